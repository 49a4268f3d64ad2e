"""``serve --http``: the Streamable HTTP transport, on trio sockets through h11.

Rules of the package:

1. **Admission before work** (``admission``): a quota of pending requests and
   idle eviction, so that no client can hold the server.
2. **A body is read within bounds** (``h11_io``): size and time, or a 4xx that
   closes the connection.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._mcp.http.h11_io import parse_address as parse_address
    from xcsh_run._mcp.http.server import serve_http as serve_http

__all__ = [
    "parse_address",
    "serve_http",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "parse_address": "h11_io",
    "serve_http": "server",
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
