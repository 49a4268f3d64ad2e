"""MCP's JSON-RPC on the wire, with no I/O: what one line (or HTTP body) holds, and the error lines.

Any transport (the stdio lines of ``line_transport``, an HTTP body) hands the
bytes of one message to :func:`classify`, which tells a request or a
notification (the shared protocol's typed ``Request`` / ``Notification``)
from a :class:`Batch` and from :class:`Malformed` input, and the owner answers.

Rules:

1. Malformed input is answered with the id of the request it held whenever
   that id can be told for certain (:func:`recover_id`), so that the client's
   call fails at once instead of waiting for its timeout. Input that is not
   even JSON (invalid UTF-8, a lone UTF-16 surrogate escape such as a cut
   emoji leaves, a cut line) still yields its id when the members before the
   break show a request: a top-level ``"method"`` string and exactly one
   top-level ``"id"``, an integer or a string that decodes whole.
2. An id is never guessed: one the repair would have to touch (invalid
   bytes, a lone surrogate inside the id itself), one that may be cut short
   (digits at the end of the input), one nested below the top level, and the
   id of what may be a response (a top-level ``"result"`` or ``"error"``: it
   names a request of the server's, not the client's) are not recovered.
3. When no id can be recovered, the error response has no ``id`` member at
   all. JSON-RPC 2.0 wants ``"id": null`` there, but MCP's schema (2025-11-25:
   ``JSONRPCErrorResponse.id`` is optional and never null) and the TypeScript
   SDK reject a null id, and no client can match either form to a call; the
   official Python SDK only logs the line as one it cannot parse.
4. A top-level array is a batch, whatever it holds; an empty one is an
   invalid request. Whether batches are served is the owner's decision (it
   knows the negotiated revision).
5. A response from the client (a ``"result"`` or ``"error"`` and no
   ``"method"``) answers a prompt of the server's, whose ids are integers:
   it is handed on as a ``Response`` or ``ErrorResponse`` (an error object
   that does not decode becomes an internal error, so the prompt still ends).
   One that cannot be such an answer (another id, no ``"jsonrpc": "2.0"``)
   is dropped, never answered: any error would carry an id of the server's,
   which the client could take for the answer to a call of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final, Literal, TypeGuard

import msgspec

from xcsh_run.worker.protocol import ErrorCode, ErrorObject, ErrorResponse, Notification, Request, Response, encode_line

RequestId = str | int


class Malformed(msgspec.Struct, frozen=True):
    """Input that is not a message: answered with ``code`` and ``message``, and ``id`` unless it is None."""

    id: RequestId | None
    code: int
    message: str


Answer = Response | ErrorResponse  # the client's, to a prompt of the server's (rule 5)
Element = Request | Notification | Answer | Malformed


class Batch(msgspec.Struct, frozen=True):
    """A JSON-RPC batch: its requests, notifications, answers and malformed elements, in order."""

    items: list[Element]


Incoming = Element | Batch


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


class _IdlessError(msgspec.Struct, frozen=True):
    # An error answer to input whose id could not be told (rule 3).
    error: ErrorObject
    jsonrpc: Literal["2.0"] = "2.0"


# A line is one JSON value; only an object can be a message. Params stay raw:
# the connection decodes them once, into its method's type.
_LINE: Final = msgspec.json.Decoder(_Envelope | list[msgspec.Raw] | str | int | float | bool | None)
_ERROR: Final = msgspec.json.Decoder(ErrorObject)
_ENCODER: Final = msgspec.json.Encoder()
_NO_PARAMS: Final = msgspec.Raw(b"{}")
_NULL: Final = msgspec.Raw(b"null")

# The tolerant scan of rule 1. A string token is whatever lies between its
# quotes (bytes that are not UTF-8 and lone surrogates included: only the
# structure matters until a value is used).
_WS: Final = re.compile(rb"[ \t\r\n]*")
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR: Final = re.compile(rb"[^,}\]\s]+")
_NESTING: Final = re.compile(rb'["{}\[\]]')
_CLOSER: Final = {ord("{"): ord("}"), ord("["): ord("]")}
# The id that ends an object: `,"id":5}` at the very end of an oversized
# line, where SDKs that write the id last put it. `[{,]` before the quote
# keeps a string's escaped `\"id\"` out.
_TRAILING_ID: Final = re.compile(
    rb'[{,][ \t\r\n]*"id"[ \t\r\n]*:[ \t\r\n]*(-?\d+|"[^"\\]*(?:\\.[^"\\]*)*")[ \t\r\n]*\}[ \t\r\n]*\Z'
)
_LONE_SURROGATE: Final = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def valid_id(value: object) -> TypeGuard[RequestId]:
    """MCP: a request id is a string or an integer, never null; bool is not an integer on the wire."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def error_line(request_id: RequestId | None, code: int, message: str) -> bytes:
    """An error answer with no ``data``, as one line; with no ``id`` member at all when ``request_id`` is None."""
    error = ErrorObject(code=int(code), message=message)
    if request_id is None:
        return _ENCODER.encode(_IdlessError(error=error)) + b"\n"
    return encode_line(ErrorResponse(id=request_id, error=error))


