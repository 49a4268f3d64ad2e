"""``xcsh-run serve``: every discovered tool behind the Model Context Protocol.

The handshake revisions (2025-11-25 and older), written directly on trio:
the SDK's own transports read a whole line into memory however long it is,
answer undecodable input with nothing a client can match, serve no batches
and share one event store across sessions, so this server keeps its bounded
books for these revisions, and the stateless era, whose protocol moves,
is the SDK's (``stateless``). One
:class:`~xcsh_run._mcp.server.ToolServer` (the runners, their reloads, the
calls' settings) serves any number of :class:`McpSession` s, each with its own
``Connection``, negotiated revision, requests in flight and outboxes. The stdio
transport (:class:`McpServer`: UTF-8 JSON-RPC 2.0, one message per line,
nothing but protocol on stdout) is one session; Streamable HTTP
(``http``) opens one per ``Mcp-Session-Id``.

What is mapped how:

- ``initialize`` negotiates the newest handshake-era revision
  (:data:`LATEST_PROTOCOL_VERSION`), or echoes an older one the client asks
  for; capabilities are ``tools.listChanged`` and ``logging``. ``server/discover``
  (the stateless 2026-07-28 era) is ``stateless``'s: a connection whose
  first request carries that era's envelope never reaches a session.
- ``tools/list``: every tool that is not ``hidden`` (and ``resolve`` while
  pending actions wait for it: ``server`` rule 5): ``name``, ``title``
  (the label), ``description``, ``inputSchema``, and its declarations (``render``).
- ``tools/call``: one :meth:`Runner.call_tool`. Every failure, whatever its
  kind (not_found included, so a model can read "did you mean ..."), is an
  ``isError: true`` result; the kind and its evidence are in
  ``_meta["xcsh-run/error"]`` and (2025-06-18 and later) in
  ``structuredContent.error``, without host paths (``render``). ``details``
  are ``structuredContent`` when an object, and in ``_meta["xcsh-run/details"]``.
- ``on_update`` partials become ``notifications/progress`` (a counter, and the
  partial's text as ``message``) when the request carried ``_meta.progressToken``.
- A call's ``api.logger`` records become ``notifications/message``
  (``log_records``), its ``api.ui`` prompts ``elicitation/create``
  (``elicit``), for the session that made the call (``call_link``).
- ``notifications/cancelled`` goes through :meth:`Runner.cancel` (the ladder);
  per the spec the cancelled request gets no response at all.
- The candidate tool files are polled for changes; a change opens a new
  runner beside the old one: new calls go to it once it is loaded, calls in
  flight finish on the old one, which then closes (``reload``). A
  ``notifications/tools/list_changed`` follows when the listing changed.
- Malformed lines get JSON-RPC errors (-32700, -32600, -32601, -32602) with
  the request's id whenever it can be told, else with no id (``wire``);
  an id in flight is never answered twice, so a request reusing one gets no
  answer (``methods``). A second ``initialize`` is refused (-32600).
  Batches are served as one array under 2025-03-26 only, and refused
  otherwise. Tool names that break MCP's rule are served under a sanitized
  name (``names``). Requests run concurrently, each in its own task.
- stdin EOF (or SIGTERM/SIGINT) stops every call through the ladder, closes
  the runners and returns once no worker is left.
- A session sends in two places only: :meth:`McpSession.notify` (what the
  server says on its own, to the session's outbox) and ``_send_for`` (what
  belongs to a request: its progress, log records, prompts and response, to
  the request's reply outbox).

Layout: ``server`` (what sessions share, and the lifecycle),
``line_transport`` (stdio lines, the writer task), ``wire`` (what a line
or an HTTP body holds, id recovery, error lines), ``methods`` (the
method table of the shared sans-io ``Connection``, which keeps the JSON-RPC
books: ids in flight, duplicates, one answer per request, unknown methods,
params that are not an object, the lifecycle; batches), ``render``
(tools, results and progress on the wire), ``names`` (tool names),
``reload`` (runners and their generations), ``stateless`` (2026-07-28,
on the official SDK); this module is the MCP application of the handshake
revisions.
"""

from __future__ import annotations

