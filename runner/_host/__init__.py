"""The ``Runner`` facade, ``open_runner``, and the host's half of the tool API.

Rules of the package:

1. **The Runner wires, it does not decide**: discovery, the pool, calls and
   the host API each live in their own package; ``Runner`` composes them and
   is the surface every other face (blocking, asyncio, Ray) mirrors.
2. **What a worker asks of the host is bounded** (``quotas``): pending
   actions, UI requests and log records per worker.
3. **The host protects itself** (``host_limits``): a worker's change to the
   host's limits, priority or affinity stops its call.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._host.host_api import UI_DEFAULTS as UI_DEFAULTS
    from xcsh_run._host.host_api import UIContext as UIContext
    from xcsh_run._host.host_api import ui_call as ui_call
    from xcsh_run._host.host_api import ui_key as ui_key
    from xcsh_run._host.oneshot import CustomToolsLoadResult as CustomToolsLoadResult
    from xcsh_run._host.oneshot import discover_and_load_custom_tools as discover_and_load_custom_tools
    from xcsh_run._host.oneshot import load_custom_tools as load_custom_tools
    from xcsh_run._host.runner import Runner as Runner
    from xcsh_run._host.runner import open_runner as open_runner
    from xcsh_run._host.runner_options import RunnerOptions as RunnerOptions
    from xcsh_run._host.runner_options import check_options as check_options
    from xcsh_run._host.signals import CallStopper as CallStopper
    from xcsh_run._host.signals import Signals as Signals
    from xcsh_run._host.signals import watching_signals as watching_signals
    from xcsh_run._host.statistics import RunnerStatistics as RunnerStatistics

__all__ = [
    "CallStopper",
    "CustomToolsLoadResult",
    "Runner",
    "RunnerOptions",
    "RunnerStatistics",
    "Signals",
    "UIContext",
    "UI_DEFAULTS",
    "check_options",
    "discover_and_load_custom_tools",
    "load_custom_tools",
    "open_runner",
    "ui_call",
    "ui_key",
    "watching_signals",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "CallStopper": "signals",
    "CustomToolsLoadResult": "oneshot",
    "Runner": "runner",
    "RunnerOptions": "runner_options",
    "RunnerStatistics": "statistics",
    "Signals": "signals",
    "UIContext": "host_api",
    "UI_DEFAULTS": "host_api",
    "check_options": "runner_options",
    "discover_and_load_custom_tools": "oneshot",
    "load_custom_tools": "oneshot",
    "open_runner": "runner",
    "ui_call": "host_api",
    "ui_key": "host_api",
    "watching_signals": "signals",
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