def batch_line(lines: list[bytes]) -> bytes:
    """The answers of one batch (lines from :func:`error_line` or the connection) as one array line."""
    return b"[" + b",".join(line.rstrip(b"\n") for line in lines) + b"]\n"


# --- classifying -------------------------------------------------------------------


def classify(line: bytes) -> Incoming | None:
    """What one line holds; None when there is nothing to take (a blank line, a response to no prompt)."""
    line = line.strip()
    if not line:
        return None
    try:
        value = _LINE.decode(line)
    except (msgspec.DecodeError, RecursionError) as exc:
        # msgspec raises RecursionError (not DecodeError) for deep nesting like `[[[[...`.
        return Malformed(recover_id(line), ErrorCode.PARSE_ERROR, _parse_error(line, exc))
    if not isinstance(value, list):
        return _message(value)
    if not value:
        return Malformed(None, ErrorCode.INVALID_REQUEST, "invalid request: an empty batch")
    items = [item for raw in value if (item := _element(raw)) is not None]
    return Batch(items) if items else None


def _element(raw: msgspec.Raw) -> Element | None:
    try:
        return _message(_LINE.decode(raw))
    except (msgspec.DecodeError, RecursionError) as exc:  # pragma: no cover - the whole line decoded
        return Malformed(None, ErrorCode.PARSE_ERROR, f"parse error: {exc}")


def _message(value: object) -> Element | None:
    if not isinstance(value, _Envelope):
        return _invalid(None, f"a message is a JSON object, got a JSON {type(value).__name__}")
    method = value.method
    if method is msgspec.UNSET and (value.result is not msgspec.UNSET or value.error is not msgspec.UNSET):
        return _answer(value)  # checked first: a response's id is never used in an error (rule 5)
    request_id = value.id if valid_id(value.id) else None
    if value.jsonrpc != "2.0":
        # Not a JSON-RPC 2.0 message at all, so not a notification either: answered.
        return _invalid(request_id, '"jsonrpc" must be "2.0"')
    if method is msgspec.UNSET:
        return _invalid(request_id, 'no "method"')
    if not isinstance(method, str):
        return _invalid(request_id, '"method" must be a string')
    params = _NO_PARAMS if isinstance(value.params, msgspec.UnsetType) or value.params == _NULL else value.params
    if value.id is msgspec.UNSET:
        return Notification(method=method, params=params)
    if request_id is None:
        return _invalid(None, f'"id" must be a string or an integer, got {value.id!r}')
    return Request(id=request_id, method=method, params=params)


def _answer(value: _Envelope) -> Answer | None:
    """The client's answer to a prompt (rule 5); None for what cannot be one."""
    if value.jsonrpc != "2.0" or not isinstance(value.id, int) or isinstance(value.id, bool):
        return None  # the server's ids are integers: no prompt waits for it
    if isinstance(value.error, msgspec.Raw):
        try:
            error = _ERROR.decode(value.error)
        except msgspec.DecodeError:
            error = ErrorObject(code=ErrorCode.INTERNAL_ERROR, message="a malformed error object")
        return ErrorResponse(id=value.id, error=error)
    assert isinstance(value.result, msgspec.Raw)
    return Response(id=value.id, result=value.result)


