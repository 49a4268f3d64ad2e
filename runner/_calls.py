"""Calls: the call table, one call's lifecycle and the cancellation ladder (``runner._outcomes``: what an end means).

Every call ends in exactly one :class:`ToolResult`. Tool failures, crashes,
timeouts, protocol violations and cancellation requests all become results
with ``is_error=True``; a call raises only ``trio.Cancelled`` (after the
worker's tree is gone) when the *caller's* scope is cancelled.

The ladder (:class:`CancelLadder`), used for timeouts and cancellation alike:

1. send ``$/cancel`` with the reason, then SIGTERM to the worker: the tool's
   ``signal`` fires; a sync tool gets ``ToolCancelled`` raised, an async one
   has its task cancelled;
2. wait up to ``grace`` seconds for the worker to answer or exit;
3. kill the worker's whole boundary (cgroup) and wait until it is empty.

The result's ``error.rung`` says whether step 2 (``"cooperative"``) or step 3
(``"killed"``) ended it. A worker that went through the ladder is never reused.

Rules this module keeps:

1. Queued time counts against the deadline: the caller asked for an answer
   within ``timeout``, whatever kept it waiting (``max_workers``, an exclusive tool).
2. A call stopped for any reason (timeout, :meth:`CallTable.cancel`, an abort,
   the caller's own cancellation) goes through the ladder, shielded, before
   its worker is let go; from then on it opens no UI prompt.
3. The error kind comes from the JSON-RPC error code, never from the
   worker's free-form ``error.data``: a worker cannot claim that its call
   "timed out" or "crashed"; those kinds are the host's own observations.
4. A warm call, one that finds an idle worker, a free token and lock, and
   nothing to tell the worker first, takes all of it in one synchronous step
   and sends without a checkpoint; it then waits for its answer alone, on an
   event that the answer, a cancel or the deadline keeper
   (``runner._deadlines``) sets. A call queued behind ``max_workers`` waits
   for its token alone under a cancel scope, then takes its worker the same
   way. Every other call waits under a cancel scope with the same deadline.
   From the answer (or the stop) on, both are one path.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import trio

from worker import _protocol as p

from ._config import check_seconds
from ._deadlines import DeadlineKeeper
from ._errors import ConfigError, RemoteProtocolError, WorkerDied
from ._outcomes import Rung, deliverer, interpret, limits, not_sent, not_started, stopped
from ._pool import Slot, WorkerPool
from ._registry import LoadFailed, ToolInfo, ToolRegistry
from ._results import ErrorKind, ToolResult, error_result
from ._sandbox import Probe, SandboxPolicy, check
from ._validate import ArgumentValidator, SchemaProblem
from ._worker_api import InFlight, PoolWorker

log: Final = logging.getLogger("xcsh_run")
UpdateCallback = Callable[[dict[str, Any]], object]

_call_ids = itertools.count(1)


# How to stop a call's worker, in the spirit of trio's `run_process(deliver_cancel=...)`:
# given the worker, the call id, the reason and the call's request (if sent), stop
# it and say which rung did. It must leave the worker dead or dying, and be bounded.
DeliverCancel = Callable[[PoolWorker, str, str, "InFlight[p.CallResult] | None"], Awaitable[Rung]]


@dataclass(frozen=True)
class CancelLadder:
    """The default :data:`DeliverCancel`: ``$/cancel`` + SIGTERM, ``grace`` seconds, then the tree kill."""

    grace: float

    async def __call__(
        self, worker: PoolWorker, call_id: str, reason: str, pending: InFlight[p.CallResult] | None
    ) -> Rung:
        rung = Rung.KILLED
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.grace):
                await worker.notify(p.CANCEL, p.CancelParams(call_id=call_id, reason=reason))
                worker.terminate()
                if pending is not None:
                    await pending.wait()
                else:
                    await worker.wait_exited()
                rung = Rung.COOPERATIVE
            await worker.kill()
        return rung


class Call:
    """One running call, as the table (cancel, abort) and the bridge (UI prompts, logs) see it."""

    __slots__ = (
        "call_id", "scope", "wake", "reason", "tool", "operation", "ui_scopes", "stopping", "worker_unenforced",
    )  # fmt: skip

    def __init__(self, call_id: str, tool: str = "", operation: str | None = None) -> None:
        self.call_id = call_id
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

    def get(self, call_id: str | None) -> Call | None:
        return self._calls.get(call_id) if call_id else None

    def add(self, call_id: str, tool: str, operation: str | None) -> Call:
        if call_id in self._calls:
            raise ConfigError(f"tool_call_id {call_id!r} is already running; ids must be unique")
        call = self._calls[call_id] = Call(call_id, tool, operation)
        return call

    def remove(self, call_id: str) -> None:
        del self._calls[call_id]
        self._changed.set()
        self._changed = trio.Event()

    def cancel(self, call_id: str, reason: str = "cancelled") -> bool:
        call = self._calls.get(call_id)
        if call is None:
            return False
        if call.reason is None:
            call.reason = reason
        if call.scope is not None:
            call.scope.cancel()
        if call.wake is not None:
            call.wake.set()
        return True

    def cancel_all(self, reason: str = "cancelled") -> None:
        for call_id in list(self._calls):
            self.cancel(call_id, reason)

    def abort(self, call_id: str | None, reason: str) -> None:
        """A tool's ``ctx.abort()``: cancel its call and every running call of its operation."""
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


