"""The ``xcsh-run`` command: a thin layer over the public API, and the only package that imports typer.

Rules of the package:

1. **Every exit code is documented** (``docs/cli.md``), and bad input is a
   usage error that says what, where and how to fix.
2. **A cold command pays only for what it runs**: each command imports its
   front end on first use.
3. **Linux only, said first**: `main` (the console script, and
   ``python -m xcsh_run``) checks the system before it imports any command, so
   elsewhere every command prints one sentence and exits
   `UNSUPPORTED_PLATFORM` (69, ``EX_UNAVAILABLE``), never a traceback.
"""

import sys
from typing import TYPE_CHECKING, Any, Final

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._cli.app import HOSTING as HOSTING
    from xcsh_run._cli.app import Hosting as Hosting
    from xcsh_run._cli.run import run_argv as run_argv

__all__ = [
    "HOSTING",
    "Hosting",
    "UNSUPPORTED_PLATFORM",
    "main",
    "run_argv",
]


def __getattr__(name: str) -> Any:
    # What the daemon's host runs the commands through, loaded on first use (rule 2).
    if name in ("HOSTING", "Hosting"):
        from xcsh_run._cli import app

        return getattr(app, name)
    if name == "run_argv":
        from xcsh_run._cli.run import run_argv

        return run_argv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


UNSUPPORTED_PLATFORM: Final = 69  # sysexits.h's EX_UNAVAILABLE: this system cannot run xcsh-run at all


def main(argv: list[str] | None = None) -> None:
    """Console entry point: the command (``xcsh_run._cli.run.main``), on Linux; elsewhere, one line and exit 69."""
    from xcsh_run._platform import unsupported_platform

    problem = unsupported_platform()
    if problem is not None:
        print(f"xcsh-run: {problem}", file=sys.stderr)
        raise SystemExit(UNSUPPORTED_PLATFORM)
    from xcsh_run._cli.run import main as run

    run(argv)
