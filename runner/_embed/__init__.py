"""Using a runner from a program that is not trio: the blocking and asyncio faces, and batches.

Rules of the package:

1. **One trio thread per runner** (``portal``): the faces send work to it and
   wait; nothing of trio runs on the caller's thread.
2. **The faces are the Runner's surface** (``tests/structure/test_runner_parity.py``):
   same names, same parameters, same results.
3. **One docstring per member** (``surface``): a face's member takes the
   Runner's (``runner_doc``); the read-only settings are one shared base.
4. **A batch bounds what is in flight** (``batch``) and yields results as they end.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._embed.asyncio_runner import AsyncioRunner as AsyncioRunner
    from xcsh_run._embed.batch import BatchItem as BatchItem
    from xcsh_run._embed.batch import BatchResults as BatchResults
    from xcsh_run._embed.batch import CallsTools as CallsTools
    from xcsh_run._embed.batch import jsonl_inputs as jsonl_inputs
    from xcsh_run._embed.batch import run_batch as run_batch
    from xcsh_run._embed.batch import run_batch_sync as run_batch_sync
    from xcsh_run._embed.blocking import BlockingRunner as BlockingRunner
    from xcsh_run._embed.openers import open_asyncio_runner as open_asyncio_runner
    from xcsh_run._embed.openers import open_blocking_runner as open_blocking_runner
    from xcsh_run._embed.openers import run_tool_sync as run_tool_sync
    from xcsh_run._embed.portal import Job as Job
    from xcsh_run._embed.surface import runner_doc as runner_doc

__all__ = [
    "AsyncioRunner",
    "BatchItem",
    "BatchResults",
    "BlockingRunner",
    "CallsTools",
    "Job",
    "jsonl_inputs",
    "open_asyncio_runner",
    "open_blocking_runner",
    "run_batch",
    "run_batch_sync",
    "run_tool_sync",
    "runner_doc",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "AsyncioRunner": "asyncio_runner",
    "BatchItem": "batch",
    "BatchResults": "batch",
    "BlockingRunner": "blocking",
    "CallsTools": "batch",
    "Job": "portal",
    "jsonl_inputs": "batch",
    "open_asyncio_runner": "openers",
    "open_blocking_runner": "openers",
    "run_batch": "batch",
    "run_batch_sync": "batch",
    "run_tool_sync": "openers",
    "runner_doc": "surface",
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