class Calls:
    """Runs calls: checks, queueing (``max_workers``, exclusive tools), the worker, the ladder, the result."""

    def __init__(
        self,
        pool: WorkerPool,
        registry: ToolRegistry,
        *,
        table: CallTable,
        max_workers: int,
        probe: Probe,
        checked: Mapping[SandboxPolicy, list[str]],
        deliver_cancel: DeliverCancel,
        before_call: Callable[[Slot], Awaitable[None]] | None = None,
        deadlines: DeadlineKeeper | None = None,
        ready: Callable[[Slot], bool] | None = None,
    ) -> None:
        self.table = table
        self._pool = pool
        self._registry = registry
        self._probe = probe
        # What each policy in use could not enforce (best effort), from the probe.
        self._checked: dict[SandboxPolicy, list[str]] = dict(checked)
        self._deliver_cancel = deliver_cancel
        self._before_call = before_call
        # The warm path: a call that finds everything it needs free waits for
        # nothing but its answer, under the keeper's deadline instead of a scope.
        # `ready` says whether a worker needs nothing from `before_call`.
        self._deadlines = deadlines
        self._ready = ready
        # Calls past max_workers wait here, first come first served (trio's
        # CapacityLimiter is FIFO); exclusive tools also queue on their lock.
        self._limiter = trio.CapacityLimiter(max_workers)
        self._exclusive: dict[str, trio.Lock] = {}
        self._validators: dict[str, ArgumentValidator] = {}

    def queued(self) -> int:
        waiting = self._limiter.statistics().tasks_waiting
        return waiting + sum(lock.statistics().tasks_waiting for lock in self._exclusive.values())

    async def call(
        self,
        info: ToolInfo,
        args: Mapping[str, Any],
        *,
        timeout: float | None,
        policy: SandboxPolicy,
        default_timeout: float,
        ctx: dict[str, Any],
        on_update: UpdateCallback | None = None,
        tool_call_id: str | None = None,
        operation_id: str | None = None,
    ) -> ToolResult:
        """One call of a loaded tool to its single terminal result (see ``Runner.call_tool``)."""
        validator = self._validator(info)
        if validator is not None:
            try:
                validator.validate(args)
            except SchemaProblem as exc:
                message = f"invalid arguments for {info.name!r}: {exc}"
                return error_result(ErrorKind.INVALID_ARGUMENTS, message, path=exc.path)
        try:
            raw_args = p.encode_value(args)
        except (TypeError, ValueError, RecursionError, msgspec.EncodeError) as exc:
            return error_result(ErrorKind.INVALID_ARGUMENTS, f"arguments are not JSON-serialisable: {exc}", path="$")
        if policy not in self._checked:
            self._checked[policy] = check(policy, self._probe)  # fail closed before anything runs
        if timeout is None:
            timeout = info.timeout if info.timeout is not None else (policy.wall_seconds or default_timeout)
        timeout = check_seconds("timeout", timeout)
        call = self.table.add(tool_call_id or f"call-{next(_call_ids)}", info.name, operation_id)
        try:
            result = await self._run(info, call, raw_args, ctx, on_update, timeout, policy)
            # The host's probe, plus what the worker itself failed to apply.
            unenforced = [*self._checked[policy], *call.worker_unenforced]
            if unenforced:
                result = msgspec.structs.replace(result, unenforced=unenforced)
            return result
        finally:
            self.table.remove(call.call_id)

    def _validator(self, info: ToolInfo) -> ArgumentValidator | None:
        if info.params_kind != "json_schema":
            return None
        validator = self._validators.get(info.name)
        if validator is None:
            # Compiled on first use: a cached run that calls a Struct tool
            # never pays for importing jsonschema.
            validator = self._validators[info.name] = ArgumentValidator(info.parameters)
        return validator

    async def _run(
        self,
        info: ToolInfo,
        call: Call,
        raw_args: msgspec.Raw,
        ctx: dict[str, Any],
        on_update: UpdateCallback | None,
        timeout: float,
        policy: SandboxPolicy,
    ) -> ToolResult:
        deadline = trio.current_time() + timeout
        lock = self._exclusive.setdefault(info.name, trio.Lock()) if info.concurrency == "exclusive" else None
        held = _Held()
        pending: InFlight[p.CallResult] | None = None
        healthy = False
        try:
            params = p.CallParams(call_id=call.call_id, tool=info.name, arguments=raw_args, ctx=ctx)
            slot = self._take_warm(info, call, policy, lock, held)
            if slot is None and self._queues_for_token(info, call, lock):
                if not await self._wait_token(call, held, deadline):
                    return _not_ready(info, call, timeout)
                slot = self._take_warm(info, call, policy, lock, held)
            sent = self._send_warm(info, slot, params, on_update) if slot is not None else None
            if isinstance(sent, ToolResult):
                healthy = True  # nothing was sent: the worker is as good as before
                return sent
            if sent is not None:
                pending = sent
                answered = await self._wait_answer(call, pending, deadline)
            else:
                with trio.CancelScope(deadline=deadline) as scope:
                    call.scope = scope
                    if call.reason is not None:
                        scope.cancel()
                    if slot is None:
                        taken = await self._take(info, call, policy, lock, held, timeout)
                        if isinstance(taken, ToolResult):
                            return taken
                        slot = taken
                    # Cancelled already (by the table, or the caller): nothing is sent.
                    await trio.lowlevel.checkpoint_if_cancelled()
                    sent = await self._send(info, slot, params, on_update)
                    if isinstance(sent, ToolResult):
                        healthy = True
                        return sent
                    pending = sent
                    await pending.wait()
                answered = not scope.cancelled_caught
                if not answered and slot is None:
                    return _not_ready(info, call, timeout)
            assert slot is not None
            if not answered:  # (pending is None if it was stopped before the call was sent)
                kind = ErrorKind.CANCELLED if call.reason is not None else ErrorKind.TIMEOUT
                call.stop()
                rung = await self._deliver_cancel(slot.worker, call.call_id, call.reason or "timeout", pending)
                return stopped(info, kind, call.reason, timeout, rung, slot.worker)
            assert pending is not None
            result = limits(interpret(info, slot.worker, pending), slot.worker, policy)
            healthy = result.kind in (None, "tool_error", "invalid_arguments")
            return result
        except BaseException:
            # The caller was cancelled (or something unexpected happened):
            # the worker still goes through the ladder before we let go (rule 2).
            if held.slot is not None:
                call.stop()
                with trio.CancelScope(shield=True):
                    await self._deliver_cancel(held.slot.worker, call.call_id, call.reason or "cancelled", pending)
            raise
        finally:
            if held.slot is not None:
                if pending is not None:
                    pending.abandon()
                await self._pool.finish(held.slot, healthy=healthy)
            if held.token:
                self._limiter.release_on_behalf_of(call)
            if held.lock and lock is not None:
                lock.release()

    def _take_warm(
        self, info: ToolInfo, call: Call, policy: SandboxPolicy, lock: trio.Lock | None, held: _Held
    ) -> Slot | None:
        """All a call waits for, if all of it is free now, taken without a checkpoint; else None, nothing taken."""
        if self._deadlines is None or call.reason is not None or (lock is not None and lock.locked()):
            return None
        slot = self._pool.peek_idle(info.module, policy)
        if slot is None or (self._ready is not None and not self._ready(slot)):
            return None
        if not held.token:
            try:
                self._limiter.acquire_on_behalf_of_nowait(call)
            except trio.WouldBlock:
                return None
            held.token = True
        if lock is not None:
            lock.acquire_nowait()  # free (checked above), and nothing ran since
            held.lock = True
        self._pool.take(slot)
        held.slot = slot
        call.worker_unenforced = slot.worker.unenforced
        return slot

    def _queues_for_token(self, info: ToolInfo, call: Call, lock: trio.Lock | None) -> bool:
        """Whether the call waits for a limiter token alone, and may then find an idle worker warm."""
        return (
            self._deadlines is not None and lock is None and call.reason is None and self._limiter.available_tokens == 0
        )

    async def _wait_token(self, call: Call, held: _Held, deadline: float) -> bool:
        """Wait in the limiter's FIFO under the call's deadline; False if stopped first (nothing held).

        Only the wait has a scope: the call then takes an idle worker warm, as
        one that found a token free would (a finishing call hands its token
        straight to the first waiter, after its worker is back in the idle lists).
        """
        with trio.CancelScope(deadline=deadline) as scope:
            call.scope = scope
            if call.reason is not None:
                scope.cancel()
            await self._limiter.acquire_on_behalf_of(call)
            held.token = True
        call.scope = None
        return held.token

    async def _take(
        self, info: ToolInfo, call: Call, policy: SandboxPolicy, lock: trio.Lock | None, held: _Held, timeout: float
    ) -> Slot | ToolResult:
        """A worker for the call, waiting as long as it takes (under the call's scope); a result if none."""
        # Each wait checkpoints only when it must wait.
        if lock is not None:  # rule 1: queued time counts
            try:
                lock.acquire_nowait()
            except trio.WouldBlock:
                await lock.acquire()
            held.lock = True
        if not held.token:
            try:
                self._limiter.acquire_on_behalf_of_nowait(call)
            except trio.WouldBlock:
                await self._limiter.acquire_on_behalf_of(call)
            held.token = True
        try:
            slot = held.slot = await self._registry.acquire(info, timeout, policy)
        except LoadFailed as exc:
            return not_started(info, exc)
        call.worker_unenforced = slot.worker.unenforced
        if self._before_call is not None:
            await self._before_call(slot)
        return slot

    def _send_warm(
        self, info: ToolInfo, slot: Slot, params: p.CallParams, on_update: UpdateCallback | None
    ) -> InFlight[p.CallResult] | ToolResult | None:
        """The call sent without a checkpoint; None if that would have to wait (another frame is being written)."""
        try:
            return slot.worker.start_call_nowait(p.CALL, params, on_update=deliverer(on_update))
        except trio.WouldBlock:
            return None
        except _UNSENT as exc:
            return _unsent(info, exc)

    async def _send(
        self, info: ToolInfo, slot: Slot, params: p.CallParams, on_update: UpdateCallback | None
    ) -> InFlight[p.CallResult] | ToolResult:
        try:
            return await slot.worker.start_call(p.CALL, params, on_update=deliverer(on_update))
        except _UNSENT as exc:
            return _unsent(info, exc)

    async def _wait_answer(self, call: Call, pending: InFlight[p.CallResult], deadline: float) -> bool:
        """A warm call's wait: True once answered (or its worker ended); False if timed out or cancelled."""
        assert self._deadlines is not None
        wake = call.wake = trio.Event()
        pending.watch(wake)
        try:
            if self._deadlines.watch(call, deadline, wake) and call.reason is None:
                await wake.wait()
        finally:
            call.wake = None
            self._deadlines.unwatch(call)
        if pending.done:
            return True
        if call.reason is not None or trio.current_time() >= deadline:
            return False
        # Woken because the keeper ended (rule 1 of runner._deadlines): a scope of its own.
        with trio.CancelScope(deadline=deadline) as scope:
            call.scope = scope  # no checkpoint since the check above: a cancel from now on reaches it
            await pending.wait()
        return not scope.cancelled_caught


class _Held:
    """What a call holds, released in its ``finally``: an exclusive tool's lock, a limiter token, a worker."""

    __slots__ = ("lock", "token", "slot")

    def __init__(self) -> None:
        self.lock = False
        self.token = False
        self.slot: Slot | None = None


_UNSENT = (p.LocalProtocolError, WorkerDied, RemoteProtocolError)


def _not_ready(info: ToolInfo, call: Call, timeout: float) -> ToolResult:
    kind = ErrorKind.CANCELLED if call.reason is not None else ErrorKind.TIMEOUT
    what = "cancelled" if kind is ErrorKind.CANCELLED else f"timed out after {timeout:g} s"
    return error_result(kind, f"{info.name!r} {what} before its worker was ready", module=info.module)


def _unsent(info: ToolInfo, exc: Exception) -> InFlight[p.CallResult] | ToolResult:
    if isinstance(exc, p.LocalProtocolError):
        return not_sent(info, exc)  # too big, or not JSON: nothing was sent
    # It died (or broke the protocol) between being taken and being sent the
    # call: reported like a death during the call.
    pending: InFlight[p.CallResult] = InFlight()
    pending.set_error(exc)
    return pending
