"""The ``xcsh-run`` command: a thin layer over the public API, and the only package that imports typer.

Rules of the package:

1. **Every exit code is documented** (``docs/cli.md``), and bad input is a
   usage error that says what, where and how to fix.
2. **A cold command pays only for what it runs**: each command imports its
   front end on first use.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._cli.run import main as main

__all__ = [
    "main",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "main": "run",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
