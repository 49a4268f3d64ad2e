"""Frames: how messages travel on the protocol pipes.

Rule 1: a frame is a 4-byte big-endian unsigned length followed by exactly that
many bytes of UTF-8 JSON holding one JSON-RPC 2.0 message. Nothing else ever
travels on the protocol pipes.

Rule 2: :class:`FrameDecoder` is bounded and total. Fed any bytes at all it
either yields messages or raises :class:`RemoteProtocolError`, and nothing
else. After it has raised once it stays failed (like h11's ``ERROR`` state):
a stream that carried garbage cannot be trusted again.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from xcsh_run.worker.protocol.messages import LocalProtocolError, Message, RemoteProtocolError, decode_message

HEADER_BYTES: Final = 4
DEFAULT_MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
MAX_NESTING: Final = 512
"""Levels of nested arrays and objects a value in a message (a result's details, say) may have.

msgspec encodes and decodes with the interpreter's recursion limit (1000 by
default), less the stack already in use; 512 leaves both sides, and the host's
own re-encoding (MCP, ``--json``), room. Deeper values may still pass; past what
a side can handle, the sender gets an error that names this limit.
"""
"""Largest frame either side accepts unless configured otherwise (64 MiB)."""

MAX_REPRESENTABLE: Final = 2**32 - 1
# A frame gets its own buffer once its size is at most the larger of these
# (see FrameDecoder): any size that small, or this many times what has arrived.
_TRUSTED_FRAME_BYTES: Final = 1 << 20
_TRUSTED_FRAME_RATIO: Final = 16
_ENCODER: Final = msgspec.json.Encoder()


class FrameTooLarge(LocalProtocolError):
    """The message to send is larger than the frame limit; nothing was sent."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"message is {size} bytes, over the {limit}-byte frame limit")


class NotSerialisable(LocalProtocolError):
    """A payload to send holds a value JSON cannot carry; nothing was sent.

    ``what`` names the payload with its verb (``"call result is"``), ``reason`` is the encoder's word.
    """

    def __init__(self, what: str, reason: BaseException) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"{what} not JSON-serialisable: {reason}")


