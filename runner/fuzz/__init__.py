"""Fuzzing a tool's inputs from its schema (the ``fuzz`` extra: Hypothesis), for tool authors' CI.

``fuzz_tool``/``fuzz_tool_sync`` run generated arguments through a real runner
and report what crashed, hung, leaked or answered outside its schema;
``assert_fuzz_clean`` fails a test on it. See ``docs/fuzzing.md``.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run.fuzz._campaign import assert_fuzz_clean as assert_fuzz_clean
    from xcsh_run.fuzz._campaign import fuzz_tool as fuzz_tool
    from xcsh_run.fuzz._campaign import fuzz_tool_sync as fuzz_tool_sync
    from xcsh_run.fuzz._report import COMMANDS as COMMANDS
    from xcsh_run.fuzz._report import FuzzFailure as FuzzFailure
    from xcsh_run.fuzz._report import FuzzReport as FuzzReport
    from xcsh_run.fuzz._report import PropertyReport as PropertyReport
    from xcsh_run.fuzz._sharded import fuzz_tool_ray as fuzz_tool_ray

__all__ = [
    "FuzzFailure",
    "FuzzReport",
    "PropertyReport",
    "assert_fuzz_clean",
    "fuzz_tool",
    "fuzz_tool_sync",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "COMMANDS": "_report",
    "FuzzFailure": "_report",
    "FuzzReport": "_report",
    "PropertyReport": "_report",
    "assert_fuzz_clean": "_campaign",
    "fuzz_tool": "_campaign",
    "fuzz_tool_ray": "_sharded",
    "fuzz_tool_sync": "_campaign",
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
