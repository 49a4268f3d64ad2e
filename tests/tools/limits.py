"""Tools that run into resource limits on purpose."""

import os
import time

from worker.pi import CustomTool

OBJ = {"type": "object"}


def factory(api):
    def memory_hog(tcid, params, on_update, ctx, signal):
        chunks = []
        while True:
            chunk = bytearray(32 * 2**20)
            for i in range(0, len(chunk), 4096):  # touch every page
                chunk[i] = 1
            chunks.append(chunk)

    def fork_bomb(tcid, params, on_update, ctx, signal):
        on_update({"content": [{"type": "text", "text": "started"}], "details": None})
        n = 0
        while True:
            try:
                pid = os.fork()
            except OSError:
                time.sleep(0.001)
                continue
            if pid == 0:
                if n % 3 == 0:
                    os.setsid()
                while True:  # every child forks too
                    try:
                        os.fork()
                    except OSError:
                        time.sleep(0.01)
            n += 1

    def steady_forker(tcid, params, on_update, ctx, signal):
        on_update({"content": [{"type": "text", "text": "started"}], "details": None})
        i = 0
        while True:
            i += 1
            pid = os.fork()
            if pid == 0:
                if i % 5 == 0:
                    os.setsid()
                    if os.fork() == 0:
                        time.sleep(5)
                        os._exit(0)
                time.sleep(0.3)
                os._exit(0)
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            except ChildProcessError:
                pass
            time.sleep(0.003)

    def burn_cpu(tcid, params, on_update, ctx, signal):
        while True:
            pass

    def big_file(tcid, params, on_update, ctx, signal):
        with open(os.path.join(os.environ["TMPDIR"], "big"), "wb") as f:
            for _ in range(params.get("mib", 64)):
                f.write(b"\0" * 2**20)
        return "wrote it"

    def many_files(tcid, params, on_update, ctx, signal):
        files = [open(os.devnull) for _ in range(params.get("count", 5000))]
        return f"opened {len(files)}"

    def chatty(tcid, params, on_update, ctx, signal):
        for _ in range(params.get("mib", 8)):
            os.write(1, b"y" * 2**20)
        return "said a lot"

    def heartbeat(tcid, params, on_update, ctx, signal):
        return "beat"

    return [
        CustomTool(name=fn.__name__, description=fn.__name__, parameters=OBJ, execute=fn)
        for fn in (memory_hog, fork_bomb, steady_forker, burn_cpu, big_file, many_files, chatty, heartbeat)
    ]
