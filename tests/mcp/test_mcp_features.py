"""MCP logging, elicitation and ``resolve``: `xcsh-run serve` driven by the official SDK client and on the raw wire.

What the SDK hands to callbacks in tasks of their own (so in no fixed order)
is checked for content there, over stdio and Streamable HTTP (the
``transport`` fixture); the order of messages, and what is *not* sent, on the
raw stdio wire, where stdout is read line by line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import trio
from mcp import ClientSession
from mcp.shared.exceptions import MCPDeprecationWarning

from tests._support.mcp_clients import DEADLINE, open_session
from tests.mcp.test_mcp import error_of, raw_server, text_of, wait_exited
from xcsh_run._mcp.log_records import MAX_QUEUED

# A log record at load (outside any call), tools that log, prompt, flood and leave a pending action.
FEATURES = """
import json
import os

from xcsh_run.pi import CustomTool

OBJ = {{"type": "object"}}


def factory(api):
    api.logger.warning("loading")  # outside any call: reaches no client

    def chatty(tcid, params, on_update, ctx, signal_):
        tag = params.get("tag", "")
        api.logger.debug(f"debug {{tag}}")
        api.logger.info(f"info {{tag}}")
        api.logger.warning(f"warning {{tag}}")
        api.logger.getChild("db").error(f"error {{tag}}")
        return f"done {{tag}}"

    def flood(tcid, params, on_update, ctx, signal_):
        for i in range(1000):
            api.logger.info(f"record {{i:04}} " + "x" * 200)
        with open({fifo!r}, "w"):  # tells the test that every record is out
            pass
        return "flooded"

    def ask(tcid, params, on_update, ctx, signal_):
        kind = params["kind"]
        on_update({{"content": [{{"type": "text", "text": f"asking {{os.getpid()}}"}}], "details": None}})
        if kind == "confirm":
            value = api.ui.confirm("Proceed", "Delete everything?")
        elif kind == "select":
            value = api.ui.select("Colour", ["red", "green"])
        else:
            value = api.ui.input("Name", "your name")
        return json.dumps({{"has_ui": api.has_ui, "value": value}})

    def prepare(tcid, params, on_update, ctx, signal_):
        api.push_pending_action({{"label": "write the file", "apply": lambda reason: f"applied ({{reason}})"}})
        return "Preview ready. Call `resolve` to apply or discard."

    return [
        CustomTool(name="chatty", description="Logs at four levels", parameters=OBJ, execute=chatty),
        CustomTool(name="flood", description="Logs a thousand records", parameters=OBJ, execute=flood),
        CustomTool(name="ask", description="Prompts", parameters=OBJ, execute=ask),
        CustomTool(name="prepare", description="Leaves a preview", parameters=OBJ, execute=prepare, deferrable=True),
    ]
"""


@pytest.fixture
def tools(tmp_path: Path) -> str:
    fifo = tmp_path / "flooded"
    os.mkfifo(fifo)
    path = tmp_path / "features.py"
    path.write_text(FEATURES.format(fifo=str(fifo)))
    return str(path)


def between(messages: list[dict[str, Any]], request_id: int) -> list[dict[str, Any]]:
    """The log notifications received before the response to ``request_id`` (and after the previous response)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("id") == request_id and "method" not in message:
            return out
        if message.get("method") == "notifications/message":
            out.append(message["params"])
        elif "method" not in message:
            out.clear()
    raise AssertionError(f"no response to {request_id}")


# --- logging -------------------------------------------------------------------------------------


async def test_logging_is_declared_and_records_of_a_call_honour_the_sessions_level(tools: str) -> None:
    """Stdio only: records and responses are read in order on the raw stdout lines (the SDK test below: both)."""
    with trio.fail_after(DEADLINE):
        async with raw_server(tools) as server:
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
            answer = await server.request("initialize", init)
            assert answer["result"]["capabilities"]["logging"] == {}
            await server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

            async def call(tag: str) -> list[tuple[str, str, str]]:
                answer = await server.request("tools/call", {"name": "chatty", "arguments": {"tag": tag}})
                assert answer["result"]["content"] == [{"type": "text", "text": f"done {tag}"}]
                return [(m["level"], m["logger"], m["data"]) for m in between(server.messages, answer["id"])]

            # No setLevel yet: info and above, as on the host's stderr; the load-time record nowhere.
            assert await call("a") == [
                ("info", "chatty", "info a"),
                ("warning", "chatty", "warning a"),
                ("error", "chatty.db", "error a"),
            ]
            assert "result" in await server.request("logging/setLevel", {"level": "debug"})
            assert [level for level, _, _ in await call("b")] == ["debug", "info", "warning", "error"]
            assert "result" in await server.request("logging/setLevel", {"level": "error"})
            assert await call("c") == [("error", "chatty.db", "error c")]
            refused = await server.request("logging/setLevel", {"level": "verbose"})
            assert refused["error"]["code"] == -32602
            assert await call("d") == [("error", "chatty.db", "error d")]  # the refusal changed nothing
            assert not any("loading" in json.dumps(m) for m in server.messages)


