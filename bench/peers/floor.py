"""The raw floors: msgspec JSON-RPC frames over os.pipe between a plain host and plain worker processes.

No framework on either side: blocking ``os.read``/``os.write`` of 4-byte
big-endian length-prefixed msgspec frames, typed decoders, one encode and one
decode per message. This is what any design that talks JSON-RPC over pipes
cannot beat, measured in the same run as everything else.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

import msgspec
import psutil

from bench._stats import now_us

# One source for the worker: run by ``python -c`` (exec'd workers) and exec'd
# into this process (so that a forked child can run the same loop).
WORKER_SRC = """
import os, signal, sys
import msgspec

class Req(msgspec.Struct):
    id: int
    method: str
    params: msgspec.Raw = msgspec.Raw(b"{}")
    jsonrpc: str = "2.0"

class Echo(msgspec.Struct):
    x: int

class Resp(msgspec.Struct):
    id: int
    result: object
    jsonrpc: str = "2.0"

_dec = msgspec.json.Decoder(Req)
_enc = msgspec.json.Encoder()
_big = []

def _read_exact(fd, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            return None
        got += k
    return buf

def _send(fd, obj):
    buf = bytearray(4)
    _enc.encode_into(obj, buf, 4)
    buf[:4] = (len(buf) - 4).to_bytes(4, "big")
    view = memoryview(buf)
    while view:
        view = view[os.write(fd, view):]

def serve(fd_in, fd_out):
    while True:
        head = _read_exact(fd_in, 4)
        if head is None:
            return
        req = _dec.decode(_read_exact(fd_in, int.from_bytes(head, "big")))
        if req.method == "echo":
            _send(fd_out, Resp(req.id, {"x": msgspec.json.decode(req.params, type=Echo).x}))
        elif req.method == "big":
            if not _big:
                _big.append("x" * (10 * 2**20))
            _send(fd_out, Resp(req.id, _big[0]))
        elif req.method == "busy":
            _send(fd_out, Resp(req.id, "started"))
            while True:
                pass
        elif req.method == "busy_term_raises":
            def _raise(signum, frame):
                raise SystemExit(128 + signum)
            signal.signal(signal.SIGTERM, _raise)
            _send(fd_out, Resp(req.id, "started"))
            while True:
                pass
"""
WORKER_MAIN = WORKER_SRC + "\nserve(int(sys.argv[1]), int(sys.argv[2]))\n"

_ns: dict[str, Any] = {"__name__": "floor_worker"}
exec(compile(WORKER_SRC, "<floor worker>", "exec", dont_inherit=True), _ns)

_F_SETPIPE_SZ = 1031
_F_GETPIPE_SZ = 1032


class _Req(msgspec.Struct):
    id: int
    method: str
    params: dict[str, int] = {}
    jsonrpc: str = "2.0"


class _EchoResp(msgspec.Struct):
    id: int
    result: dict[str, int]
    jsonrpc: str = "2.0"


class _BigResp(msgspec.Struct):
    id: int
    result: str
    jsonrpc: str = "2.0"


_ENC = msgspec.json.Encoder()
_ECHO_DEC = msgspec.json.Decoder(_EchoResp)
_BIG_DEC = msgspec.json.Decoder(_BigResp)


def _frame(req: _Req) -> bytes:
    body = _ENC.encode(req)
    return len(body).to_bytes(4, "big") + body


def _read_exact(fd: int, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise EOFError("worker closed its pipe")
        got += k
    return buf


def _read_frame(fd: int) -> bytearray:
    return _read_exact(fd, int.from_bytes(_read_exact(fd, 4), "big"))


class _Conn:
    """One exec'd floor worker on its own pipe pair."""

    def __init__(self) -> None:
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER_MAIN, str(to_r), str(from_w)], pass_fds=(to_r, from_w), close_fds=True
        )
        os.close(to_r)
        os.close(from_w)
        self.ids = 0

    def send(self, method: str, **params: int) -> None:
        self.ids += 1
        os.write(self.to_w, _frame(_Req(self.ids, method, params)))

    def echo(self, x: int) -> None:
        self.send("echo", x=x)
        if _ECHO_DEC.decode(_read_frame(self.from_r)).result["x"] != x:
            raise AssertionError("floor worker answered the wrong value")

    def close(self) -> None:
        os.close(self.to_w)
        self.proc.wait()
        os.close(self.from_r)


