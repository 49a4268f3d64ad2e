"""``xcsh-run serve``: the tools as an MCP server, over stdio (here) and Streamable HTTP (``http``).

Rules of the package:

1. **One sans-io Connection** (``xcsh_run.worker.protocol``) keeps the MCP
   session's ids, states and refusals, as it does for the worker pipe.
2. **One ToolServer for every session** (``server``): the runners, their
   reloads, and what every client shares.
3. **What a model reads of an error is cleaned** (``render``): no host
   paths, tracebacks or stderr tails; the whole evidence stays in ``_meta``
   and in the server's log.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._mcp.stdio import serve_stdio as serve_stdio

__all__ = [
    "serve_stdio",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "serve_stdio": "stdio",
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
