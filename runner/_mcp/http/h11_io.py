"""HTTP/1.1 on one trio stream, through h11: bounded requests in, whole or streamed responses out.

h11 is a sans-io HTTP/1.1 state machine: it parses (request line, headers,
chunked or sized bodies, keep-alive, pipelining) and frames what is sent; this
module only moves bytes between it and the socket, and bounds everything.

Rules:

1. A request's head is bounded: h11 refuses a head still incomplete past
   ``MAX_HEAD_BYTES`` (``max_incomplete_event_size``), and a head that came
   whole in one read is measured once parsed, so no head over the limit
   passes (431). Its body is bounded by ``max_body`` while it is read
   (``Content-Length`` is checked first; a chunked body is counted): an
   oversized request gets 413 and the connection closes, nothing beyond the
   limit is buffered.
2. Reading a request is bounded in time: once its first byte came, head and
   body must arrive within :data:`REQUEST_TIMEOUT`; an idle keep-alive
   connection closes after :data:`IDLE_TIMEOUT`; and the caller may set an
   earlier deadline for the head (a connection not yet admitted, see
   ``admission``).
3. A caller's ``screen`` sees a request's head before its body is read (it
   may wait, within the request's deadline); when it refuses the head, the
   body is read past (not kept, bounded in size and time) so that the
   refusal reaches the client instead of a reset, unless the client waits
   for ``100 Continue``.
4. While a streamed response is written, :meth:`HttpConnection.watch_closed`
   notices the client going away (its end of the socket closes), which is how
   a disconnect during a call is seen; bytes the client sends meanwhile are
   kept for h11 (a pipelined request), never dropped.
5. Sending never blocks forever on a client that stopped reading: each send
   is bounded by :data:`SEND_TIMEOUT`, after which the connection counts as gone.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, NoReturn
from urllib.parse import urlsplit

import h11
import trio

logger = logging.getLogger("xcsh_run.mcp")

MAX_HEAD_BYTES: Final = 16384
_READ_CHUNK: Final = 65536
# An oversized body is read past up to this many times the limit, for its id (then dropped).
_DRAIN_FACTOR: Final = 4
LOOPBACK: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_EDGE: Final = 1024  # bytes kept of each end of an oversized body
REQUEST_TIMEOUT: Final = 30.0  # to read one request, once its first byte came
IDLE_TIMEOUT: Final = 75.0  # between requests on a kept-alive connection
DISCARD_TIMEOUT: Final = 2.0  # to read past the body of a refused head (rule 3)
SEND_TIMEOUT: Final = 30.0


class ConnectionGone(Exception):
    """The client went away (or stopped reading): nothing more can be sent."""


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str  # without the query string
    headers: dict[str, str]  # lower-case names; repeated fields joined with ", "
    body: bytes


class HttpError(Exception):
    """A request this connection refuses before anyone sees it (too large, malformed)."""

    def __init__(
        self, status: int, message: str, head: bytes = b"", tail: bytes = b"", session_id: str | None = None
    ) -> None:
        self.status = status
        # An oversized body's first and last bytes, read past so that its id can be
        # told, and the session it names (whose ids in flight it must not reuse).
        self.head, self.tail, self.session_id = head, tail, session_id
        super().__init__(message)


class HttpConnection:
    """One client connection: read requests one at a time, answer each once."""

    def __init__(self, stream: trio.abc.Stream, *, max_body: int) -> None:
        self._stream = stream
        self._max_body = max_body
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.closed = trio.Event()  # the client's end is gone (rule 4)
        self._request_deadline = math.inf  # set by a request's first bytes (rule 2)
        self._head_scope: trio.CancelScope | None = None

    async def next_request(
        self,
        screen: Callable[[dict[str, str]], Awaitable[None]] | None = None,
        *,
        head_deadline: float = math.inf,
        on_head: Callable[[], None] | None = None,
    ) -> HttpRequest | None:
        """The next request, or None once the client is done (or too slow, rule 2).

        ``on_head`` is called once a whole head came (a request is now in
        flight); ``screen`` is awaited with the head's headers before the body
        is read; an exception it raises is raised here once the body was read
        past (rule 3). ``head_deadline`` (``trio.current_time()`` clock) bounds
        the wait for the head further. Raises :class:`HttpError` for a request
        to refuse (rule 1); the caller answers it and closes.
        """
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
        elif self._h11.our_state is not h11.IDLE:
            return None  # the last response ended the connection
        self._request_deadline = math.inf
        if self._h11.trailing_data[0]:
            self._started()  # a pipelined request: its first bytes are here already
        event: object = None
        with trio.move_on_at(min(trio.current_time() + IDLE_TIMEOUT, head_deadline)) as self._head_scope:
            event = await self._next_event()
        self._head_scope = None
        if not isinstance(event, h11.Request):
            return None  # the client closed, or said nothing (or not a whole head) for too long
        self._started()
        if on_head is not None:
            on_head()
        with trio.move_on_at(self._request_deadline):
            return await self._read_request(event, screen)
        return None

    def _started(self) -> None:
        """A request's first bytes came: all of it is due within REQUEST_TIMEOUT (rule 2)."""
        if self._request_deadline == math.inf:
            self._request_deadline = trio.current_time() + REQUEST_TIMEOUT
            if self._head_scope is not None:
                self._head_scope.deadline = min(self._head_scope.deadline, self._request_deadline)

    async def _read_request(
        self, head: h11.Request, screen: Callable[[dict[str, str]], Awaitable[None]] | None
    ) -> HttpRequest:
        headers: dict[str, str] = {}
        size = len(head.method) + len(head.target) + 12  # the request line: "M T HTTP/1.1\r\n"
        for raw_name, raw_value in head.headers:
            size += len(raw_name) + len(raw_value) + 4
            name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        if size > MAX_HEAD_BYTES:
            # Whole in one read, so h11's bound on an incomplete head did not see it (rule 1).
            raise HttpError(431, f"request header fields too large: the limit is {MAX_HEAD_BYTES} bytes")
        if screen is not None:
            try:
                await screen(headers)
            except Exception:
                await self._discard()
                raise
        length = headers.get("content-length")
        declared = int(length) if length is not None and length.isdigit() and len(length) <= 18 else None
        if declared is not None and declared > self._max_body * _DRAIN_FACTOR:
            raise HttpError(413, f"message too large: {length} bytes; {self._limit()}")
        body = bytearray()
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > self._max_body:
                    return await self._drain(body, headers.get("mcp-session-id"))
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                raise HttpError(400, "the request ended before its body")
        target = head.target.decode("latin-1")
        return HttpRequest(head.method.decode("ascii"), target.split("?", 1)[0], headers, bytes(body))

    async def _discard(self) -> None:
        """Read past the body of a refused head, keeping nothing (rule 3); give up quietly at the bounds."""
        if self._h11.they_are_waiting_for_100_continue:
            return  # it sends no body until told to: the refusal goes at once
        size = 0
        with trio.move_on_after(DISCARD_TIMEOUT):
            while size <= self._max_body:
                try:
                    event = await self._next_event()
                except HttpError:
                    return
                if not isinstance(event, h11.Data):
                    return  # its end, or something h11 will not parse past
                size += len(event.data)

    async def _drain(self, body: bytearray, session_id: str | None) -> NoReturn:
        """Read past an oversized body (up to a bound), keeping its first and last KiB; then refuse it (413).

        As over stdio, the refusal names the request's id when its edges tell
        it, so that the client's call fails at once instead of waiting; a body
        past the bound is not read further (the connection closes).
        """
        head, tail, size = bytes(body[:_EDGE]), bytes(body[-_EDGE:]), len(body)
        while size <= self._max_body * _DRAIN_FACTOR:
            event = await self._next_event()
            if isinstance(event, h11.Data):
                size += len(event.data)
                tail = (tail + bytes(event.data))[-_EDGE:]
            elif isinstance(event, h11.EndOfMessage):
                raise HttpError(413, f"message too large: {size} bytes; {self._limit()}", head, tail, session_id)
            else:
                break
        raise HttpError(413, f"message too large: {size} bytes and more; {self._limit()}")

    def _limit(self) -> str:
        # stdio's wording: what the client reads names the flag to change.
        return f"the limit is {self._max_body} bytes (--max-message-bytes)"

    async def _next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                # 431 for a head over the limit (rule 1), 400 for the rest.
                raise HttpError(exc.error_status_hint, f"bad request: {exc}") from None
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self._stream.receive_some(_READ_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            self._h11.receive_data(bytes(data))
            if not data:
                self.closed.set()
            else:
                self._started()

    # --- responses -----------------------------------------------------------

    async def respond(self, status: int, headers: list[tuple[str, str]], body: bytes = b"") -> None:
        """A whole response (``Content-Length`` set)."""
        await self.start(status, [*headers, ("content-length", str(len(body)))])
        if body:
            await self.send(body)
        await self.finish()

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        """The head of a response; without ``Content-Length`` its body is chunked."""
        await self._send(h11.Response(status_code=status, headers=[("server", "xcsh-run"), *headers]))

    async def send(self, data: bytes) -> None:
        await self._send(h11.Data(data=data))

    async def finish(self) -> None:
        await self._send(h11.EndOfMessage())

    async def _send(self, event: h11.Event) -> None:
        if self.closed.is_set():
            raise ConnectionGone
        try:
            data = self._h11.send(event)
        except h11.LocalProtocolError as exc:  # pragma: no cover - every response is built here
            raise ConnectionGone from exc
        if not data:
            return
        try:
            with trio.fail_after(SEND_TIMEOUT):
                await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError) as exc:
            self.closed.set()
            raise ConnectionGone from exc

    async def watch_closed(self) -> None:
        """Return once the client's end closes (rule 4); run beside a streamed response, then cancel."""
        kept = 0
        while not self.closed.is_set():
            try:
                data = await self._stream.receive_some(_READ_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            kept += len(data)
            if not data or kept > MAX_HEAD_BYTES + self._max_body:
                # Gone, or pushing more than one request's worth while it is
                # answered: not a client to keep buffering for.
                self.closed.set()
                return
            self._h11.receive_data(bytes(data))

    @property
    def reusable(self) -> bool:
        """Whether another request may follow on this connection."""
        return self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE

    async def aclose(self) -> None:
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            await self._stream.aclose()


def origin_allowed(origin: str | None, allowed: Sequence[str]) -> bool:
    """No ``Origin`` (not a browser), a loopback one, or one of ``allowed`` (``*``: any)."""
    if origin is None or "*" in allowed or origin in allowed:
        return True
    try:
        parts = urlsplit(origin)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host in LOOPBACK


def accepts(header: str | None) -> tuple[bool, bool]:
    """(JSON, SSE) from an ``Accept`` header; none at all takes anything."""
    if header is None:
        return True, True
    types = {part.split(";", 1)[0].strip().lower() for part in header.split(",")}
    anything = "*/*" in types
    return (anything or "application/json" in types or "application/*" in types), (
        anything or "text/event-stream" in types or "text/*" in types
    )


def parse_address(value: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` (then 127.0.0.1); ``[v6]:PORT`` for IPv6 hosts."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--http takes HOST:PORT or PORT, got {value!r}")
    return host, int(port)
