"""Calls: one call's lifecycle, from its checks and its turn to its single result.

``xcsh_run._calls.table`` has the running calls and the cancellation ladder;
``xcsh_run._calls.outcome`` says what an end means.

Every call ends in exactly one :class:`ToolResult`. Tool failures, crashes,
timeouts, protocol violations and cancellation requests all become results
with ``is_error=True``; a call raises only ``trio.Cancelled`` (after the
worker's tree is gone) when the *caller's* scope is cancelled.

Rules this module keeps:

1. Time in the queue is not the call's: a call that waits for a turn
   (``max_workers``, or the other call of an exclusive tool) waits under the
   queue deadline (``queue_timeout``), and its own ``timeout`` starts when it
   leaves the queue (starting its worker counts against it). A call whose
   queue deadline passes ends ``busy`` without having started.
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
   (``xcsh_run._calls.deadlines``) sets. A call queued behind ``max_workers`` waits
   for its token alone under a cancel scope, then takes its worker the same
   way. Every other call waits under a cancel scope with the same deadline.
   From the answer (or the stop) on, both are one path.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import msgspec
import trio

from xcsh_run._calls.deadlines import DeadlineKeeper
from xcsh_run._calls.ladder import DeliverCancel
from xcsh_run._calls.outcome import deliverer, interpret, limits, log_end, not_sent, not_started, stopped
from xcsh_run._calls.table import Call, CallTable
from xcsh_run._calls.trace_context import TraceContext
from xcsh_run._config import check_seconds
from xcsh_run._discovery import ArgumentValidator, SchemaProblem, ToolInfo
from xcsh_run._errors import RemoteProtocolError, WorkerDied
from xcsh_run._pool import InFlight, Loader, LoadFailed, Slot, settle_leftovers
from xcsh_run._results import ErrorKind, ToolResult, error_result
from xcsh_run._sandbox import Probe, SandboxPolicy, check
from xcsh_run.worker import protocol as p

log: Final = logging.getLogger("xcsh_run")
UpdateCallback = Callable[[dict[str, Any]], object]

_call_ids = itertools.count(1)
# Plans a call may need: the cache's, then its worker's (a second change means the file changed meanwhile).
_REPLANS: Final = 3


class Calls:
    """Runs calls: checks, queueing (``max_workers``, exclusive tools), the worker, the ladder, the result."""

    def __init__(
        self,
        loader: Loader,
        *,
        table: CallTable,
        max_workers: int,
        probe: Probe,
        checked: Mapping[SandboxPolicy, list[str]],
        deliver_cancel: DeliverCancel,
        before_call: Callable[[Slot], Awaitable[None]] | None = None,
        deadlines: DeadlineKeeper | None = None,
        ready: Callable[[Slot], bool] | None = None,
        queue_timeout: float | None = None,
    ) -> None:
        self.table = table
        self._loader = loader  # every worker a call gets, and gives back (one route)
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
        self._queue_timeout = queue_timeout
        self._exclusive: dict[str, trio.Lock] = {}
        self._validators: dict[str, tuple[dict[str, Any], ArgumentValidator]] = {}

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
        trace: TraceContext | None = None,
    ) -> ToolResult:
        """One call of a loaded tool to its single terminal result (see ``Runner.call_tool``)."""
        planned = self._plan(info, args, timeout, policy, default_timeout)
        if isinstance(planned, ToolResult):
            return planned
        if policy not in self._checked:
            self._checked[policy] = check(policy, self._probe)  # fail closed before anything runs
        call = self.table.add(tool_call_id or f"call-{next(_call_ids)}", info.name, operation_id, trace)
        if trace is not None:
            extra = {"tool": info.name, "call_id": call.call_id, "trace_id": trace.trace_id}
            log.debug("%r (%s) continues trace %s", info.name, call.call_id, trace.traceparent, extra=extra)
        try:
            for _ in range(_REPLANS):
                raw_args, seconds = planned
                outcome = await self._run(info, call, raw_args, ctx, on_update, seconds, policy)
                if isinstance(outcome, ToolResult):
                    break
                # Its worker's module defines the tool differently from the plan
                # (a stale or forged cache entry): plan again, from the module's word.
                info = outcome.info
                await self._loader.heal(info, outcome.loaded)
                planned = self._plan(info, args, timeout, policy, default_timeout)
                if isinstance(planned, ToolResult):
                    return planned
            else:
                message = f"{info.module} kept changing while {info.name!r} was being started; run it again"
                return error_result(ErrorKind.LOAD_ERROR, message, module=info.module)
            result = outcome
            log_end(result, info.name, call.call_id, call.worker, call.trace)
            # The host's probe, plus what the worker itself failed to apply.
            unenforced = [*self._checked[policy], *call.worker_unenforced]
            if unenforced:
                result = msgspec.structs.replace(result, unenforced=unenforced)
            return result
        finally:
            self.table.remove(call.call_id)

    def _plan(
        self, info: ToolInfo, args: Mapping[str, Any], timeout: float | None, policy: SandboxPolicy, default: float
    ) -> tuple[msgspec.Raw, float] | ToolResult:
        """The call's checked arguments, encoded, and its timeout; or why it cannot be made."""
        try:
            validator = self._validator(info)
        except SchemaProblem as exc:
            message = f"{info.module}: tool {info.name!r} cannot be called: {exc}"
            return error_result(ErrorKind.LOAD_ERROR, message, module=info.module)
        if validator is not None:
            try:
                validator.validate(args)
            except SchemaProblem as exc:
                message = f"invalid arguments for {info.name!r}: {exc}"
                return error_result(
                    ErrorKind.INVALID_ARGUMENTS, message, path=exc.path, expected=exc.expected, got=exc.got
                )
        try:
            raw_args = p.encode_value(args)
        except (TypeError, ValueError, RecursionError, msgspec.EncodeError) as exc:
            return error_result(ErrorKind.INVALID_ARGUMENTS, f"arguments are not JSON-serialisable: {exc}", path="$")
        return raw_args, call_timeout(timeout, info, policy, default)

    def _validator(self, info: ToolInfo) -> ArgumentValidator | None:
        if info.params_kind != "json_schema":
            return None
        known = self._validators.get(info.name)
        # Keyed by the schema too: a tool healed from a stale cache entry gets its real one.
        if known is None or (known[0] is not info.parameters and known[0] != info.parameters):
            # Compiled on first use: a cached run that calls a Struct tool
            # never pays for importing jsonschema.
            known = self._validators[info.name] = (info.parameters, ArgumentValidator(info.parameters))
        return known[1]

    async def _run(
        self,
        info: ToolInfo,
        call: Call,
        raw_args: msgspec.Raw,
        ctx: dict[str, Any],
        on_update: UpdateCallback | None,
        timeout: float,
        policy: SandboxPolicy,
    ) -> ToolResult | _Replan:
        now = trio.current_time()
        queue_deadline = now + self._queue_timeout if self._queue_timeout is not None else math.inf
        lock = self._exclusive.setdefault(info.name, trio.Lock()) if info.concurrency == "exclusive" else None
        held = _Held()
        pending: InFlight[p.CallResult] | None = None
        healthy = False
        try:
            params = p.CallParams(call_id=call.call_id, tool=info.name, arguments=raw_args, ctx=ctx)
            slot = self._take_warm(info, call, policy, lock, held)
            if slot is None and self._queues_for_token(info, call, lock):
                if not await self._wait_token(call, held, queue_deadline):
                    return self._not_ready(info, call, timeout, held)
                now = trio.current_time()  # rule 1: its own time starts now
                slot = self._take_warm(info, call, policy, lock, held)
            deadline = now + timeout
            if slot is not None and (replan := self._as_loaded(info, slot, call)) is not None:
                healthy = True
                return replan
            sent = self._send_warm(info, slot, params, on_update) if slot is not None else None
            if isinstance(sent, ToolResult):
                healthy = True  # nothing was sent: the worker is as good as before
                return sent
            if sent is not None:
                pending = sent
                answered = await self._wait_answer(call, pending, deadline)
            else:
                # Out of the queue already (a token taken, and maybe no idle worker
                # after all): its own deadline; entering a scope whose deadline has
                # passed cancels it for good, so the queue's must not be used then.
                with trio.CancelScope(deadline=deadline if held.started else queue_deadline) as scope:
                    call.scope = scope
                    if call.reason is not None:
                        scope.cancel()
                    if slot is None:
                        taken = await self._take(info, call, policy, lock, held, timeout, scope)
                        if isinstance(taken, ToolResult):
                            return taken
                        slot = taken
                    if (replan := self._as_loaded(info, slot, call)) is not None:
                        healthy = True
                        return replan
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
                    return self._not_ready(info, call, timeout, held)
            assert slot is not None
            if not answered:  # (pending is None if it was stopped before the call was sent)
                kind = ErrorKind.CANCELLED if call.reason is not None else ErrorKind.TIMEOUT
                call.stop()
                rung = await self._deliver_cancel(slot.worker, call, call.reason or "timeout", pending)
                if call.host_stop is not None:
                    # Stopped by the host for what its worker did (xcsh_run._host.host_limits), not by a caller.
                    return error_result(ErrorKind.TOOL_ERROR, call.host_stop, module=info.module, rung=str(rung))
                return stopped(info, kind, call.reason, timeout, rung, slot.worker)
            assert pending is not None
            result = limits(
                interpret(info, slot.worker, pending, policy, stopped=call.reason is not None or call.stopping),
                slot.worker,
                policy,
            )
            healthy = result.kind in (None, "tool_error", "invalid_arguments")
            if call.violation is not None and result.kind in (None, "tool_error"):
                # Its worker went past a bound its own API enforces (xcsh_run._host.host_api): it
                # wrote to the protocol itself, and is not given another call.
                healthy = False
                result = error_result(ErrorKind.TOOL_ERROR, call.violation, module=info.module)
            if healthy:
                result = await settle_leftovers(slot, info.name, info.keeps_processes, result)
            return result
        except BaseException:
            # The caller was cancelled (or something unexpected happened):
            # the worker still goes through the ladder before we let go (rule 2).
            if held.slot is not None:
                call.stop()
                with trio.CancelScope(shield=True):
                    await self._deliver_cancel(held.slot.worker, call, call.reason or "cancelled", pending)
            raise
        finally:
            if held.slot is not None:
                if pending is not None:
                    pending.abandon()
                await self._loader.finish(held.slot, healthy=healthy)
            if held.token:
                self._limiter.release_on_behalf_of(call)
            if held.lock and lock is not None:
                lock.release()

    def _as_loaded(self, info: ToolInfo, slot: Slot, call: Call) -> _Replan | None:
        """A new plan if ``slot``'s worker defines the tool otherwise than ``info`` says; None to go on."""
        real = self._loader.as_loaded(info, slot)
        if real is None:
            return None
        assert slot.loaded is not None
        call.worker = None  # the worker goes back: it runs nothing for this plan
        return _Replan(real, slot.loaded)

    def _take_warm(
        self, info: ToolInfo, call: Call, policy: SandboxPolicy, lock: trio.Lock | None, held: _Held
    ) -> Slot | None:
        """All a call waits for, if all of it is free now, taken without a checkpoint; else None, nothing taken."""
        if self._deadlines is None or call.reason is not None or (lock is not None and lock.locked()):
            return None
        slot = self._loader.peek(info.module, policy)
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
        self._loader.take(slot)
        held.slot = slot
        held.started = True
        call.worker_unenforced = slot.worker.unenforced
        call.worker = slot.worker
        call.pid_rules = has_pid_rules(policy, slot.worker.unenforced)
        return slot

    def _queues_for_token(self, info: ToolInfo, call: Call, lock: trio.Lock | None) -> bool:
        """Whether the call waits for a limiter token alone, and may then find an idle worker warm."""
        return (
            self._deadlines is not None and lock is None and call.reason is None and self._limiter.available_tokens == 0
        )

    async def _wait_token(self, call: Call, held: _Held, deadline: float) -> bool:
        """Wait in the limiter's FIFO under the queue deadline; False if stopped first (nothing held).

        Only the wait has a scope: the call then takes an idle worker warm, as
        one that found a token free would (a finishing call hands its token
        straight to the first waiter, after its worker is back in the idle lists).
        """
        with trio.CancelScope(deadline=deadline) as scope:
            call.scope = scope
            if call.reason is not None:
                scope.cancel()
            await self._limiter.acquire_on_behalf_of(call)
            held.token = held.started = True
        call.scope = None
        return held.token

    def _not_ready(self, info: ToolInfo, call: Call, timeout: float, held: _Held) -> ToolResult:
        """The result of a call stopped before it was sent: cancelled, busy (still queued), or timed out."""
        if call.reason is not None:
            what = "cancelled"
            kind = ErrorKind.CANCELLED
        elif not held.started:
            return error_result(ErrorKind.BUSY, self._busy(info, held), module=info.module)
        else:
            what = f"timed out after {timeout:g} s"
            kind = ErrorKind.TIMEOUT
        return error_result(kind, f"{info.name!r} {what} before its worker was ready", module=info.module)

    async def _take(
        self,
        info: ToolInfo,
        call: Call,
        policy: SandboxPolicy,
        lock: trio.Lock | None,
        held: _Held,
        timeout: float,
        scope: trio.CancelScope,
    ) -> Slot | ToolResult:
        """A worker for the call: its turn (under the queue deadline), then its worker (under its own)."""
        # Each wait checkpoints only when it must wait.
        if lock is not None:
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
        # Rule 1: out of the queue, the call's own time starts (no checkpoint
        # since the token was taken, so the queue deadline cannot have fired in between).
        if not held.started:
            scope.deadline = trio.current_time() + timeout
            held.started = True
        try:
            slot = held.slot = await self._loader.acquire(info, timeout, policy)
        except LoadFailed as exc:
            return not_started(info, exc)
        call.worker_unenforced = slot.worker.unenforced
        call.worker = slot.worker
        call.pid_rules = has_pid_rules(policy, slot.worker.unenforced)
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
        # Woken because the keeper ended (rule 1 of xcsh_run._calls.deadlines): a scope of its own.
        with trio.CancelScope(deadline=deadline) as scope:
            call.scope = scope  # no checkpoint since the check above: a cancel from now on reaches it
            await pending.wait()
        return not scope.cancelled_caught

    def _busy(self, info: ToolInfo, held: _Held) -> str:
        if info.concurrency == "exclusive" and not held.lock:
            waited = "the running call of this exclusive tool to end"
        else:
            running, limit = self._limiter.borrowed_tokens, int(self._limiter.total_tokens)
            waited = f"a free worker ({running} calls running, max_workers={limit})"
        return (
            f"{info.name!r} did not start: the runner is busy; it waited {self._queue_timeout or 0:g} s "
            f"(the queue deadline) for {waited}. Retry later, or raise max_workers (--max-workers) "
            "or the queue deadline (--queue-timeout)"
        )