async def test_a_flooding_logger_is_bounded_and_every_dropped_record_is_counted(tools: str, tmp_path: Path) -> None:
    """Stdio only: the bound is reached by not reading stdout, so that the pipe and the queues fill."""
    with trio.fail_after(DEADLINE):
        async with raw_server(tools) as server:
            await server.initialize()
            await server.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "flood"}})
            # Nothing is read until the tool has logged all it will: the pipe,
            # the output queue and the call's log queue fill, and the rest is dropped.
            await trio.to_thread.run_sync((tmp_path / "flooded").read_bytes)
            answer = await server.response(1)
            assert answer["result"]["content"] == [{"type": "text", "text": "flooded"}]
            records = between(server.messages, 1)
            numbers = [int(r["data"].split()[1]) for r in records if r["logger"] == "flood"]
            notices = [r for r in records if r["logger"] == "xcsh-run"]
            assert numbers == sorted(numbers)
            dropped = sum(int(n["data"].split()[0]) for n in notices)
            assert notices and all(n["level"] == "warning" for n in notices)
            assert dropped > 0
            assert len(numbers) + dropped == 1000  # every record sent or counted
            # The queue's bound: what waited past the pipe and the output queue.
            assert len(numbers) < 1000 - MAX_QUEUED


async def test_the_sdk_client_gets_records_through_its_logging_callback(tools: str, transport: str) -> None:
    send, receive = trio.open_memory_channel[mcp_types.LoggingMessageNotificationParams](10)

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        await send.send(params)

    with trio.fail_after(DEADLINE):
        async with open_session(transport, tools, logging_callback=on_log) as s:
            with pytest.warns(MCPDeprecationWarning):  # the stateless 2026-07-28 era drops setLevel
                await s.set_logging_level("debug")
            assert text_of(await s.call_tool("chatty", {"tag": "sdk"})) == "done sdk"
            got = {(p.level, p.logger, p.data) for p in [await receive.receive() for _ in range(4)]}
            assert got == {
                ("debug", "chatty", "debug sdk"),
                ("info", "chatty", "info sdk"),
                ("warning", "chatty", "warning sdk"),
                ("error", "chatty.db", "error sdk"),
            }


# --- elicitation ------------------------------------------------------------------------------------


ANSWERS: list[tuple[str, Any, Any]] = [
    # (kind, the client's answer, what the tool gets)
    ("confirm", mcp_types.ElicitResult(action="accept", content={"confirm": True}), True),
    ("confirm", mcp_types.ElicitResult(action="decline"), False),
    ("confirm", mcp_types.ElicitResult(action="cancel"), False),
    ("confirm", mcp_types.ErrorData(code=-32600, message="no"), False),
    ("select", mcp_types.ElicitResult(action="accept", content={"choice": "green"}), "green"),
    ("select", mcp_types.ElicitResult(action="accept", content={"choice": "blue"}), None),  # not an option
    ("input", mcp_types.ElicitResult(action="accept", content={"text": "Ada"}), "Ada"),
    ("input", mcp_types.ElicitResult(action="accept", content={"text": 42}), None),  # not a string
    ("input", mcp_types.ElicitResult(action="decline"), None),
]


async def test_prompts_become_elicitation_requests_and_their_answers_come_back(tools: str, transport: str) -> None:
    asked: list[mcp_types.ElicitRequestParams] = []
    script: list[Any] = []

    async def on_elicit(ctx: Any, params: mcp_types.ElicitRequestParams) -> Any:
        asked.append(params)
        return script.pop(0)

    with trio.fail_after(DEADLINE * 2):
        async with open_session(transport, tools, elicitation_callback=on_elicit) as s:
            for kind, answer, expected in ANSWERS:
                script.append(answer)
                result = json.loads(text_of(await s.call_tool("ask", {"kind": kind})))
                assert result == {"has_ui": True, "value": expected}, (kind, answer)
    assert not script
    schemas = {p.message: p.requested_schema for p in asked}
    assert schemas["Delete everything?"]["properties"]["confirm"]["type"] == "boolean"
    assert schemas["Colour"]["properties"]["choice"]["enum"] == ["red", "green"]
    assert schemas["Name"]["properties"]["text"] == {"type": "string", "title": "Name", "description": "your name"}
    assert all(s["required"] == [next(iter(s["properties"]))] for s in schemas.values())


async def test_without_the_capability_there_is_no_ui_and_prompts_get_the_no_op_answer(
    tools: str, transport: str
) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, tools) as s:
            for kind, value in [("confirm", False), ("select", None), ("input", None)]:
                result = json.loads(text_of(await s.call_tool("ask", {"kind": kind})))
                assert result == {"has_ui": False, "value": value}