import functools
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from xcsh_run._discovery import ToolInfo
from xcsh_run._host import Runner
from xcsh_run._mcp.elicit import Answer, Asker, can_elicit, can_list_roots, can_sample, is_answer
from xcsh_run._mcp.line_transport import RequestId, error_line
from xcsh_run._mcp.log_records import DEFAULT_LEVEL, parse_level
from xcsh_run._mcp.methods import (
    CANCELLED,
    ELICIT,
    INITIALIZE,
    INITIALIZED,
    PING,
    PROGRESS,
    SET_LEVEL,
    TOOLS_CALL,
    TOOLS_LIST,
    TOOLS_LIST_CHANGED,
    BatchReply,
    CancelledParams,
    answer_batch,
    answer_malformed,
    batch_refusal,
    refusal_message,
    server_connection,
)
from xcsh_run._mcp.methods import RpcError as _RpcError
from xcsh_run._mcp.render import INSTRUCTIONS, rename_listed, render_tools
from xcsh_run._mcp.server import CallHistory, Outbox, ToolServer
from xcsh_run._mcp.wire import Batch, Incoming, Malformed
from xcsh_run.worker.protocol import (
    ErrorCode,
    ErrorObject,
    LocalProtocolError,
    Message,
    Method,
    Notice,
    NotificationDropped,
    NotificationReceived,
    RemoteProtocolError,
    RequestReceived,
    RequestRefused,
    State,
)

logger = logging.getLogger("xcsh_run.mcp")

# The newest revision reachable through the initialize handshake, as in the
# official SDK (mcp_types.version.LATEST_HANDSHAKE_VERSION). The SDK's overall
# LATEST_PROTOCOL_VERSION, 2026-07-28, is the stateless era: no initialize, a
# per-request `_meta` envelope and server/discover; it is not served here.
LATEST_PROTOCOL_VERSION: Final = "2025-11-25"
# Newest first. A client asking for one of these gets it back; any other
# request is answered with the latest, and the client decides (lifecycle spec).
SUPPORTED_PROTOCOL_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")


class _Request:
    """One request in flight: what a ``notifications/cancelled`` needs to stop it.

    Which requests are in flight, and that each is answered once, is the
    connection's business; this is the task's side: its scope and its call.
    """

    __slots__ = ("id", "method", "params", "reply", "batch", "cancelled", "scope", "runner", "call_id")

    def __init__(
        self, request_id: RequestId, method: str, params: dict[str, Any], reply: Outbox, batch: BatchReply | None
    ) -> None:
        self.id = request_id
        self.method = method
        self.params = params
        self.reply = reply  # where its progress, its log records, its prompts and its response go
        self.batch = batch  # the batch it came in, answered as one array (then `reply` ends)
        self.cancelled = False
        self.scope = trio.CancelScope()  # entered by its task
        self.runner: Runner | None = None
        self.call_id: str | None = None


