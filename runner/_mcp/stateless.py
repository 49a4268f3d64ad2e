"""The stateless era (MCP 2026-07-28): requests that carry their revision, served by the official SDK.

A 2026-07-28 client sends no ``initialize``: each request names its revision,
its capabilities and (optionally) its log level in ``_meta``, and HTTP
requests say the same in ``MCP-Protocol-Version``, ``Mcp-Method`` and
``Mcp-Name``. The SDK's low-level ``Server`` (``mcp``, kept current by the
protocol's maintainers) owns that protocol: the envelope and header checks,
``server/discover``, version negotiation and its errors, removed methods,
``resultType`` and the cache hints on results. This module gives it the two
methods xcsh-run serves, mapped onto the same tool calls as the handshake
revisions (``server``).

Rules:

1. ``tools/list`` lists what the handshake revisions list, rendered for
   2026-07-28, with a cache hint of the poll interval: the tool files are
   checked that often, so a listing is not known to change sooner.
2. ``tools/call`` is one call on the serving runner (``server``). Its
   progress and its tool's log records ride the request's own response
   stream; records only when the request's ``_meta`` asked for a log level,
   and only from that level up (the revision's per-request opt-in).
3. A request has no back-channel, so a tool's prompts end the round: a
   prompt (``api.ui.*``) of a call whose request declared ``elicitation``,
   or an ``api.sample`` of one that declared ``sampling``, is answered with an
   ``input_required`` result naming it (``inputRequests``) and the call's
   ``requestState``; the call waits, parked, in the server's request nursery.
   The client's retry with that ``requestState`` and its ``inputResponses``
   is the next round of the same call: the answers reach the waiting prompts
   and the round waits for the next prompt or the result. The worker call is
   never run again (tools have side effects).
4. The SDK seals ``requestState`` (AES-GCM, keys of this process, bound to
   the round) and refuses a tampered or expired one with ``-32602`` before
   any handler runs; a sealed state naming a call that is over is refused
   the same way here. A retry that leaves a question unanswered (a missing or
   malformed response) is asked it again, never an error.
5. A prompt the request cannot answer: ``api.ui.*`` without ``elicitation``
   gets its no-op answer at once (as for a 2025 client that declared none);
   ``api.sample`` without ``sampling`` ends the request with ``-32021``
   (``MissingRequiredClientCapability``, naming ``sampling``) and stops the
   call through the ladder: the revision forbids asking for a capability the
   client did not declare.
6. Closing a round's response stream cancels the call (the revision's cancel):
   the call stops through the ladder. A parked call whose prompt is not
   answered within ``ELICIT_TIMEOUT`` is stopped too: nobody is coming back.
   At most :data:`MAX_PARKED` calls wait for answers, and a parked call holds
   a worker: a new call, when that many wait or when every worker is busy,
   stops the one parked longest (its client's retry then gets ``-32602``).
7. Each call is its own session for ``ctx.sessionManager`` (nothing is
   shared between stateless requests, not even of one client).
8. When the server winds down, calls in flight are cancelled through the
   ladder with the reason; the runner's records of them say why.
9. A call may run as a task (``tasks``: the tasks extension), by its tool's
   ``task_support``; a task's prompts wait for ``tasks/update`` (for
   ``ELICIT_TIMEOUT``, as every prompt), not for a round, and closing a
   request's stream does not stop it. A stopped call asks nothing more, and
   its open prompts are answered with nothing.
10. ``subscriptions/listen`` (the SDK's handler) is the revision's way to hear
    of changes: a listening client is sent ``notifications/tools/list_changed``
    when what it is listed changes, as a session is (``server`` rule 5). At
    most :data:`MAX_LISTENERS` listen at once, each with at most
    :data:`LISTEN_BACKLOG` unsent events (a stream that falls behind is ended:
    its client listens again and re-lists). When the server stops, the streams
    go with its connections, dropped: its clients are told nothing more.
"""

from __future__ import annotations

import functools
import itertools
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

import mcp_types as types
import trio
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError

