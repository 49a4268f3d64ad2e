"""The worker's half of the sandbox: what a worker applies to itself before any tool code runs.

Rules of the package (``apply`` and ``contain`` number them in full):

1. **Applied in order, checked after**: each step that fails stops the worker
   with a message naming it, before the tool is imported.
2. **Explained, not guessed** (``explain``): an ``EPERM`` from the sandbox is
   reported with the rule that caused it.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xcsh_run.worker._sandbox import apply as apply
    from xcsh_run.worker._sandbox import explain as explain
    from xcsh_run.worker._sandbox import withheld_env as withheld_env
    from xcsh_run.worker._sandbox.apply import landlock_abi as landlock_abi
    from xcsh_run.worker._sandbox.contain import set_undumpable as set_undumpable

# The runtime uses three modules whole: their functions are named for the
# module they are in (``apply.apply``, ``explain.install``, ``withheld_env.hint``).
__all__ = [
    "apply",
    "explain",
    "landlock_abi",
    "set_undumpable",
    "withheld_env",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "apply": "",
    "explain": "",
    "withheld_env": "",
    "landlock_abi": "apply",
    "set_undumpable": "contain",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    if not home:  # a module of the package
        return importlib.import_module(f"{__name__}.{name}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
