"""``xcsh-run serve --http``: the MCP Streamable HTTP transport (2025-11-25 and older, and 2026-07-28), on trio and h11.

One endpoint, ``/mcp``: ``POST`` carries one client message (or, under
2025-03-26, a batch), read by ``wire.classify`` as a stdio line is;
``GET`` opens the session's server-to-client SSE stream (or resumes a stream
with ``Last-Event-ID``), ``DELETE`` ends the session. Every session is an
:class:`~xcsh_run._mcp.session.McpSession` of one shared ``ToolServer``.

Rules:

1. Every request passes, in this order: ``Origin`` (403 unless absent, a
   loopback origin, or allowed with ``--allow-origin``: DNS rebinding),
   the bearer token when one is set (401 with ``WWW-Authenticate``, compared
   in constant time), the connection's admission (rule 8), the path (404),
   the method (405). The first two are checked on the head, before the body
   is read.
2. ``initialize`` without ``Mcp-Session-Id`` opens a session and names it in
   the response header; every other message needs the header (400 without
   it, 404 for a session that is unknown or ended). An ``MCP-Protocol-Version``
   header that names no handshake revision is rule 9's.
3. A request is answered on its own ``POST``: an SSE stream (a priming event
   with an id, progress, then the response, then the stream ends) or, for a
   client that accepts only ``application/json``, the response alone.
   Notifications and responses get 202 at once.
4. A client that loses a request's stream may resume it with
   ``Last-Event-ID`` within :data:`RESUME_WINDOW`; after that (at once for a
   JSON reply, which cannot be resumed) the call is stopped through the
   runner's ladder, as ``notifications/cancelled`` would.
5. Everything is bounded: the head and body of a request (431, 413) and the
   time to read them, the connections (rule 8), the sessions (the least
   recently used idle one is ended for a new one; 503 when none is idle),
   the streams kept per session, and each stream's events
   (``streams``).
6. SIGTERM/SIGINT (or the end of the process's own tasks) stop accepting,
   close every connection and wind every session down as stdio does.
7. A body that holds no message gets 400 with a JSON-RPC error that carries
   the id ``wire`` recovers (never null; none when the id is in flight
   in the session named). A batch is served when the session negotiated
   2025-03-26 (the one revision with batches): its answers as one array, on
   an SSE stream or as a JSON body as rule 3 says, and its requests stopped
   together when the client goes (rule 4); a batch of only notifications and
   responses gets 202. Under any other revision a batch gets 400.
8. A connection counts against ``max_connections`` only from its first
   complete head that passes rule 1's ``Origin`` and token checks
   (``admission``). Before that it is pending, in a small quota
   with a short deadline for that head; while the quota is full, the oldest
   pending connection is dropped for a newcomer once it had half a second.
   A first head that fails is answered (403, 401); one that passes while
   the pool is full takes the place of the one idle longest between
   keep-alive requests, which is closed; only when all are busy (a request
   in flight, an SSE stream open) does it get 503. Every error answer (4xx,
   503) closes its connection. So connections that
   stall, lack the token, were refused or sit idle never lock a client out.
9. A request whose ``MCP-Protocol-Version`` is not a handshake revision (the
   stateless 2026-07-28, or one unknown here) passes rule 1 and its admission
   as every other, then goes to the official SDK's handler for that era
   (``stateless``, through ``asgi``): it checks the per-request envelope and
   the headers, refuses an unknown revision naming those it serves, and
   answers on the request's own POST. It opens no session.
"""

from __future__ import annotations

import collections
import functools
import hmac
import itertools
import logging
import os
import re
import secrets
from collections.abc import Sequence
from typing import Any, Final

import msgspec
import trio

from xcsh_run._mcp.http.admission import HEAD_TIMEOUT, MAX_PENDING, Admission, Ticket
from xcsh_run._mcp.http.asgi import AsgiApp, serve_asgi
from xcsh_run._mcp.http.h11_io import (
    LOOPBACK,
    ConnectionGone,
    HttpConnection,
    HttpError,
    HttpRequest,
    accepts,
    origin_allowed,
    parse_address,
)
from xcsh_run._mcp.http.streams import EventStream, JsonReply, StreamBusy
from xcsh_run._mcp.server import ToolServer
from xcsh_run._mcp.session import SUPPORTED_PROTOCOL_VERSIONS, McpSession
from xcsh_run._mcp.wire import Batch, Malformed, RequestId, classify, error_line, recover_id
from xcsh_run.worker.protocol import ErrorCode, Request

logger = logging.getLogger("xcsh_run.mcp")

