"""The MCP stdio transport: newline-delimited JSON-RPC 2.0 on a pair of trio streams.

UTF-8 JSON, one message per line, nothing but protocol on the output. This
module knows lines and JSON-RPC envelopes, not MCP: it hands each well-formed
request and notification to its owner, as the shared protocol's typed
``Request`` / ``Notification`` (which the owner's ``Connection`` takes), and
answers malformed input itself. It writes bytes it is given, in order.

Rules:

1. One task writes to the output stream (:meth:`LineTransport.run_writer`):
   a message is never interleaved with another, and a cancelled sender cannot
   leave half a line behind (it only ever cancels its enqueueing, which is
   atomic).
2. Senders wait when the output queue is full (backpressure from a client
   that reads slowly) instead of letting it grow; a broken output is drained
   silently so that senders never block on a dead client.
3. A line is bounded by ``max_message_bytes`` while it is read: the rest of an
   oversized line is discarded, never buffered, and the line is rejected with
   the id read from its first bytes when it leads the object, so the client
   fails that request instead of waiting forever.
4. Malformed input gets a JSON-RPC error (-32700, -32600) and the transport
   keeps reading; notifications are never answered, not even malformed ones.
   Responses (answers to the server's prompts) go to the owner as well,
   which hands on only those a prompt waits for; a malformed one is dropped,
   since answering an answer is never right.
5. The read loop never blocks on a message: classification is synchronous,
   and error answers are sent from tasks of their own.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable
from typing import Any, Final, TypeGuard

import msgspec
import trio

from worker._frames import encode_line
from worker._messages import ErrorCode, ErrorObject, ErrorResponse, Message, Notification, Request, Response

from ._config import DEFAULT_MAX_MESSAGE_BYTES as DEFAULT_MAX_MESSAGE_BYTES

logger = logging.getLogger("xcsh_run.mcp")

_READ_CHUNK: Final = 65536
# Outgoing messages wait here for the writer task (rule 2).
_OUT_QUEUE: Final = 64
# How long queued messages may take to drain at shutdown before we give up
# on a client that stopped reading.
FLUSH_TIMEOUT: Final = 2.0

# The id of an oversized message, read from its first bytes when it leads the
# object (`{"jsonrpc":"2.0","id":..`, the order the SDKs write).
_LEADING_ID: Final = re.compile(
    rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?'  # `{` and perhaps "jsonrpc" first
    rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*[,}]'  # then the id: an integer or a string
)

RequestId = str | int


class _Envelope(msgspec.Struct):
    # Every member untyped, so that one decode accepts any object and the
    # checks below can answer with the id when there is a usable one. UNSET
    # keeps "absent" apart from null.
    jsonrpc: Any = msgspec.UNSET
    id: Any = msgspec.UNSET
    method: Any = msgspec.UNSET
    params: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    result: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    error: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


# A line is one JSON value; only an object can be a message. Params stay raw:
# the connection decodes them once, into its method's type.
_LINE: Final = msgspec.json.Decoder(_Envelope | list[msgspec.Raw] | str | int | float | bool | None)
_ERROR: Final = msgspec.json.Decoder(ErrorObject)
_NO_PARAMS: Final = msgspec.Raw(b"{}")
_NULL: Final = msgspec.Raw(b"null")


def valid_id(value: object) -> TypeGuard[RequestId]:
    """MCP: a request id is a string or an integer, never null; bool is not an integer on the wire."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def error_line(request_id: RequestId | None, code: int, message: str) -> bytes:
    """An error answer with no ``data``, as one line."""
    return encode_line(ErrorResponse(id=request_id, error=ErrorObject(code=int(code), message=message)))


def _params(raw: msgspec.Raw | msgspec.UnsetType) -> msgspec.Raw:
    # Absent or null params are no params: an empty object.
    return _NO_PARAMS if isinstance(raw, msgspec.UnsetType) or raw == _NULL else raw


