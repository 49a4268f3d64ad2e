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
import logging
import uuid
from collections import OrderedDict
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
from xcsh_run._mcp.elicit import ELICIT_TIMEOUT
from xcsh_run._mcp.render import INSTRUCTIONS, rename_listed, render_tools
from xcsh_run._mcp.server import CallHistory, ToolServer
from xcsh_run._mcp.stateless_call import COMPLETE, StatelessCall
from xcsh_run._mcp.tasks import (
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

logger = logging.getLogger("xcsh_run.mcp")

STATELESS_VERSION: Final = "2026-07-28"
MAX_PARKED: Final = 64
MAX_LISTENERS: Final = 64
LISTEN_BACKLOG: Final = 16


class StatelessServer:
    """The SDK's ``Server`` for 2026-07-28 requests, over one :class:`ToolServer`; a ``Session`` of it (rule 8)."""

    def __init__(self, tools: ToolServer, poll_interval: float) -> None:
        self._tools = tools
        # The calls in flight, by their requestState's plaintext, oldest first (rules 6 and 8).
        self._calls: OrderedDict[str, StatelessCall] = OrderedDict()
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
            call = StatelessCall(params.name, raw.get("_meta"))
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

    def _as_task(self, call: StatelessCall, support: tuple[str, bool], declared: bool) -> Task | None:
        """Make ``call`` a task now, or when its first prompts are answered (``tasks`` rule 2); the task if now."""
        kind, after_input = support
        if kind == "required" and not declared:
            raise missing_tasks_capability(f"{call.name!r} runs only as a task: it")
        if kind == "forbidden" or not declared:
            return None
        if after_input:
            call.become_task = functools.partial(self._new_task, kind == "required")
            return None
        task = self._new_task(kind == "required", call)
        call.run_as(task)
        return task

    def _new_task(self, required: bool, call: TaskedCall) -> Task | None:
        """A task for ``call``; None when the store is full, or, for a ``required`` tool, refused (``tasks`` rule 5).

        The refused call is stopped: one not started yet never starts, a ``task_after_input`` one ends.
        """
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

    def _start(self, call: StatelessCall, raw: dict[str, Any]) -> None:
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
