"""xcsh-run: run LLM-agent custom tools in isolated, killable worker processes.

This is the host's public face; ``docs/architecture.md`` maps every package
behind it. Tool authors import :mod:`xcsh_run.pi` instead, and
``xcsh_run.worker`` is the worker process's own package (private).

Rules of this module:

1. **Nothing is imported until it is used.** A worker process imports this
   module on its way to ``xcsh_run.worker`` and ``xcsh_run.pi``, and a worker
   imports nothing of trio or of the host (``tests/structure/test_layering.py``
   checks ``sys.modules`` in a live worker). Every name below is loaded on first
   access (PEP 562), a group at a time.
2. **``_startup`` runs before the first host module**, so that trio's import
   never runs ``/sbin/ldconfig`` (see ``xcsh_run._startup``). The CLI, the
   fuzzer and Ray import it first too: they are the other ways in.
3. **The front ends stay lazy**: a ``run`` or a ``list`` pays for neither the
   fuzzer, nor Ray, nor the blocking wrappers.
4. **Public names say they are public**: ``__module__`` of what this module
   hands out is ``xcsh_run``, not the private module that defines it.
5. **Not even ``typing`` at import**: the console script imports this module
   first, and the daemon's client imports nothing else it does not need.
"""

from __future__ import annotations

# typing.TYPE_CHECKING, without importing typing (type checkers read the name as theirs).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import typing as _typing

    from xcsh_run._config import RunnerConfig as RunnerConfig
    from xcsh_run._discovery import Candidate as Candidate
    from xcsh_run._discovery import LoadError as LoadError
    from xcsh_run._discovery import ToolInfo as ToolInfo
    from xcsh_run._discovery import ToolSource as ToolSource
    from xcsh_run._discovery import discover_custom_tool_paths as discover_custom_tool_paths
    from xcsh_run._embed import AsyncioRunner as AsyncioRunner
    from xcsh_run._embed import BatchItem as BatchItem
    from xcsh_run._embed import BatchResults as BatchResults
    from xcsh_run._embed import BlockingRunner as BlockingRunner
    from xcsh_run._embed import jsonl_inputs as jsonl_inputs
    from xcsh_run._embed import open_asyncio_runner as open_asyncio_runner
    from xcsh_run._embed import open_blocking_runner as open_blocking_runner
    from xcsh_run._embed import run_batch as run_batch
    from xcsh_run._embed import run_batch_sync as run_batch_sync
    from xcsh_run._embed import run_tool_sync as run_tool_sync
    from xcsh_run._errors import ConfigError as ConfigError
    from xcsh_run._errors import LocalProtocolError as LocalProtocolError
    from xcsh_run._errors import ProtocolError as ProtocolError
    from xcsh_run._errors import RemoteProtocolError as RemoteProtocolError
    from xcsh_run._errors import RunnerClosedError as RunnerClosedError
    from xcsh_run._errors import RunnerError as RunnerError
    from xcsh_run._errors import UnsupportedPlatform as UnsupportedPlatform
    from xcsh_run._errors import WorkerDied as WorkerDied
    from xcsh_run._errors import WorkerError as WorkerError
    from xcsh_run._errors import WorkerStartupError as WorkerStartupError
    from xcsh_run._host import CustomToolsLoadResult as CustomToolsLoadResult
    from xcsh_run._host import Runner as Runner
    from xcsh_run._host import RunnerOptions as RunnerOptions
    from xcsh_run._host import RunnerStatistics as RunnerStatistics
    from xcsh_run._host import discover_and_load_custom_tools as discover_and_load_custom_tools
    from xcsh_run._host import load_custom_tools as load_custom_tools
    from xcsh_run._host import open_runner as open_runner
    from xcsh_run._results import ErrorInfo as ErrorInfo
    from xcsh_run._results import ErrorKind as ErrorKind
    from xcsh_run._results import PendingAction as PendingAction
    from xcsh_run._results import ToolResult as ToolResult
    from xcsh_run._sandbox import SandboxPolicy as SandboxPolicy
    from xcsh_run._sandbox import SandboxUnavailable as SandboxUnavailable
    from xcsh_run._version import __version__ as __version__
    from xcsh_run.fuzz import FuzzFailure as FuzzFailure
    from xcsh_run.fuzz import FuzzReport as FuzzReport
    from xcsh_run.fuzz import PropertyReport as PropertyReport
    from xcsh_run.fuzz import assert_fuzz_clean as assert_fuzz_clean
    from xcsh_run.fuzz import fuzz_tool as fuzz_tool
    from xcsh_run.fuzz import fuzz_tool_sync as fuzz_tool_sync
    from xcsh_run.ray import RayMissing as RayMissing
    from xcsh_run.ray import RayRunner as RayRunner
    from xcsh_run.ray import open_ray_runner as open_ray_runner
del TYPE_CHECKING

