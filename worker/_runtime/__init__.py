"""The worker process: its loop, one call at a time, and its start (supervisor, zygote, hand-off to Bun).

Rules of the package:

1. **The main thread reads while idle** (``inbox``), and runs the tool while
   busy: a cancel reaches a running call through the reader.
2. **A worker never outlives its host** (``supervisor``, ``sigterm``).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xcsh_run.worker._runtime.loop import main as main
    from xcsh_run.worker._runtime.zygote import serve as serve

__all__ = [
    "main",
    "serve",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "main": "loop",
    "serve": "zygote",
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
