"""Calls: the call table, one call's lifecycle, the cancellation ladder, and what an answer means.

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
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import trio

from worker import _protocol as p

from ._config import check_seconds
from ._errors import ConfigError, RemoteProtocolError, WorkerDied, describe_exit
from ._pool import Slot, WorkerPool
from ._proc import RemoteError
from ._registry import LoadFailed, ToolInfo, ToolRegistry, last_line
from ._results import ErrorKind, ToolResult, error_result
from ._sandbox import Probe, SandboxPolicy, check
from ._validate import ArgumentValidator, SchemaProblem
from ._worker_api import InFlight, PoolWorker

log: Final = logging.getLogger("xcsh_run")
UpdateCallback = Callable[[dict[str, Any]], object]

_call_ids = itertools.count(1)


class Rung(enum.StrEnum):
    """Which step of the ladder ended a call."""

    COOPERATIVE = "cooperative"  # it answered or exited within the grace period
    KILLED = "killed"  # its tree was killed after the grace period


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

    __slots__ = ("call_id", "scope", "reason", "tool", "operation", "ui_scopes", "stopping", "worker_unenforced")

    def __init__(self, call_id: str, tool: str = "", operation: str | None = None) -> None:
        self.call_id = call_id
        self.scope: trio.CancelScope | None = None
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
    ) -> None:
        self.table = table
        self._pool = pool
        self._registry = registry
        self._probe = probe
        # What each policy in use could not enforce (best effort), from the probe.
        self._checked: dict[SandboxPolicy, list[str]] = dict(checked)
        self._deliver_cancel = deliver_cancel
        self._before_call = before_call
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
        slot: Slot | None = None
        pending: InFlight[p.CallResult] | None = None
        healthy = False
        lock = self._exclusive.setdefault(info.name, trio.Lock()) if info.concurrency == "exclusive" else None
        holds_lock = holds_slot = False
        try:
            with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
                call.scope = scope
                if call.reason is not None:
                    scope.cancel()
                # The waits below checkpoint only when they must wait: a warm
                # call's only trip through the scheduler is for its answer.
                if lock is not None:  # rule 1: queued time counts
                    try:
                        lock.acquire_nowait()
                    except trio.WouldBlock:
                        await lock.acquire()
                    holds_lock = True
                try:
                    self._limiter.acquire_on_behalf_of_nowait(call)
                except trio.WouldBlock:
                    await self._limiter.acquire_on_behalf_of(call)
                holds_slot = True
                try:
                    slot = await self._registry.acquire(info, timeout, policy)
                except LoadFailed as exc:
                    return _not_started(info, exc)
                call.worker_unenforced = slot.worker.unenforced
                if self._before_call is not None:
                    await self._before_call(slot)
                # Cancelled already (by the table, or the caller): nothing is sent.
                await trio.lowlevel.checkpoint_if_cancelled()
                params = p.CallParams(call_id=call.call_id, tool=info.name, arguments=raw_args, ctx=ctx)
                try:
                    pending = await slot.worker.start_call(p.CALL, params, on_update=_deliverer(on_update))
                except p.LocalProtocolError as exc:
                    healthy = True  # nothing was sent: the worker is as good as before
                    return _not_sent(info, exc)
                except (WorkerDied, RemoteProtocolError) as exc:
                    # It died (or broke the protocol) between being taken and
                    # being sent the call: reported like a death during the call.
                    pending = InFlight()
                    pending.set_error(exc)
                await pending.wait()
            if scope.cancelled_caught:
                kind = ErrorKind.CANCELLED if call.reason is not None else ErrorKind.TIMEOUT
                if slot is None:
                    what = "cancelled" if kind is ErrorKind.CANCELLED else f"timed out after {timeout:g} s"
                    return error_result(kind, f"{info.name!r} {what} before its worker was ready", module=info.module)
                call.stop()
                rung = await self._deliver_cancel(slot.worker, call.call_id, call.reason or "timeout", pending)
                return _stopped(info, kind, call.reason, timeout, rung, slot.worker)
            assert slot is not None and pending is not None
            result = limits(interpret(info, slot.worker, pending), slot.worker, policy)
            healthy = result.kind in (None, "tool_error", "invalid_arguments")
            return result
        except BaseException:
            # The caller was cancelled (or something unexpected happened):
            # the worker still goes through the ladder before we let go (rule 2).
            if slot is not None:
                call.stop()
                with trio.CancelScope(shield=True):
                    await self._deliver_cancel(slot.worker, call.call_id, call.reason or "cancelled", pending)
            raise
        finally:
            if slot is not None:
                if pending is not None:
                    pending.abandon()
                await self._pool.finish(slot, healthy=healthy)
            if holds_slot:
                self._limiter.release_on_behalf_of(call)
            if holds_lock and lock is not None:
                lock.release()


def _deliverer(on_update: UpdateCallback | None) -> Callable[[p.CallResult], None]:
    def deliver(partial: p.CallResult) -> None:
        if on_update is None:
            return
        try:
            on_update({"content": partial.content, "details": partial.details})
        except Exception as exc:  # the caller's callback must not take the host down
            log.warning("on_update callback raised %r; update dropped", exc)

    return deliver


def _not_started(info: ToolInfo, exc: LoadFailed) -> ToolResult:
    if exc.startup:
        message = f"could not run {info.name!r}: {exc}"
        return error_result(ErrorKind.CRASHED, message, stderr_tail=exc.stderr_tail, module=info.module)
    return error_result(ErrorKind.LOAD_ERROR, str(exc), stderr_tail=exc.stderr_tail, module=info.module)


def _not_sent(info: ToolInfo, exc: p.LocalProtocolError) -> ToolResult:
    if isinstance(exc, p.FrameTooLarge):
        message = (
            f"the call to {info.name!r} does not fit in one protocol message ({exc}); pass less data, "
            "or open the runner with a larger max_frame_bytes"
        )
        return error_result(ErrorKind.INVALID_ARGUMENTS, message, path="$", module=info.module)
    # Not JSON: a ctx (set_context, or the call's own) holding values JSON cannot carry.
    message = (
        f"the call to {info.name!r} could not be sent: {exc}; ctx values must be JSON (str, numbers, lists, dicts)"
    )
    return error_result(ErrorKind.INVALID_ARGUMENTS, message, module=info.module)


def _stopped(
    info: ToolInfo, kind: ErrorKind, reason: str | None, timeout: float, rung: Rung, worker: PoolWorker
) -> ToolResult:
    if kind is ErrorKind.TIMEOUT:
        message = f"{info.name!r} timed out after {timeout:g} s"
    else:
        message = f"{info.name!r} was cancelled ({reason})"
    how = "stopped within the grace period" if rung is Rung.COOPERATIVE else "was killed after the grace period"
    return error_result(
        kind,
        f"{message}; the tool {how}",
        rung=rung.value,
        stderr_tail=worker.stderr_tail.text() or None,
        module=info.module,
    )


def interpret(info: ToolInfo, worker: PoolWorker, pending: InFlight[p.CallResult]) -> ToolResult:
    """The worker's answer (or its end) as a result."""
    try:
        result = pending.outcome()
    except RemoteError as exc:
        data = exc.data
        kind = ErrorKind(p.kind_of(exc.error.code))  # rule 3
        message = exc.error.message
        if kind is ErrorKind.PROTOCOL_ERROR:
            message = f"the worker answered with an unexpected error ({exc.error.code}): {message}"
        return error_result(
            kind,
            message,
            traceback=str_or_none(data.get("traceback")),
            path=str_or_none(data.get("path")),
            limit=str_or_none(data.get("limit")),
            module=info.module,
        )
    except WorkerDied as exc:
        return error_result(
            ErrorKind.CRASHED,
            f"the worker running {info.name!r} {describe_exit(exc.returncode)}"
            + (f"; last stderr: {last_line(exc.stderr_tail)}" if exc.stderr_tail.strip() else ""),
            exit_code=exc.exit_code,
            signal=exc.signal_name,
            stderr_tail=exc.stderr_tail or None,
            module=info.module,
        )
    except RemoteProtocolError as exc:
        tail = worker.stderr_tail.text() or None
        return error_result(ErrorKind.PROTOCOL_ERROR, str(exc), stderr_tail=tail, module=info.module)
    return ToolResult(content=result.content, details=result.details)


