"""Each session's tool calls and results, as the entries tools read through ``ctx.sessionManager``.

A session is whatever the caller of :meth:`Runner.call_tool` names with
``session_id``: an MCP session (one per client connection), an embedding
host's own conversation, or, when none is named, the runner itself (the
``default`` session: a CLI run, or an embedding program that never names one).

Rules:

1. Every finished call is recorded under its session as one entry in the
   original design's shape, ``{type: "message", id, parentId, timestamp,
   message: {role: "toolResult", toolCallId, toolName, content, details,
   isError, timestamp}}``, chained by ``parentId`` so the branch is the list
   in order. Results that JSON cannot carry are not recorded (a tool reading
   its own history must be able to trust what it reads).
2. An embedding host that keeps its own history (a real conversation with
   assistant and user messages, branches, a resumed session) supplies it with
   :meth:`SessionHistories.replace`; calls made afterwards are appended to it.
3. Bounded twice. What is kept per session is at most :data:`MAX_KEPT`
   entries (the oldest dropped), and what is sent with a call is the newest
   entries that fit :data:`MAX_SENT_ENTRIES` and :data:`MAX_SENT_BYTES`, with
   ``truncated: true`` when older ones were left out. The view is sent with
   every call and session event rather than fetched on demand because
   ``getBranch()`` is synchronous in the original: a worker cannot wait for
   the host inside it, and the caps keep each frame small whatever the
   session's length.
4. At most :data:`MAX_SESSIONS` sessions are kept; the one used least recently
   is forgotten first, so a long-lived server with many clients stays bounded.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from xcsh_run._errors import ConfigError

DEFAULT_SESSION: Final = "default"
"""The session of calls that name none: the runner's own."""

WIRE_KEY: Final = "$session"
"""The ``ctx`` key the view travels under; the worker turns it into ``ctx.sessionManager``."""

MAX_KEPT: Final = 1000
MAX_SENT_ENTRIES: Final = 200
MAX_SENT_BYTES: Final = 256 * 1024
MAX_SESSIONS: Final = 256

_encode = msgspec.json.Encoder().encode


class _Session:
    __slots__ = ("entries", "sizes")

    def __init__(self) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=MAX_KEPT)
        self.sizes: deque[int] = deque(maxlen=MAX_KEPT)

    def append(self, entry: dict[str, Any]) -> bool:
        try:
            size = len(_encode(entry))
        except (TypeError, ValueError, OverflowError):
            return False
        if self.entries:
            entry["parentId"] = self.entries[-1].get("id")
        self.entries.append(entry)
        self.sizes.append(size)
        return True


class SessionHistories:
    """The runner's record of every session's entries (rules in the module docstring)."""

    def __init__(self, cwd: str) -> None:
        self._cwd = cwd
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    def _get(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = _Session()
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(session_id)
        return session

    def record(self, session_id: str, tool_call_id: str, tool_name: str, result: Any) -> None:
        """Append a finished call's result (a ``ToolResult``) to its session."""
        now = time.time()
        message = {
            "role": "toolResult", "toolCallId": tool_call_id, "toolName": tool_name,
            "content": list(result.content), "details": result.details, "isError": bool(result.is_error),
            "timestamp": int(now * 1000),
        }  # fmt: skip
        entry = {
            "type": "message", "id": uuid.uuid4().hex[:8], "parentId": None,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "message": message,
        }  # fmt: skip
        self._get(session_id).append(entry)

    def replace(self, session_id: str, entries: Iterable[Mapping[str, Any]]) -> None:
        """Make ``entries`` (the original's session entries, in order) the session's history."""
        if isinstance(entries, (str, bytes, Mapping)):
            raise ConfigError("session history must be a list of entries (objects), oldest first")
        session = _Session()
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise ConfigError(f"session history entry {i} is a {type(entry).__name__}, not an object")
            item = dict(entry)
            try:
                session.sizes.append(len(_encode(item)))
            except (TypeError, ValueError, OverflowError) as exc:
                raise ConfigError(f"session history entry {i} is not JSON-serialisable: {exc}") from None
            session.entries.append(item)
        self._get(session_id)
        self._sessions[session_id] = session

    def entries(self, session_id: str) -> list[dict[str, Any]]:
        """A copy of everything kept for the session, oldest first."""
        session = self._sessions.get(session_id)
        return [] if session is None else list(session.entries)

    def view(self, session_id: str) -> dict[str, Any]:
        """What is sent to the worker under :data:`WIRE_KEY`: the newest entries within the caps."""
        session = self._get(session_id)
        sent: list[dict[str, Any]] = []
        total = 0
        for entry, size in zip(reversed(session.entries), reversed(session.sizes), strict=True):
            if len(sent) >= MAX_SENT_ENTRIES or total + size > MAX_SENT_BYTES:
                break
            sent.append(entry)
            total += size
        sent.reverse()
        return {
            "sessionId": session_id, "cwd": self._cwd, "entries": sent,
            "truncated": len(sent) < len(session.entries),
        }  # fmt: skip
