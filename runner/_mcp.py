"""``xcsh-run serve``: every discovered tool behind the Model Context Protocol, over stdio.

A small MCP server written directly on trio (the official SDK's server is
asyncio/anyio and pydantic based, and would drag both into the host). The wire
is the MCP stdio transport: UTF-8 JSON-RPC 2.0, one message per line, nothing
but protocol on stdout.

What is mapped how:

- ``initialize`` negotiates the newest handshake-era revision
  (:data:`LATEST_PROTOCOL_VERSION`), or echoes an older one the client asks
  for; capabilities are ``{"tools": {"listChanged": true}}``. ``server/discover``
  (the stateless 2026-07-28 era) is answered "method not found", which is what
  makes the SDK's ``mode="auto"`` clients fall back to ``initialize``.
- ``tools/list``: every tool that is not ``hidden``: ``name``, ``title`` (the
  label), ``description``, ``inputSchema`` (the JSON Schema).
- ``tools/call``: one :meth:`Runner.call_tool`. Every failure, whatever its
  kind (not_found included, so a model can read "did you mean ..."), is an
  ``isError: true`` result; the kind and its evidence are in
  ``_meta["xcsh-run/error"]`` and (2025-06-18 and later) in
  ``structuredContent.error``. ``details`` travel in ``_meta["xcsh-run/details"]``.
- ``on_update`` partials become ``notifications/progress`` (a counter, and the
  partial's text as ``message``) when the request carried ``_meta.progressToken``.
- ``notifications/cancelled`` goes through :meth:`Runner.cancel` (the ladder);
  per the spec the cancelled request gets no response at all.
- The candidate tool files are polled for changes; a change opens a new
  runner beside the old one: new calls go to it once it is loaded, calls in
  flight finish on the old one, which then closes (``_mcp_reload``). A
  ``notifications/tools/list_changed`` follows when the listing changed.
- Malformed lines get JSON-RPC errors (-32700, -32600, -32601, -32602) with
  the request's id whenever it can be told, else with no id (``_mcp_wire``);
  an id in flight is never answered twice, so a request reusing one gets no
  answer (``_mcp_methods``). A second ``initialize`` is refused (-32600).
  Batches are served as one array under 2025-03-26 only, and refused
  otherwise. Tool names that break MCP's rule are served under a sanitized
  name (``_mcp_names``). Requests run concurrently, each in its own task.
- stdin EOF (or SIGTERM/SIGINT) stops every call through the ladder, closes
  the runners and returns once no worker is left.

Layout: ``_mcp_transport`` (lines, the writer task), ``_mcp_wire`` (what a
line holds, id recovery, error lines), ``_mcp_methods`` (the method table of
the shared sans-io ``Connection``, which keeps the JSON-RPC books: ids in
flight, duplicates, one answer per request, unknown methods, params that are
not an object, the lifecycle; batches), ``_mcp_render`` (tools, results and
progress on the wire), ``_mcp_names`` (tool names), ``_mcp_reload`` (runners
and their generations); this module is the MCP application.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import trio

from worker._connection import NotificationDropped, NotificationReceived, RequestReceived, RequestRefused
from worker._messages import ErrorCode, ErrorObject, LocalProtocolError, Message, RemoteProtocolError

from ._config import DEFAULT_GRACE, DEFAULT_LOAD_TIMEOUT, check_seconds
from ._errors import ConfigError
from ._host import Runner, ToolInfo
from ._mcp_methods import (
    CANCELLED,
    INITIALIZE,
    INITIALIZED,
    PING,
    PROGRESS,
    TOOLS_CALL,
    TOOLS_LIST,
    TOOLS_LIST_CHANGED,
    BatchReply,
    CancelledParams,
    answer_batch,
    answer_malformed,
    refusal_message,
    server_connection,
)
from ._mcp_names import rename_listed
from ._mcp_reload import Runners
from ._mcp_render import META_ERROR, Progress, render_result, render_tools
from ._mcp_transport import DEFAULT_MAX_MESSAGE_BYTES as DEFAULT_MAX_MESSAGE_BYTES
from ._mcp_transport import FLUSH_TIMEOUT, LineTransport, RequestId, error_line, take_over_stdio, valid_id
from ._mcp_wire import Batch, Incoming, Malformed
from ._results import ErrorKind, error_result
from ._sandbox import SandboxPolicy
from ._signals import watching_signals

logger = logging.getLogger("xcsh_run.mcp")

# The newest revision reachable through the initialize handshake, as in the
# official SDK (mcp_types.version.LATEST_HANDSHAKE_VERSION). The SDK's overall
# LATEST_PROTOCOL_VERSION, 2026-07-28, is the stateless era: no initialize, a
# per-request `_meta` envelope and server/discover; it is not served here.
LATEST_PROTOCOL_VERSION: Final = "2025-11-25"
# Newest first. A client asking for one of these gets it back; any other
# request is answered with the latest, and the client decides (lifecycle spec).
SUPPORTED_PROTOCOL_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

DEFAULT_POLL_INTERVAL: Final = 1.0

_call_numbers = itertools.count(1)


class _RpcError(Exception):
    """A JSON-RPC error answer to the request being handled."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


