"""The xcsh-run wire protocol: JSON-RPC 2.0 messages in length-prefixed frames.

This module is sans-io: it never reads or writes a file descriptor. Both the
host (``runner``) and the worker import it, and the fuzz suite drives it with
arbitrary bytes. ``docs/protocol.md`` describes the same rules for people who
want to write a worker in another language.

Rule 1: a frame is a 4-byte big-endian unsigned length followed by exactly that
many bytes of UTF-8 JSON holding one JSON-RPC 2.0 message. Nothing else ever
travels on the protocol pipes.

Rule 2: :class:`FrameDecoder` is bounded and total. Fed any bytes at all it
either yields messages or raises :class:`RemoteProtocolError`, and nothing
else. After it has raised once it stays failed (like h11's ``ERROR`` state):
a stream that carried garbage cannot be trusted again.

Rule 3: ``params`` and ``result`` stay as :class:`msgspec.Raw` until the
receiver knows what they should be, so each side decodes them exactly once,
into the type the method calls for.
"""

from __future__ import annotations

import enum
from typing import Any, Final, Literal, TypeAlias

import msgspec

PROTOCOL_VERSION: Final = 1
"""Bumped on any incompatible change; checked in the ``initialize`` handshake."""

HEADER_BYTES: Final = 4
DEFAULT_MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
"""Largest frame either side accepts unless configured otherwise (64 MiB)."""

_MAX_REPRESENTABLE: Final = 2**32 - 1


class ErrorCode(enum.IntEnum):
    """JSON-RPC error codes. The first five are the standard ones."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    # Application codes, one per terminal error kind the worker can report.
    TOOL_ERROR = -32000
    INVALID_ARGUMENTS = -32001
    NOT_FOUND = -32002
    LOAD_ERROR = -32003
    CANCELLED = -32004
    LIMIT_EXCEEDED = -32005
    VERSION_MISMATCH = -32006
    SANDBOX_UNAVAILABLE = -32007


# --- errors -----------------------------------------------------------------


class ProtocolError(Exception):
    """Something broke the framing or the JSON-RPC rules.

    Not raised directly: it is either :class:`LocalProtocolError` (we were
    about to send something illegal: a bug on this side) or
    :class:`RemoteProtocolError` (the peer sent something illegal).
    """

    def __init__(self, message: str) -> None:
        if type(self) is ProtocolError:
            raise TypeError("raise LocalProtocolError or RemoteProtocolError, not ProtocolError")
        super().__init__(message)


class LocalProtocolError(ProtocolError):
    """This side tried to encode something the protocol does not allow."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that are not the protocol."""


# --- messages ----------------------------------------------------------------

JsonRpcId: TypeAlias = int | str


class ErrorObject(msgspec.Struct, frozen=True, omit_defaults=True):
    """The ``error`` member of a JSON-RPC error response."""

    code: int
    message: str
    data: Any = None


class Request(msgspec.Struct, frozen=True):
    """A call that expects exactly one :class:`Response` or :class:`ErrorResponse`."""

    id: JsonRpcId
    method: str
    params: msgspec.Raw = msgspec.Raw(b"{}")
    jsonrpc: Literal["2.0"] = "2.0"


class Notification(msgspec.Struct, frozen=True):
    """A one-way message: no ``id``, never answered."""

    method: str
    params: msgspec.Raw = msgspec.Raw(b"{}")
    jsonrpc: Literal["2.0"] = "2.0"


class Response(msgspec.Struct, frozen=True):
    """A successful answer to the :class:`Request` with the same ``id``."""

    id: JsonRpcId
    result: msgspec.Raw
    jsonrpc: Literal["2.0"] = "2.0"


class ErrorResponse(msgspec.Struct, frozen=True):
    """A failed answer. ``id`` is ``None`` only when the request could not be parsed."""

    id: JsonRpcId | None
    error: ErrorObject
    jsonrpc: Literal["2.0"] = "2.0"