def limits(result: ToolResult, worker: PoolWorker, policy: SandboxPolicy) -> ToolResult:
    """Name the sandbox limit behind a failure, when one was hit."""
    if result.kind not in ("crashed", "tool_error"):
        return result
    err = result.error
    assert err is not None
    limit, why = None, ""
    if worker.output_exceeded:
        limit, why = "output", f"the worker wrote more than {policy.output_mb} MiB to stdout and stderr"
    elif worker.boundary.oom_kills():
        limit, why = "memory", f"the tool's processes went over the {policy.memory_mb} MiB memory limit (OOM kill)"
    elif err.signal == "SIGXCPU" or (err.signal == "SIGKILL" and _near_cpu_limit(worker, policy)):
        limit, why = "cpu", f"the worker used its {policy.cpu_seconds} s of CPU time"
    elif worker.boundary.pids_limit_hits():
        limit, why = "processes", f"the tool tried to run more than {policy.max_procs} processes"
    if limit is None:
        return result
    return error_result(
        ErrorKind.LIMIT_EXCEEDED,
        f"{limit} limit exceeded: {why}; raise it in the sandbox policy if the tool needs more",
        limit=limit,
        exit_code=err.exit_code,
        signal=err.signal,
        stderr_tail=err.stderr_tail,
        traceback=err.traceback,
        module=err.module,
    )


def _near_cpu_limit(worker: PoolWorker, policy: SandboxPolicy) -> bool:
    # SIGKILL at the hard limit (soft + 5 s), for a tool that ignored SIGXCPU.
    return policy.cpu_seconds is not None and worker.cpu_seconds() >= policy.cpu_seconds


def str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