from xcsh_run._discovery import ToolInfo
from xcsh_run._host import Runner
from xcsh_run._mcp.elicit import ELICIT_TIMEOUT, Answer, can_elicit, can_list_roots
from xcsh_run._mcp.log_records import LEVELS
from xcsh_run._mcp.methods import ELICIT, ROOTS, SAMPLE
from xcsh_run._mcp.names import rename_listed
from xcsh_run._mcp.render import INSTRUCTIONS, META_ERROR, render_tools
from xcsh_run._mcp.server import CallHistory, ToolServer
from xcsh_run._mcp.tasks import (
    TASK_TTL,
    TASKS_EXTENSION,
    Task,
    TaskedCall,
    TaskParams,
    TaskStore,
    TaskUpdateParams,
    declares_tasks,
    missing_tasks_capability,
)
from xcsh_run._version import __version__
from xcsh_run.worker.protocol import Method, Notice, ResultReceived

logger = logging.getLogger("xcsh_run.mcp")

STATELESS_VERSION: Final = "2026-07-28"
MAX_PARKED: Final = 64
MAX_LISTENERS: Final = 64
LISTEN_BACKLOG: Final = 16
# How long a round waits for more prompts after one came, and at most in all (``_Call._gather_questions``).
GATHER_QUIET: Final = 0.05
GATHER_MAX: Final = 0.25
INPUT_REQUIRED: Final = "input_required"
# A dict result names its own type: the SDK fills it only into the models it builds.
COMPLETE: Final = "complete"
# Above every level: a request that asked for no log level is sent no records (rule 2).
_NO_RECORDS: Final = len(LEVELS)
# A task whose call ended so is ``failed``: the worker side failed, not the tool (``tasks`` rule 3).
_FAILED_KINDS: Final = frozenset({"crashed", "protocol_error", "limit_exceeded", "load_error"})


