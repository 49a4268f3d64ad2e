"""``python -m xcsh_run._daemon.hosting --folder DIR --ready-fd FD``: start the daemon (the client's ``_start``)."""

from xcsh_run._daemon.hosting.daemon_main import main

main()