def encode_message(message: Message, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Encode one message as a complete frame (length prefix included).

    Raises:
        FrameTooLarge: the encoded body is larger than ``max_frame_bytes`` (a LocalProtocolError).
        msgspec.EncodeError / TypeError: a value inside is not JSON-serialisable.
    """
    # One copy after the encoding either way: joining the header to the body
    # costs half of encoding into a bytearray with headroom and copying that
    # out as bytes for a small message (0.5 us against 1.1 us for 1 KiB), and
    # the same from 1 MiB up.
    body = _ENCODER.encode(message)
    n = len(body)
    if n > max_frame_bytes:
        raise FrameTooLarge(n, max_frame_bytes)
    return n.to_bytes(HEADER_BYTES, "big") + body


def encode_line(message: Message, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Encode one message as a line of compact JSON (for newline-delimited transports such as MCP's stdio).

    Compact JSON never contains a raw newline: msgspec escapes control
    characters inside strings.
    """
    body = _ENCODER.encode(message)
    if len(body) > max_frame_bytes:
        raise FrameTooLarge(len(body), max_frame_bytes)
    return body + b"\n"


def encode_value(value: Any) -> msgspec.Raw:
    """Encode ``params`` or ``result`` ahead of time (raises if not JSON-serialisable)."""
    return msgspec.Raw(_ENCODER.encode(value))


class NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()
"""Returned by :meth:`FrameDecoder.next_message` (and ``Connection.next_event``) when more bytes are needed."""


class FrameDecoder:
    """Incremental, bounded frame decoder.

    Usage::

        decoder.receive_data(chunk)      # b"" signals end of stream
        while (msg := decoder.next_message()) is not NEED_DATA:
            handle(msg)

    or, reading straight into the decoder's memory (no chunk object, and a
    large frame's body lands where it is decoded from)::

        view = decoder.receive_buffer()
        n = os.readv(fd, [view])
        del view
        decoder.received(n)              # 0 signals end of stream

    A frame whose header has arrived but not its whole body gets a buffer of
    its own, of exactly the announced size: the rest of its bytes are copied
    (or read) into place, that buffer never grows, and the finished body is
    decoded from it without a copy. A length prefix is only trusted that far
    up to 1 MiB, or 16 times what has arrived of its frame: a prefix that lies
    costs no more memory than the bytes sent with it (a larger frame grows
    with its bytes until then). Memory is bounded by ``max_frame_bytes`` plus
    one read chunk: an oversized length prefix is rejected as soon as its four
    bytes arrive, and nothing is allocated for it.
    """

    __slots__ = ("_buf", "_pos", "_frame", "_filled", "_scratch", "_direct", "_eof", "_failed", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        check_max_frame_bytes(max_frame_bytes)
        self.max_frame_bytes = max_frame_bytes
        # Bytes not in a frame buffer: whole frames, then at most the start of
        # one more. Consumed up to _pos; compacting lazily keeps extraction
        # O(frame) instead of O(buffer) when many small frames arrive at once.
        self._buf = bytearray()
        self._pos = 0
        # The body of the frame being received, allocated at its announced
        # size, and how much of it has arrived. Every earlier byte of the
        # stream was consumed, so _buf is empty while it is set.
        self._frame: bytearray | None = None
        self._filled = 0
        # receive_buffer()'s view: the scratch buffer, or (_direct) the frame's rest.
        self._scratch: bytearray | None = None
        self._direct = False
        self._eof = False
        self._failed: RemoteProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as messages."""
        pending = len(self._buf) - self._pos
        return pending if self._frame is None else pending + HEADER_BYTES + self._filled

    def unread(self) -> bytes:
        """The bytes received but not yet returned as messages, as they came (for a reader taking over the stream).

        An incomplete frame's header is given back with what arrived of its body.
        """
        rest = bytes(memoryview(self._buf)[self._pos :])  # after the frame's bytes, if one is being received
        if self._frame is None:
            return rest
        return len(self._frame).to_bytes(HEADER_BYTES, "big") + bytes(memoryview(self._frame)[: self._filled]) + rest

    @property
    def ended(self) -> bool:
        """True once the end of the stream was received."""
        return self._eof

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes from the peer (copied: the caller may reuse ``data``); empty ``data`` means the stream ended."""
        if self._failed is not None:
            raise self._failed
        if not data:
            self._eof = True
            return
        if self._eof:
            raise RuntimeError("receive_data() called after end of stream")
        self._direct = False
        if self._frame is not None:
            frame, filled = self._frame, self._filled
            view = memoryview(data)
            take = min(len(view), len(frame) - filled)
            frame[filled : filled + take] = view[:take]
            self._filled = filled + take
            if take == len(view):
                return
            data = view[take:]
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def receive_buffer(self, size: int = 1 << 16) -> memoryview:
        """A view to read the next bytes from the peer into; then call :meth:`received`.

        It is the rest of the frame being received when at least ``size``
        bytes of it are missing (the read lands in its final place), otherwise
        a scratch buffer of ``size`` bytes. Release the view before the next
        call that receives (``del view``): a frame's buffer is handed over
        for decoding once it is full.
        """
        if self._failed is not None:
            raise self._failed
        if self._eof:
            raise RuntimeError("receive_buffer() called after end of stream")
        if self._frame is None:
            self._start_frame()
        if self._frame is not None and len(self._frame) - self._filled >= size:
            self._direct = True
            return memoryview(self._frame)[self._filled :]
        self._direct = False
        if self._scratch is None or len(self._scratch) != size:
            self._scratch = bytearray(size)
        return memoryview(self._scratch)

    def received(self, n: int) -> None:
        """``n`` bytes were read into the view from :meth:`receive_buffer`; 0 means the stream ended."""
        if n == 0:
            self.receive_data(b"")
        elif self._direct:
            self._direct = False
            self._filled += n
        else:
            assert self._scratch is not None, "received() without receive_buffer()"
            with memoryview(self._scratch) as view:
                self.receive_data(view[:n])

    def next_message(self) -> Message | NeedData:
        """Return the next complete message, or :data:`NEED_DATA`.

        Raises:
            RemoteProtocolError: the bytes received are not the protocol. Every
                later call raises the same error.
        """
        body = self.next_body()
        if isinstance(body, NeedData):
            return body
        try:
            return decode_message(body)
        except RemoteProtocolError as exc:
            self._failed = exc
            raise

    def next_body(self) -> bytearray | memoryview | NeedData:
        """The next complete frame's body, undecoded, or :data:`NEED_DATA` (for a typed decode of the whole).

        The body is the caller's: no memory of it is ever reused. Raises like
        :meth:`next_message`, except for a body that is not a message.
        """
        if self._failed is not None:
            raise self._failed
        try:
            return self._next()
        except RemoteProtocolError as exc:
            self._failed = exc
            raise

    def _next(self) -> bytearray | memoryview | NeedData:
        frame = self._frame
        if frame is not None:
            if self._filled < len(frame):
                if self._eof:
                    raise RemoteProtocolError(f"stream ended inside a frame ({self._filled} of {len(frame)} bytes)")
                return NEED_DATA
            self._frame = None
            self._direct = False
            return frame
        start = self._pos
        available = len(self._buf) - start
        if available < HEADER_BYTES:
            if self._eof and available:
                raise RemoteProtocolError(f"stream ended inside a frame header ({available} of 4 bytes)")
            return NEED_DATA
        n = self._announced(start)
        end = start + HEADER_BYTES + n
        if len(self._buf) < end:
            if self._eof:
                raise RemoteProtocolError(f"stream ended inside a frame ({available - HEADER_BYTES} of {n} bytes)")
            self._start_frame()
            return NEED_DATA
        # Decoded Raw members keep a reference to the memory they came from,
        # so a body never aliases memory this decoder will write again.
        if start == 0 and end == len(self._buf):
            # The frame is the whole buffer: hand the buffer over instead of copying it.
            body: bytearray | memoryview = memoryview(self._buf)[HEADER_BYTES:]
            self._buf = bytearray()
            self._pos = 0
            return body
        body = self._buf[start + HEADER_BYTES : end]  # one copy, into a bytearray of its own
        self._pos = end
        if end == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return body

    def _announced(self, start: int) -> int:
        n = int.from_bytes(self._buf[start : start + HEADER_BYTES], "big")
        if n > self.max_frame_bytes:
            raise RemoteProtocolError(f"frame announces {n} bytes, over the {self.max_frame_bytes}-byte limit")
        return n

    def _start_frame(self) -> None:
        """Move an incomplete first frame of ``_buf`` into a buffer of its own, once its header is trusted."""
        start = self._pos
        available = len(self._buf) - start
        if available < HEADER_BYTES:
            return
        n = int.from_bytes(self._buf[start : start + HEADER_BYTES], "big")
        if n > self.max_frame_bytes or available >= HEADER_BYTES + n:
            return  # refused, or complete: for _next to deal with
        have = available - HEADER_BYTES
        if n > max(_TRUSTED_FRAME_BYTES, _TRUSTED_FRAME_RATIO * have):
            return  # not yet: it grows in _buf until enough of it is there
        frame = bytearray(n)
        with memoryview(self._buf) as view:  # released before the clear below resizes _buf
            frame[:have] = view[start + HEADER_BYTES :]
        self._frame, self._filled = frame, have
        self._buf.clear()
        self._pos = 0


def check_max_frame_bytes(limit: int) -> None:
    if not 1 <= limit <= MAX_REPRESENTABLE:
        raise ValueError(f"max_frame_bytes must be between 1 and {MAX_REPRESENTABLE}, got {limit}")