class StatelessServer:
    """The SDK's ``Server`` for 2026-07-28 requests, over one :class:`ToolServer`; a ``Session`` of it (rule 8)."""

    def __init__(self, tools: ToolServer, poll_interval: float) -> None:
        self._tools = tools
        # The calls in flight, by their requestState's plaintext, oldest first (rules 6 and 8).
        self._calls: OrderedDict[str, _Call] = OrderedDict()
        self.sdk: Server[Any] = Server(
            "xcsh-run",
            version=__version__,
            instructions=INSTRUCTIONS,
            cache_hints={"tools/list": CacheHint(ttl_ms=int(poll_interval * 1000), scope="public")},
            get_tool_input_schema=self._input_schema,
        )
        # Rule 4: the SDK seals every outgoing requestState and verifies every one that comes back.
        security = RequestStateSecurity.ephemeral(ttl=ELICIT_TIMEOUT)
        self.sdk.middleware.append(RequestStateBoundary(security, default_audience="xcsh-run"))
        # Registered by method, not as on_list_tools/on_call_tool: those are typed to return the SDK's
        # models, and the results here are the dicts `render` builds for every revision.
        self.sdk.add_request_handler("tools/list", types.PaginatedRequestParams, self._list_tools)
        self.sdk.add_request_handler("tools/call", types.CallToolRequestParams, self._call_tool)
        # Rule 10: listen streams, fed by the reloads and pending actions that change the listing.
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus, max_subscriptions=MAX_LISTENERS, max_buffered_events=LISTEN_BACKLOG)
        self.sdk.add_request_handler("subscriptions/listen", types.SubscriptionsListenRequestParams, self._listen)
        # Rule 9: the tasks extension, advertised in server/discover.
        self._tasks = TaskStore()
        self.sdk.extensions[TASKS_EXTENSION] = {}
        self.sdk.add_request_handler("tasks/get", TaskParams, self._task_get)
        self.sdk.add_request_handler("tasks/update", TaskUpdateParams, self._task_update)
        self.sdk.add_request_handler("tasks/cancel", TaskParams, self._task_cancel)
        tools.sessions.add(self)
        tools.sync_ui()

    # --- what the server asks of a session ----------------------------------------------

    @property
    def can_elicit(self) -> bool | None:
        # Tools may prompt (api.has_ui) as far as stateless clients go: each request says for itself
        # whether it takes prompts (rules 3 and 5), and the worker must send them to be asked.
        return True

    async def tools_changed(self, before: list[ToolInfo], after: list[ToolInfo]) -> None:
        """Tell the listening clients (rule 10); the others re-list when their cache hint runs out."""
        if render_tools(before, STATELESS_VERSION) != render_tools(after, STATELESS_VERSION):
            await self._bus.publish(ToolsListChanged())

    def wind_down(self, why: str, deadline: float) -> None:
        for call in list(self._calls.values()):
            call.stop(why)

    # --- the methods ---------------------------------------------------------------

    def _listing(self) -> list[dict[str, Any]]:
        runners = self._tools.runners
        return rename_listed(render_tools(self._tools.listed_tools(), STATELESS_VERSION), runners.names)

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        """The listed tool's ``inputSchema``, for the SDK's ``Mcp-Param-*`` header checks."""
        for tool in self._listing():
            if tool["name"] == name:
                schema = tool.get("inputSchema")
                return schema if isinstance(schema, dict) else None
        return None

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        if params.cursor is not None:
            raise MCPError(
                code=types.INVALID_PARAMS, message="invalid params: unknown cursor (tools/list is never paginated here)"
            )
        await self._tools.runners.first_load.wait()  # the first load runs in the background
        return {"tools": self._listing(), "resultType": COMPLETE}

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        raw = dict(ctx.params or {})
        state = raw.get("requestState")
        if isinstance(state, str):
            call = self._calls.get(state)
            if call is None or call.name != params.name:
                raise MCPError(
                    code=types.INVALID_PARAMS,
                    message=f"invalid params: the call this requestState continues is over ({params.name!r}); "
                    "call the tool again without requestState",
                )
            if call.task is not None:
                raise MCPError(
                    code=types.INVALID_REQUEST,
                    message=f"invalid request: this {params.name!r} call became task {call.task.id!r}; "
                    "read it with tasks/get and answer it with tasks/update",
                )
            if call.serving:
                raise MCPError(
                    code=types.INVALID_REQUEST,
                    message=f"invalid request: a round of this {params.name!r} call is still being answered; "
                    "send the next round once that one is answered",
                )
        else:
            await self._tools.runners.first_load.wait()  # a tool's task support is known once it is loaded
            call = _Call(params.name, raw.get("_meta"))
            created = self._as_task(call, self._task_support(params.name), declares_tasks(raw.get("_meta")))
            self._start(call, raw)
            if created is not None:
                return created.created_result()
        return await call.serve_round(ctx, raw.get("inputResponses"))

    def _task_support(self, name: str) -> tuple[str, bool]:
        tool = self._tools.runners.names.to_tool(name)
        for info in self._tools.listed_tools():
            if info.name == tool:
                return info.task_support, info.task_after_input
        return "forbidden", False

    def _as_task(self, call: _Call, support: tuple[str, bool], declared: bool) -> Task | None:
        """Make ``call`` a task now, or when its first prompts are answered (``tasks`` rule 2); the task if now."""
        kind, after_input = support
        if kind == "required" and not declared:
            raise missing_tasks_capability(f"{call.name!r} runs only as a task: it")
        if kind == "forbidden" or not declared:
            return None
        if after_input:
            call.become_task = functools.partial(self._late_task, kind == "required")
            return None
        task = self._tasks.create(call)
        if task is None and kind == "required":
            raise MCPError(
                code=types.INTERNAL_ERROR,
                message=f"{call.name!r} runs only as a task, and every one of the tasks kept here is still running; "
                "wait for one to end, or stop one with tasks/cancel",
            )
        call.run_as(task)
        return task

    def _late_task(self, required: bool, call: TaskedCall) -> Task | None:
        """A ``task_after_input`` call's task, once its prompts are answered; refused as ``_as_task`` does."""
        task = self._tasks.create(call)
        if task is None and required:
            call.stop("every one of the tasks kept here was still running")
            raise MCPError(
                code=types.INTERNAL_ERROR,
                message="this tool runs only as a task, and every one of the tasks kept here is still running; "
                "wait for one to end, or stop one with tasks/cancel",
            )
        return task

    async def _task_get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        return self._tasks.find(ctx, params).detailed()

    async def _task_update(self, ctx: ServerRequestContext[Any, Any], params: TaskUpdateParams) -> dict[str, Any]:
        self._tasks.find(ctx, params).call.answer(params.inputResponses)
        return {"resultType": COMPLETE}

    async def _task_cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        self._tasks.find(ctx, params).call.stop("the MCP client cancelled the task (tasks/cancel)")
        return {"resultType": COMPLETE}

    def _start(self, call: _Call, raw: dict[str, Any]) -> None:
        """Run ``call`` in the server's request nursery, so that it outlives its first round (rule 3)."""
        self._make_room()
        name = call.name

        async def run() -> None:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call.outlive_ttl)
                    result = await self._tools.call_tool(
                        call,
                        None,
                        name=name,
                        arguments=raw.get("arguments"),
                        meta=raw.get("_meta"),
                        version=STATELESS_VERSION,
                        history=CallHistory(f"mcp-{uuid.uuid4().hex[:12]}"),
                        # A call stopped before it started (while the tools loaded) is not started.
                        closing=lambda: self._tools.closing or call.stop_reason,
                        send_progress=call.progress,
                        label=f"stateless call {call.token[:8]}",
                        started=call.started,
                    )
                    nursery.cancel_scope.cancel()
                call.finish(result)
            except Exception:
                # One call's failure must not take the server (and every other call) down.
                logger.exception("stateless call of %r failed", name)
            finally:
                call.finish(None)
                self._calls.pop(call.token, None)

        self._calls[call.token] = call
        self._tools.start_request(run)

    def _make_room(self) -> None:
        """Rule 6: a parked call gives way to a new one when too many wait, or when every worker is busy."""
        waiting = [c for c in self._calls.values() if c.waiting]
        if not waiting:
            return
        runner = self._tools.runners.serving
        if len(waiting) >= MAX_PARKED:
            waiting[0].stop(f"more than {MAX_PARKED} calls waited for their input requests; this one waited longest")
        elif runner is not None and runner.statistics().running_calls >= runner.config.worker_limit:
            # A parked call holds a worker while its client may never come back; a new call is here now.
            waiting[0].stop(
                "every worker was busy and a new call came; of the calls waiting for input, it waited longest"
            )