class McpSession:
    """One client's MCP session: its protocol books and its ways of sending; the tools are ``server``'s.

    ``outbox`` takes what the server says on its own (notifications); a
    request's progress and response go to the ``reply`` outbox it came with
    (the session's own when it came with none).
    """

    def __init__(self, server: ToolServer, outbox: Outbox) -> None:
        self._server = server
        self._outbox = outbox
        self._conn = server_connection()
        self._routes: dict[str, Callable[[_Request], Awaitable[dict[str, Any]]]] = {
            INITIALIZE.name: self._initialize,
            PING.name: self._ping,
            TOOLS_LIST.name: self._tools_list,
            TOOLS_CALL.name: self._tools_call,
            SET_LEVEL.name: self._set_level,
        }
        self._version = LATEST_PROTOCOL_VERSION
        self._initialized = False  # an initialize succeeded: a second one is refused
        self._tasks: dict[RequestId, _Request] = {}
        self._closing: str | None = None  # why the session stops taking calls, once it does
        self._deadline = math.inf  # what requests may take once it winds down
        self._idle = trio.Event()  # set when the last request in flight ends
        self.log_level = DEFAULT_LEVEL  # the least severe log record its client is sent (log_records)
        self.can_elicit: bool | None = None  # whether its client takes prompts; None until initialize
        self.can_sample = False  # whether its client offers sampling (api.sample)
        self.can_list_roots = False  # whether its client offers roots (api.roots)
        self._asker = Asker(self._conn)  # the prompts sent to its client, waiting for their answers
        # The runner's record of this session's calls (ctx.sessionManager); carried
        # over to the next generation's runner when `serve` reloads the tools.
        self._history = CallHistory(f"mcp-{uuid.uuid4().hex[:12]}")
        server.sessions.add(self)

    @property
    def version(self) -> str:
        """The negotiated protocol revision (the latest until ``initialize`` says otherwise)."""
        return self._version

    @property
    def initialized(self) -> bool:
        """Whether ``initialize`` was answered with a result."""
        return self._conn.state is not State.AWAITING_INIT

    # --- sending: the one place for each kind of message ---------------------

    async def notify(self, notice: Notice[Any], params: dict[str, Any]) -> None:
        """Send a server-initiated notification to the client (its session outbox)."""
        await self._outbox.send(self._conn.send_notification(notice, params))

    async def _send_for(self, request: _Request, data: bytes) -> None:
        """Send a message that belongs to ``request`` (progress, log records, prompts, response) to its reply."""
        await request.reply.send(data)

    async def notify_for(self, request: _Request, notice: Notice[Any], params: dict[str, Any]) -> None:
        """Send a notification that belongs to ``request`` (its progress, its tool's log records)."""
        await self._send_for(request, self._conn.send_notification(notice, params))

    async def ask(
        self,
        request: _Request,
        params: dict[str, Any],
        timeout: float,
        *,
        method: Method[Any, Any] = ELICIT,
        key: str | None = None,
    ) -> Answer | None:
        """Ask the client for ``request``'s tool (a prompt, or a sample); its answer, or None (elicit).

        ``key`` means nothing here: a handshake client is sent the request itself, with an id.
        """
        if not request.reply.carries_requests:
            return None  # a JSON-only reply would drop the request: the no-op answer now, not at the timeout
        return await self._asker.ask(params, functools.partial(self._send_for, request), timeout, method=method)

    # --- lifecycle ---------------------------------------------------------------

    def receive(self, message: Incoming, reply: Outbox | None = None) -> None:
        """What the client sent (``wire.classify``); a request's progress and response go to ``reply``."""
        self._on_message(message, reply)

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    def in_flight(self, request_id: RequestId) -> bool:
        """Whether a request with this id waits for its answer (no other answer may carry the id)."""
        return request_id in self._conn.unanswered

    def batch_refusal(self) -> str | None:
        """Why a batch is refused now (the negotiated revision has none); None when one is served."""
        return batch_refusal(self._conn, self._version)

    async def drain_and_close(self) -> None:
        """Close once no request runs (after :meth:`wind_down`, that is bounded)."""
        while self._tasks:
            self._idle = trio.Event()
            await self._idle.wait()
        self.close()

    def wind_down(self, why: str, deadline: float) -> None:
        """Stop taking calls: calls in flight go through the ladder, the rest finish by ``deadline``.

        A call stopped here is not one the client cancelled, so its
        ``cancelled`` result is still sent (a client that reads to the end
        learns why). Quick requests (ping, tools/list) are answered. What is
        still running at ``deadline`` is cancelled outright, unanswered.
        """
        if self._closing is None:
            self._closing = why
        self._deadline = min(self._deadline, deadline)
        logger.info("%s; %d request(s) in flight", why, len(self._tasks))
        for request in list(self._tasks.values()):
            if request.runner is not None and request.call_id is not None:
                request.runner.cancel(request.call_id, why)
            request.scope.deadline = min(request.scope.deadline, self._deadline)

    def close(self) -> None:
        """The session is over: no more messages either way."""
        self._server.sessions.discard(self)
        self._server.sync_ui()
        self._conn.close()
        self._outbox.end()

    async def tools_changed(self, before: list[ToolInfo], after: list[ToolInfo]) -> None:
        # Sent only once the client said notifications/initialized (the table's rule).
        if self._conn.state in TOOLS_LIST_CHANGED.allowed and render_tools(before, self._version) != render_tools(
            after, self._version
        ):
            await self.notify(TOOLS_LIST_CHANGED, {})

    # --- incoming messages ------------------------------------------------------

    def _on_message(self, item: Incoming, reply: Outbox | None = None) -> None:
        """What one line or body held, from the transport. Runs in the read loop, so it never blocks.

        A request's progress and response go to ``reply`` (the session's
        outbox when None); so does the array answering a batch, once its last
        request ends.
        """
        out = reply or self._outbox
        if isinstance(item, Batch):
            lines, batch = answer_batch(
                self._conn, item, self._version, lambda message, into: self._receive(message, out, into)[1]
            )
            # Ended here unless a request of the batch runs: the last to end sends the array, then ends it.
            self._reply_now(out, lines, end=reply is not None and (batch is None or batch.finished))
            return
        if isinstance(item, Malformed):
            started, line = False, answer_malformed(self._conn, item)
        else:
            started, line = self._receive(item, out, None)
        if not started:
            self._reply_now(out, [line], end=reply is not None)  # nothing else belongs to it

    def _reply_now(self, out: Outbox, lines: list[bytes | None], *, end: bool) -> None:
        lines_due = [line for line in lines if line is not None]
        if lines_due:
            self._server.start_request(functools.partial(self._reply_lines, out, lines_due, end))
        elif end:
            out.end()

    async def _reply_lines(self, out: Outbox, lines: list[bytes], end: bool) -> None:
        try:
            for line in lines:
                await out.send(line)
        finally:
            if end:
                out.end()

    def _receive(self, message: Message, out: Outbox, batch: BatchReply | None) -> tuple[bool, bytes | None]:
        """Take one message: whether a request started (it answers itself), and the answer due at once, if any."""
        if is_answer(message):  # to a prompt of ours, or dropped (elicit)
            self._asker.answered(message)
            return False, None
        try:
            self._conn.receive_message(message)
            event = self._conn.next_event()
        except (LocalProtocolError, RemoteProtocolError) as exc:  # pragma: no cover - see methods
            # Out of reach with this table (incoming notifications are lenient
            # or take any params, and answers go to the asker); should it
            # happen, stop cleanly.
            logger.error("the MCP connection failed: %s", exc)
            self._server.stop(f"protocol error: {exc}")
            return False, None
        if isinstance(event, RequestReceived):
            request = _Request(event.id, event.method.name, event.params, out, batch)
            request.scope.deadline = self._deadline
            # Registered before its task starts, so a cancellation that follows
            # on the next line always finds it.
            self._tasks[event.id] = request
            if batch is not None:
                batch.expect()
            self._server.start_request(functools.partial(self._handle, request))
            return True, None
        if isinstance(event, RequestRefused):
            if event.id in self._conn.unanswered:
                # Whatever else is wrong with it, any answer would carry the id, and the
                # client would take it for the answer to the request in flight (methods).
                why = "request id %r is already in use by a request in flight: the new %s request is not answered"
                logger.warning(why, event.id, event.method_name)
                return False, None
            return False, error_line(event.id, event.error.code, self._refusal(event))
        if isinstance(event, NotificationReceived):
            if event.method is CANCELLED:
                self._cancel(event.params)
            elif event.method is INITIALIZED:
                logger.debug("the client is initialized")
        elif isinstance(event, NotificationDropped):
            # Notifications are never answered, not even malformed ones (a
            # notifications/cancelled without a usable requestId lands here).
            logger.debug("ignored notification %s (%s)", event.method_name, event.reason)
        return False, None

    _refusal = staticmethod(refusal_message)

    def _cancel(self, params: CancelledParams) -> None:
        reason = params.reason
        why = reason if isinstance(reason, str) and reason else "cancelled by the MCP client"
        self.cancel_request(params.request_id, why)

    def cancel_request(self, request_id: RequestId, why: str) -> None:
        """Stop a request in flight, unanswered (``notifications/cancelled``, or its client is gone)."""
        request = self._tasks.get(request_id)
        # Unknown or finished requests are ignored (the response may already
        # be on its way); initialize MUST NOT be cancelled.
        if request is None or request.method == INITIALIZE.name:
            return
        request.cancelled = True
        logger.info("request %r (%s) cancelled: %s", request_id, request.method, why)
        if request.runner is not None and request.call_id is not None and request.runner.cancel(request.call_id, why):
            return  # the call ends through the ladder with a `cancelled` result, which is not sent
        request.scope.cancel()

    # --- requests ----------------------------------------------------------------

    async def _handle(self, request: _Request) -> None:
        line: bytes | None = None
        try:
            line = await self._serve(request)
        finally:
            batch = request.batch
            if batch is not None:
                line = batch.done(line)  # the batch's array, once its last request ends
            try:
                if line is not None:
                    await self._send_for(request, line)
            finally:
                if batch is None or batch.finished:
                    request.reply.end()

    async def _serve(self, request: _Request) -> bytes | None:
        """Run ``request``'s method; its answer, or None when it ends unanswered."""
        result: dict[str, Any] | None = None
        error: ErrorObject | None = None
        try:
            # Entered here, created with the request: a cancellation or a
            # wind-down deadline that came first applies on entry.
            with request.scope:
                try:
                    result = await self._routes[request.method](request)
                except _RpcError as exc:
                    error = ErrorObject(code=exc.code, message=str(exc))
                except Exception as exc:
                    logger.exception("request %r (%s) failed", request.id, request.method)
                    error = ErrorObject(code=ErrorCode.INTERNAL_ERROR, message=f"internal error: {exc!r}")
        finally:
            self._tasks.pop(request.id, None)
            if not self._tasks:
                self._idle.set()
        if request.cancelled or request.scope.cancelled_caught:
            # The spec: the receiver of a cancellation does not answer the
            # request; one cut short by a wind-down has nobody waiting.
            self._conn.withhold(request.id)
            why = "after its cancellation" if request.cancelled else "cut short by the wind-down"
            logger.info("request %r (%s) ended %s; no response sent", request.id, request.method, why)
            return None
        return self._answer(request.id, result, error)

    def _answer(self, request_id: RequestId, result: dict[str, Any] | None, error: ErrorObject | None) -> bytes:
        if error is None:
            try:
                return self._conn.send_result(request_id, result)
            except LocalProtocolError as exc:  # pragma: no cover - every value came from JSON
                logger.error("cannot encode a result (%s); sending an internal error instead", exc)
                error = ErrorObject(code=ErrorCode.INTERNAL_ERROR, message=f"unencodable message: {exc}")
        return self._conn.send_error_object(request_id, error)

    async def _initialize(self, request: _Request) -> dict[str, Any]:
        from xcsh_run._version import __version__

        if self._initialized:
            # No checkpoint from the check to the flag below: two initialize
            # requests in flight at once cannot both get through.
            raise _RpcError(
                ErrorCode.INVALID_REQUEST,
                f"invalid request: the session is already initialized (protocol {self._version}); "
                "initialize is sent once, and a new session needs a new connection",
            )
        asked = request.params.get("protocolVersion")
        if not isinstance(asked, str):
            raise _RpcError(
                ErrorCode.INVALID_PARAMS, "invalid params: initialize needs params.protocolVersion, a string"
            )
        self._initialized = True
        self._version = asked if asked in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
        self.can_elicit = can_elicit(request.params.get("capabilities"))
        self.can_sample = can_sample(request.params.get("capabilities"))
        self.can_list_roots = can_list_roots(request.params.get("capabilities"))
        self._server.sync_ui()
        client = request.params.get("clientInfo")
        logger.info(
            "initialize from %s: asked for %s, speaking %s",
            client.get("name", "?") if isinstance(client, dict) else "?",
            asked,
            self._version,
        )
        return {
            "protocolVersion": self._version,
            "capabilities": {"tools": {"listChanged": True}, "logging": {}},
            "serverInfo": {"name": "xcsh-run", "version": __version__},
            "instructions": INSTRUCTIONS,
        }

    async def _ping(self, request: _Request) -> dict[str, Any]:
        return {}

    async def _set_level(self, request: _Request) -> dict[str, Any]:
        self.log_level = parse_level(request.params)  # for this session's calls, from their next record on
        return {}

    async def _tools_list(self, request: _Request) -> dict[str, Any]:
        if request.params.get("cursor") is not None:
            raise _RpcError(
                ErrorCode.INVALID_PARAMS, "invalid params: unknown cursor (tools/list is never paginated here)"
            )
        runners = self._server.runners
        await runners.first_load.wait()  # the first load runs in the background
        return {"tools": rename_listed(render_tools(self._server.listed_tools(), self._version), runners.names)}

    async def _tools_call(self, request: _Request) -> dict[str, Any]:
        params = request.params
        name = params.get("name")
        if not isinstance(name, str):
            raise _RpcError(ErrorCode.INVALID_PARAMS, 'invalid params: tools/call needs "name", a string')

        def started(runner: Runner, call_id: str) -> None:
            request.runner, request.call_id = runner, call_id

        return await self._server.call_tool(
            self,
            request,
            name=name,
            arguments=params.get("arguments"),
            meta=params.get("_meta"),
            version=self._version,
            history=self._history,
            closing=lambda: self._closing,
            send_progress=functools.partial(self.notify_for, request, PROGRESS),
            label=f"request {request.id!r}",
            started=started,
        )
