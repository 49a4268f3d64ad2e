"""The host's half of the tool API (SPEC §2): UI bridge, logs, session events, renders, pending actions.

These are the pieces a worker reaches through the protocol while the host
stays in charge: a UI request is answered by whatever UI the embedding host
attached (the no-op one by default), log records go to the standard logging
logger ``xcsh_run.tool``, and pending actions are previews whose callables
stay in the worker that made them.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Mapping
from typing import Any, Final, Protocol

import msgspec

from ._results import ToolResult

tool_log: Final = logging.getLogger("xcsh_run.tool")
log: Final = logging.getLogger("xcsh_run")

SESSION_EVENTS: Final = (
    "start", "switch", "branch", "tree", "shutdown", "auto_compaction_start", "auto_compaction_end",
    "auto_retry_start", "auto_retry_end", "ttsr_triggered", "todo_reminder",
)  # fmt: skip
"""The ``reason`` of every session event, with the payload fields of the original design:

- ``start``, ``tree``, ``shutdown``: ``{reason, previousSessionFile: null}``
- ``switch``, ``branch``: ``{reason, previousSessionFile}``
- ``auto_compaction_start``: ``{reason, trigger: threshold|overflow|idle, action: context-full|handoff}``
- ``auto_compaction_end``: ``{reason, action, result, aborted, willRetry, errorMessage?}``
- ``auto_retry_start``: ``{reason, attempt, maxAttempts, delayMs, errorMessage}``
- ``auto_retry_end``: ``{reason, success, attempt, finalError?}``
- ``ttsr_triggered``: ``{reason, rules}``
- ``todo_reminder``: ``{reason, todos, attempt, maxAttempts}``
"""

UI_DEFAULTS: Final[dict[str, Any]] = {
    "select": None,
    "confirm": False,
    "input": None,
    "notify": None,
    "set_status": None,
    "editor": None,
    "get_editor_text": "",
    "set_editor_text": None,
}


class UIContext(Protocol):
    """What ``Runner.set_ui_context`` accepts: any object with these methods, sync or async.

    Missing methods answer like the no-op UI.
    """

    def confirm(self, title: str, message: str) -> Any: ...


class NoOpUI:
    """The host's UI when none is attached: it has no methods, so :func:`call_ui`
    answers every request with the empty value of ``UI_DEFAULTS`` and shows nothing."""


async def call_ui(ui: Any, method: str, args: list[Any]) -> Any:
    """Call ``ui.method(*args)``, awaiting it if it is async; a JSON-safe answer or the no-op one."""
    fn = getattr(ui, method, None)
    if fn is None:
        return UI_DEFAULTS[method]
    value = fn(*args)
    if inspect.isawaitable(value):
        value = await value
    try:
        msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError):
        log.warning("UI method %s returned %r, which is not JSON; answering %r", method, value, UI_DEFAULTS[method])
        return UI_DEFAULTS[method]
    return value


class PendingActionRecord:
    """A preview in the host; ``apply``/``reject`` live in ``worker``."""

    __slots__ = ("action_id", "worker", "label", "details", "source_tool_name", "call_id")

    def __init__(self, action_id: str, worker: Any, label: str, details: Any, source_tool_name: str,
                 call_id: str | None) -> None:  # fmt: skip
        self.action_id = action_id
        self.worker = worker
        self.label = label
        self.details = details
        self.source_tool_name = source_tool_name
        self.call_id = call_id

    def preview(self) -> dict[str, Any]:
        return {"label": self.label, "details": self.details, "sourceToolName": self.source_tool_name}


RESOLVE_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["apply", "discard"], "description": "apply or discard the preview"},
        "reason": {"type": "string", "description": "why"},
    },
    "required": ["action", "reason"],
    "additionalProperties": False,
}


def default_render_call(label: str, args: Any) -> str:
    try:
        shown = json.dumps(args, ensure_ascii=False)
    except (TypeError, ValueError):
        shown = repr(args)
    return f"{label} {shown}"


def default_render_result(result: ToolResult) -> str:
    return result.text


def validate_event(event: Mapping[str, Any]) -> dict[str, Any]:
    from ._errors import ConfigError

    reason = event.get("reason")
    if reason not in SESSION_EVENTS:
        raise ConfigError(f"session event reason must be one of {', '.join(SESSION_EVENTS)}, got {reason!r}")
    try:
        out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(dict(event)))
    except (TypeError, msgspec.EncodeError) as exc:
        raise ConfigError(f"session event payload is not JSON-serialisable: {exc}") from None
    return out
