"""Tools for the worker's inbox tests: holding a call open, prompting after a call, spawning a grandchild."""

import os
import subprocess
import threading
import time

from worker.pi import CustomTool

OBJ = {"type": "object"}
DEADLINE = 20.0


def factory(api):
    def hold(tcid, params, on_update, ctx, signal):
        """Runs until the file ``release`` exists, or until the call is aborted."""
        with open(params["log"], "a") as f:
            f.write(f"start {tcid}\n")
        if params.get("spawn"):
            child = subprocess.Popen(["sleep", "60"])
            on_update({"content": [], "details": {"child": child.pid}})
        else:
            on_update({"content": [], "details": "holding"})
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            if os.path.exists(params["release"]):
                return "released"
            if signal.wait(0.005):
                signal.throw_if_aborted()
        return "gave up"

    def echo(tcid, params, on_update, ctx, signal):
        return {"content": [], "details": params}

    def ask_later(tcid, params, on_update, ctx, signal):
        """Prompts from a thread of its own, which outlives the call, and reports the answer."""

        def ask():
            answer = api.ui.confirm("later", "asked from a thread of the tool's")
            api.ui.notify(f"answer {answer!r}")

        threading.Thread(target=ask, daemon=True).start()
        return "asked"

    def spawn(tcid, params, on_update, ctx, signal):
        return {"content": [], "details": subprocess.Popen(["sleep", "60"]).pid}

    def nap(tcid, params, on_update, ctx, signal):
        on_update({"content": [], "details": "napping"})
        time.sleep(params["seconds"])
        return "rested"

    return [
        CustomTool(name=fn.__name__, description=fn.__name__, parameters=OBJ, execute=fn)
        for fn in (hold, echo, ask_later, spawn, nap)
    ]
