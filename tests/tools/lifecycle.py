"""Tools for the lifecycle sweep and the fault matrix: as cheap as a call can be, a nap, and a stream."""

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

    def stream(tool_call_id, params, on_update, ctx, signal):
        # A tool that reports as it works: `count` partial results, each
        # followed by a log record, `interval` seconds of work apart (so that
        # the host receives and delivers them one by one, not all in one
        # read); it stops as soon as its call is cancelled.
        count = params.get("count", 8)
        interval = params.get("interval", 0.001)
        for i in range(count):
            on_update({"content": [{"type": "text", "text": f"part {i} of {count}"}], "details": i})
            if signal.wait(interval):
                break  # cancelled: stop at once (the host answers for the call)
            api.logger.info("sent part %d of %d", i, count)
            if signal.wait(interval):
                break
        return {"content": [{"type": "text", "text": "streamed"}], "details": count}

    return [
        CustomTool(name="ping", description="answers pong with its worker's pid", parameters=OBJ, execute=ping),
        CustomTool(name="nap", description="sleeps `seconds`, then answers", parameters=OBJ, execute=nap),
        CustomTool(
            name="stream",
            description="sends `count` partial results and log records, `interval` s apart, then answers",
            parameters=OBJ,
            execute=stream,
        ),
    ]
