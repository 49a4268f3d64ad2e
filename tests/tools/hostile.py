"""Hostile tools: each one attacks the host a different way. None may hurt it."""

import ctypes
import hashlib
import os
import signal
import struct
import sys
import time

from worker.pi import CustomTool

OBJ = {"type": "object"}
READY = {"content": [{"type": "text", "text": "started"}], "details": None}


def _fake_frame():
    body = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"FORGED"}]}}'
    return struct.pack(">I", len(body)) + body


def _daemon(seconds):
    """Double fork + setsid; the grandchild holds stdout/stderr and sleeps. Returns its pid."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        pid2 = os.fork()
        if pid2 == 0:
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            time.sleep(seconds)
            os._exit(0)
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    daemon = int(os.read(r, 32))
    os.close(r)
    return daemon


def factory(api):
    def os_exit(tcid, params, on_update, ctx, signal_):
        os._exit(params.get("code", 13))

    def segfault(tcid, params, on_update, ctx, signal_):
        ctypes.string_at(0)

    def sigkill_self(tcid, params, on_update, ctx, signal_):
        os.kill(os.getpid(), signal.SIGKILL)

    def busy_loop(tcid, params, on_update, ctx, signal_):
        on_update(READY)
        while True:
            pass

    def ignore_sigterm(tcid, params, on_update, ctx, signal_):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        on_update(READY)
        while True:
            pass

    def long_c_call(tcid, params, on_update, ctx, signal_):
        on_update(READY)
        # Releases the GIL and never returns to the eval loop: no Python
        # signal handler can run until it ends, so only SIGKILL stops it.
        hashlib.pbkdf2_hmac("sha256", b"x", b"salt", 2**31 - 1)
        return "unreachable"

    def sleeper(tcid, params, on_update, ctx, signal_):
        try:
            # Inside the try: the host may cancel as soon as it sees this update.
            on_update(READY)
            time.sleep(params.get("seconds", 3600))
        finally:
            if params.get("marker"):
                with open(params["marker"], "w") as f:
                    f.write(f"cleaned up: {signal_.reason}")
        return "slept"

    async def async_sleeper(tcid, params, on_update, ctx, signal_):
        import asyncio

        try:
            on_update(READY)
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if params.get("marker"):
                with open(params["marker"], "w") as f:
                    f.write(f"cancelled: {signal_.reason}")
            raise
        return "slept"

    def flood(tcid, params, on_update, ctx, signal_):
        chunk = (_fake_frame() + b"noise\n") * 1000
        for _ in range(params.get("rounds", 200)):
            os.write(1, chunk)
            os.write(2, chunk)
        print("print() from the tool", flush=True)
        return {"content": [{"type": "text", "text": "flooded"}], "details": len(chunk) * params.get("rounds", 200)}

    def garbage_fds(tcid, params, on_update, ctx, signal_):
        for name in os.listdir("/proc/self/fd"):
            try:
                os.write(int(name), b"\xff\x00garbage\x00" * 64)
            except OSError:
                pass
        return "wrote garbage everywhere"

    def daemon(tcid, params, on_update, ctx, signal_):
        pid = _daemon(params.get("seconds", 3600))
        return {"content": [{"type": "text", "text": f"daemon {pid}"}], "details": {"pids": [pid]}}

    def many_setsid(tcid, params, on_update, ctx, signal_):
        pids = [_daemon(3600) for _ in range(params.get("count", 40))]
        if params.get("hang"):
            on_update({"content": [{"type": "text", "text": "started"}], "details": {"pids": pids}})
            time.sleep(3600)
        return {"content": [{"type": "text", "text": f"{len(pids)} daemons"}], "details": {"pids": pids}}

    def fork_then_hang(tcid, params, on_update, ctx, signal_):
        pid = _daemon(3600)
        on_update({"content": [{"type": "text", "text": "started"}], "details": {"pids": [pid]}})
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(1)

    def forge_frames(tcid, params, on_update, ctx, signal_):
        """Writes well-framed JSON-RPC that breaks the protocol's rules to the real protocol fd."""
        fd_out = int(sys.argv[sys.argv.index("--fd-out") + 1])
        bodies = {
            "bad_update": b'{"jsonrpc":"2.0","method":"update","params":{"call_id":7}}',
            "unknown_id": b'{"jsonrpc":"2.0","id":999999,"result":{}}',
            "huge_length": b"",
        }
        body = bodies[params["mode"]]
        frame = (b"\xff\xff\xff\xff" if params["mode"] == "huge_length" else struct.pack(">I", len(body))) + body
        os.write(fd_out, frame)
        time.sleep(3600)

    def raise_base(tcid, params, on_update, ctx, signal_):
        raise KeyboardInterrupt("not really")

    return [
        CustomTool(name=fn.__name__, description=fn.__name__, parameters=OBJ, execute=fn)
        for fn in (
            os_exit,
            segfault,
            sigkill_self,
            busy_loop,
            ignore_sigterm,
            long_c_call,
            sleeper,
            async_sleeper,
            flood,
            garbage_fds,
            daemon,
            many_setsid,
            fork_then_hang,
            forge_frames,
            raise_base,
        )
    ]
