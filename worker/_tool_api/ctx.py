"""``ctx``, the second-to-last argument of ``execute`` and of ``on_session``: :class:`Ctx`."""

from __future__ import annotations

from typing import Any

from xcsh_run.worker._tool_api.host_link import HostLink
from xcsh_run.worker._tool_api.session_manager import SessionManager, split_state
from xcsh_run.worker.protocol import methods as m


class Ctx:
    """``ctx`` for ``execute`` and ``on_session`` (``xcsh_run.pi.ToolContext`` for annotations).

    The state the host shares with tools (the embedding program's
    ``set_context``, merged with a call's own ``ctx``): read-only here, a
    snapshot taken when the call started. `session_manager` (alias
    ``sessionManager``, the original's name), the session's history as the host
    recorded it: a tool rebuilds its state from its earlier results there, in
    ``on_session`` (``start`` comes before the first call a new worker serves
    for a session). And `abort`, to stop the whole operation.

    Example:
        ```python
        def execute(tool_call_id, params, on_update, ctx: ToolContext, signal):
            model = ctx.get("model", "unknown")
            if params["dangerous"] and not ctx.get("allow_dangerous"):
                ctx.abort("refused: dangerous and not allowed in this session")
        ```
    """

    __slots__ = ("_state", "_link", "_call_id", "_session")

    def __init__(self, state: dict[str, Any], link: HostLink | None = None, call_id: str | None = None) -> None:
        self._state, self._session = split_state(state)
        self._link = link
        self._call_id = call_id

    def abort(self, reason: str = "aborted by the tool") -> None:
        """Ask the host to cancel the whole current operation: every running call grouped with this one.

        Returns at once; this call, too, then ends with a ``cancelled`` result
        (its `AbortSignal` is set) unless it returns first.

        Args:
            reason: why, shown in the cancelled calls' results.
        """
        if self._link is not None:
            self._link.notify(m.ABORT, m.AbortParams(call_id=self._call_id, reason=reason))

    @property
    def session_manager(self) -> SessionManager:
        """The session's history, read-only: ``get_branch()``, ``get_entries()``, ``get_session_id()``...

        Empty (no entries, session ``default``) when the host sent none, as for
        a tool's own unit tests that build a `ToolContext` by hand.
        """
        return self._session

    sessionManager = session_manager

    def __getitem__(self, key: str) -> Any:
        """``ctx[key]``: the value the host shared under ``key``; KeyError if none."""
        return self._state[key]

    def get(self, key: str, default: Any = None) -> Any:
        """The value the host shared under ``key``, or ``default``."""
        return self._state.get(key, default)

    @property
    def state(self) -> dict[str, Any]:
        """A copy of the whole shared state."""
        return dict(self._state)

    def __repr__(self) -> str:
        return f"<ctx {sorted(self._state)}>"