class Floor:
    """The raw floors (ops: warm, throughput, big, spawn, cancel, idle_rss)."""

    loop = "sync"

    def __enter__(self) -> Floor:
        self.conns = [_Conn(), _Conn()]
        for conn in self.conns:
            conn.echo(0)
        return self

    def __exit__(self, *exc: object) -> None:
        for conn in self.conns:
            conn.close()

    def op_warm(self, n: int) -> list[float]:
        conn = self.conns[0]
        for i in range(200):
            conn.echo(i)
        samples = []
        for i in range(n):
            start = now_us()
            conn.echo(i)
            samples.append(now_us() - start)
        return samples

    def op_throughput(self, n: int, window: int = 1) -> float:
        """Seconds for n echo calls over the 2 workers, ``window`` requests in flight per worker."""
        a, b = self.conns
        start = time.perf_counter()
        done = 0
        while done < n:
            k = min(window, (n - done) // 2) or 1
            for conn in (a, b):
                os.write(conn.to_w, b"".join(_frame(_Req(i, "echo", {"x": i})) for i in range(k)))
            for conn in (a, b):
                for _ in range(k):
                    _ECHO_DEC.decode(_read_frame(conn.from_r))
            done += 2 * k
        return time.perf_counter() - start

    def op_big(self, reps: int, pipe_bytes: int = 65536) -> list[float]:
        conn = self.conns[0]
        fcntl.fcntl(conn.from_r, _F_SETPIPE_SZ, pipe_bytes)
        got = fcntl.fcntl(conn.from_r, _F_GETPIPE_SZ)
        try:
            samples = []
            for i in range(reps + 1):
                start = time.perf_counter()
                conn.send("big")
                result = _BIG_DEC.decode(_read_frame(conn.from_r)).result
                if len(result) != 10 * 2**20:
                    raise AssertionError("short big result")
                if i:  # the first builds the string in the worker
                    samples.append((time.perf_counter() - start) * 1e3)
            return samples
        finally:
            fcntl.fcntl(conn.from_r, _F_SETPIPE_SZ, 65536)
            if got != pipe_bytes:
                raise AssertionError(f"pipe size {got}, wanted {pipe_bytes}")

    def op_spawn(self, reps: int) -> dict[str, list[float]]:
        """ms from start to the first reply: Popen of a msgspec worker, and os.fork of this warm process."""
        out: dict[str, list[float]] = {"popen": [], "fork": []}
        for _ in range(reps):
            start = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-c", WORKER_MAIN, "0", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            assert proc.stdin is not None and proc.stdout is not None
            os.write(proc.stdin.fileno(), _frame(_Req(1, "echo", {"x": 1})))
            _ECHO_DEC.decode(_read_frame(proc.stdout.fileno()))
            out["popen"].append((time.perf_counter() - start) * 1e3)
            proc.stdin.close()
            proc.wait()
            proc.stdout.close()

            start = time.perf_counter()
            to_r, to_w = os.pipe()
            from_r, from_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                os.close(to_w)
                os.close(from_r)
                _ns["serve"](to_r, from_w)
                os._exit(0)
            os.close(to_r)
            os.close(from_w)
            os.write(to_w, _frame(_Req(1, "echo", {"x": 1})))
            _ECHO_DEC.decode(_read_frame(from_r))
            out["fork"].append((time.perf_counter() - start) * 1e3)
            os.close(to_w)
            os.waitpid(pid, 0)
            os.close(from_r)
        return out

    def op_cancel(self, reps: int) -> dict[str, list[float]]:
        """ms from the signal to the exit seen through a pidfd, for a busy msgspec worker."""
        out: dict[str, list[float]] = {"sigkill": [], "sigterm_raises": []}
        for _ in range(reps):
            for case, method, sig in (
                ("sigkill", "busy", signal.SIGKILL),
                ("sigterm_raises", "busy_term_raises", signal.SIGTERM),
            ):
                conn = _Conn()
                conn.echo(0)
                conn.send(method)
                _read_frame(conn.from_r)
                time.sleep(0.005)
                pidfd = os.pidfd_open(conn.proc.pid)
                start = time.perf_counter()
                os.kill(conn.proc.pid, sig)
                select.select([pidfd], [], [])
                out[case].append((time.perf_counter() - start) * 1e3)
                os.close(pidfd)
                conn.close()
        return out

    def op_idle_rss(self, reps: int = 3) -> dict[str, float]:
        """RSS and USS (MiB) of an idle bare ``python -c 'import msgspec; <block>'``."""
        rss, uss = [], []
        for _ in range(reps):
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import msgspec, sys; sys.stdout.write('r'); sys.stdout.flush(); sys.stdin.read()",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdout.read(1)
            time.sleep(0.05)
            info = psutil.Process(proc.pid).memory_full_info()
            rss.append(info.rss / 2**20)
            uss.append(info.uss / 2**20)
            proc.stdin.close()
            proc.wait()
            proc.stdout.close()
        return {"rss": statistics.median(rss), "uss": statistics.median(uss)}
