"""The host's half of the tool API (SPEC §2): UI, logs, abort, pending actions, session events, renders.

These are the pieces a worker reaches through the protocol while the host
stays in charge: a UI request is answered by whatever UI the embedding host
attached (the no-op one by default), log records go to the standard logging
logger ``xcsh_run.tool``, and pending actions are previews whose callables
stay in the worker that made them (which the pool then keeps: it is pinned).
"""

from __future__ import annotations

import contextvars
import inspect
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

import msgspec
import trio

from xcsh_run._calls import CallTable, str_or_none
from xcsh_run._config import RunnerConfig
from xcsh_run._discovery import Catalog, ToolInfo
from xcsh_run._errors import (
    ConfigError,
    RemoteError,
    RemoteProtocolError,
    RemoteRequestRefused,
    WorkerDied,
    describe_exit,
)
from xcsh_run._host.quotas import (
    COMPLAINTS_LOGGED,
    PENDING_MAX_BYTES,
    PENDING_PER_WORKER,
    PENDING_TOTAL,
    UI_IN_FLIGHT_PER_WORKER,
    UI_MAX_BYTES,
    cut_log,
    over,
)
from xcsh_run._pool import Housekeeping, Loader, LoadFailed, PoolWorker, Slot, WorkerPool
from xcsh_run._results import ErrorKind, PendingAction, ToolResult, error_result
from xcsh_run.worker import protocol as p

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

ui_call: Final = contextvars.ContextVar[str | None]("xcsh_run_ui_call", default=None)
"""The id of the call whose prompt a UI method is answering (None outside a call): set while the bridge
awaits the UI, so that one UI serving many callers (the MCP server's) can route the prompt to the right one."""

ui_key: Final = contextvars.ContextVar[str | None]("xcsh_run_ui_key", default=None)
"""The tool's name for the prompt being answered (``api.ui.elicit(..., key=)``, ``api.sample(key=)``), or None:
set beside :data:`ui_call`, for a UI that names prompts (the MCP server's, for 2026-07-28 input requests)."""

UI_DEFAULTS: Final[dict[str, Any]] = {
    "select": None,
    "confirm": False,
    "input": None,
    "notify": None,
    "set_status": None,
    "editor": None,
    "get_editor_text": "",
    "set_editor_text": None,
    "elicit": {"action": "cancel", "content": None},
    "sample": None,
    "roots": None,
}


class UIContext(Protocol):
    """What ``Runner.set_ui_context`` accepts: any object with these methods, sync or async.

    Missing methods answer like the no-op UI. A UI that serves many callers
    learns which call a prompt belongs to from :data:`ui_call`.
    """

    def confirm(self, title: str, message: str) -> Any: ...


class NoOpUI:
    """The host's UI when none is attached: it has no methods, so :func:`call_ui`
    answers every request with the empty value of ``UI_DEFAULTS`` and shows nothing."""


async def call_ui(ui: object, method: str, args: list[Any]) -> Any:
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
    """A preview in the host; ``apply``/``reject`` live in ``worker``, under its own ``action_id``.

    ``id`` is the host's, unique across workers (each numbers its own actions
    from one) and across runners (an MCP client's id outlives a reload).
    """

    __slots__ = ("id", "action_id", "worker", "label", "details", "source_tool_name", "call_id")

    def __init__(self, action_id: str, worker: PoolWorker, label: str, details: Any, source_tool_name: str,
                 call_id: str | None) -> None:  # fmt: skip
        self.id = f"pending-{uuid.uuid4().hex[:12]}"
        self.action_id = action_id
        self.worker = worker
        self.label = label
        self.details = details
        self.source_tool_name = source_tool_name
        self.call_id = call_id

    def preview(self) -> PendingAction:
        return PendingAction(self.id, self.label, self.source_tool_name, self.details, self.call_id)


def default_render_call(label: str, args: Any) -> str:
    try:
        shown = json.dumps(args, ensure_ascii=False)
    except (TypeError, ValueError):
        shown = repr(args)
    return f"{label} {shown}"


def default_render_result(result: ToolResult) -> str:
    return result.text


