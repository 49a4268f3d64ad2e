"""Frame buffers and reading in place (pure, no I/O): worker/protocol/frames.py's FrameDecoder.

A frame whose body has not all arrived gets a buffer of its own, and
``receive_buffer``/``received`` let a reader put bytes straight into it. These
tests hold both paths to the same answers as whole-stream decoding, at every
split point, for large frames across many reads, at the frame limit, at the
end of the stream, and with the caller reusing its buffers.
"""

from __future__ import annotations

import msgspec
import pytest

from tests.protocol.test_protocol import SAMPLE_MESSAGES, drain, frame
from xcsh_run.worker import protocol as p

STREAM = b"".join(p.encode_message(m) for m in SAMPLE_MESSAGES)
BIG = p.Response(id=1, result=p.encode_value({"blob": "x" * (3 * 2**20)}))


class Source:
    """A byte stream read ``step`` bytes at most at a time into whatever view it is given."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data = data
        self.pos = 0
        self.step = step
        self.views: list[int] = []  # the size of every view offered

    def read_into(self, view: memoryview) -> int:
        self.views.append(len(view))
        n = min(len(view), self.step, len(self.data) - self.pos)
        view[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


def read_all(decoder: p.FrameDecoder, source: Source, size: int = 1 << 16) -> list[p.Message]:
    """Read ``source`` to its end through receive_buffer/received, draining after every read."""
    out: list[p.Message] = []
    while not decoder.ended:
        view = decoder.receive_buffer(size)
        n = source.read_into(view)
        view.release()
        decoder.received(n)
        out.extend(drain(decoder))
    return out


# --- every split point -------------------------------------------------------------


@pytest.mark.parametrize("msg", SAMPLE_MESSAGES, ids=lambda m: type(m).__name__)
def test_a_frame_split_at_every_byte_decodes_the_same(msg: p.Message) -> None:
    data = p.encode_message(msg)
    for cut in range(len(data) + 1):
        decoder = p.FrameDecoder()
        got: list[p.Message] = []
        for piece in (data[:cut], data[cut:]):
            if piece:  # an empty piece would mean the end of the stream
                decoder.receive_data(piece)
            got.extend(drain(decoder))
        decoder.receive_data(b"")
        got.extend(drain(decoder))
        assert got == [msg], cut
        assert decoder.buffered == 0


def test_a_stream_split_in_two_at_every_byte_decodes_the_same() -> None:
    for cut in range(1, len(STREAM)):
        decoder = p.FrameDecoder()
        decoder.receive_data(STREAM[:cut])
        got = drain(decoder)
        decoder.receive_data(bytearray(STREAM[cut:]))
        got += drain(decoder)
        assert got == SAMPLE_MESSAGES, cut


@pytest.mark.parametrize("step", [1, 2, 3, 5, 8, 64, len(STREAM)])
def test_reading_in_place_decodes_the_same(step: int) -> None:
    assert read_all(p.FrameDecoder(), Source(STREAM, step), size=16) == SAMPLE_MESSAGES


def test_buffered_counts_a_frame_in_its_own_buffer() -> None:
    data = p.encode_message(SAMPLE_MESSAGES[0])
    decoder = p.FrameDecoder()
    decoder.receive_data(data[:10])
    assert decoder.next_message() is p.NEED_DATA  # the frame now has its own buffer
    assert decoder.buffered == 10
    decoder.receive_data(data[10:] + data[:2])
    assert decoder.buffered == len(data) + 2
    assert decoder.next_message() == SAMPLE_MESSAGES[0]
    assert decoder.buffered == 2


# --- large frames --------------------------------------------------------------------


@pytest.mark.parametrize("step", [4096, 65536 + 1, 1 << 20])
def test_a_large_frame_across_many_reads_lands_in_place(step: int) -> None:
    data = p.encode_message(BIG) + p.encode_message(SAMPLE_MESSAGES[0])
    source = Source(data, step)
    got = read_all(p.FrameDecoder(), source, size=65536)
    assert got == [BIG, SAMPLE_MESSAGES[0]]
    # Once a sixteenth of the frame has arrived, reads go into its own buffer
    # (views larger than the scratch) until less than a scratch is missing.
    direct = [v for v in source.views if v > 65536]
    assert direct and direct == sorted(direct, reverse=True)
    assert len(direct) >= (len(data) - len(data) // 16 - 2 * 65536 - step) // step


def test_a_large_frame_across_many_chunks_is_not_regrown() -> None:
    data = p.encode_message(BIG)
    decoder = p.FrameDecoder()
    first = len(data) // 16 + p.HEADER_BYTES
    decoder.receive_data(data[:first])
    assert decoder.next_message() is p.NEED_DATA
    frame_buffer = decoder._frame
    assert frame_buffer is not None and len(frame_buffer) == len(data) - p.HEADER_BYTES
    for i in range(first, len(data), 65536):
        decoder.receive_data(memoryview(data)[i : i + 65536])
        assert decoder._frame is frame_buffer or decoder._frame is None
    body = decoder.next_body()
    assert body is frame_buffer  # decoded from where it was filled, no copy
    assert bytes(body) == data[p.HEADER_BYTES :]


def test_a_large_announced_size_is_trusted_only_as_its_bytes_arrive() -> None:
    decoder = p.FrameDecoder()
    announced = 32 * 2**20
    decoder.receive_data(announced.to_bytes(4, "big") + b"x" * 1000)
    assert decoder.next_message() is p.NEED_DATA
    assert decoder._frame is None  # a lie would cost only the bytes sent with it
    decoder.receive_data(b"x" * (announced // 16 - 1000 - 1))
    assert decoder.next_message() is p.NEED_DATA
    assert decoder._frame is None
    decoder.receive_data(b"x")
    assert decoder.next_message() is p.NEED_DATA
    assert decoder._frame is not None and decoder._filled == announced // 16
    assert decoder.buffered == p.HEADER_BYTES + announced // 16


def test_a_frame_up_to_a_mebibyte_gets_its_buffer_with_its_header() -> None:
    decoder = p.FrameDecoder()
    decoder.receive_data((2**20).to_bytes(4, "big"))
    assert decoder.next_message() is p.NEED_DATA
    assert decoder._frame is not None and len(decoder._frame) == 2**20


def test_a_reused_chunk_buffer_does_not_change_what_was_received() -> None:
    data = p.encode_message(BIG) + STREAM
    chunk = bytearray(10_000)
    decoder = p.FrameDecoder()
    got: list[p.Message] = []
    for i in range(0, len(data), len(chunk)):
        piece = data[i : i + len(chunk)]
        chunk[: len(piece)] = piece
        decoder.receive_data(memoryview(chunk)[: len(piece)])
        got.extend(drain(decoder))
        chunk[:] = b"\xff" * len(chunk)  # the caller reuses its buffer
    assert got == [BIG, *SAMPLE_MESSAGES]


def test_raw_members_survive_later_reads_in_place() -> None:
    msgs = [p.Response(id=i, result=p.encode_value(list(range(i * 500)))) for i in range(12)]
    data = b"".join(p.encode_message(m) for m in msgs)
    assert read_all(p.FrameDecoder(), Source(data, 777), size=64) == msgs


# --- the limit -----------------------------------------------------------------------


def test_an_oversize_header_is_refused_before_anything_is_buffered_for_it() -> None:
    decoder = p.FrameDecoder(max_frame_bytes=1000)
    decoder.receive_data((1001).to_bytes(4, "big") + b"x" * 100)
    view = decoder.receive_buffer(64)
    assert len(view) == 64  # the scratch buffer, not one the size of the frame
    view.release()
    assert decoder._frame is None
    with pytest.raises(p.RemoteProtocolError, match="1000-byte limit"):
        decoder.next_message()
    with pytest.raises(p.RemoteProtocolError, match="1000-byte limit"):
        decoder.receive_buffer()


def test_a_frame_at_the_limit_is_read_in_place() -> None:
    body = msgspec.json.encode({"jsonrpc": "2.0", "method": "m", "params": "y" * 5000})
    decoder = p.FrameDecoder(max_frame_bytes=len(body))
    source = Source(frame(body), 1000)
    (msg,) = read_all(decoder, source, size=256)
    assert isinstance(msg, p.Notification) and msgspec.json.decode(msg.params) == "y" * 5000


# --- end of stream ---------------------------------------------------------------------


def test_the_end_inside_a_frame_buffer_is_a_protocol_error() -> None:
    data = p.encode_message(BIG)
    decoder = p.FrameDecoder()
    with pytest.raises(p.RemoteProtocolError, match=f"inside a frame \\(99996 of {len(data) - 4} bytes\\)"):
        read_all(decoder, Source(data[:100_000], 30_000))


def test_reading_after_the_end_is_a_usage_error() -> None:
    decoder = p.FrameDecoder()
    decoder.received(0)
    assert decoder.ended
    with pytest.raises(RuntimeError):
        decoder.receive_buffer()


# --- the connection's view of it -------------------------------------------------------------


def test_a_connection_reads_in_place() -> None:
    host, worker = p.Connection(p.Role.HOST), p.Connection(p.Role.WORKER)
    init = p.InitializeParams(protocol_version=p.PROTOCOL_VERSION, host_pid=1, cwd="/")
    req_id, data = host.send_request(p.INITIALIZE, init)
    worker.receive_data(data)
    request = worker.next_event()
    assert isinstance(request, p.RequestReceived)
    reply = worker.send_result(request.id, p.InitializeResult(protocol_version=1, pid=2))
    source = Source(reply, 7)
    while not isinstance(event := host.next_event(), p.ResultReceived):
        assert event is p.NEED_DATA
        view = host.receive_buffer(16)
        n = source.read_into(view)
        view.release()
        host.received(n)
    assert event.id == req_id and event.result == p.InitializeResult(protocol_version=1, pid=2)
    host.received(0)
    assert isinstance(host.next_event(), p.ConnectionClosed)
    host.received(0)  # a second end is harmless, as with receive_data(b"")
    with pytest.raises(p.LocalProtocolError):
        host.receive_buffer()
    with pytest.raises(p.LocalProtocolError):
        host.received(1)
