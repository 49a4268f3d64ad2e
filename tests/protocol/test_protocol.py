"""Protocol tests (pure, no I/O).

These drive ``xcsh_run.worker.protocol`` directly: message round trips, the framing
rules, and the guarantee that :class:`FrameDecoder` turns every kind of bad
input into :class:`RemoteProtocolError` (and then stays failed).
"""

from __future__ import annotations

import msgspec
import pytest

from xcsh_run.worker import protocol as p

# --- helpers -------------------------------------------------------------------


def frame(body: bytes) -> bytes:
    """Wrap a raw body in a length prefix, bypassing ``encode_message``."""
    return len(body).to_bytes(p.HEADER_BYTES, "big") + body


def drain(decoder: p.FrameDecoder) -> list[p.Message]:
    """Every message currently available from ``decoder``."""
    out = []
    while (msg := decoder.next_message()) is not p.NEED_DATA:
        out.append(msg)
    return out


def decode_all(data: bytes, *, chunk: int | None = None, eof: bool = True) -> list[p.Message]:
    """Feed ``data`` (whole, or in ``chunk``-sized pieces) and collect the messages."""
    decoder = p.FrameDecoder()
    out: list[p.Message] = []
    step = chunk or max(len(data), 1)
    for i in range(0, len(data), step):
        decoder.receive_data(data[i : i + step])
        out.extend(drain(decoder))
    if eof:
        decoder.receive_data(b"")
        out.extend(drain(decoder))
    return out


SAMPLE_MESSAGES: list[p.Message] = [
    p.Request(id=1, method="call", params=p.encode_value({"call_id": "c1", "tool": "t", "arguments": {}})),
    p.Request(id="abc", method="initialize"),
    p.Notification(method="update", params=p.encode_value({"call_id": "c1", "partial": {"content": []}})),
    p.Notification(method="$/cancel"),
    p.Response(id=7, result=p.encode_value({"tools": [], "entry_errors": []})),
    p.Response(id="x", result=p.encode_value(None)),
    p.ErrorResponse(id=3, error=p.ErrorObject(code=p.ErrorCode.TOOL_ERROR, message="boom", data={"kind": "tool"})),
    p.ErrorResponse(id=None, error=p.ErrorObject(code=p.ErrorCode.PARSE_ERROR, message="bad")),
]


# --- round trips -----------------------------------------------------------------