class _Question:
    """One prompt of a call, waiting for the client's answer in a later round."""

    __slots__ = ("key", "method", "request", "answer", "answered")

    def __init__(self, key: str, method: Method[Any, Any], params: dict[str, Any]) -> None:
        self.key = key
        self.method = method
        self.request = {"method": method.name, "params": params}
        self.answer: Answer | None = None
        self.answered = trio.Event()


class _Call:
    """One stateless ``tools/call`` over its rounds, or as a task; the owner of its call (``call_link.CallOwner``)."""

    def __init__(self, name: str, meta: Any) -> None:
        self.name = name
        self.token = uuid.uuid4().hex  # the plaintext of its requestState (the SDK seals it, rule 4)
        self.call_id: str | None = None
        self.task: Task | None = None  # set when it runs as a task (rule 9), by run_as
        self._tasked = trio.Event()
        # Set for a task_after_input tool's call: makes it a task in the round that answers its prompts.
        self.become_task: Callable[[TaskedCall], Task | None] | None = None
        self._runner: Runner | None = None
        self._ctx: ServerRequestContext[Any, Any] | None = None  # the round being served, if any
        self._last_meta: dict[str, Any] = meta if isinstance(meta, dict) else {}  # a task's prompts read it
        self._questions: dict[str, _Question] = {}
        self._keys = itertools.count(1)
        self._result: dict[str, Any] | None = None
        self._refusal: MCPError | None = None
        self._over = False
        self._changed = trio.Event()  # a question came, or the call is over: the round looks again
        self._stop_reason: str | None = None

    @property
    def serving(self) -> bool:
        """A round of the call is being served (one at a time)."""
        return self._ctx is not None

    @property
    def waiting(self) -> bool:
        """Parked: a call (not a task) with no round being served and a prompt waiting for its answer (rule 6)."""
        return self.task is None and self._ctx is None and bool(self._open_questions())

    @property
    def over(self) -> bool:
        return self._over

    def run_as(self, task: Task | None) -> None:
        """From now on, the call is ``task`` (if not None)."""
        if task is not None:
            self.task = task
            self._tasked.set()

    def _open_questions(self) -> dict[str, Any]:
        return {q.key: q.request for q in self._questions.values() if not q.answered.is_set()}

    def _touched(self) -> None:
        self._changed.set()
        if self.task is not None:
            self.task.changed()

    # --- the call's side -----------------------------------------------------------

    def started(self, runner: Runner, call_id: str) -> None:
        self._runner, self.call_id = runner, call_id
        if self._stop_reason is not None:
            runner.cancel(call_id, self._stop_reason)

    def finish(self, result: dict[str, Any] | None) -> None:
        if not self._over:
            self._over = True
            self._result = result
            self._touched()

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def stop(self, why: str) -> None:
        """Stop the call through the ladder (or as soon as it starts).

        Its open prompts are answered with nothing, and it asks no more: a stop may come while the
        call is not yet the runner's to cancel (an approval prompt comes first), and it must not
        wait for an answer then.
        """
        self._stop_reason = self._stop_reason or why
        for question in self._questions.values():
            question.answered.set()
        if self._runner is not None and self.call_id is not None:
            self._runner.cancel(self.call_id, why)

    async def outlive_ttl(self) -> None:
        """Beside the call: a task still running at its ttl is stopped (``tasks`` rule 5)."""
        await self._tasked.wait()
        await trio.sleep(TASK_TTL)
        self.stop(f"it was still running at its ttl ({TASK_TTL:g} s)")

    # --- the owner of its call (call_link.CallOwner) ----------------------------------

    def _meta(self) -> dict[str, Any]:
        meta = (self._ctx.params or {}).get("_meta") if self._ctx is not None else None
        return meta if isinstance(meta, dict) else self._last_meta

    def _capabilities(self) -> dict[str, Any]:
        caps = self._meta().get(types.CLIENT_CAPABILITIES_META_KEY)
        return caps if isinstance(caps, dict) else {}

    @property
    def log_level(self) -> int:
        asked = self._meta().get(types.LOG_LEVEL_META_KEY)
        return LEVELS.index(asked) if isinstance(asked, str) and asked in LEVELS else _NO_RECORDS

    @property
    def can_elicit(self) -> bool:
        return can_elicit(self._capabilities())

    # Always asked: a sample without the capability is the request's refusal (rule 5), not a quiet None.
    can_sample: Final = True
    can_list_roots: Final = True  # asked, and answered None when the request's client declared no roots

    async def notify_for(self, request: Any, notice: Notice[Any], params: dict[str, Any]) -> None:
        """A log record of the call, on the stream of the round being served (none between rounds)."""
        ctx = self._ctx
        if ctx is not None:
            record = types.LoggingMessageNotificationParams.model_validate(params)
            message = types.LoggingMessageNotification(params=record)
            await ctx.session.send_notification(message, related_request_id=ctx.request_id)

    async def progress(self, params: dict[str, Any]) -> None:
        ctx = self._ctx
        if ctx is not None:
            await ctx.session.report_progress(params["progress"], params.get("total"), params.get("message"))

    async def ask(
        self,
        request: Any,
        params: dict[str, Any],
        timeout: float,
        *,
        method: Method[Any, Any] = ELICIT,
        key: str | None = None,
    ) -> Answer | None:
        """Put a prompt to the client as an input request of the next answer (rule 3); its answer, or None.

        The input request is named by ``key``, the tool's name for it, unless the call has an open one of
        that name; else the server names it (``input-N``).
        """
        if self._stop_reason is not None:
            await trio.lowlevel.checkpoint()
            return None  # stopped: nobody is asked any more
        if method is ROOTS and not can_list_roots(self._capabilities()):
            await trio.lowlevel.checkpoint()
            return None  # the tool learns that no roots are known
        if method is SAMPLE and not isinstance(self._capabilities().get("sampling"), dict):
            # Rule 5: the tool needs what this client did not declare.
            self._refusal = MCPError(
                code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"{self.name!r} asks for sampling (api.sample), which this request's client did not "
                "declare; declare the sampling capability in _meta to call it",
                data={"requiredCapabilities": {"sampling": {}}},
            )
            self.stop("its client offers no sampling")
            self._touched()
            await trio.lowlevel.checkpoint()
            return None
        if key is None or key in self._questions:
            # A tool may name a prompt `input-1` itself: the server's names skip what is taken.
            key = next(k for k in (f"input-{n}" for n in self._keys) if k not in self._questions)
        question = _Question(key, method, params)
        self._questions[question.key] = question
        self._touched()
        try:
            with trio.move_on_after(timeout):
                await question.answered.wait()
        finally:
            if self._questions.get(question.key) is question:
                del self._questions[question.key]
        if not question.answered.is_set():
            self.stop(f"its input request was not answered within {timeout:g} s")
        return question.answer

    # --- the client's side: rounds, or a task's updates ------------------------------------

    def answer(self, responses: Any) -> bool:
        """Hand the client's answers to their prompts; whether one was answered (rule 4).

        A malformed response leaves its question open: it is asked again.
        """
        answered = False
        if isinstance(responses, dict):
            for key, value in responses.items():
                question = self._questions.get(key)
                if question is not None and isinstance(value, dict) and not question.answered.is_set():
                    question.answer = ResultReceived(id=0, method=question.method, result=value)
                    question.answered.set()
                    answered = True
        if answered and self.task is not None:
            self.task.changed()
        return answered

    def view(self) -> dict[str, Any]:
        """The task's status and what goes with it (``tasks`` rule 3)."""
        if self._refusal is not None:
            refusal = self._refusal.error
            return {
                "status": "failed",
                "error": refusal.model_dump(exclude_none=True),
                "statusMessage": refusal.message,
            }
        if not self._over:
            open_questions = self._open_questions()
            if open_questions and self._stop_reason is None:
                return {"status": INPUT_REQUIRED, "inputRequests": open_questions}
            if self._stop_reason is not None:
                return {"status": "working", "statusMessage": f"stopping: {self._stop_reason}"}
            return {"status": "working"}
        result = self._result
        if result is None:
            return {
                "status": "failed",
                "error": {"code": types.INTERNAL_ERROR, "message": f"{self.name!r} ended without a result"},
            }
        error = result.get("_meta", {}).get(META_ERROR) if result.get("isError") else None
        kind = error.get("kind") if isinstance(error, dict) else None
        text = next((b.get("text") for b in result.get("content", []) if b.get("type") == "text"), str(kind))
        if kind == "cancelled" or (self._stop_reason is not None and result.get("isError")):
            # Also an error after a stop: one that came before the runner had the call (its approval
            # prompt) ends it as that prompt's refusal, not through the ladder.
            return {"status": "cancelled", "statusMessage": self._stop_reason or text}
        if kind in _FAILED_KINDS:
            failure = {"code": types.INTERNAL_ERROR, "message": text, "data": error}
            return {"status": "failed", "error": failure, "statusMessage": text}
        return {"status": "completed", "result": result}

    async def _gather_questions(self) -> bool:
        """Wait while more prompts come (rule 3): a tool's prompts asked together leave in one result.

        A tool that asks several at once (``asyncio.gather``) sends them in one go, but each reaches
        the call on its own: the round waits until none came for :data:`GATHER_QUIET` (at most
        :data:`GATHER_MAX` in all). The answers it returns are right either way: a prompt that came
        too late is asked in the next round. False if the call ended or was refused meanwhile.
        """
        deadline = trio.current_time() + GATHER_MAX
        while not self._over and self._refusal is None:
            self._changed = trio.Event()
            with trio.move_on_at(min(deadline, trio.current_time() + GATHER_QUIET)) as waited:
                await self._changed.wait()
            if waited.cancelled_caught:
                return True
        return False

    async def serve_round(self, ctx: ServerRequestContext[Any, Any], responses: Any) -> dict[str, Any]:
        """Serve one round: hand over the answers, then wait for the result or the next questions."""
        self._ctx = ctx
        meta = (ctx.params or {}).get("_meta")
        self._last_meta = meta if isinstance(meta, dict) else self._last_meta
        try:
            if self.answer(responses) and self.become_task is not None and not self._open_questions():
                # A task_after_input tool's prompts are answered: from here on the call is a task.
                self.run_as(self.become_task(self))
                self.become_task = None
                if self.task is not None:
                    self._touched()
                    return self.task.created_result()
            while True:
                if self._refusal is not None:
                    raise self._refusal
                if self._over:
                    if self._result is None:
                        raise MCPError(code=types.INTERNAL_ERROR, message=f"{self.name!r} ended without a result")
                    return {**self._result, "resultType": COMPLETE}
                if self._open_questions() and not await self._gather_questions():
                    continue  # the call ended or was refused meanwhile: that is the answer
                if open_questions := self._open_questions():
                    return {
                        "resultType": INPUT_REQUIRED,
                        "inputRequests": open_questions,
                        "requestState": self.token,
                    }
                self._changed = trio.Event()
                await self._changed.wait()
        except trio.Cancelled:
            # Rule 6: the client closed the round's stream.
            self.stop("the MCP client closed the request's stream")
            raise
        finally:
            self._ctx = None