def has_pid_rules(policy: SandboxPolicy, unenforced: Sequence[str]) -> bool:
    """Whether a worker runs under the seccomp rules that keep it from naming the host's pid."""
    return policy.level != "none" and not any(item.startswith("seccomp") for item in unenforced)


def call_timeout(caller: float | None, info: ToolInfo, policy: SandboxPolicy, default: float) -> float:
    """A call's timeout: the smallest of the caller's, the policy's ``wall_seconds`` and the tool's own.

    The caller and the policy are the host's word; either may raise the
    runner's ``default_timeout`` (used when neither gives one). The tool's
    declared ``timeout`` is the tool's word: it may shorten its calls, never
    lengthen them past what the host allows.
    """
    given = [check_seconds(label, t) for label, t in (("timeout", caller), ("wall_seconds", policy.wall_seconds))
             if t is not None]  # fmt: skip
    ceiling = min(given) if given else default
    return min(ceiling, info.timeout) if info.timeout is not None and info.timeout > 0 else ceiling


class _Replan(NamedTuple):
    """What ends a run before anything is sent: the tool as its worker's module defines it."""

    info: ToolInfo
    loaded: p.LoadResult


class _Held:
    """What a call holds, released in its ``finally``: an exclusive tool's lock, a limiter token, a worker."""

    __slots__ = ("lock", "token", "started", "slot")

    def __init__(self) -> None:
        self.lock = False
        self.token = False
        self.started = False  # out of the queue (rule 1)
        self.slot: Slot | None = None


_UNSENT = (p.LocalProtocolError, WorkerDied, RemoteProtocolError)


def _unsent(info: ToolInfo, exc: Exception) -> InFlight[p.CallResult] | ToolResult:
    if isinstance(exc, p.LocalProtocolError):
        return not_sent(info, exc)  # too big, or not JSON: nothing was sent
    # It died (or broke the protocol) between being taken and being sent the
    # call: reported like a death during the call.
    pending: InFlight[p.CallResult] = InFlight()
    pending.set_error(exc)
    return pending