@pytest.mark.parametrize("msg", SAMPLE_MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip_each_message_type(msg: p.Message) -> None:
    data = p.encode_message(msg)
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    assert p.decode_message(data[4:]) == msg
    assert decode_all(data) == [msg]


def test_raw_members_compare_by_value() -> None:
    # The round-trip assertions above rely on this.
    assert msgspec.Raw(b"[1,2]") == msgspec.Raw(b"[1,2]")
    assert msgspec.Raw(b"[1,2]") != msgspec.Raw(b"[1, 2]")


def test_round_trip_payload_values() -> None:
    value = {"a": [1, 2.5, None, True, "é\u2603"], "b": {"nested": -(2**63)}}
    msg = p.Request(id=42, method="load", params=p.encode_value(value))
    (decoded,) = decode_all(p.encode_message(msg))
    assert isinstance(decoded, p.Request)
    assert msgspec.json.decode(decoded.params) == value
    assert bytes(decoded.params) == bytes(msg.params)


def test_default_params_is_empty_object() -> None:
    (decoded,) = decode_all(frame(b'{"jsonrpc":"2.0","id":1,"method":"shutdown"}'))
    assert decoded == p.Request(id=1, method="shutdown")
    assert msgspec.json.decode(decoded.params) == {}


def test_typed_payload_round_trip() -> None:
    params = p.InitializeParams(protocol_version=p.PROTOCOL_VERSION, host_pid=123, cwd="/tmp")
    msg = p.Request(id=1, method=p.M_INITIALIZE, params=p.encode_value(params))
    (decoded,) = decode_all(p.encode_message(msg))
    assert isinstance(decoded, p.Request)
    assert msgspec.json.decode(decoded.params, type=p.InitializeParams) == params


def test_notification_has_no_id() -> None:
    msg = p.Notification(method="update", params=p.encode_value({"x": 1}))
    data = p.encode_message(msg)
    assert "id" not in msgspec.json.decode(data[4:])
    assert not hasattr(msg, "id")
    (decoded,) = decode_all(data)
    assert isinstance(decoded, p.Notification)
    assert not hasattr(decoded, "id")


def test_message_without_id_is_a_notification() -> None:
    (decoded,) = decode_all(frame(b'{"jsonrpc":"2.0","method":"$/cancel","params":{"call_id":"a","reason":"r"}}'))
    assert type(decoded) is p.Notification


def test_error_response_with_null_id() -> None:
    (decoded,) = decode_all(frame(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}'))
    assert decoded == p.ErrorResponse(id=None, error=p.ErrorObject(code=-32700, message="x"))


# --- incremental decoding -----------------------------------------------------------


def test_byte_by_byte_equals_whole() -> None:
    data = b"".join(p.encode_message(m) for m in SAMPLE_MESSAGES)
    whole = decode_all(data)
    assert whole == SAMPLE_MESSAGES
    assert decode_all(data, chunk=1) == whole
    assert decode_all(data, chunk=3) == whole
    assert decode_all(data, chunk=7) == whole


def test_several_frames_in_one_chunk() -> None:
    decoder = p.FrameDecoder()
    decoder.receive_data(b"".join(p.encode_message(m) for m in SAMPLE_MESSAGES))
    assert drain(decoder) == SAMPLE_MESSAGES
    assert decoder.buffered == 0


def test_frame_and_a_half_in_one_chunk() -> None:
    a, b = (p.encode_message(m) for m in SAMPLE_MESSAGES[:2])
    decoder = p.FrameDecoder()
    decoder.receive_data(a + b[:5])
    assert decoder.next_message() == SAMPLE_MESSAGES[0]
    assert decoder.next_message() is p.NEED_DATA
    assert decoder.buffered == 5
    decoder.receive_data(b[5:])
    assert decoder.next_message() == SAMPLE_MESSAGES[1]
    assert decoder.next_message() is p.NEED_DATA


def test_raw_survives_later_data() -> None:
    # A decoded Raw must not alias memory the decoder later mutates.
    msgs = [p.Response(id=i, result=p.encode_value(list(range(i * 10)))) for i in range(20)]
    data = b"".join(p.encode_message(m) for m in msgs)
    decoder = p.FrameDecoder()
    got: list[p.Message] = []
    for i in range(0, len(data), 13):
        decoder.receive_data(data[i : i + 13])
        got.extend(drain(decoder))
    assert got == msgs


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_need_data_on_partial_header(n: int) -> None:
    data = p.encode_message(SAMPLE_MESSAGES[0])
    decoder = p.FrameDecoder()
    if n:
        decoder.receive_data(data[:n])
    assert decoder.next_message() is p.NEED_DATA
    assert decoder.next_message() is p.NEED_DATA
    decoder.receive_data(data[n:])
    assert decoder.next_message() == SAMPLE_MESSAGES[0]


def test_need_data_on_partial_body() -> None:
    data = p.encode_message(SAMPLE_MESSAGES[0])
    decoder = p.FrameDecoder()
    decoder.receive_data(data[:-1])
    assert decoder.next_message() is p.NEED_DATA
    decoder.receive_data(data[-1:])
    assert decoder.next_message() == SAMPLE_MESSAGES[0]
    assert decoder.next_message() is p.NEED_DATA


def test_clean_eof_between_frames() -> None:
    decoder = p.FrameDecoder()
    decoder.receive_data(p.encode_message(SAMPLE_MESSAGES[0]))
    decoder.receive_data(b"")
    assert decoder.next_message() == SAMPLE_MESSAGES[0]
    assert decoder.next_message() is p.NEED_DATA
    assert decoder.next_message() is p.NEED_DATA


def test_large_frame_in_chunks() -> None:
    blob = "x" * (5 * 1024 * 1024)
    msg = p.Response(id=1, result=p.encode_value({"blob": blob}))
    data = p.encode_message(msg)
    assert len(data) > 5 * 1024 * 1024
    decoder = p.FrameDecoder()
    got: list[p.Message] = []
    step = 65536
    for i in range(0, len(data), step):
        decoder.receive_data(data[i : i + step])
        got.extend(drain(decoder))
        if i + step < len(data):
            assert not got
    assert len(got) == 1
    (decoded,) = got
    assert isinstance(decoded, p.Response)
    assert decoded.id == 1
    assert bytes(decoded.result) == bytes(msg.result)
    assert msgspec.json.decode(decoded.result) == {"blob": blob}
    assert decoder.buffered == 0


def test_large_frame_followed_by_small_one() -> None:
    big = p.Response(id=1, result=p.encode_value("y" * (1024 * 1024)))
    small = p.Notification(method="update")
    data = p.encode_message(big) + p.encode_message(small)
    assert decode_all(data, chunk=4096) == [big, small]


# --- limits ------------------------------------------------------------------------------


def test_oversized_length_rejected_at_header() -> None:
    decoder = p.FrameDecoder(max_frame_bytes=100)
    decoder.receive_data((101).to_bytes(4, "big"))  # header only, no body at all
    with pytest.raises(p.RemoteProtocolError, match=r"\b100-byte limit"):
        decoder.next_message()


def test_oversized_length_rejected_with_default_limit() -> None:
    decoder = p.FrameDecoder()
    decoder.receive_data(b"\xff\xff\xff\xff")
    with pytest.raises(p.RemoteProtocolError, match=str(p.DEFAULT_MAX_FRAME_BYTES)):
        decoder.next_message()


def test_oversized_length_rejected_header_split() -> None:
    decoder = p.FrameDecoder(max_frame_bytes=10)
    header = (11).to_bytes(4, "big")
    for i in range(3):
        decoder.receive_data(header[i : i + 1])
        assert decoder.next_message() is p.NEED_DATA
    decoder.receive_data(header[3:])
    with pytest.raises(p.RemoteProtocolError, match="10"):
        decoder.next_message()


def test_frame_exactly_at_limit_accepted() -> None:
    body = b'{"jsonrpc":"2.0","method":"m"}'
    decoder = p.FrameDecoder(max_frame_bytes=len(body))
    decoder.receive_data(frame(body))
    assert decoder.next_message() == p.Notification(method="m")


def test_encode_over_limit_raises_local_error() -> None:
    msg = p.Response(id=1, result=p.encode_value("z" * 200))
    with pytest.raises(p.LocalProtocolError, match="100-byte"):
        p.encode_message(msg, max_frame_bytes=100)
    body_len = len(p.encode_message(msg)) - 4
    assert p.encode_message(msg, max_frame_bytes=body_len)  # exactly at the limit is fine
    with pytest.raises(p.LocalProtocolError):
        p.encode_message(msg, max_frame_bytes=body_len - 1)


@pytest.mark.parametrize("limit", [0, -1, 2**32])
def test_bad_max_frame_bytes(limit: int) -> None:
    with pytest.raises(ValueError, match="max_frame_bytes"):
        p.FrameDecoder(limit)


def test_limit_bounds_accepted() -> None:
    assert p.FrameDecoder(1).max_frame_bytes == 1
    assert p.FrameDecoder(2**32 - 1).max_frame_bytes == 2**32 - 1


# --- end of stream -------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3])
def test_eof_mid_header(n: int) -> None:
    decoder = p.FrameDecoder()
    decoder.receive_data(p.encode_message(SAMPLE_MESSAGES[0])[:n])
    decoder.receive_data(b"")
    with pytest.raises(p.RemoteProtocolError, match="header"):
        decoder.next_message()


@pytest.mark.parametrize("cut", [4, 5, -1])
def test_eof_mid_body(cut: int) -> None:
    decoder = p.FrameDecoder()
    decoder.receive_data(p.encode_message(SAMPLE_MESSAGES[0])[:cut])
    decoder.receive_data(b"")
    with pytest.raises(p.RemoteProtocolError, match="inside a frame"):
        decoder.next_message()


def test_eof_after_complete_frame_then_partial() -> None:
    data = p.encode_message(SAMPLE_MESSAGES[0])
    decoder = p.FrameDecoder()
    decoder.receive_data(data + data[:6])
    decoder.receive_data(b"")
    assert decoder.next_message() == SAMPLE_MESSAGES[0]
    with pytest.raises(p.RemoteProtocolError):
        decoder.next_message()


def test_receive_after_eof_is_a_usage_error() -> None:
    decoder = p.FrameDecoder()
    decoder.receive_data(b"")
    with pytest.raises(RuntimeError):
        decoder.receive_data(b"x")


# --- failure is sticky -------------------------------------------------------------------


def test_failed_decoder_keeps_raising_same_error() -> None:
    decoder = p.FrameDecoder()
    good = p.encode_message(SAMPLE_MESSAGES[0])
    decoder.receive_data(frame(b"not json") + good)
    with pytest.raises(p.RemoteProtocolError) as first:
        decoder.next_message()
    for _ in range(3):
        with pytest.raises(p.RemoteProtocolError) as again:
            decoder.next_message()
        assert again.value is first.value
    with pytest.raises(p.RemoteProtocolError) as on_receive:
        decoder.receive_data(good)
    assert on_receive.value is first.value
    with pytest.raises(p.RemoteProtocolError) as on_eof:
        decoder.receive_data(b"")
    assert on_eof.value is first.value


def test_oversize_failure_is_sticky() -> None:
    decoder = p.FrameDecoder(max_frame_bytes=8)
    decoder.receive_data((9).to_bytes(4, "big"))
    with pytest.raises(p.RemoteProtocolError) as first:
        decoder.next_message()
    with pytest.raises(p.RemoteProtocolError) as again:
        decoder.next_message()
    assert again.value is first.value


# --- garbage bodies ----------------------------------------------------------------------

GARBAGE_BODIES = {
    "empty": b"",
    "invalid-utf8": b'{"jsonrpc":"2.0","method":"\xff\xfe"}',
    "invalid-utf8-bare": b"\xc3\x28",
    "not-json": b"hello",
    "truncated-json": b'{"jsonrpc":"2.0","method":',
    "trailing-garbage": b'{"jsonrpc":"2.0","method":"m"} x',
    "json-array": b'[{"jsonrpc":"2.0","method":"m"}]',
    "json-string": b'"2.0"',
    "json-null": b"null",
    "json-number": b"1",
    "missing-jsonrpc": b'{"id":1,"method":"m"}',
    "wrong-jsonrpc": b'{"jsonrpc":"1.0","id":1,"method":"m"}',
    "numeric-jsonrpc": b'{"jsonrpc":2.0,"id":1,"method":"m"}',
    "result-and-error": b'{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}',
    "method-and-result": b'{"jsonrpc":"2.0","id":1,"method":"m","result":1}',
    "method-and-error": b'{"jsonrpc":"2.0","id":1,"method":"m","error":{"code":1,"message":"m"}}',
    "params-without-method": b'{"jsonrpc":"2.0","id":1,"params":{}}',
    "params-with-result": b'{"jsonrpc":"2.0","id":1,"params":{},"result":1}',
    "unknown-field": b'{"jsonrpc":"2.0","id":1,"method":"m","extra":1}',
    "null-id-request": b'{"jsonrpc":"2.0","id":null,"method":"m"}',
    "float-id": b'{"jsonrpc":"2.0","id":1.5,"method":"m"}',
    "object-id": b'{"jsonrpc":"2.0","id":{},"method":"m"}',
    "non-string-method": b'{"jsonrpc":"2.0","id":1,"method":5}',
    "result-without-id": b'{"jsonrpc":"2.0","result":1}',
    "result-null-id": b'{"jsonrpc":"2.0","id":null,"result":1}',
    "error-without-id": b'{"jsonrpc":"2.0","error":{"code":1,"message":"m"}}',
    "error-not-object": b'{"jsonrpc":"2.0","id":1,"error":"boom"}',
    "error-missing-code": b'{"jsonrpc":"2.0","id":1,"error":{"message":"m"}}',
    "nothing": b'{"jsonrpc":"2.0","id":1}',
    "deeply-nested": b'{"jsonrpc":"2.0","method":"m","params":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "lone-surrogate-escape": b'{"jsonrpc":"2.0","method":"\\ud800"}',
}


@pytest.mark.parametrize("body", GARBAGE_BODIES.values(), ids=GARBAGE_BODIES.keys())
def test_garbage_body_raises_remote_error(body: bytes) -> None:
    with pytest.raises(p.RemoteProtocolError):
        p.decode_message(body)
    decoder = p.FrameDecoder()
    decoder.receive_data(frame(body))
    with pytest.raises(p.RemoteProtocolError):
        decoder.next_message()


def test_garbage_after_good_frame() -> None:
    decoder = p.FrameDecoder()
    decoder.receive_data(p.encode_message(SAMPLE_MESSAGES[0]) + frame(b"[]"))
    assert decoder.next_message() == SAMPLE_MESSAGES[0]
    with pytest.raises(p.RemoteProtocolError):
        decoder.next_message()


# --- errors -------------------------------------------------------------------------------


def test_protocol_error_is_abstract() -> None:
    with pytest.raises(TypeError):
        p.ProtocolError("x")
    assert isinstance(p.LocalProtocolError("x"), p.ProtocolError)
    assert isinstance(p.RemoteProtocolError("x"), p.ProtocolError)
    assert not issubclass(p.LocalProtocolError, p.RemoteProtocolError)
    assert not issubclass(p.RemoteProtocolError, p.LocalProtocolError)


def test_encode_unserialisable_value() -> None:
    with pytest.raises((TypeError, msgspec.EncodeError)):
        p.encode_value(object())
