"""The xcsh-run side of the 10 MiB result (its own module, so the echo worker never holds it)."""

import functools

from xcsh_run.pi import CustomTool


@functools.cache
def _big() -> str:
    return "x" * (10 * 2**20)


def factory(api):
    def big(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": _big()}], "details": None}

    return CustomTool(name="big", description="a 10 MiB text result", parameters={"type": "object"}, execute=big)