def validate_event(event: Mapping[str, Any]) -> dict[str, Any]:
    reason = event.get("reason")
    if reason not in SESSION_EVENTS:
        raise ConfigError(f"session event reason must be one of {', '.join(SESSION_EVENTS)}, got {reason!r}")
    try:
        out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(dict(event)))
    except (TypeError, msgspec.EncodeError) as exc:
        raise ConfigError(f"session event payload is not JSON-serialisable: {exc}") from None
    return out


class HostBridge:
    """Answers what workers ask of the host, and carries the host's session to them."""

    def __init__(
        self,
        config: RunnerConfig,
        pool: WorkerPool,
        catalog: Catalog,
        loader: Loader,
        calls: CallTable,
        *,
        nursery: trio.Nursery,
        housekeeping: Housekeeping,
    ) -> None:
        self._config = config
        self._pool = pool
        self._catalog = catalog
        self._loader = loader
        self._calls = calls
        self._nursery = nursery
        self._housekeeping = housekeeping
        self._ui: object = NoOpUI()
        self.context: dict[str, Any] = {}
        self.pending: list[PendingActionRecord] = []
        self._ui_in_flight: dict[PoolWorker, int] = {}
        # Also given every tool log record, whatever the logging levels: the MCP
        # server sends them to the client whose call made them. Must not block.
        self.log_listener: Callable[[p.LogParams], None] | None = None

    # --- the UI -----------------------------------------------------------------------

    def set_ui_context(self, ui: UIContext | None, has_ui: bool = True) -> None:
        self._ui = ui if ui is not None else NoOpUI()
        self._pool.has_ui = has_ui and ui is not None
        for slot in self._pool.slots():
            if slot.worker.alive:
                # Now for calls already running; sync_ui also runs before the
                # next request, so a call started right after this sees it.
                self._nursery.start_soon(self.sync_ui, slot)

    def ui_synced(self, slot: Slot) -> bool:
        """True if the worker knows whether there is a UI: :meth:`sync_ui` has nothing to send it."""
        return slot.has_ui == self._pool.has_ui

    async def sync_ui(self, slot: Slot) -> None:
        has_ui = self._pool.has_ui
        if slot.has_ui != has_ui:
            slot.has_ui = has_ui
            await slot.worker.notify(p.UI_CHANGED, p.UiChangedParams(has_ui=has_ui))

    async def on_request(self, worker: PoolWorker, request: p.RequestReceived) -> Any:
        if request.method is not p.UI:
            raise RemoteRequestRefused(int(p.ErrorCode.METHOD_NOT_FOUND), f"unknown method {request.method.name!r}")
        params: p.UiParams = request.params
        if params.method not in p.UI_METHODS:
            raise RemoteRequestRefused(int(p.ErrorCode.INVALID_PARAMS), f"unknown UI method {params.method!r}")
        default = UI_DEFAULTS[params.method]
        call = self._calls.owned(params.call_id, worker)
        if params.call_id is not None and call is None:
            # Not this worker's call: answering would show its prompt to another call's client.
            self._disowned(worker, f"a UI prompt ({params.method})", params.call_id)
            return default
        if call is not None and (call.reason is not None or call.stopping):
            return default  # the call is being stopped: answer now, show nothing
        in_flight = self._ui_in_flight.get(worker, 0)
        if in_flight >= UI_IN_FLIGHT_PER_WORKER:
            raise RemoteRequestRefused(
                int(p.ErrorCode.INVALID_REQUEST),
                f"{UI_IN_FLIGHT_PER_WORKER} UI requests of this worker are already waiting for an answer; "
                "wait for one before asking again",
            )
        if (problem := over("the UI request's arguments", params.args, UI_MAX_BYTES)) is not None:
            raise RemoteRequestRefused(int(p.ErrorCode.INVALID_PARAMS), f"{problem}; show less in a prompt")
        self._ui_in_flight[worker] = in_flight + 1
        with trio.CancelScope() as scope:
            if call is not None:
                call.ui_scopes.add(scope)
            token = ui_call.set(params.call_id)
            named = params.key if p.methods.input_key_problem(params.key) is None else None
            key_token = ui_key.set(named)
            try:
                return await call_ui(self._ui, params.method, params.args)
            except Exception as exc:
                log.warning("UI method %s raised %r; answering %r", params.method, exc, default)
                return default
            finally:
                ui_call.reset(token)
                ui_key.reset(key_token)
                if call is not None:
                    call.ui_scopes.discard(scope)
                self._ui_done(worker)
        return default  # cancelled with its call

    def on_notification(self, worker: PoolWorker, message: p.NotificationReceived) -> None:
        if message.method is p.LOG:
            record: p.LogParams = message.params
            call = self._calls.owned(record.call_id, worker)
            if record.call_id is not None and call is None:
                # Another call's id: its log (and an MCP client's) must not show this worker's words.
                self._disowned(worker, "a log record", record.call_id)
                record = msgspec.structs.replace(record, call_id=None)
            record = cut_log(record)
            slot = self._pool.slot(worker)
            tool = call.tool if call is not None else os.path.basename(slot.module) if slot is not None else ""
            tool_log.log(
                record.level,
                "%s",
                record.message,
                extra={"tool": tool, "call_id": record.call_id, "pid": worker.pid, "tool_logger": record.logger},
            )
            if self.log_listener is not None:
                self.log_listener(record)
        elif message.method is p.ABORT:
            abort: p.AbortParams = message.params
            call = self._calls.owned(abort.call_id, worker)
            if call is None:
                # Ids are sequential: any worker could otherwise stop any call.
                self._disowned(worker, "an abort", abort.call_id)
            else:
                self._calls.abort(call.call_id, abort.reason)
        elif message.method is p.PENDING:
            self._push(worker, message.params)
        elif message.method is p.UI_NOTICE:
            ui: p.UiParams = message.params
            if ui.method not in ("notify", "set_status", "set_editor_text"):
                return
            problem = over(f"a UI {ui.method}'s arguments", ui.args, UI_MAX_BYTES)
            if problem is None and self._ui_in_flight.get(worker, 0) >= UI_IN_FLIGHT_PER_WORKER:
                problem = f"{UI_IN_FLIGHT_PER_WORKER} UI requests of this worker are waiting for the UI already"
            if problem is not None:
                self._complain(worker, f"{problem}; dropped")
                return
            self._ui_in_flight[worker] = self._ui_in_flight.get(worker, 0) + 1
            # Housekeeping: a UI whose notify never returns must not hold the runner open.
            self._housekeeping.start_soon(self._fire_ui, worker, ui.method, ui.args)

    def _disowned(self, worker: PoolWorker, what: str, call_id: str | None) -> None:
        self._complain(worker, f"sent {what} for call {call_id!r}, which it is not running; ignored")

    def _complain(self, worker: PoolWorker, what: str) -> None:
        """Log a warning about what a worker sent, the first few only: a flood of them must not flood the log."""
        slot = self._pool.slot(worker)
        count = 1
        if slot is not None:
            slot.complaints += 1
            count = slot.complaints
        if count <= COMPLAINTS_LOGGED:
            last = "; further warnings about this worker are not logged" if count == COMPLAINTS_LOGGED else ""
            log.warning("worker %d (%s) %s%s", worker.pid, self._module_name(worker), what, last)

    def _module_name(self, worker: PoolWorker) -> str:
        slot = self._pool.slot(worker)
        return os.path.basename(slot.module) if slot is not None and slot.module else "no module"

    def _push(self, worker: PoolWorker, push: p.PendingPushParams) -> None:
        """Keep a pending action, or drop it (with a warning, and the call's tool_error) past a bound."""
        call = self._calls.owned(push.call_id, worker)
        if push.call_id is not None and call is None:
            self._disowned(worker, "a pending action", push.call_id)
            return
        mine = sum(1 for r in self.pending if r.worker is worker)
        label_bytes = len(push.label.encode("utf-8", "replace"))
        problem = over("its label and details", push.details, PENDING_MAX_BYTES, label_bytes)
        if problem is None and mine >= PENDING_PER_WORKER:
            problem = f"this worker holds {mine} already, the most a worker may hold"
        elif problem is None and len(self.pending) >= PENDING_TOTAL:
            problem = f"the runner holds {len(self.pending)} already, the most it may hold"
        if problem is not None:
            message = (
                f"pending action {push.label[:80]!r} dropped: {problem}; resolve (or discard) pending actions "
                "first, and keep a preview's details small"
            )
            self._complain(worker, message)
            if call is not None and call.violation is None:
                call.violation = message
            return
        # The action's callables live in this worker: it stays until the
        # action is resolved or the runner closes.
        self._pool.pin(worker)
        self.pending.append(
            PendingActionRecord(push.action_id, worker, push.label, push.details, push.source_tool_name,
                                push.call_id)
        )  # fmt: skip

    async def _fire_ui(self, worker: PoolWorker, method: str, args: list[Any]) -> None:
        try:
            await call_ui(self._ui, method, args)
        except Exception as exc:
            log.warning("UI method %s raised %r", method, exc)
        finally:
            self._ui_done(worker)

    def _ui_done(self, worker: PoolWorker) -> None:
        if (left := self._ui_in_flight.pop(worker, 1) - 1) > 0:
            self._ui_in_flight[worker] = left

    # --- pending actions ------------------------------------------------------------------

    async def resolve(self, args: Mapping[str, Any]) -> ToolResult:
        """The built-in ``resolve``: apply or discard a pending action (``id``'s, else the newest), in its worker."""
        action, reason, chosen = args.get("action"), args.get("reason"), args.get("id")
        if action not in ("apply", "discard") or not isinstance(reason, str) or not isinstance(chosen, str | None):
            return error_result(
                ErrorKind.INVALID_ARGUMENTS,
                'resolve takes {"action": "apply" | "discard", "reason": str, "id"?: str}',
                path="$",
            )
        if not self.pending:
            return error_result(ErrorKind.TOOL_ERROR, "No pending action to resolve. Nothing to apply or discard.")
        if chosen is None:
            record = self.pending.pop()  # the newest, as the original design serves previews
        else:
            found = [r for r in self.pending if r.id == chosen]
            if not found:
                waiting = "; ".join(f"{r.id!r} ({r.label[:80]!r})" for r in reversed(self.pending))
                return error_result(
                    ErrorKind.TOOL_ERROR,
                    f"No pending action has the id {chosen!r}: it was resolved already, or is not this "
                    f"runner's. Pending now, newest first: {waiting}",
                )
            record = found[0]
            self.pending.remove(record)
        details = {"action": action, "reason": reason, "sourceToolName": record.source_tool_name,
                   "label": record.label, "id": record.id}  # fmt: skip
        if record.details is not None:
            details["sourceResultDetails"] = record.details
        try:
            return await self._resolve_in(record, action, reason, details)
        finally:
            self._pool.unpin(record.worker)

    async def _resolve_in(
        self, record: PendingActionRecord, action: Any, reason: str, details: dict[str, Any]
    ) -> ToolResult:
        worker = record.worker
        if not worker.alive:
            how = describe_exit(worker.returncode) if worker.returncode is not None else "was stopped"
            return error_result(
                ErrorKind.TOOL_ERROR,
                f"pending action {record.label!r} was lost: the worker that made it {how}, so it cannot be "
                f"{'applied' if action == 'apply' else 'discarded'}",
            )
        try:
            with trio.fail_after(self._config.default_timeout):
                resolved = await worker.call(
                    p.RESOLVE, p.ResolveParams(action_id=record.action_id, action=action, reason=reason)
                )
        except RemoteError as exc:
            return error_result(
                ErrorKind.TOOL_ERROR, exc.error.message, traceback=str_or_none(exc.data.get("traceback"))
            )
        except (WorkerDied, RemoteProtocolError, trio.TooSlowError) as exc:
            if isinstance(exc, trio.TooSlowError):
                # It may still be running apply(): that worker cannot be trusted with more work.
                await self._retire(worker)
            return error_result(ErrorKind.TOOL_ERROR, f"pending action {record.label!r} was lost: {exc}")
        outcome = resolved.result
        if outcome is None:
            verb = "Applied" if action == "apply" else "Discarded"
            text = f"{verb}: {record.label}. Reason: {reason}"
            return ToolResult(content=[{"type": "text", "text": text}], details=details)
        return ToolResult(content=outcome.content, details={**details, "result": outcome.details})

    async def _retire(self, worker: PoolWorker) -> None:
        slot = self._pool.slot(worker)
        with trio.CancelScope(shield=True):
            await (self._pool.retire(slot) if slot is not None else worker.kill())

    # --- session events and renders -------------------------------------------------------------

    async def emit_session_event(
        self, event: Mapping[str, Any], *, timeout: float, ctx: Mapping[str, Any] | None = None
    ) -> list[str]:
        payload = validate_event(event)
        modules = {t.module for t in self._catalog.tools.values() if t.has_on_session}
        targets = [s for s in self._pool.slots() if s.worker.alive and s.module in modules]
        warnings: list[str] = []

        async def deliver(slot: Slot) -> None:
            name = os.path.basename(slot.module)
            with trio.move_on_after(timeout) as scope:
                try:
                    result = await slot.worker.call(
                        p.SESSION, p.SessionParams(event=payload, ctx={**self.context, **(ctx or {})})
                    )
                    warnings.extend(result.warnings)
                except (RemoteError, WorkerDied, RemoteProtocolError, p.LocalProtocolError) as exc:
                    # LocalProtocolError: the event or the context is not JSON (or too big to send).
                    warnings.append(f"{name}: session event not delivered: {exc}")
            if scope.cancelled_caught:
                warnings.append(f"{name}: on_session did not return within {timeout:g} s")

        async with trio.open_nursery() as nursery:
            for slot in targets:
                nursery.start_soon(deliver, slot)
        for warning in warnings:
            log.warning("session event %s: %s", payload["reason"], warning)
        return warnings

    async def render_call(self, name: str, args: Any, theme: Any, timeout: float) -> str:
        info = self._catalog.tools.get(name)
        default = default_render_call(info.label if info else name, args)
        if info is None or not info.has_render_call:
            return default
        return await self._render(
            info, p.RenderParams(tool=name, kind="call", args=args, theme=theme), default, timeout
        )

    async def render_result(
        self, name: str, result: ToolResult, options: Mapping[str, Any] | None, theme: Any, args: Any, timeout: float
    ) -> str:
        info = self._catalog.tools.get(name)
        default = default_render_result(result)
        if info is None or not info.has_render_result:
            return default
        opts = {"expanded": False, "is_partial": False, "spinner_frame": None, **(options or {})}
        params = p.RenderParams(tool=name, kind="result", args=args, result=result.to_json(), options=opts, theme=theme)
        return await self._render(info, params, default, timeout)

    @property
    def ui(self) -> object:
        """The UI prompts go to (the no-op one when none is attached)."""
        return self._ui

    @property
    def has_ui(self) -> bool:
        """Whether someone can answer a prompt."""
        return self._pool.has_ui

    async def approval_question(self, info: ToolInfo, args: Any, timeout: float) -> str:
        """The worker's answer to "what does this call need approved?" (JSON text), or "" if it gave none."""
        return await self._render(info, p.RenderParams(tool=info.name, kind="approval", args=args), "", timeout)

    async def _render(self, info: ToolInfo, params: p.RenderParams, default: str, timeout: float) -> str:
        if self._pool.closed:
            return default  # no new worker for a closed runner
        policy = self._catalog.policy_for(info.name)
        try:
            slot = await self._loader.acquire(info, self._config.load_timeout, policy)
        except LoadFailed as exc:
            log.warning("render_%s of %s: no worker (%s); default rendering used", params.kind, info.name, exc)
            return default
        healthy = False
        try:
            with trio.move_on_after(timeout):
                rendered = await slot.worker.call(p.RENDER, params)
                healthy = True
                return rendered.text
            log.warning("render_%s of %s did not return within %g s; default rendering used", params.kind,
                        info.name, timeout)  # fmt: skip
        except (RemoteError, WorkerDied, RemoteProtocolError, p.LocalProtocolError) as exc:
            healthy = isinstance(exc, RemoteError | p.LocalProtocolError)  # nothing was sent on the latter
            log.warning("render_%s of %s failed (%s); default rendering used", params.kind, info.name, exc)
        finally:
            # A hook that hung has a worker stuck in it: that worker goes.
            await self._pool.finish(slot, healthy=healthy, served_call=False)
        return default