async def test_a_call_cancelled_while_its_prompt_is_open_withdraws_the_prompt(tools: str, transport: str) -> None:
    asking = trio.Event()
    withdrawn = trio.Event()
    started = trio.Event()
    pid: list[int] = []

    async def on_elicit(ctx: Any, params: mcp_types.ElicitRequestParams) -> Any:
        if params.message == "Name":  # the second call: answered at once
            return mcp_types.ElicitResult(action="accept", content={"text": "again"})
        asking.set()
        try:
            await trio.sleep_forever()
        finally:
            withdrawn.set()  # the server's notifications/cancelled cancelled this handler

    async def on_progress(progress: float, total: float | None, text: str | None) -> None:
        if text is not None and not pid:
            pid.append(int(text.split()[1]))
            started.set()

    with trio.fail_after(DEADLINE):
        async with open_session(transport, tools, elicitation_callback=on_elicit) as s:
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def call() -> None:
                    with scope:
                        await s.call_tool("ask", {"kind": "confirm"}, progress_callback=on_progress)

                nursery.start_soon(call)
                await asking.wait()
                # The update and the prompt travel apart (and the SDK runs each
                # callback in a task of its own): once the call is cancelled its
                # progress is no longer delivered, so the pid is awaited first.
                await started.wait()
                scope.cancel()
            await withdrawn.wait()
            await wait_exited(pid[0])  # the call went through the ladder
            result = json.loads(text_of(await s.call_tool("ask", {"kind": "input"})))
            assert result == {"has_ui": True, "value": "again"}


# --- resolve ----------------------------------------------------------------------------------------


async def test_resolve_is_listed_while_a_pending_action_waits_with_list_changed(tools: str, transport: str) -> None:
    send, receive = trio.open_memory_channel[None](10)

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            await send.send(None)

    async def names(s: ClientSession) -> set[str]:
        return {t.name for t in (await s.list_tools()).tools}

    with trio.fail_after(DEADLINE):
        async with open_session(transport, tools, message_handler=on_message) as s:
            assert "resolve" not in await names(s)
            assert "Call `resolve`" in text_of(await s.call_tool("prepare", {}))
            await receive.receive()
            assert "resolve" in await names(s)
            tool = next(t for t in (await s.list_tools()).tools if t.name == "resolve")
            assert set(tool.input_schema["properties"]) == {"action", "reason", "id"}  # id: a chosen one
            assert text_of(await s.call_tool("chatty", {})) == "done "  # no change, no notification
            applied = await s.call_tool("resolve", {"action": "apply", "reason": "looks right"})
            assert text_of(applied) == "applied (looks right)"
            await receive.receive()
            assert "resolve" not in await names(s)
            nothing = await s.call_tool("resolve", {"action": "apply", "reason": "again"})
            assert "No pending action" in error_of(nothing)["message"]
            with trio.move_on_after(0):
                await receive.receive()
                raise AssertionError("a list_changed without a change")


# --- two sessions on one server ------------------------------------------------------------------


class Collected:
    """An outbox that keeps what it is sent."""

    carries_requests = True

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.ended = trio.Event()

    async def send(self, data: bytes) -> None:
        self.messages.append(json.loads(data))

    def end(self) -> None:
        self.ended.set()


async def test_a_calls_records_reach_only_the_session_that_made_it(tools: str) -> None:
    """No transport: two `McpSession`s (which both transports drive) on one `ToolServer`, in this process."""
    import msgspec

    from xcsh_run._mcp.server import ToolServer
    from xcsh_run._mcp.session import McpSession
    from xcsh_run.worker.protocol.messages import Request

    server = ToolServer([tools], grace=0.5)
    own = {"a": Collected(), "b": Collected()}
    sessions = {name: McpSession(server, outbox) for name, outbox in own.items()}

    def request(name: str, method: str, params: dict[str, Any]) -> Collected:
        reply = Collected()
        raw = msgspec.Raw(json.dumps(params).encode())
        sessions[name]._on_message(Request(id=1 if method == "initialize" else 2, method=method, params=raw), reply)
        return reply

    replies: dict[str, Collected] = {}

    async def main(requests: trio.Nursery) -> None:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        for name in sessions:
            await request(name, "initialize", init).ended.wait()
        for name in sessions:  # both calls run at once
            replies[name] = request(name, "tools/call", {"name": "chatty", "arguments": {"tag": name}})
        for reply in replies.values():
            await reply.ended.wait()

    with trio.fail_after(DEADLINE):
        await server.run(main, ended="the test is over")
    for name, reply in replies.items():
        *records, response = reply.messages
        assert response["result"]["content"] == [{"type": "text", "text": f"done {name}"}]
        assert [r["params"]["data"] for r in records] == [f"info {name}", f"warning {name}", f"error {name}"]
        assert not any(m.get("method") == "notifications/message" for m in own[name].messages)