ENDPOINT: Final = "/mcp"
TOKEN_ENV: Final = "XCSH_RUN_MCP_TOKEN"
RESUME_WINDOW: Final = 5.0
MAX_CONNECTIONS: Final = 64
MAX_SESSIONS: Final = 64
_STREAMS_KEPT: Final = 32  # finished request streams kept per session, for resumption
_PRIMING_SINCE: Final = "2025-11-25"  # older clients cannot read an event with empty data
_ALL_BUSY: Final = "all busy with requests or streams; try again when one ends"
_EVENT_ID: Final = re.compile(r"([0-9]{1,18})-([0-9]{1,18})")


class _Refused(Exception):
    """An HTTP error answer: status, JSON-RPC code and message (the body: a JSON-RPC error, with ``request_id``)."""

    def __init__(
        self,
        status: int,
        message: str,
        code: int = ErrorCode.INVALID_REQUEST,
        request_id: RequestId | None = None,
        **headers: str,
    ) -> None:
        self.status, self.code, self.request_id, self.headers = status, code, request_id, headers
        super().__init__(message)


class _HttpSession:
    __slots__ = ("id", "mcp", "standalone", "streams", "numbers")

    def __init__(self, session_id: str, tools: ToolServer, numbers: itertools.count[int]) -> None:
        self.id = session_id
        self.numbers = numbers
        self.standalone = EventStream(next(numbers), request_ids=None)
        self.streams: collections.OrderedDict[int, EventStream] = collections.OrderedDict()
        self.streams[self.standalone.number] = self.standalone
        self.mcp = McpSession(tools, self.standalone)

    def new_stream(self, request_ids: tuple[RequestId, ...]) -> EventStream:
        stream = EventStream(next(self.numbers), request_ids=request_ids)
        self.streams[stream.number] = stream
        finished = [n for n, s in self.streams.items() if s.done and s is not self.standalone]
        for n in finished[: max(0, len(self.streams) - _STREAMS_KEPT - 1)]:
            del self.streams[n]
        return stream


