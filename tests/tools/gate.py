"""A tool that returns when a file appears: calls running together end together."""

import os
import time

from worker.pi import CustomTool

OBJ = {"type": "object"}


def factory(api):
    def gate(tcid, params, on_update, ctx, signal):
        on_update({"content": [{"type": "text", "text": "waiting"}], "details": None})
        while not os.path.exists(params["path"]) and not signal.aborted:
            time.sleep(0.001)
        return {"content": [], "details": os.getpid()}

    return [CustomTool(name="gate", description="waits for a file", parameters=OBJ, execute=gate)]
