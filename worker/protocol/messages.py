"""JSON-RPC 2.0 messages: their types, the one error hierarchy, the one code-to-kind map, refusal reasons.

Rule 3 of the protocol: ``params`` and ``result`` stay as :class:`msgspec.Raw`
until the receiver knows what they should be, so each side decodes them
exactly once, into the type the method calls for (see ``methods.py``). A
sender puts the value itself in them (or Raw it encoded earlier), so that it
is encoded once, in the same pass as its frame.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

import msgspec


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


KIND_BY_CODE: Final[Mapping[int, str]] = {
    ErrorCode.TOOL_ERROR: "tool_error",
    ErrorCode.INVALID_ARGUMENTS: "invalid_arguments",
    ErrorCode.NOT_FOUND: "not_found",
    ErrorCode.LOAD_ERROR: "load_error",
    ErrorCode.CANCELLED: "cancelled",
    ErrorCode.LIMIT_EXCEEDED: "limit_exceeded",
}
"""What a worker may report, by error code; a code not in it means ``"protocol_error"``.

The code decides the kind, never ``error.data.kind``: a worker cannot claim
that its call timed out or crashed, which are the host's own observations.
"""


def kind_of(code: int) -> str:
    """The result kind an error code stands for."""
    return KIND_BY_CODE.get(code, "protocol_error")


class RefusalReason(enum.Enum):
    """Why a connection refused a request, so that an adapter can word the refusal without parsing it."""

    UNKNOWN_METHOD = "unknown_method"  # not in the table, or one the receiver sends itself
    DUPLICATE_ID = "duplicate_id"  # the id of a request still unanswered
    OUT_OF_STATE = "out_of_state"  # not allowed in the connection's state
    BAD_PARAMS = "bad_params"  # params that do not decode into the method's type

    @property
    def code(self) -> ErrorCode:
        """The JSON-RPC code of the refusal: -32601, -32600 (both of the middle two) or -32602."""
        return _REFUSAL_CODES[self]


_REFUSAL_CODES: Final[Mapping[RefusalReason, ErrorCode]] = {
    RefusalReason.UNKNOWN_METHOD: ErrorCode.METHOD_NOT_FOUND,
    RefusalReason.DUPLICATE_ID: ErrorCode.INVALID_REQUEST,
    RefusalReason.OUT_OF_STATE: ErrorCode.INVALID_REQUEST,
    RefusalReason.BAD_PARAMS: ErrorCode.INVALID_PARAMS,
}


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
    """This side tried to send something the protocol does not allow."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that are not the protocol."""


# --- messages ----------------------------------------------------------------

JsonRpcId: TypeAlias = int | str


class ErrorData(msgspec.Struct, frozen=True, omit_defaults=True):
    """``error.data`` of an application error: the kind plus optional evidence.

    ``exception``, ``exception_mro``, ``raised_at`` and ``deliberate`` describe
    the exception behind a ``tool_error``, and ``expected`` and ``got`` what an
    ``invalid_arguments`` value at ``path`` should have been and was
    (protocol.md, section 6); a host must not require them (older workers do
    not send them).
    """

    kind: str
    traceback: str | None = None
    path: str | None = None
    expected: str | None = None
    got: str | None = None
    limit: str | None = None
    exception: str | None = None
    exception_mro: list[str] | None = None
    raised_at: str | None = None
    deliberate: bool | None = None


class ErrorObject(msgspec.Struct, frozen=True, omit_defaults=True):
    """The ``error`` member of a JSON-RPC error response."""

    code: int
    message: str
    data: Any = None


def error_object(code: int, message: str, **data: Any) -> ErrorObject:
    """An application error: ``data`` is :class:`ErrorData` with the code's kind and the given evidence."""
    return ErrorObject(code=int(code), message=message, data=ErrorData(kind=kind_of(code), **data))


class Request(msgspec.Struct, frozen=True):
    """A call that expects exactly one :class:`Response` or :class:`ErrorResponse`."""

    id: JsonRpcId
    method: str
    params: Any = msgspec.Raw(b"{}")  # msgspec.Raw when received (Rule 3)
    jsonrpc: Literal["2.0"] = "2.0"


class Notification(msgspec.Struct, frozen=True):
    """A one-way message: no ``id``, never answered."""

    method: str
    params: Any = msgspec.Raw(b"{}")  # msgspec.Raw when received (Rule 3)
    jsonrpc: Literal["2.0"] = "2.0"


class Response(msgspec.Struct, frozen=True):
    """A successful answer to the :class:`Request` with the same ``id``."""

    id: JsonRpcId
    result: Any  # msgspec.Raw when received (Rule 3)
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
    """Decode one message body (a frame without its length prefix, or one line) into a message.

    Raises:
        RemoteProtocolError: the body is not one JSON-RPC 2.0 message.
    """
    try:
        env = _ENVELOPE_DECODER.decode(body)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise RemoteProtocolError(f"frame is not a JSON-RPC message: {exc}") from None
    except RecursionError:
        raise RemoteProtocolError(
            "frame nests arrays and objects deeper than can be decoded here (values may nest 512 levels deep)"
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:  # pragma: no cover - defensive; msgspec wraps these
        raise RemoteProtocolError(f"frame is not a JSON-RPC message: {exc}") from None
    return _classify(env)