class LineTransport:
    """Reads and writes newline-delimited JSON-RPC; classifies what it reads.

    ``on_message`` receives every well-formed request (with a valid id) and
    notification; it runs in the read loop and must not block. ``on_broken``
    is told once the output fails. Error answers to malformed input go out
    through tasks started in the nursery given to :meth:`read`.
    """

    def __init__(
        self,
        *,
        max_message_bytes: int,
        on_message: Callable[[Message], None],
        on_broken: Callable[[str], None],
    ) -> None:
        self._max_message = max_message_bytes
        self._on_message = on_message
        self._on_broken = on_broken
        self._out_send, self._out_receive = trio.open_memory_channel[bytes](_OUT_QUEUE)
        self._nursery: trio.Nursery | None = None

    # --- output ----------------------------------------------------------------

    async def run_writer(self, stream: trio.abc.SendStream) -> None:
        """The only task that writes to ``stream`` (rule 1); ends after :meth:`close`, once the queue is empty."""
        broken = False
        async for data in self._out_receive:
            if broken:
                continue  # rule 2: keep draining
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                broken = True
                self._on_broken(f"stdout is closed ({exc!r})")

    async def send(self, data: bytes) -> None:
        """Queue one encoded line for the writer; waits while the queue is full (rule 2)."""
        try:
            await self._out_send.send(data)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # shutting down: nobody is listening any more

    def send_soon(self, data: bytes) -> None:
        """Send from a task of its own, for callers that must not block (rule 5)."""
        assert self._nursery is not None
        self._nursery.start_soon(self.send, data)

    def close(self) -> None:
        """No more messages: the writer ends once what is queued is written."""
        self._out_send.close()

    # --- input -----------------------------------------------------------------

    async def read(self, stream: trio.abc.ReceiveStream, nursery: trio.Nursery) -> None:
        """Read ``stream`` to its end, splitting it into lines bounded by ``max_message_bytes`` (rule 3)."""
        self._nursery = nursery
        buffer = bytearray()
        oversized: int | None = None  # bytes of the current too-long line, once it is too long
        head = b""  # its first bytes, for the id
        while True:
            try:
                chunk = await stream.receive_some(_READ_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                logger.warning("reading stdin failed (%r); treating it as the end of input", exc)
                chunk = b""
            if not chunk:
                break
            start = 0
            while start <= len(chunk):
                newline = chunk.find(b"\n", start)
                end = len(chunk) if newline < 0 else newline
                if oversized is not None:
                    oversized += end - start  # discarded, never buffered
                else:
                    buffer += chunk[start:end]
                    if len(buffer) > self._max_message:
                        oversized, head = len(buffer), bytes(buffer[:1024])
                        buffer.clear()
                if newline < 0:
                    break
                start = newline + 1
                if oversized is not None:
                    self._reject_oversized(head, oversized)
                    oversized, head = None, b""
                else:
                    self._classify(bytes(buffer))
                    buffer.clear()
        # A last line without its newline still counts (lenient at EOF).
        if oversized is not None:
            self._reject_oversized(head, oversized)
        elif buffer.strip():
            self._classify(bytes(buffer))

    def _reject_oversized(self, head: bytes, size: int) -> None:
        request_id: RequestId | None = None
        if (match := _LEADING_ID.match(head)) is not None:
            try:
                value = msgspec.json.decode(match.group(1))
            except msgspec.DecodeError:
                value = None
            if valid_id(value):
                request_id = value
        logger.warning("rejected a message of %d bytes (limit %d bytes)", size, self._max_message)
        limit = f"the limit is {self._max_message} bytes (--max-message-bytes)"
        self.send_soon(error_line(request_id, ErrorCode.INVALID_REQUEST, f"message too large: {size} bytes; {limit}"))

    def _classify(self, line: bytes) -> None:
        """Hand one line to the owner if it is a request or a notification; answer it if it is malformed."""
        line = line.strip()
        if not line:
            return
        try:
            message = _LINE.decode(line)
        except (msgspec.DecodeError, RecursionError) as exc:
            # msgspec raises RecursionError (not DecodeError) for deep nesting like `[[[[...`.
            self.send_soon(error_line(None, ErrorCode.PARSE_ERROR, f"parse error: {exc}"))
            return
        if not isinstance(message, _Envelope):
            what = "batches are not supported" if isinstance(message, list) else f"got a JSON {type(message).__name__}"
            self._invalid(None, f"a message is one JSON object; {what}")
            return
        request_id = message.id if valid_id(message.id) else None
        method = message.method
        if message.jsonrpc != "2.0":
            # Not a JSON-RPC 2.0 message at all, so not a notification either: answered.
            self._invalid(request_id, '"jsonrpc" must be "2.0"')
        elif method is msgspec.UNSET:
            if message.result is not msgspec.UNSET or message.error is not msgspec.UNSET:
                self._response(message)
            else:
                self._invalid(request_id, 'no "method"')
        elif not isinstance(method, str):
            self._invalid(request_id, '"method" must be a string')
        elif message.id is msgspec.UNSET:
            self._on_message(Notification(method=method, params=_params(message.params)))
        elif request_id is None:
            self._invalid(None, f'"id" must be a string or an integer, got {message.id!r}')
        else:
            self._on_message(Request(id=request_id, method=method, params=_params(message.params)))

    def _response(self, message: _Envelope) -> None:
        if not isinstance(message.id, int) or isinstance(message.id, bool):  # the server's ids are integers
            logger.debug("ignored a response with id %r: the server sent no such request", message.id)
        elif isinstance(message.error, msgspec.Raw):
            try:
                error = _ERROR.decode(message.error)
            except msgspec.DecodeError:
                error = ErrorObject(code=ErrorCode.INTERNAL_ERROR, message="a malformed error object")
            self._on_message(ErrorResponse(id=message.id, error=error))
        elif isinstance(message.result, msgspec.Raw):
            self._on_message(Response(id=message.id, result=message.result))

    def _invalid(self, request_id: RequestId | None, why: str) -> None:
        self.send_soon(error_line(request_id, ErrorCode.INVALID_REQUEST, f"invalid request: {why}"))


def take_over_stdio() -> tuple[int, int]:
    """Private copies of fds 0 and 1 for the protocol; fd 0 becomes the null device, fd 1 stderr.

    Anything in this process (or a child) that reads stdin or prints then
    cannot touch the protocol: print() lands on stderr.
    """
    sys.stdout.flush()
    protocol_in, protocol_out = os.dup(0), os.dup(1)  # non-inheritable: no worker gets them
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, 0)
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr at all
            os.dup2(null, 1)
    finally:
        os.close(null)
    return protocol_in, protocol_out
