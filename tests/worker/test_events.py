"""``api.events``: the event bus shared by the tools of one worker (real workers, real pipes)."""

from __future__ import annotations

from pathlib import Path

import trio

from xcsh_run import open_runner

NOTES = """
import asyncio

from xcsh_run.pi import CustomTool, ToolAPI


def factory(api: ToolAPI):
    seen = []
    api.events.on("note", seen.append)
    stop = api.events.on("note", lambda data: seen.append(("second", data)))

    def broken(data):
        raise ValueError("a broken listener")

    api.events.on("note", broken)
    api.events.on("note", lambda data: seen.append(("after the broken one", data)))

    async def later(data):
        await asyncio.sleep(0)
        seen.append(("async", data))

    api.events.on("async-note", later)

    def emit(tool_call_id, params, on_update, ctx, signal):
        api.events.emit("note", params["text"])
        if params.get("stop"):
            stop()
        return "ok"

    async def emit_async(tool_call_id, params, on_update, ctx, signal):
        api.events.emit("async-note", params["text"])
        for _ in range(10):  # the scheduled handler runs on this loop
            await asyncio.sleep(0)
        return "ok"

    def read(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": "read"}], "details": {"seen": seen}}

    schema = {"type": "object", "properties": {"text": {"type": "string"}, "stop": {"type": "boolean"}}}
    return [
        CustomTool(name="emit", description="Emits a note", parameters=schema, execute=emit),
        CustomTool(name="emit_async", description="Emits an async note", parameters=schema, execute=emit_async),
        CustomTool(name="read", description="What the listeners saw", parameters=schema, execute=read),
    ]
"""


async def test_tools_of_one_worker_share_a_bus_and_a_broken_listener_breaks_nothing(tmp_path: Path) -> None:
    module = tmp_path / "notes.py"
    module.write_text(NOTES)
    records: list[str] = []
    with trio.fail_after(60):
        async with open_runner([str(module)]) as runner:
            runner.set_log_listener(lambda record: records.append(record.message))
            first = await runner.call_tool("emit", {"text": "a", "stop": True})
            second = await runner.call_tool("emit", {"text": "b"})
            third = await runner.call_tool("emit_async", {"text": "c"})
            read = await runner.call_tool("read", {})
    assert not first.is_error and not second.is_error and not third.is_error, (first, second, third)
    assert not read.is_error, read
    # In the order added; the unsubscribed one only saw the first; the one after a broken listener ran.
    assert read.details["seen"] == [
        "a", ["second", "a"], ["after the broken one", "a"],
        "b", ["after the broken one", "b"],
        ["async", "c"],
    ], read.details  # fmt: skip
    assert any("a broken listener" in r or "'note' handler failed" in r for r in records), records