Message: TypeAlias = Request | Notification | Response | ErrorResponse


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    # Every member optional, so one typed decode accepts every message shape and
    # classification happens below with precise error messages. UNSET keeps
    # "absent" apart from an explicit null, which JSON-RPC gives meaning to.
    jsonrpc: str | msgspec.UnsetType = msgspec.UNSET
    id: int | str | msgspec.UnsetType | None = msgspec.UNSET
    method: str | msgspec.UnsetType = msgspec.UNSET
    params: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    result: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    error: ErrorObject | msgspec.UnsetType = msgspec.UNSET


_ENVELOPE_DECODER: Final = msgspec.json.Decoder(_Envelope)
_ENCODER: Final = msgspec.json.Encoder()


def _classify(env: _Envelope) -> Message:
    if env.jsonrpc != "2.0":
        raise RemoteProtocolError('message lacks "jsonrpc": "2.0"')
    if env.method is not msgspec.UNSET:
        if env.result is not msgspec.UNSET or env.error is not msgspec.UNSET:
            raise RemoteProtocolError("a request cannot also carry result or error")
        params = env.params if env.params is not msgspec.UNSET else msgspec.Raw(b"{}")
        if env.id is msgspec.UNSET:
            return Notification(method=env.method, params=params)
        if env.id is None:
            raise RemoteProtocolError("request id must be an integer or a string, not null")
        return Request(id=env.id, method=env.method, params=params)
    if env.params is not msgspec.UNSET:
        raise RemoteProtocolError('"params" without "method"')
    if env.result is not msgspec.UNSET:
        if env.error is not msgspec.UNSET:
            raise RemoteProtocolError('a response carries both "result" and "error"')
        if env.id is msgspec.UNSET or env.id is None:
            raise RemoteProtocolError('a response with "result" needs an integer or string id')
        return Response(id=env.id, result=env.result)
    if env.error is not msgspec.UNSET:
        if env.id is msgspec.UNSET:
            raise RemoteProtocolError('an error response needs an "id" (null is allowed)')
        return ErrorResponse(id=env.id, error=env.error)
    raise RemoteProtocolError('message has none of "method", "result" or "error"')


