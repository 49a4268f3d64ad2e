"""Tools for the lifecycle sweep and the fault matrix: as cheap as a call can be, plus a nap."""

import os
import time

from worker.pi import CustomTool

OBJ = {"type": "object"}


def factory(api):
    def ping(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": "pong"}], "details": os.getpid()}

    def nap(tool_call_id, params, on_update, ctx, signal):
        time.sleep(params.get("seconds", 0.05))
        return {"content": [{"type": "text", "text": "rested"}], "details": os.getpid()}

    return [
        CustomTool(name="ping", description="answers pong with its worker's pid", parameters=OBJ, execute=ping),
        CustomTool(name="nap", description="sleeps `seconds`, then answers", parameters=OBJ, execute=nap),
    ]
