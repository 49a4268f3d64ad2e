"""``python -m xcsh_run``: the ``xcsh-run`` command."""

from xcsh_run._entry import main

main()
