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
   entries and :data:`MAX_KEPT_BYTES` (the oldest dropped), an entry larger
   than :data:`MAX_ENTRY_BYTES` kept as a stub (its ``details`` if they fit,
   its content replaced by a line saying what was left out: a result of many
   megabytes must neither fill the host's memory nor push every other entry
   out of what is sent), and what is sent with a call is the newest
   entries that fit :data:`MAX_SENT_ENTRIES` and :data:`MAX_SENT_BYTES`, with
   ``truncated: true`` when older ones were left out. The view is sent with
   every call and session event rather than fetched on demand because
   ``getBranch()`` is synchronous in the original: a worker cannot wait for
   the host inside it, and the caps keep each frame small whatever the
   session's length.
4. At most :data:`MAX_SESSIONS` sessions and :data:`MAX_TOTAL_BYTES` of
   entries are kept; the session used least recently is forgotten first, so a
   long-lived server with many clients stays bounded.
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
MAX_ENTRY_BYTES: Final = 64 * 1024
MAX_KEPT_BYTES: Final = 4 * 1024 * 1024
MAX_TOTAL_BYTES: Final = 64 * 1024 * 1024

_encode = msgspec.json.Encoder().encode


def _stub(entry: dict[str, Any], size: int) -> dict[str, Any]:
    """``entry`` without what makes it larger than :data:`MAX_ENTRY_BYTES` (rule 3)."""
    message = entry.get("message")
    if not isinstance(message, dict):
        return {**entry, "omitted": f"an entry of {size} bytes, larger than {MAX_ENTRY_BYTES}, was not kept"}
    note = {"type": "text", "text": f"[content of a {size}-byte result not kept: over {MAX_ENTRY_BYTES} bytes]"}
    details = message.get("details")
    if details is not None and len(_encode(details)) > MAX_ENTRY_BYTES // 2:
        details = None
    return {**entry, "message": {**message, "content": [note], "details": details}}


class _Session:
    __slots__ = ("entries", "sizes", "total")

    def __init__(self) -> None:
        self.entries: deque[dict[str, Any]] = deque()
        self.sizes: deque[int] = deque()
        self.total = 0

    def append(self, entry: dict[str, Any]) -> bool:
        """Keep ``entry`` within the session's caps; False if JSON cannot carry it."""
        try:
            size = len(_encode(entry))
            if size > MAX_ENTRY_BYTES:
                entry = _stub(entry, size)
                size = len(_encode(entry))
        except (TypeError, ValueError, OverflowError):
            return False
        self.entries.append(entry)
        self.sizes.append(size)
        self.total += size
        while len(self.entries) > MAX_KEPT or (self.total > MAX_KEPT_BYTES and len(self.entries) > 1):
            self.entries.popleft()
            self.total -= self.sizes.popleft()
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
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > 1 and (
            len(self._sessions) > MAX_SESSIONS or sum(s.total for s in self._sessions.values()) > MAX_TOTAL_BYTES
        ):
            self._sessions.popitem(last=False)
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
        session = self._get(session_id)
        if session.entries:
            entry["parentId"] = session.entries[-1].get("id")
        session.append(entry)

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
                _encode(item)
            except (TypeError, ValueError, OverflowError) as exc:
                raise ConfigError(f"session history entry {i} is not JSON-serialisable: {exc}") from None
            session.append(item)
        self._sessions[session_id] = session
        self._get(session_id)

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
