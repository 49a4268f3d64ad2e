"""``ctx.session_manager``: a read-only view of the session's history, as the host sent it.

Rules:

1. The host sends the view with every call and session event under the ``ctx``
   key ``$session`` (``{sessionId, cwd, entries, truncated}``); it is taken out
   of the shared state, so ``ctx.state`` and ``ctx.get`` never show it.
2. Entries are the original design's session entries, oldest first; a call's
   result is ``{type: "message", message: {role: "toolResult", toolName,
   toolCallId, content, details, isError}}``. The view holds only the newest
   entries within the host's caps (``truncated`` says when older ones were left
   out): a tool that must never lose state keeps it small, in ``details``.
3. Read-only: every getter returns copies, so a tool cannot change what the
   next hook of the same event reads.
4. :func:`start_needed` tells the worker loop when to run ``on_session`` with
   ``{reason: "start"}`` before a call: the first call this worker serves, and
   a call of another session than the previous one (a pooled worker may serve
   several sessions in turn), so a tool rebuilding its state there always holds
   the state of the session it is called for.
"""

from __future__ import annotations

import copy
from typing import Any, Final

WIRE_KEY: Final = "$session"


class SessionManager:
    """The session's history (``ctx.session_manager``), read-only.

    Example:
        ```python
        def rebuild(ctx: ToolContext) -> list[str]:
            items: list[str] = []
            for entry in ctx.session_manager.get_branch():
                msg = entry.get("message", {})
                if entry.get("type") == "message" and msg.get("role") == "toolResult" and msg.get("toolName") == "todo":
                    items = list((msg.get("details") or {}).get("items", items))
            return items
        ```
    """

    __slots__ = ("_view",)

    def __init__(self, view: Any) -> None:
        self._view: dict[str, Any] = view if isinstance(view, dict) else {}

    def get_entries(self) -> list[dict[str, Any]]:
        """Every entry sent, oldest first (copies)."""
        entries = self._view.get("entries")
        return copy.deepcopy(entries) if isinstance(entries, list) else []

    def get_branch(self, from_id: str | None = None) -> list[dict[str, Any]]:
        """The entries from the first to ``from_id`` (the leaf if None), following ``parentId``, oldest first."""
        entries = self.get_entries()
        if not entries:
            return []
        by_id = {e.get("id"): e for e in entries if isinstance(e, dict) and e.get("id") is not None}
        if not by_id:
            return entries
        path: list[dict[str, Any]] = []
        current = by_id.get(from_id if from_id is not None else entries[-1].get("id"))
        seen: set[Any] = set()
        while current is not None and current.get("id") not in seen:
            seen.add(current.get("id"))
            path.append(current)
            current = by_id.get(current.get("parentId"))
        path.reverse()
        return path

    def get_entry(self, entry_id: str) -> dict[str, Any] | None:
        """The entry with that id, or None."""
        return next((e for e in self.get_entries() if e.get("id") == entry_id), None)

    def get_leaf_id(self) -> str | None:
        """The id of the newest entry, or None for an empty session."""
        entries = self._view.get("entries")
        return entries[-1].get("id") if isinstance(entries, list) and entries else None

    def get_leaf_entry(self) -> dict[str, Any] | None:
        """The newest entry, or None."""
        leaf = self.get_leaf_id()
        return None if leaf is None else self.get_entry(leaf)

    def get_session_id(self) -> str:
        """The session's id (``default`` for the runner's own)."""
        return str(self._view.get("sessionId", "default"))

    def get_cwd(self) -> str:
        """The runner's working directory."""
        return str(self._view.get("cwd", ""))

    def get_session_file(self) -> None:
        """None: xcsh-run keeps sessions in memory, never in a file."""
        return None

    def is_truncated(self) -> bool:
        """True when the host left older entries out (its caps)."""
        return bool(self._view.get("truncated", False))

    # The original's names, for tools ported from TypeScript.
    getEntries = get_entries
    getBranch = get_branch
    getEntry = get_entry
    getLeafId = get_leaf_id
    getLeafEntry = get_leaf_entry
    getSessionId = get_session_id
    getCwd = get_cwd
    getSessionFile = get_session_file

    def __repr__(self) -> str:
        return f"<session {self.get_session_id()!r}: {len(self._view.get('entries') or [])} entries>"


def split_state(state: dict[str, Any]) -> tuple[dict[str, Any], SessionManager]:
    """The shared state without the view, and the view as a :class:`SessionManager`."""
    if WIRE_KEY not in state:
        return state, SessionManager(None)
    rest = {k: v for k, v in state.items() if k != WIRE_KEY}
    return rest, SessionManager(state[WIRE_KEY])


def session_of(state: dict[str, Any]) -> str | None:
    """The session id a call's ``ctx`` names, or None when the host sent no view."""
    view = state.get(WIRE_KEY)
    return str(view.get("sessionId")) if isinstance(view, dict) else None
