"""Property tests for the wire protocol (``xcsh_run.worker.protocol``).

Invariants checked, for any input Hypothesis can build:

(a) Totality: any bytes at all (random, or valid frames corrupted, truncated,
    spliced with random bodies), split into any chunks, make
    :class:`FrameDecoder` return messages or raise :class:`RemoteProtocolError`,
    never any other exception; after raising it keeps raising the same error;
    and it never holds more than one partial frame (``buffered`` stays below
    ``HEADER_BYTES + max_frame_bytes`` once drained).
(b) Chunking does not matter: feeding the stream whole or in random chunks gives
    the same message sequence and the same error (or none); so does reading it
    in place (``receive_buffer``/``received``) with random read sizes.
(c) Round trip: encoding generated messages and decoding them (in one piece or
    in chunks) gives back equal messages, and ``params``/``result``/``error.data``
    decode to the original JSON values.
(d) The frame limit holds: no message whose body is larger than
    ``max_frame_bytes`` is ever returned; the decoder agrees with a tiny
    reference model of the framing rules.

Profiles (``dev``/``ci``/``long``) live in ``fuzz/conftest.py``.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import msgspec
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from xcsh_run.worker import protocol as p

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

# --- strategies -----------------------------------------------------------------


def json_strategy(max_leaves: int) -> st.SearchStrategy[Any]:
    """JSON values: null, bool, int64, finite float, text, and lists/objects of them."""
    return st.recursive(
        st.none() | st.booleans() | INT64 | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
        lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
        max_leaves=max_leaves,
    )


json_values = json_strategy(20)  # for round trips
small_json = json_strategy(5)  # inside byte streams, where generation time adds up

ids: st.SearchStrategy[int | str] = INT64 | st.text(max_size=20)
methods = st.sampled_from([p.M_INITIALIZE, p.M_LOAD, p.M_CALL, p.M_SHUTDOWN, p.N_UPDATE, p.N_CANCEL]) | st.text(
    max_size=20
)


def message_strategy(values: st.SearchStrategy[Any]) -> st.SearchStrategy[p.Message]:
    raws = values.map(p.encode_value)
    error_objects = st.builds(
        p.ErrorObject,
        code=st.sampled_from(list(p.ErrorCode)).map(int) | INT64,
        message=st.text(max_size=30),
        data=values,
    )
    return st.one_of(
        st.builds(p.Request, id=ids, method=methods, params=raws),
        st.builds(p.Request, id=ids, method=methods),  # default params
        st.builds(p.Notification, method=methods, params=raws),
        st.builds(p.Notification, method=methods),
        st.builds(p.Response, id=ids, result=raws),
        st.builds(p.ErrorResponse, id=ids | st.none(), error=error_objects),
    )


messages = message_strategy(json_values)
small_messages = message_strategy(small_json)

ENVELOPE_KEYS = ["jsonrpc", "id", "method", "params", "result", "error", "extra"]
# JSON objects shaped roughly like messages, so classification paths get hit.
envelope_bodies = st.dictionaries(
    st.sampled_from(ENVELOPE_KEYS),
    st.one_of(
        st.just("2.0"),
        small_json,
        st.fixed_dictionaries({"code": INT64, "message": st.text(max_size=5)}),
    ),
    max_size=5,
).map(msgspec.json.encode)


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(p.HEADER_BYTES, "big") + body


@st.composite
def corrupted_streams(draw: st.DrawFn) -> bytes:
    """Valid frames (and frames around odd bodies) with random damage applied."""
    parts = draw(
        st.lists(
            small_messages.map(p.encode_message) | envelope_bodies.map(frame) | st.binary(max_size=40).map(frame),
            max_size=5,
        )
    )
    data = bytearray(b"".join(parts))
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["flip", "truncate", "insert", "delete", "length"]),
                st.integers(min_value=0, max_value=2**16),
                st.binary(min_size=1, max_size=8),
            ),
            max_size=4,
        )
    )
    for op, where, junk in ops:
        i = where % (len(data) + 1)
        if op == "flip" and data:
            i %= len(data)
            data[i] ^= junk[0] or 0xFF
        elif op == "truncate":
            del data[i:]
        elif op == "insert":
            data[i:i] = junk
        elif op == "delete":
            del data[i : i + len(junk)]
        elif op == "length":
            # Overwrite 4 bytes with a random (often huge) length prefix.
            data[i : i + 4] = (junk * 4)[:4]
    return bytes(data)


streams = st.one_of(
    st.binary(max_size=300),
    corrupted_streams(),
    st.lists(envelope_bodies, max_size=5).map(lambda bodies: b"".join(frame(b) for b in bodies)),
)


@st.composite
def chunkings(draw: st.DrawFn, data: bytes) -> list[bytes | bytearray | memoryview]:
    """``data`` split at random points into non-empty chunks of random buffer types."""
    cuts: list[int] = []
    if len(data) > 1:
        cuts = sorted(draw(st.sets(st.integers(min_value=1, max_value=len(data) - 1), max_size=12)))
    bounds = [0, *cuts, len(data)]
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    kind = draw(st.sampled_from([bytes, bytearray, memoryview]))
    return [kind(piece) for piece in pieces]


# --- driver and reference model ---------------------------------------------------


def feed(
    chunks: list[bytes | bytearray | memoryview], max_frame_bytes: int = p.DEFAULT_MAX_FRAME_BYTES
) -> tuple[list[p.Message], p.RemoteProtocolError | None]:
    """Feed ``chunks`` then EOF, draining after each; any non-protocol exception escapes."""
    decoder = p.FrameDecoder(max_frame_bytes)
    out: list[p.Message] = []
    failure: p.RemoteProtocolError | None = None
    try:
        for chunk in [*chunks, b""]:
            decoder.receive_data(chunk)
            while (msg := decoder.next_message()) is not p.NEED_DATA:
                assert isinstance(msg, p.Request | p.Notification | p.Response | p.ErrorResponse)
                out.append(msg)
            assert decoder.buffered < p.HEADER_BYTES + max_frame_bytes
    except p.RemoteProtocolError as exc:
        failure = exc
    if failure is not None:
        # Sticky: the same error again, from both entry points.
        with pytest.raises(p.RemoteProtocolError) as again:
            decoder.next_message()
        assert again.value is failure
        with pytest.raises(p.RemoteProtocolError) as again:
            decoder.receive_data(b"more")
        assert again.value is failure
    return out, failure


def feed_in_place(
    data: bytes, reads: list[int], size: int, max_frame_bytes: int = p.DEFAULT_MAX_FRAME_BYTES
) -> tuple[list[p.Message], p.RemoteProtocolError | None]:
    """Read ``data`` through receive_buffer/received, at most ``reads[i]`` bytes the i-th time, then the end."""
    decoder = p.FrameDecoder(max_frame_bytes)
    out: list[p.Message] = []
    pos, i = 0, 0
    try:
        while not decoder.ended:
            view = decoder.receive_buffer(size)
            assert len(view) >= 1
            n = min(len(view), reads[i % len(reads)], len(data) - pos)
            view[:n] = data[pos : pos + n]
            view.release()
            pos, i = pos + n, i + 1
            decoder.received(n)
            while (msg := decoder.next_message()) is not p.NEED_DATA:
                out.append(msg)
            assert decoder.buffered < p.HEADER_BYTES + max_frame_bytes + size
    except p.RemoteProtocolError as exc:
        return out, exc
    return out, None


def model(data: bytes, max_frame_bytes: int) -> tuple[list[p.Message], bool]:
    """Reference reading of Rule 1 over a complete stream: (messages, failed)."""
    out: list[p.Message] = []
    pos = 0
    while True:
        rest = len(data) - pos
        if rest < p.HEADER_BYTES:
            return out, rest > 0
        n = int.from_bytes(data[pos : pos + p.HEADER_BYTES], "big")
        if n > max_frame_bytes or rest - p.HEADER_BYTES < n:
            return out, True
        try:
            out.append(p.decode_message(data[pos + p.HEADER_BYTES : pos + p.HEADER_BYTES + n]))
        except p.RemoteProtocolError:
            return out, True
        pos += p.HEADER_BYTES + n


# --- (a) totality ---------------------------------------------------------------


@given(data=st.data(), stream=streams)
def test_decoder_is_total(data: st.DataObject, stream: bytes) -> None:
    msgs, err = feed(data.draw(chunkings(stream)))
    expected, failed = model(stream, p.DEFAULT_MAX_FRAME_BYTES)
    assert msgs == expected
    assert (err is not None) == failed
    event(f"messages before end: {min(len(msgs), 3)}{'+' if len(msgs) > 3 else ''}")
    event("clean end" if err is None else "error: " + re.sub(r"\d+", "N", str(err).split(":")[0]))


@given(body=st.binary(max_size=200) | envelope_bodies)
def test_decode_message_is_total(body: bytes) -> None:
    try:
        msg = p.decode_message(body)
    except p.RemoteProtocolError:
        return
    # Whatever was accepted must re-encode and decode to itself.
    assert p.decode_message(p.encode_message(msg)[p.HEADER_BYTES :]) == msg


# --- (b) chunking does not matter -------------------------------------------------


@given(data=st.data(), stream=streams, limit=st.integers(min_value=1, max_value=512) | st.just(2**32 - 1))
def test_chunking_does_not_matter(data: st.DataObject, stream: bytes, limit: int) -> None:
    whole_msgs, whole_err = feed([stream] if stream else [], limit)
    split_msgs, split_err = feed(data.draw(chunkings(stream)), limit)
    assert split_msgs == whole_msgs
    assert (split_err is None) == (whole_err is None)
    if whole_err is not None:
        assert str(split_err) == str(whole_err)


@given(
    stream=streams | st.lists(messages, max_size=5).map(lambda ms: b"".join(p.encode_message(m) for m in ms)),
    reads=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=8),
    size=st.integers(min_value=1, max_value=64),
    limit=st.integers(min_value=1, max_value=512) | st.just(2**32 - 1),
)
def test_reading_in_place_does_not_matter(stream: bytes, reads: list[int], size: int, limit: int) -> None:
    whole_msgs, whole_err = feed([stream] if stream else [], limit)
    msgs, err = feed_in_place(stream, reads, size, limit)
    assert msgs == whole_msgs
    assert str(err) == str(whole_err)


# --- (c) round trip ---------------------------------------------------------------


@given(msg=messages)
def test_round_trip_one(msg: p.Message) -> None:
    data = p.encode_message(msg)
    assert int.from_bytes(data[: p.HEADER_BYTES], "big") == len(data) - p.HEADER_BYTES
    decoded = p.decode_message(data[p.HEADER_BYTES :])
    assert decoded == msg
    assert type(decoded) is type(msg)


@given(value=json_values, id_=ids, method=methods)
def test_round_trip_values(value: Any, id_: int | str, method: str) -> None:
    sent = [
        p.Request(id=id_, method=method, params=p.encode_value(value)),
        p.Notification(method=method, params=p.encode_value(value)),
        p.Response(id=id_, result=p.encode_value(value)),
        p.ErrorResponse(id=id_, error=p.ErrorObject(code=-32000, message=method, data=value)),
    ]
    msgs, err = feed([b"".join(p.encode_message(m) for m in sent)])
    assert err is None
    req, note, resp, error = msgs
    assert isinstance(req, p.Request)
    assert isinstance(note, p.Notification)
    assert isinstance(resp, p.Response)
    assert isinstance(error, p.ErrorResponse)
    assert (req.id, req.method, resp.id, error.id, note.method) == (id_, method, id_, id_, method)
    assert msgspec.json.decode(req.params) == value
    assert msgspec.json.decode(note.params) == value
    assert msgspec.json.decode(resp.result) == value
    assert error.error.data == value


@given(data=st.data(), msgs=st.lists(messages, max_size=5))
def test_round_trip_stream_in_chunks(data: st.DataObject, msgs: list[p.Message]) -> None:
    stream = b"".join(p.encode_message(m) for m in msgs)
    got, err = feed(data.draw(chunkings(stream)))
    assert err is None
    assert got == msgs


# --- (d) the frame limit -------------------------------------------------------------

padded_messages = st.builds(
    p.Response,
    id=st.integers(min_value=0, max_value=10**6),
    result=st.integers(min_value=0, max_value=300).map(lambda k: p.encode_value("x" * k)),
) | st.builds(p.Notification, method=st.text(max_size=200))


@given(data=st.data(), msgs=st.lists(padded_messages, min_size=1, max_size=6), limit=st.integers(1, 320))
def test_frame_limit_respected(data: st.DataObject, msgs: list[p.Message], limit: int) -> None:
    frames = [p.encode_message(m) for m in msgs]
    stream = b"".join(frames)
    got, err = feed(data.draw(chunkings(stream)), limit)
    for m in got:
        # These bodies re-encode byte for byte, so this is the received body size.
        assert len(p.encode_message(m)) - p.HEADER_BYTES <= limit
    # Exactly the frames before the first oversized one come through.
    fitting = 0
    while fitting < len(frames) and len(frames[fitting]) - p.HEADER_BYTES <= limit:
        fitting += 1
    assert got == msgs[:fitting]
    assert (err is not None) == (fitting < len(frames))
    if err is not None:
        assert f"{limit}-byte limit" in str(err)


@given(data=st.data(), stream=streams, limit=st.integers(min_value=1, max_value=128))
def test_small_limit_matches_model(data: st.DataObject, stream: bytes, limit: int) -> None:
    got, err = feed(data.draw(chunkings(stream)), limit)
    expected, failed = model(stream, limit)
    assert got == expected
    assert (err is not None) == failed


@given(limit=st.integers(min_value=1, max_value=2**32 - 1), extra=st.integers(min_value=1, max_value=2**16))
def test_oversized_header_rejected_before_body(limit: int, extra: int) -> None:
    n = limit + extra
    assume(n <= 2**32 - 1)  # representable in the header
    decoder = p.FrameDecoder(limit)
    decoder.receive_data(n.to_bytes(p.HEADER_BYTES, "big"))  # the header alone, no body
    with pytest.raises(p.RemoteProtocolError, match=f"over the {limit}-byte limit"):
        decoder.next_message()
