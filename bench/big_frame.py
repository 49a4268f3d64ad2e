"""A 10 MiB result through the protocol code alone, in one process: encode, then decode, vs the msgspec floor.

Usage: python -m bench.big_frame [--reps N]

No processes and no pipe: what the worker's Connection costs to frame one
10 MiB ``CallResult`` and what the host's costs to turn 1 MiB reads of it
into a ``ResultReceived``, next to the floor (``encode_into`` a bytearray;
reads into a preallocated ``bytearray(n)``; one typed decode). CPU time per
call is the minimum over ``--reps``; the tracemalloc peak is one call's,
above what existed before it (the decoded 10 MiB string is part of it).
Minor page faults per call are counted too: on a loaded VM they are most of
what a large buffer costs.
"""

from __future__ import annotations

import argparse
import gc
import resource
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec

from xcsh_run.worker import protocol as p

TEXT = "x" * (10 * 2**20)
RESULT = p.CallResult(content=[{"type": "text", "text": TEXT}], details=None)
CHUNK = 1 << 20
_ENCODER = msgspec.json.Encoder()


class _Resp(msgspec.Struct):
    id: int
    result: p.CallResult
    jsonrpc: str = "2.0"


_FLOOR_DECODER = msgspec.json.Decoder(_Resp)


def _pair() -> tuple[p.Connection, p.Connection]:
    host, worker = p.Connection(p.Role.HOST), p.Connection(p.Role.WORKER)
    init = p.InitializeParams(protocol_version=p.PROTOCOL_VERSION, host_pid=1, cwd="/")
    steps: list[tuple[p.Method[Any, Any], Any, Any]] = [
        (p.INITIALIZE, init, p.InitializeResult(protocol_version=1, pid=2)),
        (p.LOAD, p.LoadParams(path="/t.py"), p.LoadResult(tools=[])),
    ]
    for method, params, result in steps:
        _, data = host.send_request(method, params)
        worker.receive_data(data)
        request = worker.next_event()
        assert isinstance(request, p.RequestReceived)
        host.receive_data(worker.send_result(request.id, result))
        host.next_event()
    return host, worker


HOST, WORKER = _pair()  # for decoding
E_HOST, E_WORKER = _pair()  # for encoding
CALL = p.CallParams(call_id="c", tool="big", arguments=msgspec.Raw(b"{}"))


# --- encoding -------------------------------------------------------------------------------


def encode_floor() -> object:
    buf = bytearray(p.HEADER_BYTES)
    _ENCODER.encode_into(_Resp(1, RESULT), buf, p.HEADER_BYTES)
    buf[: p.HEADER_BYTES] = (len(buf) - p.HEADER_BYTES).to_bytes(p.HEADER_BYTES, "big")
    return buf


def _encode_with(outcome: Callable[[], Any]) -> Callable[[], object]:
    def run() -> object:
        _, data = E_HOST.send_request(p.CALL, CALL)
        E_WORKER.receive_data(data)
        request = E_WORKER.next_event()
        assert isinstance(request, p.RequestReceived)
        frame = E_WORKER.send_result(request.id, outcome())
        E_HOST.abandon(request.id)
        return frame

    return run


# --- decoding -------------------------------------------------------------------------------

# One frame, built once: each call patches its two-digit request id in place,
# so that no 10 MiB allocation outside the code measured disturbs the heap.
while HOST.send_request(p.CALL, CALL)[0] < 9:
    pass
for _rid in HOST.outstanding:
    HOST.abandon(_rid)
FRAME = bytearray(p.encode_message(p.Response(id=10, result=msgspec.Raw(msgspec.json.encode(RESULT)))))


def _next_frame() -> memoryview:
    req_id, _ = HOST.send_request(p.CALL, CALL)
    if not 10 <= req_id <= 99:
        raise RuntimeError("run fewer reps: the frame's id has two digits")
    FRAME[p.HEADER_BYTES + 6 : p.HEADER_BYTES + 8] = b"%d" % req_id
    return memoryview(FRAME)


def decode_floor() -> object:
    src = _next_frame()[p.HEADER_BYTES :]
    HOST.abandon(HOST.outstanding[-1])
    into = bytearray(len(src))
    with memoryview(into) as view:
        for i in range(0, len(src), CHUNK):
            view[i : i + CHUNK] = src[i : i + CHUNK]  # readv into a preallocated frame
    return _FLOOR_DECODER.decode(into)


def decode_chunks() -> object:
    """os.read(1 MiB) -> a new bytes object -> receive_data, draining after each read (the host today)."""
    src = _next_frame()
    for i in range(0, len(src), CHUNK):
        HOST.receive_data(bytes(src[i : i + CHUNK]))
        if not isinstance(event := HOST.next_event(), p.NeedData):
            return event
    raise AssertionError("no answer")


def decode_in_place() -> object:
    """receive_buffer -> os.readv into it (here a copy of at most 1 MiB) -> received."""
    src, pos = _next_frame(), 0
    while True:
        view = HOST.receive_buffer(CHUNK)  # type: ignore[attr-defined]
        n = min(len(view), CHUNK, len(src) - pos)
        view[:n] = src[pos : pos + n]
        view.release()
        HOST.received(n)  # type: ignore[attr-defined]
        pos += n
        if not isinstance(event := HOST.next_event(), p.NeedData):
            return event


def measure(label: str, fn: Callable[[], object], reps: int) -> None:
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(reps):
        start = time.process_time()
        out = fn()
        times.append(time.process_time() - start)
        del out
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    out = fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    del out
    cpu = min(times) * 1e3
    print(f"{label:62s} cpu {cpu:6.2f} ms  faults {faults / reps:6.0f}  tracemalloc peak {peak / 2**20:5.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    reps = min(args.reps, 28)  # the decoding ids stay two digits
    measure("encode: floor (encode_into a bytearray)", encode_floor, reps)
    measure("encode: worker result pre-encoded to Raw, then framed", _encode_with(lambda: p.encode_value(RESULT)), reps)
    measure("encode: worker result framed directly (send_result)", _encode_with(lambda: RESULT), reps)
    measure("decode: floor (reads into bytearray(n), one typed decode)", decode_floor, reps)
    measure("decode: Connection, 1 MiB chunks via receive_data", decode_chunks, reps)
    if hasattr(HOST, "receive_buffer"):
        measure("decode: Connection, read in place (receive_buffer)", decode_in_place, reps)


if __name__ == "__main__":
    main()
