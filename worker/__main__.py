"""``python -m worker``: started by the xcsh-run host, never by hand."""

from worker._loop import main

main()
