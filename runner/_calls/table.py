"""The call table: the running calls by id, and what cancelling or aborting one of them does.

A call is stopped by its ``DeliverCancel`` (``ladder``: ``$/cancel`` and SIGTERM,
``grace`` seconds, then the tree kill); a forced cancel ends the grace at once.
"""

from __future__ import annotations

import logging

import trio

from xcsh_run._calls.trace_context import TraceContext
from xcsh_run._errors import ConfigError
from xcsh_run._pool import PoolWorker

log = logging.getLogger("xcsh_run")


class Call:
    """One running call, as the table (cancel, abort) and the bridge (UI prompts, logs) see it."""

    __slots__ = (
        "call_id", "scope", "wake", "reason", "tool", "operation", "ui_scopes", "stopping", "worker_unenforced",
        "worker", "violation", "grace", "forced", "pid_rules", "host_stop", "trace",
    )  # fmt: skip

    def __init__(
        self, call_id: str, tool: str = "", operation: str | None = None, trace: TraceContext | None = None
    ) -> None:
        self.call_id = call_id
        # The caller's trace this call belongs to (trace_context): named in the host's records of it.
        self.trace = trace
        # What stops its waiting: the scope of a call that may wait for a worker,
        # or the event a warm call waits on for its answer.
        self.scope: trio.CancelScope | None = None
        self.wake: trio.Event | None = None
        self.reason: str | None = None
        self.tool = tool
        self.operation = operation
        # UI prompts this call is waiting on: cancelled with the call, so they
        # are answered (with the no-op value) instead of left hanging.
        self.ui_scopes: set[trio.CancelScope] = set()
        self.stopping = False
        self.worker_unenforced: list[str] = []
        # The worker running it, from when it is taken: only that worker may
        # speak for this call (abort it, log, prompt or push an action as it).
        self.worker: PoolWorker | None = None
        # Set when its worker broke one of the host's bounds during the call
        # (xcsh_run._host.host_api): the call then ends with a tool_error saying so.
        self.violation: str | None = None
        # The ladder's grace period while it runs; `forced` ends it (now, or as soon as it starts).
        self.grace: trio.CancelScope | None = None
        self.forced = False
        # Whether its worker runs under the sandbox's rules for syscalls that
        # name another process (xcsh_run._host.host_limits): None until it has a worker.
        self.pid_rules: bool | None = None
        # Set when the host itself ends the call for what its worker did to the
        # host (xcsh_run._host.host_limits): the call's tool_error, instead of `cancelled`.
        self.host_stop: str | None = None

    def stop(self) -> None:
        """The ladder begins (timeouts too): no new UI prompt, and the open ones are answered now."""
        self.stopping = True
        for scope in self.ui_scopes:
            scope.cancel()


class CallTable:
    """The running calls by id: cancel one, every one, or every one of an operation."""

    def __init__(self) -> None:
        self._calls: dict[str, Call] = {}
        self._changed = trio.Event()

    def __len__(self) -> int:
        return len(self._calls)

    def calls(self) -> list[Call]:
        """The running calls, in the order they started."""
        return list(self._calls.values())

    def get(self, call_id: str | None) -> Call | None:
        return self._calls.get(call_id) if call_id else None

    def owned(self, call_id: str | None, worker: PoolWorker) -> Call | None:
        """The call ``call_id`` if ``worker`` is running it now; None for an unknown id or another worker's call.

        Call ids are sequential (``call-N``, ``sync-N``, ``mcp-N``) and so easy to
        guess: a worker's word about a call is taken only for its own call.
        """
        call = self.get(call_id)
        return call if call is not None and call.worker is worker else None

    def add(self, call_id: str, tool: str, operation: str | None, trace: TraceContext | None = None) -> Call:
        if call_id in self._calls:
            raise ConfigError(f"tool_call_id {call_id!r} is already running; ids must be unique")
        call = self._calls[call_id] = Call(call_id, tool, operation, trace)
        return call

    def remove(self, call_id: str) -> None:
        del self._calls[call_id]
        self._changed.set()
        self._changed = trio.Event()

    def cancel(self, call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool:
        """Stop a call through the ladder; ``force`` skips what is left of its grace period (the kill rung now)."""
        call = self._calls.get(call_id)
        if call is None:
            return False
        if call.reason is None:
            call.reason = reason
        if force:
            call.forced = True
            if call.grace is not None:
                call.grace.cancel()
        if call.scope is not None:
            call.scope.cancel()
        if call.wake is not None:
            call.wake.set()
        return True

    def cancel_all(self, reason: str = "cancelled") -> None:
        for call_id in list(self._calls):
            self.cancel(call_id, reason)

    def abort(self, call_id: str | None, reason: str) -> None:
        """A tool's ``ctx.abort()``: cancel its call and every running call of its operation.

        The caller checks first that the call is the aborting worker's own (:meth:`owned`).
        """
        call = self.get(call_id)
        if call is None:
            return
        why = f"aborted by {call.tool}: {reason}"
        for other in list(self._calls.values()):
            if other is call or (call.operation is not None and other.operation == call.operation):
                self.cancel(other.call_id, why)

    async def wait_empty(self, bound: float) -> None:
        with trio.move_on_after(bound):
            while self._calls:
                await self._changed.wait()
