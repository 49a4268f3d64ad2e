"""Tools for the parallelism tests: they record when they run, in a file the test names."""

import os
import time

from worker.pi import CustomTool

OBJ = {"type": "object"}


def _mark(path, text):
    with open(path, "a") as f:
        f.write(text + "\n")


def factory(api):
    def work(tcid, params, on_update, ctx, signal):
        _mark(params["log"], f"start {tcid} {os.getpid()}")
        on_update({"content": [{"type": "text", "text": "started"}], "details": None})
        time.sleep(params.get("seconds", 0.3))
        _mark(params["log"], f"end {tcid} {os.getpid()}")
        return {"content": [], "details": os.getpid()}

    def pid(tcid, params, on_update, ctx, signal):
        return {"content": [], "details": os.getpid()}

    return [
        CustomTool(name="work", description="sleeps, recording start and end", parameters=OBJ, execute=work),
        CustomTool(
            name="exclusive_work",
            description="the same, one at a time",
            parameters=OBJ,
            execute=work,
            concurrency="exclusive",
        ),
        CustomTool(name="pid", description="its worker's pid", parameters=OBJ, execute=pid),
    ]
