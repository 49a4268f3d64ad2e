"""A tool for the batch tests: it echoes, and on request records its run, waits, or crashes."""

import os
import signal as signals
import time

from worker.pi import CustomTool

SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "counter": {"type": "string"},  # a file each call appends its text to
        "log": {"type": "string"},  # a file each call appends "start"/"end" lines to
        "seconds": {"type": "number"},  # how long to wait (cancellable) before answering
        "crash": {"type": "boolean"},  # exit the worker without answering
    },
    "required": ["text"],
    "additionalProperties": False,
}


def _append(path, line):
    # One write of a short line to an O_APPEND file: lines of concurrent calls never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def factory(api):
    def batch_echo(tool_call_id, params, on_update, ctx, signal):
        if "counter" in params:
            _append(params["counter"], params["text"])
        if "log" in params:
            _append(params["log"], f"start {params['text']}")
        if params.get("crash"):
            os._exit(7)
        if "seconds" in params:
            signal.wait(params["seconds"])
        if "log" in params:
            _append(params["log"], f"end {params['text']}")
        return {"content": [{"type": "text", "text": params["text"]}], "details": {"pid": os.getpid()}}

    def batch_stubborn(tool_call_id, params, on_update, ctx, signal):
        # Ignores SIGTERM and every cancellation: only the ladder's kill stops it.
        signals.signal(signals.SIGTERM, signals.SIG_IGN)
        _append(params["counter"], params["text"])
        while True:
            try:
                time.sleep(1)
            except BaseException:
                pass

    return [
        CustomTool(name="batch_echo", description="echoes text", parameters=SCHEMA, execute=batch_echo),
        CustomTool(name="batch_stubborn", description="never stops", parameters=SCHEMA, execute=batch_stubborn),
    ]