__all__ = [
    "AsyncioRunner",
    "BatchItem",
    "BatchResults",
    "BlockingRunner",
    "Candidate",
    "ConfigError",
    "CustomToolsLoadResult",
    "ErrorInfo",
    "ErrorKind",
    "FuzzFailure",
    "FuzzReport",
    "LoadError",
    "LocalProtocolError",
    "PendingAction",
    "PropertyReport",
    "ProtocolError",
    "RayMissing",
    "RayRunner",
    "RemoteProtocolError",
    "Runner",
    "RunnerClosedError",
    "RunnerConfig",
    "RunnerError",
    "RunnerOptions",
    "RunnerStatistics",
    "SandboxPolicy",
    "SandboxUnavailable",
    "ToolInfo",
    "ToolResult",
    "ToolSource",
    "UnsupportedPlatform",
    "WorkerDied",
    "WorkerError",
    "WorkerStartupError",
    "assert_fuzz_clean",
    "discover_and_load_custom_tools",
    "discover_custom_tool_paths",
    "fuzz_tool",
    "fuzz_tool_sync",
    "jsonl_inputs",
    "load_custom_tools",
    "open_asyncio_runner",
    "open_blocking_runner",
    "open_ray_runner",
    "open_runner",
    "run_batch",
    "run_batch_sync",
    "run_tool_sync",
]

# Where each name lives, by the package face that exports it. The core's names
# load together (one `open_runner` needs them all anyway); each front end loads
# as a group of its own.
_CORE: _typing.Final = (
    "xcsh_run._config",
    "xcsh_run._discovery",
    "xcsh_run._errors",
    "xcsh_run._host",
    "xcsh_run._results",
    "xcsh_run._sandbox",
)
_WHERE: _typing.Final = {
    "RunnerConfig": "xcsh_run._config",
    "Candidate": "xcsh_run._discovery",
    "ToolSource": "xcsh_run._discovery",
    "discover_custom_tool_paths": "xcsh_run._discovery",
    "LoadError": "xcsh_run._discovery",
    "ToolInfo": "xcsh_run._discovery",
    "ConfigError": "xcsh_run._errors",
    "LocalProtocolError": "xcsh_run._errors",
    "ProtocolError": "xcsh_run._errors",
    "RemoteProtocolError": "xcsh_run._errors",
    "RunnerError": "xcsh_run._errors",
    "RunnerClosedError": "xcsh_run._errors",
    "UnsupportedPlatform": "xcsh_run._errors",
    "WorkerDied": "xcsh_run._errors",
    "WorkerError": "xcsh_run._errors",
    "WorkerStartupError": "xcsh_run._errors",
    "Runner": "xcsh_run._host",
    "RunnerOptions": "xcsh_run._host",
    "RunnerStatistics": "xcsh_run._host",
    "open_runner": "xcsh_run._host",
    "ErrorInfo": "xcsh_run._results",
    "ErrorKind": "xcsh_run._results",
    "PendingAction": "xcsh_run._results",
    "ToolResult": "xcsh_run._results",
    "SandboxPolicy": "xcsh_run._sandbox",
    "SandboxUnavailable": "xcsh_run._sandbox",
    # The original API's one-shot loaders.
    "CustomToolsLoadResult": "xcsh_run._host",
    "discover_and_load_custom_tools": "xcsh_run._host",
    "load_custom_tools": "xcsh_run._host",
    # Embedding: the blocking and asyncio faces, and batches.
    "AsyncioRunner": "xcsh_run._embed",
    "BlockingRunner": "xcsh_run._embed",
    "open_asyncio_runner": "xcsh_run._embed",
    "open_blocking_runner": "xcsh_run._embed",
    "run_tool_sync": "xcsh_run._embed",
    "BatchItem": "xcsh_run._embed",
    "BatchResults": "xcsh_run._embed",
    "jsonl_inputs": "xcsh_run._embed",
    "run_batch": "xcsh_run._embed",
    "run_batch_sync": "xcsh_run._embed",
    # The fuzzer (hypothesis, imported only by the fuzz code) and Ray (the `ray`
    # extra, imported only when a Ray runner opens).
    "assert_fuzz_clean": "xcsh_run.fuzz",
    "fuzz_tool": "xcsh_run.fuzz",
    "fuzz_tool_sync": "xcsh_run.fuzz",
    "FuzzFailure": "xcsh_run.fuzz",
    "FuzzReport": "xcsh_run.fuzz",
    "PropertyReport": "xcsh_run.fuzz",
    "RayMissing": "xcsh_run.ray",
    "open_ray_runner": "xcsh_run.ray",
    "RayRunner": "xcsh_run.ray",
}


def _public(obj: _typing.Any) -> _typing.Any:
    if getattr(obj, "__module__", "").startswith("xcsh_run."):
        try:
            obj.__module__ = "xcsh_run"
        except (AttributeError, TypeError):  # pragma: no cover - some types refuse
            pass
    return obj


def _load(module: str) -> None:
    import importlib

    importlib.import_module("xcsh_run._startup")  # rule 2
    group = _CORE if module in _CORE else (module,)
    for where in group:
        loaded = importlib.import_module(where)
        for name, home in _WHERE.items():
            if home == where:
                globals()[name] = _public(getattr(loaded, name))


def __getattr__(name: str) -> _typing.Any:
    if name == "__version__":  # asked by a worker's tool as well as a host: no trio for it
        from xcsh_run._version import __version__

        return __version__
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'xcsh_run' has no attribute {name!r}")
    _load(module)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
