"""The ``api`` object given to factories: UI, logs, exec, the host link, ``ctx`` and the abort signal.

Rules of the package:

1. **Everything that reaches the host goes through** ``HostLink``, over the
   runtime's protocol pipe (a ``Pipe``): the API never writes to it itself.
2. **Typed for authors**: ``xcsh_run.pi`` re-exports these types for annotations.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xcsh_run.worker._tool_api.abort_signal import AbortSignal as AbortSignal
    from xcsh_run.worker._tool_api.abort_signal import ToolCancelled as ToolCancelled
    from xcsh_run.worker._tool_api.abort_signal import abort as abort
    from xcsh_run.worker._tool_api.api import ToolAPI as ToolAPI
    from xcsh_run.worker._tool_api.api import log_handler as log_handler
    from xcsh_run.worker._tool_api.ctx import Ctx as Ctx
    from xcsh_run.worker._tool_api.events import EventBus as EventBus
    from xcsh_run.worker._tool_api.exec import ExecResult as ExecResult
    from xcsh_run.worker._tool_api.host_link import HostLink as HostLink
    from xcsh_run.worker._tool_api.session_manager import SessionManager as SessionManager
    from xcsh_run.worker._tool_api.session_manager import session_of as session_of
    from xcsh_run.worker._tool_api.ui import UI as UI

__all__ = [
    "AbortSignal",
    "Ctx",
    "EventBus",
    "ExecResult",
    "HostLink",
    "SessionManager",
    "ToolAPI",
    "ToolCancelled",
    "UI",
    "abort",
    "log_handler",
    "session_of",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "AbortSignal": "abort_signal",
    "Ctx": "ctx",
    "ExecResult": "exec",
    "HostLink": "host_link",
    "SessionManager": "session_manager",
    "ToolAPI": "api",
    "ToolCancelled": "abort_signal",
    "UI": "ui",
    "abort": "abort_signal",
    "log_handler": "api",
    "session_of": "session_manager",
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