class HttpServer:
    """Streamable HTTP sessions over one :class:`ToolServer`."""

    def __init__(
        self,
        tools: ToolServer,
        *,
        max_body: int,
        token: str | None = None,
        allowed_origins: Sequence[str] = (),
        max_connections: int = MAX_CONNECTIONS,
        max_pending: int = MAX_PENDING,
        head_timeout: float = HEAD_TIMEOUT,
    ) -> None:
        self._tools = tools
        self._max_body = max_body
        self._token = token.encode() if token else None
        self._allowed = tuple(allowed_origins)
        self.admission = Admission(admitted=max_connections, pending=max_pending, head_timeout=head_timeout)
        self._sessions: collections.OrderedDict[str, _HttpSession] = collections.OrderedDict()
        self._numbers = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        # Requests of the stateless era go to the SDK's handler for them, behind the same admission
        # (rule 9); it is started on the first such request, so a server whose clients all speak a
        # handshake revision never imports the SDK (about a second of start-up).
        self._sdk_app: AsgiApp | None = None
        self._sdk_lock = trio.Lock()

    async def serve(self, listeners: list[trio.SocketListener], *, handle_signals: bool = False) -> None:
        """Serve until a signal (or cancellation); returns once every worker is gone (rule 6)."""

        async def main(_: trio.Nursery) -> None:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self.admission.serve(listeners, self._connection, nursery)

        try:
            await self._tools.run(main, ended="the listener closed", handle_signals=handle_signals)
        finally:
            for session in list(self._sessions.values()):
                self._forget(session)
                session.mcp.close()
            for listener in listeners:
                await listener.aclose()

    # --- connections -------------------------------------------------------------

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = HttpConnection(stream, max_body=self._max_body)
        ticket = self.admission.arrive()
        try:
            # Cancelled when a newer pending connection takes its place (rule 8).
            with ticket.scope:
                while (request := await self._next(conn, ticket)) is not None:
                    try:
                        await self._dispatch(conn, request)
                    except _Refused as refused:
                        # An error answer ends its connection: it keeps no place in the pool (rule 8).
                        await self._refuse(conn, refused, close=True)
                        return
                    if not conn.reusable:
                        return
                    self.admission.set_idle(ticket)  # between keep-alive requests: its place may be taken
        except ConnectionGone:
            pass
        except Exception:
            # One connection's failure must not take the server (and every session) down.
            logger.exception("an HTTP connection failed")
        finally:
            self.admission.leave(ticket)
            await conn.aclose()

    async def _next(self, conn: HttpConnection, ticket: Ticket) -> HttpRequest | None:
        try:
            if ticket.admitted:
                return await conn.next_request(on_head=functools.partial(self.admission.set_busy, ticket))
            screen = functools.partial(self._screen, ticket)
            return await conn.next_request(screen, head_deadline=ticket.head_deadline)
        except _Refused as refused:  # from the screen: this connection was never admitted
            await self._refuse(conn, refused, close=True)
            return None
        except HttpError as exc:
            request_id = recover_id(exc.head, tail=exc.tail) if exc.head else None
            session = self._sessions.get(exc.session_id or "")
            if request_id is not None and session is not None and session.mcp.in_flight(request_id):
                request_id = None  # that id's answer is still to come: never a second one
            await self._refuse(conn, _Refused(exc.status, str(exc), request_id=request_id), close=True)
            return None

    async def _screen(self, ticket: Ticket, headers: dict[str, str]) -> None:
        """The first head of a pending connection: checked, then admitted (rule 8), before its body is read."""
        self._check_head(headers)
        if not await self.admission.admit(ticket):
            raise _Refused(503, f"too many connections ({self.admission.limit} open), {_ALL_BUSY}")

    def _check_head(self, headers: dict[str, str]) -> None:
        if not origin_allowed(headers.get("origin"), self._allowed):
            raise _Refused(403, f"forbidden origin: {headers.get('origin')}")
        if self._token is not None:
            self._authorize(headers.get("authorization"))

    async def _refuse(self, conn: HttpConnection, refused: _Refused, *, close: bool = False) -> None:
        body = error_line(refused.request_id, refused.code, str(refused))
        headers = [("content-type", "application/json")]
        headers += [(name.replace("_", "-"), value) for name, value in refused.headers.items()]
        if close:
            headers.append(("connection", "close"))
        await conn.respond(refused.status, headers, body)

    async def _dispatch(self, conn: HttpConnection, request: HttpRequest) -> None:
        headers = request.headers
        self._check_head(headers)  # again on every request of an admitted connection
        if request.path != ENDPOINT:
            raise _Refused(404, f"not found: the MCP endpoint is {ENDPOINT}")
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in SUPPORTED_PROTOCOL_VERSIONS:
            # Rule 9: the stateless era, or a revision unknown here, which the SDK refuses naming those it serves.
            await serve_asgi(await self._stateless_app(), conn, request)
            return
        if request.method == "POST":
            await self._post(conn, request)
        elif request.method == "GET":
            await self._get(conn, request)
        elif request.method == "DELETE":
            session = self._session(headers)
            self._end(session, "the MCP session ended (DELETE)")
            await conn.respond(200, [("mcp-session-id", session.id)])
        else:
            raise _Refused(405, f"method not allowed: {request.method}", allow="GET, POST, DELETE")

    async def _stateless_app(self) -> AsgiApp:
        """The SDK's stateless-era handler, started in the connections' nursery on first use (rule 9)."""
        async with self._sdk_lock:
            if self._sdk_app is None:
                assert self._nursery is not None
                self._sdk_app = await self._nursery.start(self._run_stateless)
        return self._sdk_app

    async def _run_stateless(self, task_status: trio.TaskStatus[AsgiApp] = trio.TASK_STATUS_IGNORED) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        from xcsh_run._mcp.stateless import StatelessServer

        stateless = StatelessServer(self._tools, self._tools.runners.poll_interval)
        manager = StreamableHTTPSessionManager(
            stateless.sdk,
            stateless=True,
            max_request_body_size=self._max_body,
            # Origin and token were checked here first (rule 1); the SDK's own Host/Origin lists are not wanted.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        async with manager.run():
            task_status.started(manager.handle_request)
            await trio.sleep_forever()  # until the server stops: the nursery is cancelled

    def _authorize(self, header: str | None) -> None:
        scheme, _, given = (header or "").partition(" ")
        assert self._token is not None
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self._token):
            challenge = 'Bearer realm="xcsh-run"' + ("" if header is None else ', error="invalid_token"')
            raise _Refused(401, "unauthorized: a valid bearer token is required", www_authenticate=challenge)

    def _session(self, headers: dict[str, str]) -> _HttpSession:
        session_id = headers.get("mcp-session-id")
        if session_id is None:
            raise _Refused(400, "bad request: Mcp-Session-Id header is required")
        session = self._sessions.get(session_id)
        if session is None:
            raise _Refused(404, "session not found: unknown or ended; initialize a new one")
        self._sessions.move_to_end(session_id)
        return session

    # --- POST ------------------------------------------------------------------

    async def _post(self, conn: HttpConnection, request: HttpRequest) -> None:
        headers = request.headers
        json_ok, sse_ok = accepts(headers.get("accept"))
        if not (json_ok or sse_ok):
            raise _Refused(406, "not acceptable: accept application/json or text/event-stream")
        if headers.get("content-type", "").split(";", 1)[0].strip().lower() != "application/json":
            raise _Refused(415, "unsupported media type: Content-Type must be application/json")
        message = classify(request.body)
        if isinstance(message, Malformed) or (message is None and not request.body.strip()):
            raise self._malformed(headers, message or Malformed(None, ErrorCode.PARSE_ERROR, "parse error: no body"))
        if isinstance(message, Request) and message.method == "initialize" and "mcp-session-id" not in headers:
            session = self._open_session()
        else:
            session = self._session(headers)
        if isinstance(message, Batch):
            await self._post_batch(conn, session, message, sse_ok)
            return
        if not isinstance(message, Request):
            await conn.respond(202, [("mcp-session-id", session.id)])
            if message is not None:
                session.mcp.receive(message)
            return
        ids = (message.id,)
        if sse_ok:
            stream = session.new_stream(ids)
            session.mcp.receive(message, stream)
            await conn.start(200, self._sse_headers(session))
            prime = self._version(session, message) >= _PRIMING_SINCE
            await self._pump(conn, session, stream, ids, None, prime=prime)
        else:
            reply = JsonReply()
            session.mcp.receive(message, reply)
            await self._json_reply(conn, session, reply, ids)
        if message.method == "initialize" and not session.mcp.initialized:
            self._end(session, "initialize failed")

    def _malformed(self, headers: dict[str, str], malformed: Malformed) -> _Refused:
        """400 for a body that holds no message, with the id it names unless that one is in flight (rule 7)."""
        request_id = malformed.id
        session = self._sessions.get(headers.get("mcp-session-id", ""))
        if request_id is not None and session is not None and session.mcp.in_flight(request_id):
            request_id = None  # the client could take the error for the answer to its request in flight
        return _Refused(400, malformed.message, malformed.code, request_id)

    async def _post_batch(self, conn: HttpConnection, session: _HttpSession, batch: Batch, sse_ok: bool) -> None:
        """A batch: served as one array (2025-03-26 only), with 202 when it holds no request (rule 7)."""
        why = session.mcp.batch_refusal()
        if why is not None:
            raise _Refused(400, why)
        if not any(isinstance(item, Request | Malformed) for item in batch.items):
            await conn.respond(202, [("mcp-session-id", session.id)])
            session.mcp.receive(batch)
            return
        # Those its stream answers (and stops when the client goes): not the id of a request already in flight.
        ids = tuple(
            dict.fromkeys(i.id for i in batch.items if isinstance(i, Request) and not session.mcp.in_flight(i.id))
        )
        if sse_ok:
            stream = session.new_stream(ids)
            session.mcp.receive(batch, stream)
            await conn.start(200, self._sse_headers(session))
            await self._pump(conn, session, stream, ids, None, prime=session.mcp.version >= _PRIMING_SINCE)
        else:
            reply = JsonReply()
            session.mcp.receive(batch, reply)
            await self._json_reply(conn, session, reply, ids)

    def _version(self, session: _HttpSession, message: Request) -> str:
        if message.method == "initialize":
            try:
                asked = msgspec.json.decode(message.params).get("protocolVersion")
            except (msgspec.DecodeError, AttributeError):
                asked = None
            return asked if isinstance(asked, str) else ""
        return session.mcp.version

    def _open_session(self) -> _HttpSession:
        if self._tools.closing is not None:
            raise _Refused(503, f"the MCP server is shutting down: {self._tools.closing}")
        if len(self._sessions) >= MAX_SESSIONS:
            idle = next((s for s in self._sessions.values() if not s.mcp.busy), None)
            if idle is None:
                raise _Refused(503, f"too many sessions ({MAX_SESSIONS}), all busy")
            self._end(idle, "ended for a new session (the least recently used)")
        session = _HttpSession(secrets.token_urlsafe(24), self._tools, self._numbers)
        self._sessions[session.id] = session
        logger.info("HTTP session %s opened", session.id[:8])
        return session

    def _sse_headers(self, session: _HttpSession) -> list[tuple[str, str]]:
        return [
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache, no-transform"),
            ("mcp-session-id", session.id),
        ]

    async def _pump(
        self,
        conn: HttpConnection,
        session: _HttpSession,
        stream: EventStream,
        request_ids: tuple[RequestId, ...],
        after: int | None,
        *,
        prime: bool,
    ) -> None:
        """Write ``stream`` until it ends or the client goes; a request left behind is stopped later (rule 4)."""
        complete = False
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                await conn.watch_closed()
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            complete = await stream.pump(conn, after, prime=prime)
            nursery.cancel_scope.cancel()
        if complete:
            await conn.finish()
        elif request_ids:
            assert self._nursery is not None
            self._nursery.start_soon(self._abandon_later, session, stream, request_ids, stream.attachments)
        if not complete:
            raise ConnectionGone

    async def _abandon_later(
        self, session: _HttpSession, stream: EventStream, request_ids: tuple[RequestId, ...], seen: int
    ) -> None:
        await trio.sleep(RESUME_WINDOW)
        if stream.attachments == seen and not stream.done:
            for request_id in request_ids:
                session.mcp.cancel_request(request_id, "the HTTP client went away")
            stream.close()

    async def _json_reply(
        self, conn: HttpConnection, session: _HttpSession, reply: JsonReply, request_ids: tuple[RequestId, ...]
    ) -> None:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                await conn.watch_closed()
                for request_id in request_ids:
                    session.mcp.cancel_request(request_id, "the HTTP client went away")

            nursery.start_soon(watch)
            await reply.ended.wait()
            nursery.cancel_scope.cancel()
        base = [("mcp-session-id", session.id)]
        if reply.response is None:
            await conn.respond(202, base)  # cancelled: no response will follow
        else:
            await conn.respond(200, [*base, ("content-type", "application/json")], reply.response.rstrip(b"\n"))

    # --- GET, and the end of a session ------------------------------------------

    async def _get(self, conn: HttpConnection, request: HttpRequest) -> None:
        headers = request.headers
        if not accepts(headers.get("accept"))[1]:
            raise _Refused(406, "not acceptable: the GET stream is text/event-stream")
        session = self._session(headers)
        stream, after = session.standalone, None
        last = headers.get("last-event-id")
        if last is not None:
            # ASCII digits, at most 18 of each: str.isdigit() takes '²', and int() refuses 4,301 digits.
            parsed = _EVENT_ID.fullmatch(last)
            if parsed is None:
                raise _Refused(400, f"cannot resume from event {last[:64]!r}: not an event id of this server")
            number, n = parsed.groups()
            found = session.streams.get(int(number))
            if found is None or found.closed:
                raise _Refused(404 if found is None else 400, f"cannot resume from event {last!r}: not kept")
            stream, after = found, int(n)
        if stream is session.standalone:
            try:
                stream.check_free()
            except StreamBusy:
                raise _Refused(409, "conflict: the session's GET stream is already open") from None
        else:
            # A client resuming a request's stream may come back before this
            # side noticed the old connection go: the new one takes over.
            await stream.release()
        await conn.start(200, self._sse_headers(session))
        prime = stream is session.standalone and session.mcp.version >= _PRIMING_SINCE and after is None
        # A resumed request stream is stopped later if it is lost again; the GET stream never is.
        await self._pump(conn, session, stream, stream.request_ids or (), after, prime=prime)

    def _end(self, session: _HttpSession, why: str) -> None:
        self._forget(session)
        logger.info("HTTP session %s: %s", session.id[:8], why)
        session.mcp.wind_down(why, self._tools.wind_down_deadline())
        self._tools.start_request(session.mcp.drain_and_close)

    def _forget(self, session: _HttpSession) -> None:
        self._sessions.pop(session.id, None)
        for stream in session.streams.values():
            stream.close()


async def serve_http(
    tool_paths: Sequence[str],
    *,
    address: str,
    max_message_bytes: int,
    token: str | None = None,
    allowed_origins: Sequence[str] = (),
    port_file: str | None = None,
    **options: Any,
) -> int:
    """Serve MCP over Streamable HTTP until SIGTERM/SIGINT; returns the exit status (128 + the signal)."""
    from xcsh_run._mcp.server import configure_logging

    tools = ToolServer(tool_paths, **options)
    configure_logging()
    host, port = parse_address(address)
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()
    url_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    logger.info("listening on http://%s:%d%s", url_host, bound[1], ENDPOINT)
    if host not in LOOPBACK and token is None:
        logger.warning("listening beyond this machine without a token: anyone who reaches the port can run tools")
    if port_file is not None:
        partial = f"{port_file}.{os.getpid()}.tmp"
        with open(partial, "w") as f:  # noqa: ASYNC230 - a few bytes, once, before serving
            f.write(f"{bound[1]}\n")
        os.replace(partial, port_file)
    server = HttpServer(tools, max_body=max_message_bytes, token=token, allowed_origins=allowed_origins)
    await server.serve(listeners, handle_signals=True)
    return 0 if tools.stopped_by is None else 128 + int(tools.stopped_by)
