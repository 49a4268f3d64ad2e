"""Well-behaved tools used across the tests (sync, async, streaming, big results)."""

import asyncio
import fcntl
import os
import sys

import msgspec

from worker.pi import CustomTool, TextContent, ToolResult


class AddParams(msgspec.Struct, forbid_unknown_fields=True):
    a: int
    b: int = 0


class ProgressParams(msgspec.Struct):
    count: int


class BigParams(msgspec.Struct):
    mib: float


ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
    "required": ["text"],
    "additionalProperties": False,
}


def factory(api):
    def echo(tool_call_id, params, on_update, ctx, signal):
        return {
            "content": [{"type": "text", "text": params["text"] * params.get("times", 1)}],
            "details": {"call_id": tool_call_id, "ctx": ctx.state},
        }

    def add(tool_call_id, params: AddParams, on_update, ctx, signal):
        return ToolResult(content=[TextContent(text=str(params.a + params.b))], details={"sum": params.a + params.b})

    async def async_echo(tool_call_id, params, on_update, ctx, signal):
        await asyncio.sleep(0)
        return f"async {params['text']}"

    def progress(tool_call_id, params: ProgressParams, on_update, ctx, signal):
        for i in range(params.count):
            on_update({"content": [], "details": i})
        return {"content": [{"type": "text", "text": "done"}], "details": params.count}

    def big(tool_call_id, params: BigParams, on_update, ctx, signal):
        return "x" * int(params.mib * 2**20)

    def unserialisable(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": "hi"}], "details": {"when": object()}}

    def cyclic(tool_call_id, params, on_update, ctx, signal):
        details = {}
        details["self"] = details
        return {"content": [{"type": "text", "text": "hi"}], "details": details}

    def raises(tool_call_id, params, on_update, ctx, signal):
        raise ValueError("the tool failed on purpose")

    def sys_exit(tool_call_id, params, on_update, ctx, signal):
        sys.exit(3)

    def bad_result(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "video"}]}

    def environment(tool_call_id, params, on_update, ctx, signal):
        fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
        protocol = [int(sys.argv[sys.argv.index(flag) + 1]) for flag in ("--fd-in", "--fd-out")]
        return {
            "content": [],
            "details": {
                "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("trio", "runner", "typer", "psutil")),
                "fds": fds,
                "stdin": os.readlink("/proc/self/fd/0"),
                "stdin_read": sys.stdin.read(),
                "isatty": [os.isatty(0), os.isatty(1), os.isatty(2)],
                "pid": os.getpid(),
                "sid": os.getsid(0),
                "cwd": api.cwd,
                "pipe_sizes": [fcntl.fcntl(fd, 1032) for fd in protocol],  # F_GETPIPE_SZ
            },
        }

    obj = {"type": "object"}
    return [
        CustomTool(name="echo", label="Echo", description="Echoes text", parameters=ECHO_SCHEMA, execute=echo),
        CustomTool(name="add", label="Add", description="Adds two integers", parameters=AddParams, execute=add),
        CustomTool(name="async_echo", description="Echoes, async", parameters=obj, execute=async_echo),
        CustomTool(name="progress", description="Streams count updates", parameters=ProgressParams, execute=progress),
        CustomTool(name="big", description="Returns mib MiB of text", parameters=BigParams, execute=big),
        CustomTool(name="unserialisable", description="Bad details", parameters=obj, execute=unserialisable),
        CustomTool(name="cyclic", description="Details that contain themselves", parameters=obj, execute=cyclic),
        CustomTool(name="raises", description="Raises", parameters=obj, execute=raises),
        CustomTool(name="sys_exit", description="Calls sys.exit", parameters=obj, execute=sys_exit),
        CustomTool(name="bad_result", description="Returns a bad block", parameters=obj, execute=bad_result),
        CustomTool(
            name="environment", description="Reports the worker's surroundings", parameters=obj, execute=environment
        ),
    ]
