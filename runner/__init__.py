"""xcsh-run: run LLM-agent custom tools in isolated, killable worker processes.

The host is layered, lowest first (``docs/architecture.md`` maps every module):
the sans-io protocol in ``worker`` (frames, messages, the method table and the
``Connection``); ``_process`` supervises one worker process and ``_boundary`` is
the kernel-tracked group every kill goes through; ``_proc`` speaks the protocol
over a process's pipes; ``_pool`` owns every worker's pool state and
``_registry`` what discovery loaded; ``_calls`` runs one call (and its
cancellation ladder) and ``_bridge`` carries the host API; ``_host`` is the
``Runner`` facade; ``_sync``, ``_fuzz``, ``_mcp`` and ``_cli`` are front ends
over this public API.
"""

import typing as _typing

# First, before anything imports trio: it keeps trio's import from running /sbin/ldconfig.
from . import _startup  # noqa: F401
from ._config import RunnerConfig as RunnerConfig
from ._discovery import Candidate as Candidate
from ._discovery import ToolSource as ToolSource
from ._discovery import discover_custom_tool_paths as discover_custom_tool_paths
from ._errors import ConfigError as ConfigError
from ._errors import LocalProtocolError as LocalProtocolError
from ._errors import ProtocolError as ProtocolError
from ._errors import RemoteProtocolError as RemoteProtocolError
from ._errors import RunnerError as RunnerError
from ._errors import WorkerDied as WorkerDied
from ._errors import WorkerError as WorkerError
from ._errors import WorkerStartupError as WorkerStartupError
from ._host import LoadError as LoadError
from ._host import Runner as Runner
from ._host import RunnerStatistics as RunnerStatistics
from ._host import ToolInfo as ToolInfo
from ._host import open_runner as open_runner
from ._results import ErrorInfo as ErrorInfo
from ._results import ErrorKind as ErrorKind
from ._results import ToolResult as ToolResult
from ._sandbox import SandboxPolicy as SandboxPolicy
from ._sandbox import SandboxUnavailable as SandboxUnavailable
from ._version import __version__ as __version__

if _typing.TYPE_CHECKING:
    from ._batch import BatchItem as BatchItem
    from ._batch import BatchResults as BatchResults
    from ._batch import jsonl_inputs as jsonl_inputs
    from ._batch import run_batch as run_batch
    from ._batch import run_batch_sync as run_batch_sync
    from ._custom_tools import CustomToolsLoadResult as CustomToolsLoadResult
    from ._custom_tools import discover_and_load_custom_tools as discover_and_load_custom_tools
    from ._custom_tools import load_custom_tools as load_custom_tools
    from ._fuzz import assert_fuzz_clean as assert_fuzz_clean
    from ._fuzz import fuzz_tool as fuzz_tool
    from ._fuzz import fuzz_tool_sync as fuzz_tool_sync
    from ._fuzz_report import FuzzFailure as FuzzFailure
    from ._fuzz_report import FuzzReport as FuzzReport
    from ._fuzz_report import PropertyReport as PropertyReport
    from ._ray import RayMissing as RayMissing
    from ._ray import open_ray_runner as open_ray_runner
    from ._ray_calls import RayRunner as RayRunner
    from ._sync import AsyncioRunner as AsyncioRunner
    from ._sync import BlockingRunner as BlockingRunner
    from ._sync import open_asyncio_runner as open_asyncio_runner
    from ._sync import open_blocking_runner as open_blocking_runner
    from ._sync import run_tool_sync as run_tool_sync

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
    "PropertyReport",
    "ProtocolError",
    "RayMissing",
    "RayRunner",
    "RemoteProtocolError",
    "Runner",
    "RunnerConfig",
    "RunnerError",
    "RunnerStatistics",
    "SandboxPolicy",
    "SandboxUnavailable",
    "ToolInfo",
    "ToolResult",
    "ToolSource",
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

# The front ends are imported on first use: a `run` or a `list` needs neither
# the fuzzer nor the blocking wrappers, and a cold command pays for every import.
_LAZY: _typing.Final = {
    "BatchItem": "._batch",
    "BatchResults": "._batch",
    "jsonl_inputs": "._batch",
    "run_batch": "._batch",
    "run_batch_sync": "._batch",
    "CustomToolsLoadResult": "._custom_tools",
    "discover_and_load_custom_tools": "._custom_tools",
    "load_custom_tools": "._custom_tools",
    "assert_fuzz_clean": "._fuzz",
    "fuzz_tool": "._fuzz",
    "fuzz_tool_sync": "._fuzz",
    "FuzzFailure": "._fuzz_report",
    "FuzzReport": "._fuzz_report",
    "PropertyReport": "._fuzz_report",
    # Ray itself is imported only when a Ray runner opens (it is the `ray` extra).
    "RayMissing": "._ray",
    "open_ray_runner": "._ray",
    "RayRunner": "._ray_calls",
    "AsyncioRunner": "._sync",
    "BlockingRunner": "._sync",
    "open_asyncio_runner": "._sync",
    "open_blocking_runner": "._sync",
    "run_tool_sync": "._sync",
}


def _public(obj: _typing.Any) -> _typing.Any:
    if getattr(obj, "__module__", "").startswith("runner._"):
        try:
            obj.__module__ = "runner"
        except (AttributeError, TypeError):  # pragma: no cover - some types refuse
            pass
    return obj


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runner' has no attribute {name!r}")
    import importlib

    loaded = importlib.import_module(module, __name__)
    for other, where in _LAZY.items():
        if where == module:
            globals()[other] = _public(getattr(loaded, other))
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


for _name in __all__:
    if _name not in _LAZY:
        _public(globals()[_name])