def _invalid(request_id: RequestId | None, why: str) -> Malformed:
    return Malformed(request_id, ErrorCode.INVALID_REQUEST, f"invalid request: {why}")


def _parse_error(line: bytes, exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "parse error: JSON nested too deeply"
    if (surrogate := _LONE_SURROGATE.search(line)) is not None:
        # msgspec calls this "truncated"; say what it is.
        found = surrogate.group().decode()
        return f"parse error: a string holds a lone UTF-16 surrogate ({found}), half of a character cut in two"
    return f"parse error: {exc}"


# --- recovering the id of malformed input (rules 1 and 2) ---------------------------


def recover_id(head: bytes, *, tail: bytes = b"") -> RequestId | None:
    """The id of the request ``head`` starts, when it can be told for certain; else None.

    ``head`` is the input, or its first bytes; ``tail``, the last bytes of an
    input too long to keep, is searched for an id that closes the object
    when ``head`` shows a request without one.
    """
    ids: list[bytes] = []
    request = False
    for key, value in _members(head):
        if key == "id":
            ids.append(value)
        elif key == "method":
            request = value.startswith(b'"')
        elif key in ("result", "error"):
            return None
    if not request:
        return None
    if not ids and tail and (match := _TRAILING_ID.search(tail)) is not None:
        ids.append(match.group(1))
    if len(ids) != 1:
        return None
    try:
        value = msgspec.json.decode(ids[0])
    except msgspec.DecodeError:
        return None  # invalid bytes or a lone surrogate in the id itself
    return value if valid_id(value) else None


def _members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The top-level ``(key, raw value)`` members of the object ``data`` opens, up to the first break or its end.

    A number or literal counts only once a delimiter follows it (it may be cut
    short); a string or container once it is closed.
    """
    pos = _WS.match(data).end()  # type: ignore[union-attr]  # matches the empty string
    if data[pos : pos + 1] != b"{":
        return
    pos += 1
    while True:
        pos = _WS.match(data, pos).end()  # type: ignore[union-attr]
        key_token = _STRING.match(data, pos)
        if key_token is None:
            return
        try:
            key = msgspec.json.decode(key_token.group(), type=str)
        except msgspec.DecodeError:
            return
        pos = _WS.match(data, key_token.end()).end()  # type: ignore[union-attr]
        if data[pos : pos + 1] != b":":
            return
        start = _WS.match(data, pos + 1).end()  # type: ignore[union-attr]
        end = _value_end(data, start)
        if end is None:
            return
        pos = _WS.match(data, end).end()  # type: ignore[union-attr]
        after = data[pos : pos + 1]
        if after not in (b",", b"}") and not (after == b"" and data[start] in b'"{['):
            return
        yield key, data[start:end]
        if after != b",":
            return
        pos += 1


def _value_end(data: bytes, pos: int) -> int | None:
    """Where the JSON value at ``pos`` ends, if it ends in ``data``."""
    first = data[pos : pos + 1]
    if first == b'"':
        token = _STRING.match(data, pos)
        return None if token is None else token.end()
    if first not in (b"{", b"["):
        scalar = _SCALAR.match(data, pos)
        return None if scalar is None else scalar.end()
    # A container: brackets counted, strings skipped; no recursion, whatever the depth.
    expected: list[int] = []
    while (stop := _NESTING.search(data, pos)) is not None:
        char = data[stop.start()]
        if char == ord('"'):
            token = _STRING.match(data, stop.start())
            if token is None:
                return None
            pos = token.end()
            continue
        if char in _CLOSER:
            expected.append(_CLOSER[char])
        elif not expected or expected.pop() != char:
            return None
        pos = stop.end()
        if not expected:
            return pos
    return None
