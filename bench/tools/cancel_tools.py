"""Tools that never finish on their own, for cancel-to-result latency (loaded by path, in a worker)."""

import signal

from xcsh_run.pi import CustomTool

READY = {"content": [{"type": "text", "text": "running"}], "details": None}


def factory(api):
    def busy(tool_call_id, params, on_update, ctx, signal_):
        on_update(READY)
        while True:
            pass

    def ignore_sigterm(tcid, params, on_update, ctx, signal_):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        on_update(READY)
        while True:
            pass

    return [
        CustomTool(name="busy", description="a busy Python loop", parameters={"type": "object"}, execute=busy),
        CustomTool(
            name="ignore_sigterm",
            description="a busy loop that ignores SIGTERM",
            parameters={"type": "object"},
            execute=ignore_sigterm,
        ),
    ]
