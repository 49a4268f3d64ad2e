"""The ``xcsh-run`` console script: the daemon's client when the daemon is opted in, else the CLI itself.

Decided before anything but the standard library is imported
(``xcsh_run._daemon``, rule 1 of the client): a call through the daemon
starts one small interpreter and nothing else.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    """The console entry point; the process ends here."""
    from xcsh_run._daemon import route

    through_daemon, argv = route(sys.argv[1:])
    if through_daemon and sys.platform.startswith("linux"):
        from xcsh_run._daemon import call

        code = call(argv)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                code = code or 120
        os._exit(code)
    sys.argv[1:] = argv
    from xcsh_run._cli import main as cli

    cli()