class _Request:
    """One request in flight: what a ``notifications/cancelled`` needs to stop it.

    Which requests are in flight, and that each is answered once, is the
    connection's business; this is the task's side: its scope and its call.
    """

    __slots__ = ("id", "method", "params", "batch", "cancelled", "scope", "runner", "call_id")

    def __init__(self, request_id: RequestId, method: str, params: dict[str, Any], batch: BatchReply | None) -> None:
        self.id = request_id
        self.method = method
        self.params = params
        self.batch = batch  # the batch it came in, answered as one array
        self.cancelled = False
        self.scope: trio.CancelScope | None = None
        self.runner: Runner | None = None
        self.call_id: str | None = None


class McpServer:
    """Serves the tools of ``tool_paths`` (and ``<cwd>/.xcsh/tools``) on a pair of trio streams.

    Args:
        tool_paths: tool files or folders, like the CLI's ``--tools``.
        cwd: the working directory tools see; default: the current one.
        timeout: seconds per call, overriding the tools' own; None keeps them.
        grace: seconds between SIGTERM and the tree kill in the ladder.
        load_timeout: seconds a module may take to load.
        max_message_bytes: the longest line accepted; longer ones get -32600.
        poll_interval: seconds between checks of the tool files for changes.
    """

    def __init__(
        self,
        tool_paths: Sequence[str] = (),
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        grace: float = DEFAULT_GRACE,
        load_timeout: float = DEFAULT_LOAD_TIMEOUT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        sandbox: SandboxPolicy | None = None,
    ) -> None:
        for label, value in (("timeout", timeout), ("poll_interval", poll_interval)):
            if value is not None:
                check_seconds(label, value)
        if max_message_bytes < 1024:
            raise ConfigError(f"max_message_bytes must be at least 1024, got {max_message_bytes}")
        self._timeout = timeout
        self._grace = grace
        self._load_timeout = load_timeout
        self._runners = Runners(
            tool_paths,
            cwd=os.path.abspath(cwd if cwd is not None else os.getcwd()),
            grace=grace,
            load_timeout=load_timeout,
            sandbox=sandbox,
            poll_interval=poll_interval,
            on_reloaded=self._on_reloaded,
        )
        self._transport = LineTransport(
            max_message_bytes=max_message_bytes, on_message=self._on_message, on_broken=self._stop
        )
        self._conn = server_connection()
        self._routes: dict[str, Callable[[_Request], Awaitable[dict[str, Any]]]] = {
            INITIALIZE.name: self._initialize,
            PING.name: self._ping,
            TOOLS_LIST.name: self._tools_list,
            TOOLS_CALL.name: self._tools_call,
        }
        self._version = LATEST_PROTOCOL_VERSION
        self._initialized = False  # an initialize succeeded: a second one is refused
        self._tasks: dict[RequestId, _Request] = {}
        self._requests: trio.Nursery | None = None
        self._read_scope = trio.CancelScope()
        self._closing: str | None = None  # why the server is stopping, once it is
        self.stopped_by: signal.Signals | None = None

    # --- lifecycle -------------------------------------------------------------

    async def serve(
        self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream, *, handle_signals: bool = False
    ) -> None:
        """Serve until ``receive`` ends (or a signal, or a broken ``send``); then stop every call.

        With ``handle_signals``, SIGTERM and SIGINT stop the server the same
        way (and set :attr:`stopped_by`). Returns only once every worker of
        every runner is gone.
        """
        if not handle_signals:
            await self._serve(receive, send)
            return
        async with watching_signals() as signals:
            with signals.handled_by(self._on_signal):
                await self._serve(receive, send)

    async def _serve(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        async with trio.open_nursery() as outer:
            writer_scope = trio.CancelScope()
            outer.start_soon(self._write, send, writer_scope)
            # Runners live in `outer`: they outlast the calls made on them.
            outer.start_soon(self._runners.run, outer)
            async with trio.open_nursery() as requests:
                self._requests = requests
                with self._read_scope:
                    await self._transport.read(receive, requests)
                    self._closing = "stdin closed"
                self._wind_down(requests)
            self._runners.retire_all()
            self._conn.close()
            # What is queued still goes out, for a bounded time; then the writer stops.
            self._transport.close()
            writer_scope.deadline = trio.current_time() + FLUSH_TIMEOUT

    async def _write(self, send: trio.abc.SendStream, scope: trio.CancelScope) -> None:
        with scope:
            await self._transport.run_writer(send)

    def _stop(self, why: str) -> None:
        if self._closing is None:
            self._closing = why
            logger.info("stopping: %s", why)
        self._read_scope.cancel()

    def _wind_down(self, requests: trio.Nursery) -> None:
        """Stop taking work: calls in flight go through the ladder, the rest finish.

        A call stopped here is not one the client cancelled, so its
        ``cancelled`` result is still sent (a client that reads stdout to EOF
        learns why). Quick requests (ping, tools/list) are answered. Everything
        is bounded: what is still running after the ladder and a load's time
        is cancelled outright.
        """
        logger.info("stopping: %s; %d request(s) in flight", self._closing, len(self._tasks))
        # No more (re)loads; requests waiting for one are let through, to find `_closing` set.
        self._runners.stop()
        why = f"the MCP server is shutting down: {self._closing}"
        for request in list(self._tasks.values()):
            if request.runner is not None and request.call_id is not None:
                request.runner.cancel(request.call_id, why)
        requests.cancel_scope.deadline = trio.current_time() + self._grace + self._load_timeout + 2.0

    def _on_signal(self, sig: signal.Signals) -> bool:
        self.stopped_by = sig
        self._stop(f"received {sig.name}")
        return True  # taken: the server winds its calls down itself

    async def _on_reloaded(self, before: list[ToolInfo], after: list[ToolInfo]) -> None:
        # Sent only once the client said notifications/initialized (the table's rule).
        if self._conn.state in TOOLS_LIST_CHANGED.allowed and render_tools(before, self._version) != render_tools(
            after, self._version
        ):
            await self._transport.send(self._conn.send_notification(TOOLS_LIST_CHANGED, {}))

    async def _send_progress(self, params: dict[str, Any]) -> None:
        await self._transport.send(self._conn.send_notification(PROGRESS, params))

    # --- incoming messages ------------------------------------------------------

    def _on_message(self, item: Incoming) -> None:
        """What one line held, from the transport. Runs in the read loop, so it never blocks."""
        if isinstance(item, Batch):
            lines = answer_batch(self._conn, item, self._version, self._receive)
        elif isinstance(item, Malformed):
            lines = [answer_malformed(self._conn, item)]
        else:
            lines = [self._receive(item, None)]
        for line in lines:
            if line is not None:
                self._transport.send_soon(line)

    def _receive(self, message: Message, batch: BatchReply | None) -> bytes | None:
        """Take one request or notification; returns the answer due at once (a refusal), if any."""
        try:
            self._conn.receive_message(message)
            event = self._conn.next_event()
        except (LocalProtocolError, RemoteProtocolError) as exc:  # pragma: no cover - see _mcp_methods
            # Out of reach with this table (incoming notifications are lenient
            # or take any params, and responses never get here); should it
            # happen, stop cleanly.
            logger.error("the MCP connection failed: %s", exc)
            self._stop(f"protocol error: {exc}")
            return None
        if isinstance(event, RequestReceived):
            request = _Request(event.id, event.method.name, event.params, batch)
            # Registered before its task starts, so a cancellation that follows
            # on the next line always finds it.
            self._tasks[event.id] = request
            if batch is not None:
                batch.expect()
            assert self._requests is not None
            self._requests.start_soon(self._handle, request)
        elif isinstance(event, RequestRefused):
            if event.id in self._conn.unanswered:
                # Whatever else is wrong with it, any answer would carry the id, and the
                # client would take it for the answer to the request in flight (_mcp_methods).
                why = "request id %r is already in use by a request in flight: the new %s request is not answered"
                logger.warning(why, event.id, event.method_name)
                return None
            return error_line(event.id, event.error.code, self._refusal(event))
        elif isinstance(event, NotificationReceived):
            if event.method is CANCELLED:
                self._cancel(event.params)
            elif event.method is INITIALIZED:
                logger.debug("the client is initialized")
        elif isinstance(event, NotificationDropped):
            # Notifications are never answered, not even malformed ones (a
            # notifications/cancelled without a usable requestId lands here).
            logger.debug("ignored notification %s (%s)", event.method_name, event.reason)
        return None

    _refusal = staticmethod(refusal_message)

    def _cancel(self, params: CancelledParams) -> None:
        request_id, reason = params.request_id, params.reason
        request = self._tasks.get(request_id)
        # Unknown or finished requests are ignored (the response may already
        # be on its way); initialize MUST NOT be cancelled.
        if request is None or request.method == INITIALIZE.name:
            return
        why = reason if isinstance(reason, str) and reason else "cancelled by the MCP client"
        request.cancelled = True
        logger.info("request %r (%s) cancelled: %s", request_id, request.method, why)
        if request.runner is not None and request.call_id is not None and request.runner.cancel(request.call_id, why):
            return  # the call ends through the ladder with a `cancelled` result, which is not sent
        if request.scope is not None:
            request.scope.cancel()

    # --- requests ----------------------------------------------------------------

    async def _handle(self, request: _Request) -> None:
        result: dict[str, Any] | None = None
        error: ErrorObject | None = None
        try:
            with trio.CancelScope() as scope:
                request.scope = scope
                if request.cancelled:
                    scope.cancel()
                try:
                    result = await self._routes[request.method](request)
                except _RpcError as exc:
                    error = ErrorObject(code=exc.code, message=str(exc))
                except Exception as exc:
                    logger.exception("request %r (%s) failed", request.id, request.method)
                    error = ErrorObject(code=ErrorCode.INTERNAL_ERROR, message=f"internal error: {exc!r}")
        finally:
            self._tasks.pop(request.id, None)
        line: bytes | None = None
        if request.cancelled:
            # The spec: the receiver of a cancellation does not answer the request.
            self._conn.withhold(request.id)
            logger.info("request %r (%s) ended after its cancellation; no response sent", request.id, request.method)
        else:
            line = self._answer(request.id, result, error)
        if request.batch is not None:
            line = request.batch.done(line)
        if line is not None:
            await self._transport.send(line)

    def _answer(self, request_id: RequestId, result: dict[str, Any] | None, error: ErrorObject | None) -> bytes:
        if error is None:
            try:
                return self._conn.send_result(request_id, result)
            except LocalProtocolError as exc:  # pragma: no cover - every value came from JSON
                logger.error("cannot encode a result (%s); sending an internal error instead", exc)
                error = ErrorObject(code=ErrorCode.INTERNAL_ERROR, message=f"unencodable message: {exc}")
        return self._conn.send_error_object(request_id, error)

    async def _initialize(self, request: _Request) -> dict[str, Any]:
        from ._version import __version__

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
        client = request.params.get("clientInfo")
        logger.info(
            "initialize from %s: asked for %s, speaking %s",
            client.get("name", "?") if isinstance(client, dict) else "?",
            asked,
            self._version,
        )
        return {
            "protocolVersion": self._version,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "xcsh-run", "version": __version__},
            "instructions": "Tools run in isolated worker processes; errors come back as isError results "
            f"with their kind in _meta[{META_ERROR!r}].",
        }

    async def _ping(self, request: _Request) -> dict[str, Any]:
        return {}

    async def _tools_list(self, request: _Request) -> dict[str, Any]:
        if request.params.get("cursor") is not None:
            raise _RpcError(
                ErrorCode.INVALID_PARAMS, "invalid params: unknown cursor (tools/list is never paginated here)"
            )
        await self._runners.first_load.wait()  # the first load runs in the background
        return {"tools": rename_listed(render_tools(self._runners.tools, self._version), self._runners.names)}

    async def _tools_call(self, request: _Request) -> dict[str, Any]:
        params = request.params
        name = params.get("name")
        if not isinstance(name, str):
            raise _RpcError(ErrorCode.INVALID_PARAMS, 'invalid params: tools/call needs "name", a string')
        arguments = params.get("arguments")
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        generation = await self._runners.current()
        # The names of the generation just handed out: a name served in tools/list maps back to its tool.
        tool = self._runners.names.to_tool(name)
        # No checkpoint from here to call_tool's registration of the call id,
        # so a cancellation (or the wind-down) either finds the call in the
        # runner or finds `request.cancelled` / `_closing` already set.
        if self._closing is not None:
            message = f"{name!r} was not started: the MCP server is shutting down ({self._closing})"
            return render_result(error_result(ErrorKind.CANCELLED, message), self._version)
        if generation is None:
            message = f"{name!r} was not started: the tools could not be loaded ({self._runners.failure})"
            return render_result(error_result(ErrorKind.LOAD_ERROR, message), self._version)
        call_id = f"mcp-{next(_call_numbers)}"
        request.runner, request.call_id = generation.runner, call_id
        with generation.in_use():
            async with trio.open_nursery() as nursery:
                progress = Progress(token, self._send_progress) if valid_id(token) else None
                if progress is not None:
                    nursery.start_soon(progress.pump)
                try:
                    result = await generation.runner.call_tool(
                        tool,
                        arguments,
                        on_update=progress.update if progress is not None else None,
                        timeout=self._timeout,
                        tool_call_id=call_id,
                    )
                finally:
                    # The pump flushes the last partial, then the nursery lets
                    # the response go: progress always precedes the result.
                    if progress is not None:
                        progress.close()
        if result.is_error:
            logger.info("tools/call %s (request %r): %s", name, request.id, result.kind)
        return render_result(result, self._version)


def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="xcsh-run serve: %(message)s")
    logging.getLogger("xcsh_run").setLevel(logging.INFO)


async def serve_stdio(tool_paths: Sequence[str] = (), **options: Any) -> int:
    """Serve MCP on this process's stdin/stdout until stdin ends; returns the exit status.

    ``options`` are :class:`McpServer`'s. Takes fds 0 and 1 over for the rest of the process (see
    :func:`take_over_stdio`); logs go to stderr. Returns 0 after stdin EOF,
    128 + the signal number after SIGTERM or SIGINT; either way only once no
    worker is left.
    """
    server = McpServer(tool_paths, **options)
    _configure_logging()
    protocol_in, protocol_out = take_over_stdio()
    async with trio.lowlevel.FdStream(protocol_in) as receive, trio.lowlevel.FdStream(protocol_out) as send:
        await server.serve(receive, send, handle_signals=True)
    return 0 if server.stopped_by is None else 128 + int(server.stopped_by)
