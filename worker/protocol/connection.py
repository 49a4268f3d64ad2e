"""One side of a JSON-RPC connection, as a state machine with no I/O (in the style of h11).

A :class:`Connection` turns bytes from the peer into typed events and the
messages this side sends into bytes; the adapter around it (threads in the
worker, trio tasks in the host, a line reader in the MCP server) only moves
bytes and waits. Everything JSON-RPC bookkeeping needs lives here, once:
request ids, our outstanding requests, their unanswered requests, the
lifecycle (``State``) and the typed decoding of params and results through the
method table (``methods.py``).

Rules (each one a test in tests/protocol/test_connection.py, and the model of
fuzz/test_connection_fuzz.py):

1. Every request sent ends in exactly one :class:`ResultReceived` or
   :class:`ErrorReceived`, or in :class:`ConnectionClosed`'s ``outstanding``,
   or in :meth:`Connection.close`'s return value, or was abandoned. A second
   answer to the same id, or an answer to an id never sent, is a
   RemoteProtocolError. An answer to an abandoned id is dropped without an event.
2. Every :class:`RequestReceived` is answered exactly once through
   ``send_result`` / ``send_error``, or withheld (``withhold``: it ends with
   no answer at all, as MCP wants for a cancelled request). A request the
   table does not allow (an unknown method, one this side sends, one out of
   state, malformed params, or a duplicate of an unanswered id) is not an
   event to answer: it comes out as :class:`RequestRefused` with the error
   reply ready to write and its :class:`RefusalReason`, and the connection
   stays usable.
3. Params and results are decoded into the method's types exactly once; a
   result that does not fit, or a notification whose params do not, is a
   RemoteProtocolError naming the method, except for a ``lenient`` notice,
   which is dropped (:class:`NotificationDropped`).
4. Nothing raises but LocalProtocolError (this side's bug: sending out of
   state, a method this side does not send, an unknown or answered id, a frame
   over the limit) and RemoteProtocolError (the peer's). A LocalProtocolError
   changes nothing; a RemoteProtocolError moves to ``ERROR`` for good, and
   every later ``receive_data``/``next_event`` raises it again.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final, Protocol, TypeVar

import msgspec

from xcsh_run.worker.protocol.decoders import TooDeep, answer_id, decode_answer
from xcsh_run.worker.protocol.decoders import decoder as _decoder
from xcsh_run.worker.protocol.events import (
    ConnectionClosed,
    ErrorReceived,
    Event,
    NotificationDropped,
    NotificationReceived,
    RequestReceived,
    RequestRefused,
    ResultReceived,
)
from xcsh_run.worker.protocol.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    MAX_NESTING,
    MAX_REPRESENTABLE,
    NEED_DATA,
    FrameDecoder,
    NeedData,
    NotSerialisable,
    check_max_frame_bytes,
    encode_message,
)
from xcsh_run.worker.protocol.messages import (
    ErrorCode,
    ErrorObject,
    ErrorResponse,
    JsonRpcId,
    LocalProtocolError,
    Message,
    Notification,
    RefusalReason,
    RemoteProtocolError,
    Request,
    Response,
    decode_message,
    error_object,
)
from xcsh_run.worker.protocol.methods import WORKER_PROTOCOL, Method, MethodTable, Notice, Role, State

__all__ = [
    "NEED_DATA", "Connection", "ConnectionClosed", "ErrorReceived", "Event", "NotificationDropped",
    "NotificationReceived", "RefusalReason", "RequestReceived", "RequestRefused", "ResultReceived", "Role", "State",
]  # fmt: skip

P = TypeVar("P")
R = TypeVar("R")


class Encoder(Protocol):
    """How messages become bytes: :func:`encode_message` (frames) or ``encode_line`` (MCP's stdio)."""

    def __call__(self, message: Message, *, max_frame_bytes: int) -> bytes: ...


def _checkable(tp: Any) -> type | None:
    """The class a value sent as ``tp`` must be an instance of, when that can be checked."""
    return tp if isinstance(tp, type) and tp is not Any else None


def _short(name: str) -> str:
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "..."


class Connection:
    """One side of one JSON-RPC connection: pure state, no I/O, no threads (not thread-safe).

    Sending returns the bytes to write, which the adapter writes in the order
    it got them; receiving takes bytes (``receive_data``) or whole messages
    (``receive_message``) and ``next_event()`` returns one event at a time, or
    :data:`NEED_DATA`.

    ``max_frame_bytes`` bounds both directions unless ``max_send_bytes`` is
    given: a limit of its own for what this side sends, or None for none but
    what a frame can represent (MCP bounds only the lines it reads).
    """

    def __init__(
        self,
        role: Role,
        table: MethodTable = WORKER_PROTOCOL,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_send_bytes: int | msgspec.UnsetType | None = msgspec.UNSET,
        encode: Encoder = encode_message,
    ) -> None:
        check_max_frame_bytes(max_frame_bytes)
        self.role: Final = role
        self._table = table
        self._state = table.initial
        self._max = max_frame_bytes
        self._max_send: int | msgspec.UnsetType | None = msgspec.UNSET
        if max_send_bytes is not msgspec.UNSET:
            self.max_send_bytes = max_send_bytes
        self._decoder = FrameDecoder(max_frame_bytes)
        self._encode = encode
        self._last_id = 0
        self._outstanding: dict[int, Method[Any, Any]] = {}
        self._abandoned: set[int] = set()
        self._unanswered: dict[JsonRpcId, Method[Any, Any]] = {}
        self._inbox: deque[Message] = deque()
        self._eof = False
        self._error: RemoteProtocolError | None = None
        self._closed: ConnectionClosed | None = None

    def __repr__(self) -> str:
        return (
            f"<Connection {self.role.value} {self._state.name} outstanding={len(self._outstanding)} "
            f"unanswered={len(self._unanswered)}>"
        )

    # --- properties ---------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    @property
    def outstanding(self) -> tuple[int, ...]:
        """Ids of our requests not answered yet (abandoned ones excluded)."""
        return tuple(self._outstanding)

    @property
    def unanswered(self) -> tuple[JsonRpcId, ...]:
        """Ids of the peer's requests we have not answered yet."""
        return tuple(self._unanswered)

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @max_frame_bytes.setter
    def max_frame_bytes(self, limit: int) -> None:
        """Both directions (unless ``max_send_bytes`` was set), from the next message on.

        The worker switches after ``initialize``.
        """
        check_max_frame_bytes(limit)
        self._max = limit
        self._decoder.max_frame_bytes = limit

    @property
    def max_send_bytes(self) -> int | None:
        """The largest message this side sends; None: as large as a frame can be."""
        return self._max if self._max_send is msgspec.UNSET else self._max_send

    @max_send_bytes.setter
    def max_send_bytes(self, limit: int | None) -> None:
        if limit is not None:
            check_max_frame_bytes(limit)
        self._max_send = limit

    # --- sending ------------------------------------------------------------------

    def send_request(self, method: Method[P, R], params: P | msgspec.Raw) -> tuple[int, bytes]:
        """Register a request of ours and return its id and bytes. Ids are 1, 2, 3, ..."""
        self._check_send(method, self._table.requests.get(method.name), method.sender, method.allowed)
        req_id = self._last_id + 1
        self._check_payload(method.params, params, f"{method.name} params")
        data = self._frame(Request(id=req_id, method=method.name, params=params), f"{method.name} params are")
        self._last_id = req_id
        self._outstanding[req_id] = method
        self._advance(method.on_request)
        return req_id, data

    def send_notification(self, notice: Notice[P], params: P | msgspec.Raw) -> bytes:
        self._check_send(notice, self._table.notices.get(notice.name), notice.sender, notice.allowed)
        self._check_payload(notice.params, params, f"{notice.name} params")
        data = self._frame(Notification(method=notice.name, params=params), f"{notice.name} params are")
        self._advance(notice.on_receive)
        return data

    def send_result(self, request_id: JsonRpcId, result: Any) -> bytes:
        """Answer the peer's request ``request_id`` with ``result`` (its method's result type, or Raw)."""
        method = self._answering(request_id)
        self._check_payload(method.result, result, f"{method.name} result")
        data = self._frame(Response(id=request_id, result=result), f"{method.name} result is")
        del self._unanswered[request_id]
        self._advance(method.on_result)
        return data

    def send_error(self, request_id: JsonRpcId, code: int, message: str, **data: Any) -> bytes:
        """Answer the peer's request with an application error (``data`` is ErrorData with the code's kind)."""
        return self.send_error_object(request_id, error_object(code, message, **data))

    def send_error_object(self, request_id: JsonRpcId, error: ErrorObject) -> bytes:
        """Answer the peer's request with this exact error object (e.g. without ``data``)."""
        self._answering(request_id)
        data = self._frame(ErrorResponse(id=request_id, error=error), "error object is")
        del self._unanswered[request_id]
        return data

    def withhold(self, request_id: JsonRpcId) -> None:
        """End the peer's request ``request_id`` with no answer at all (MCP: a cancelled request).

        Its id is free again; nothing is sent. Raises LocalProtocolError for an
        id that is not unanswered, like ``send_result``.
        """
        self._answering(request_id)
        del self._unanswered[request_id]

    def abandon(self, request_id: int) -> None:
        """We stopped waiting for ``request_id``: its answer, if one ever comes, is dropped silently.

        A no-op for an id that is not outstanding (already answered, or closed).
        """
        if self._outstanding.pop(request_id, None) is not None:
            self._abandoned.add(request_id)

    def close(self) -> tuple[int, ...]:
        """Stop; return the ids of our requests that will never be answered (and forget them).

        A late answer to one of them is dropped like the answer to an abandoned
        request. After a RemoteProtocolError the state stays ``ERROR``.
        """
        outstanding = tuple(self._outstanding)
        self._abandoned.update(outstanding)
        self._outstanding.clear()
        if self._state is not State.ERROR:
            self._state = State.CLOSED
        return outstanding

    # --- receiving ----------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes from the peer; ``b""`` means the stream ended."""
        if self._error is not None:
            raise self._error
        if self._eof:
            if not data:
                return
            raise LocalProtocolError("receive_data() called after end of stream")
        if not data:
            self._eof = True
        self._decoder.receive_data(data)

    def receive_buffer(self, size: int = 1 << 16) -> memoryview:
        """A view to read the next bytes from the peer into (``FrameDecoder.receive_buffer``); then :meth:`received`."""
        if self._error is not None:
            raise self._error
        if self._eof:
            raise LocalProtocolError("receive_buffer() called after end of stream")
        return self._decoder.receive_buffer(size)

    def received(self, n: int) -> None:
        """``n`` bytes were read into the view from :meth:`receive_buffer`; 0 means the stream ended."""
        if self._error is not None:
            raise self._error
        if self._eof:
            if not n:
                return
            raise LocalProtocolError("received() called after end of stream")
        if not n:
            self._eof = True
        self._decoder.received(n)

    def unread(self) -> bytes:
        """The bytes received but not yet decoded (``FrameDecoder.unread``): the handshake hands them to Bun."""
        return self._decoder.unread()

    def receive_message(self, message: Message) -> None:
        """A whole message, for transports that split and decode messages themselves."""
        if self._error is not None:
            raise self._error
        if self._eof:
            raise LocalProtocolError("receive_message() called after end of stream")
        self._inbox.append(message)

    def next_event(self) -> Event | NeedData:
        """The next event, or :data:`NEED_DATA`.

        Raises:
            RemoteProtocolError: the peer broke the protocol; every later call raises it again.
        """
        if self._error is not None:
            raise self._error
        while True:
            if self._inbox:
                msg = self._inbox.popleft()
            else:
                try:
                    body = self._decoder.next_body()
                    if isinstance(body, NeedData):
                        return self._end() if self._eof else NEED_DATA
                    answer = self._typed_answer(body)
                    if answer is not None:
                        return answer
                    msg = decode_message(body)
                except RemoteProtocolError as exc:
                    raise self._fail(exc) from None
            try:
                event = self._handle(msg)
            except RemoteProtocolError as exc:
                raise self._fail(exc) from None
            if event is not None:
                return event

    # --- internals ----------------------------------------------------------------

    def _check_send(
        self, what: Method[Any, Any] | Notice[Any], listed: object, sender: Role, allowed: frozenset[State]
    ) -> None:
        if listed is not what:
            raise LocalProtocolError(f"{what!r} is not in this connection's method table")
        if sender is not self.role:
            raise LocalProtocolError(f"{what!r} is sent by the {sender.value}, and this side is the {self.role.value}")
        if self._state not in allowed:
            raise LocalProtocolError(f"cannot send {what!r} while the connection is {self._state.name}")

    def _check_payload(self, tp: Any, value: Any, what: str) -> None:
        cls = _checkable(tp)
        if cls is not None and not isinstance(value, (cls, msgspec.Raw)):
            raise LocalProtocolError(f"{what} must be {cls.__name__}, not {type(value).__name__}")

    def _frame(self, message: Message, what: str) -> bytes:
        """The frame of ``message``, its payload encoded in the same pass (once, straight into the frame)."""
        try:
            limit = self.max_send_bytes
            return self._encode(message, max_frame_bytes=MAX_REPRESENTABLE if limit is None else limit)
        except LocalProtocolError:
            raise
        except Exception as exc:
            # Only the payload can fail: ids, names and codes were checked already.
            # Any exception: a cycle is a RecursionError, and a value's own methods
            # (a tzinfo's utcoffset, say) may raise anything while it is encoded.
            raise NotSerialisable(what, exc) from None

    def _typed_answer(self, body: bytearray | memoryview) -> ResultReceived | ErrorReceived | None:
        """A result to one of our requests, in one decode of the whole body (``_decoders``); None: the general path."""
        rid = answer_id(body)
        method = None if rid is None else self._outstanding.get(rid)
        if rid is None or method is None:
            return None  # not this shape, or abandoned, or not ours: the general path decides
        try:
            decoded = decode_answer(method.result, body, rid)
        except TooDeep:
            # Legal JSON, only deeper than msgspec goes from here: the request's
            # own error, not a broken connection (and never an exception out of here).
            del self._outstanding[rid]
            message = (
                f"the answer to {method.name!r} nests arrays and objects deeper than can be decoded here; "
                f"values may nest {MAX_NESTING} levels deep, return flatter data"
            )
            return ErrorReceived(id=rid, method=method, error=error_object(ErrorCode.TOOL_ERROR, message))
        if decoded is None:
            return None
        del self._outstanding[rid]
        self._advance(method.on_result)
        return ResultReceived(id=rid, method=method, result=decoded[0])

    def _answering(self, request_id: JsonRpcId) -> Method[Any, Any]:
        method = self._unanswered.get(request_id)
        if method is None:
            raise LocalProtocolError(f"no unanswered request with id {request_id!r}")
        return method

    def _advance(self, target: State | None) -> None:
        if target is not None and target > self._state:
            self._state = target

    def _fail(self, exc: RemoteProtocolError) -> RemoteProtocolError:
        self._error = exc
        self._state = State.ERROR
        return exc

    def _end(self) -> ConnectionClosed:
        if self._closed is None:
            self._closed = ConnectionClosed(outstanding=tuple(self._outstanding))
            self._outstanding.clear()
            self._state = State.CLOSED
        return self._closed

    def _handle(self, msg: Message) -> Event | None:
        if isinstance(msg, Request):
            return self._on_request(msg)
        if isinstance(msg, Notification):
            return self._on_notification(msg)
        return self._on_answer(msg)

    def _on_request(self, msg: Request) -> Event:
        method = self._table.requests.get(msg.method)
        if method is None or method.sender is self.role:
            return self._refuse(msg, RefusalReason.UNKNOWN_METHOD, f"unknown method {_short(msg.method)}")
        if msg.id in self._unanswered:
            return self._refuse(msg, RefusalReason.DUPLICATE_ID, f"request id {msg.id!r} is already in use")
        if self._state not in method.allowed:
            why = f"{method.name!r} is not allowed while the connection is {self._state.name}"
            return self._refuse(msg, RefusalReason.OUT_OF_STATE, why)
        try:
            params = _decoder(method.params).decode(msg.params)
        except msgspec.DecodeError as exc:
            return self._refuse(msg, RefusalReason.BAD_PARAMS, f"bad {method.name} params: {exc}")
        self._unanswered[msg.id] = method
        self._advance(method.on_request)
        return RequestReceived(id=msg.id, method=method, params=params)

    def _refuse(self, msg: Request, reason: RefusalReason, message: str) -> RequestRefused:
        error = ErrorObject(code=int(reason.code), message=message)
        # Not bounded by our frame limit: a refusal is small, and must not fail for a tiny limit.
        reply = self._encode(ErrorResponse(id=msg.id, error=error), max_frame_bytes=MAX_REPRESENTABLE)
        return RequestRefused(id=msg.id, method_name=msg.method, error=error, reply=reply, reason=reason)

    def _on_notification(self, msg: Notification) -> Event:
        notice = self._table.notices.get(msg.method)
        if notice is None or notice.sender is self.role:
            return NotificationDropped(method_name=msg.method, reason="unknown notification")
        if self._state not in notice.allowed:
            return NotificationDropped(method_name=msg.method, reason=f"not allowed while {self._state.name}")
        try:
            params = _decoder(notice.params).decode(msg.params)
        except msgspec.DecodeError as exc:
            if notice.lenient:
                return NotificationDropped(method_name=msg.method, reason=f"bad params: {exc}")
            raise RemoteProtocolError(f"malformed {_short(msg.method)} message: {exc}") from None
        self._advance(notice.on_receive)
        return NotificationReceived(method=notice, params=params)

    def _on_answer(self, msg: Response | ErrorResponse) -> Event | None:
        rid = msg.id
        method = self._outstanding.get(rid) if isinstance(rid, int) else None
        if method is None:
            if isinstance(rid, int) and rid in self._abandoned:
                self._abandoned.discard(rid)
                return None
            if isinstance(rid, int) and 0 < rid <= self._last_id:
                raise RemoteProtocolError(f"a second answer to request {rid}")
            raise RemoteProtocolError(f"response to a request id the {self.role.value} never sent: {rid!r}")
        assert isinstance(rid, int)
        if isinstance(msg, ErrorResponse):
            del self._outstanding[rid]
            return ErrorReceived(id=rid, method=method, error=msg.error)
        try:
            result = _decoder(method.result).decode(msg.result)
        except msgspec.DecodeError as exc:
            raise RemoteProtocolError(f"malformed {method.name} result: {exc}") from None
        del self._outstanding[rid]
        self._advance(method.on_result)
        return ResultReceived(id=rid, method=method, result=result)
