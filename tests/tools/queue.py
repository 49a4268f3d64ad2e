"""Tools for queued calls: one that holds its worker until a file appears (then may crash), one that marks a
file, and a quick one with a short timeout of its own."""

import os
import signal
import time

from worker.pi import CustomTool

OBJ = {"type": "object"}


def factory(api):
    def hold(tcid, params, on_update, ctx, signal_):
        on_update({"content": [{"type": "text", "text": "holding"}], "details": os.getpid()})
        while not os.path.exists(params["path"]) and not signal_.aborted:
            time.sleep(0.001)
        if params.get("crash"):
            os.kill(os.getpid(), signal.SIGSEGV)
        return {"content": [], "details": os.getpid()}

    def mark(tcid, params, on_update, ctx, signal_):
        with open(params["path"], "w") as f:
            f.write(tcid)
        return {"content": [], "details": os.getpid()}

    def quick(tcid, params, on_update, ctx, signal_):
        return f"quick from {os.getpid()}"

    return [
        CustomTool(name="hold", description="holds its worker until a file appears", parameters=OBJ, execute=hold),
        CustomTool(name="mark", description="writes its call id to a file", parameters=OBJ, execute=mark),
        # Its own timeout (1 s) is shorter than a wait in the queue behind `hold`.
        CustomTool(name="quick", description="answers at once", parameters=OBJ, execute=quick, timeout=1),
    ]