def decode_message(body: bytes | bytearray | memoryview) -> Message:
    """Decode one frame body (without its length prefix) into a message.

    Raises:
        RemoteProtocolError: the body is not one JSON-RPC 2.0 message.
    """
    try:
        env = _ENVELOPE_DECODER.decode(body)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise RemoteProtocolError(f"frame is not a JSON-RPC message: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # pragma: no cover - defensive; msgspec wraps these
        raise RemoteProtocolError(f"frame is not a JSON-RPC message: {exc}") from None
    return _classify(env)


def encode_message(message: Message, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Encode one message as a complete frame (length prefix included).

    Raises:
        LocalProtocolError: the encoded body is larger than ``max_frame_bytes``.
        msgspec.EncodeError / TypeError: a value inside is not JSON-serialisable.
    """
    # Encode into a buffer with 4 bytes of headroom, then fill the header in
    # place: one copy fewer than b"".join for large results.
    buf = bytearray(HEADER_BYTES)
    _ENCODER.encode_into(message, buf, HEADER_BYTES)
    n = len(buf) - HEADER_BYTES
    if n > max_frame_bytes:
        raise LocalProtocolError(f"message is {n} bytes, over the {max_frame_bytes}-byte frame limit")
    buf[0:HEADER_BYTES] = n.to_bytes(HEADER_BYTES, "big")
    return bytes(buf)


def encode_value(value: Any) -> msgspec.Raw:
    """Encode ``params`` or ``result`` ahead of time (raises if not JSON-serialisable)."""
    return msgspec.Raw(_ENCODER.encode(value))


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()
"""Returned by :meth:`FrameDecoder.next_message` when no complete frame is buffered."""


class FrameDecoder:
    """Incremental, bounded frame decoder.

    Usage::

        decoder.receive_data(chunk)      # b"" signals end of stream
        while (msg := decoder.next_message()) is not NEED_DATA:
            handle(msg)

    Memory is bounded by ``max_frame_bytes`` plus one read chunk: an oversized
    length prefix is rejected as soon as its four bytes arrive.
    """

    __slots__ = ("_buf", "_pos", "_eof", "_failed", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 1 <= max_frame_bytes <= _MAX_REPRESENTABLE:
            raise ValueError(f"max_frame_bytes must be between 1 and {_MAX_REPRESENTABLE}, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        # Consumed prefix of _buf. Compacting lazily keeps extraction O(frame)
        # instead of O(buffer) per message when many small frames arrive at once.
        self._pos = 0
        self._eof = False
        self._failed: RemoteProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as messages."""
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes from the peer; an empty ``data`` means the stream ended."""
        if self._failed is not None:
            raise self._failed
        if not data:
            self._eof = True
            return
        if self._eof:
            raise RuntimeError("receive_data() called after end of stream")
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_message(self) -> Message | _NeedData:
        """Return the next complete message, or :data:`NEED_DATA`.

        Raises:
            RemoteProtocolError: the bytes received are not the protocol. Every
                later call raises the same error.
        """
        if self._failed is not None:
            raise self._failed
        try:
            return self._next()
        except RemoteProtocolError as exc:
            self._failed = exc
            raise

    def _next(self) -> Message | _NeedData:
        available = len(self._buf) - self._pos
        if available < HEADER_BYTES:
            if self._eof and available:
                raise RemoteProtocolError(f"stream ended inside a frame header ({available} of 4 bytes)")
            return NEED_DATA
        start = self._pos
        n = int.from_bytes(self._buf[start : start + HEADER_BYTES], "big")
        if n > self.max_frame_bytes:
            raise RemoteProtocolError(f"frame announces {n} bytes, over the {self.max_frame_bytes}-byte limit")
        end = start + HEADER_BYTES + n
        if len(self._buf) < end:
            if self._eof:
                raise RemoteProtocolError(f"stream ended inside a frame ({available - HEADER_BYTES} of {n} bytes)")
            return NEED_DATA
        # Decoded Raw members keep a reference to the buffer they came from, so
        # the body must never alias memory this decoder will mutate later.
        if start == 0 and end == len(self._buf):
            # The frame is the whole buffer (the usual case for a large result):
            # hand the buffer over instead of copying it, and start a new one.
            body: bytes | memoryview = memoryview(self._buf)[HEADER_BYTES:]
            self._buf = bytearray()
            self._pos = 0
        else:
            body = bytes(self._buf[start + HEADER_BYTES : end])
            self._pos = end
            if self._pos == len(self._buf):
                self._buf.clear()
                self._pos = 0
        return decode_message(body)


# --- method payloads -----------------------------------------------------------
# One Struct per method's params and result. Keeping them here means a reader
# finds the whole protocol in this file.


class SandboxConfig(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the worker must apply to itself before it imports tool code (see worker/_sandbox.py)."""

    level: Literal["none", "contained", "strict"]
    cpu_seconds: int | None = None
    open_files: int | None = None
    file_size_bytes: int | None = None
    data_bytes: int | None = None
    network: Literal["off", "netns"] = "off"
    read_paths: list[str] = []
    write_paths: list[str] = []
    exec_paths: list[str] = []
    drop_uid: int | None = None
    drop_gid: int | None = None
    best_effort: bool = False


class InitializeParams(msgspec.Struct, frozen=True, omit_defaults=True):
    protocol_version: int
    host_pid: int
    cwd: str
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    cgroup_kill_path: str | None = None
    sandbox: SandboxConfig = SandboxConfig(level="none")
    has_ui: bool = False


class InitializeResult(msgspec.Struct, frozen=True):
    protocol_version: int
    pid: int
    python: str = ""
    unenforced: list[str] = []


class LoadParams(msgspec.Struct, frozen=True, omit_defaults=True):
    """Load by file path, or (entry-point plugins) by dotted module name from ``sys_path``."""

    path: str
    module: str | None = None
    sys_path: str | None = None
    factory: str = "factory"


class ToolDescription(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    label: str
    description: str
    parameters: dict[str, Any]
    params_kind: Literal["struct", "json_schema"]
    hidden: bool = False
    deferrable: bool = False
    concurrency: Literal["shared", "exclusive"] = "shared"
    timeout: float | None = None
    has_on_session: bool = False
    has_render_call: bool = False
    has_render_result: bool = False


class EntryError(msgspec.Struct, frozen=True):
    """One entry of a factory's return value that is not a valid tool."""

    index: int
    message: str


class LoadResult(msgspec.Struct, frozen=True):
    tools: list[ToolDescription]
    entry_errors: list[EntryError] = []


class CallParams(msgspec.Struct, frozen=True, omit_defaults=True):
    call_id: str
    tool: str
    arguments: msgspec.Raw
    ctx: dict[str, Any] = {}


class CallResult(msgspec.Struct, frozen=True):
    content: list[dict[str, Any]]
    details: Any = None


class UpdateParams(msgspec.Struct, frozen=True):
    call_id: str
    partial: CallResult


class CancelParams(msgspec.Struct, frozen=True):
    call_id: str
    reason: str


class ErrorData(msgspec.Struct, frozen=True, omit_defaults=True):
    """``error.data`` of an application error: the kind plus optional evidence."""

    kind: str
    traceback: str | None = None
    path: str | None = None
    limit: str | None = None


# --- the host API across the boundary (SPEC §2): worker -> host ---------------------


class UiParams(msgspec.Struct, frozen=True):
    """A UI method call from a tool: ``method`` is one of UI_METHODS, ``args`` its arguments."""

    call_id: str | None
    method: str
    args: list[Any] = []


UI_METHODS: Final = ("select", "confirm", "input", "notify", "set_status", "editor", "get_editor_text",
                     "set_editor_text")  # fmt: skip


class LogParams(msgspec.Struct, frozen=True):
    call_id: str | None
    level: int
    logger: str
    message: str


class AbortParams(msgspec.Struct, frozen=True):
    call_id: str | None
    reason: str


class PendingPushParams(msgspec.Struct, frozen=True, omit_defaults=True):
    call_id: str | None
    action_id: str
    label: str
    source_tool_name: str
    details: Any = None


# --- host -> worker -----------------------------------------------------------------


class UiChangedParams(msgspec.Struct, frozen=True):
    has_ui: bool


class SessionParams(msgspec.Struct, frozen=True):
    event: dict[str, Any]
    ctx: dict[str, Any] = {}


class SessionResult(msgspec.Struct, frozen=True):
    warnings: list[str] = []


class RenderParams(msgspec.Struct, frozen=True, omit_defaults=True):
    tool: str
    kind: Literal["call", "result"]
    args: Any = None
    result: Any = None
    options: dict[str, Any] = {}
    theme: Any = None


class RenderResult(msgspec.Struct, frozen=True):
    text: str


class ResolveParams(msgspec.Struct, frozen=True):
    action_id: str
    action: Literal["apply", "discard"]
    reason: str


class ResolveResult(msgspec.Struct, frozen=True):
    """``result`` is None when a discard had no ``reject`` (or it returned nothing)."""

    result: CallResult | None


# Method names, in one place.
M_INITIALIZE: Final = "initialize"
M_LOAD: Final = "load"
M_CALL: Final = "call"
M_SHUTDOWN: Final = "shutdown"
M_SESSION: Final = "session"
M_RENDER: Final = "render"
M_RESOLVE: Final = "pending/resolve"
N_UPDATE: Final = "update"
N_CANCEL: Final = "$/cancel"
N_UI_CHANGED: Final = "ui/changed"
# worker -> host
M_UI: Final = "ui"
N_LOG: Final = "log"
N_ABORT: Final = "abort"
N_PENDING: Final = "pending/push"
