"""MCP protocol correctness: ids of malformed input, ids in flight, re-initialize, batches, tool names.

`xcsh-run serve` is driven over stdio with raw lines (``raw_server`` from
test_mcp), which show exactly what is on the wire, or its absence; where the
client's view matters, with the official `mcp` Python client. An absence is
bounded: the server logs the moment it decides not to answer, a following
request proves it still serves, and the whole of stdout is read to EOF at
the end.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from mcp.shared.exceptions import MCPError

from tests.mcp.test_mcp import BASIC, DEADLINE, RawServer, raw_server, session, text_of
from xcsh_run._mcp.render import ToolNames, rename_listed, valid_tool_name
from xcsh_run._mcp.wire import Batch, Malformed, classify, recover_id
from xcsh_run.worker.protocol.messages import ErrorObject, ErrorResponse, Notification, Response

ABSENT = "absent"
TS_PARAMS = '"params":{"name":"echo","arguments":{"text":"cut %s"}}'

# --- the ids of malformed input ------------------------------------------------------

RECOVERED: list[tuple[bytes, object]] = [
    # A lone surrogate escape (an emoji cut in half), the id last as the TypeScript SDK writes it.
    (b'{"method":"tools/call",' + (TS_PARAMS % "\\ud83d").encode() + b',"jsonrpc":"2.0","id":5}', 5),
    (b'{"method":"tools/call",' + (TS_PARAMS % "\\ude00").encode() + b',"jsonrpc":"2.0","id":"s"}', "s"),
    # A line cut short after its id and method.
    (b'{"jsonrpc":"2.0","id":"abc","method":"tools/call","params":{"name":"ec', "abc"),
    # Invalid UTF-8 where the structure is still whole: method name, nested arrays, a bare word.
    (b'{"jsonrpc":"2.0","id":3,"method":"\xff"}', 3),
    (b'{"method":"m","params":[[{"a":"]\\"}"}]],"id":7,"x":\xff}', 7),
    (b'{"method":"m","params":{"s":"x"},"id":-8,"jsonrpc":"2.\xc3"}', -8),
    # Nothing to be told for certain: an id that may be cut, no method seen, a response,
    # an id below the top level, two ids, an id the repair would touch, a broken structure.
    (b'{"jsonrpc":"2.0","method":"m","id":12', ABSENT),
    (b'{"jsonrpc":"2.0","id":12,"params":{"x":"\xff"}', ABSENT),
    (b'{"jsonrpc":"2.0","id":0,"result":{"x":"\xff"}', ABSENT),
    (b'{"method":"m","params":{"id":3},', ABSENT),
    (b'{"method":"m","id":1,"id":2,"x":"\xff}', ABSENT),
    (b'{"method":"m","id":"\xff"}', ABSENT),
    (b'{"method":"m","id":"\\ud83d"}', ABSENT),
    (b'{"method":"m",broken,"id":4}', ABSENT),
    (b'{"method":"m","id":true,"x":\xff}', ABSENT),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}', ABSENT),
]


@pytest.mark.parametrize(("line", "expected"), RECOVERED)
def test_the_id_of_malformed_input_is_recovered_only_when_certain(line: bytes, expected: object) -> None:
    malformed = classify(line)
    assert isinstance(malformed, Malformed)
    assert malformed.code == -32700
    assert (ABSENT if malformed.id is None else malformed.id) == expected


def test_an_oversized_lines_id_is_read_from_its_last_bytes_only_for_a_request() -> None:
    head = b'{"method":"tools/call","params":{"text":"xxxx'
    assert recover_id(head, tail=b'xxxx"},"jsonrpc":"2.0","id":22}\n') == 22
    assert recover_id(head, tail=b'xxxx"},"jsonrpc":"2.0","id":"t"}') == "t"
    # A closing `}` that may end params, not the message: no id.
    assert recover_id(head, tail=b'xx\\",\\"id\\":5}') is None
    assert recover_id(b'{"jsonrpc":"2.0","result":{"x":"', tail=b'"},"id":22}') is None
    assert recover_id(b'{"params":{"x":"', tail=b'"},"id":22}') is None


def test_the_clients_answers_to_prompts_are_handed_on_and_broken_ones_dropped() -> None:
    assert classify(b'{"jsonrpc":"2.0","id":3,"result":{"action":"accept"}}') == Response(
        id=3, result=msgspec.Raw(b'{"action":"accept"}')
    )
    error = classify(b'{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}')
    assert error == ErrorResponse(id=4, error=ErrorObject(code=-1, message="no"))
    # An error object that does not decode still ends the prompt, as an internal error.
    broken = classify(b'{"jsonrpc":"2.0","id":5,"error":"no"}')
    assert isinstance(broken, ErrorResponse)
    assert (broken.id, broken.error.code) == (5, -32603)
    # What cannot answer a prompt (the server's ids are integers; not JSON-RPC 2.0) is dropped, never
    # answered: an error would carry an id of the server's, which the client may be using for a call.
    for line in (
        b'{"jsonrpc":"2.0","id":"s","result":{}}',
        b'{"jsonrpc":"2.0","id":true,"result":{}}',
        b'{"jsonrpc":"1.0","id":6,"result":{}}',
        b'{"id":6,"error":{"code":1,"message":"x"}}',
    ):
        assert classify(line) is None, line
    # In a batch, answers are elements like any other.
    batch = classify(b'[{"jsonrpc":"2.0","id":7,"result":{}},{"jsonrpc":"2.0","method":"n"}]')
    assert isinstance(batch, Batch)
    assert [type(item) for item in batch.items] == [Response, Notification]


async def test_answers_to_no_prompt_are_never_answered_over_stdio() -> None:
    with trio.fail_after(DEADLINE):
        async with raw_server(BASIC) as server:
            await server.initialize()
            for line in (
                b'{"jsonrpc":"2.0","id":1,"result":{}}',
                b'{"jsonrpc":"1.0","id":1,"result":{}}',
                b'{"jsonrpc":"2.0","id":1,"error":"broken"}',
                b'{"jsonrpc":"2.0","id":"x","error":{"code":1,"message":"m"}}',
            ):
                await server.send_line(line)
            # Nothing came back for them: the next line is the ping's answer.
            await server.send(ping(99))
            assert await server.receive() == {"jsonrpc": "2.0", "id": 99, "result": {}}


async def test_malformed_lines_are_answered_with_the_recovered_id_or_none() -> None:
    with trio.fail_after(DEADLINE):
        async with raw_server(BASIC) as server:
            await server.initialize()
            for line, expected in RECOVERED:
                await server.send_line(line)
                message = await server.receive()
                assert message is not None
                assert message.get("id", ABSENT) == expected, line
                assert message["error"]["code"] == -32700
                assert message["error"]["message"].startswith("parse error: ")
            surrogate = next(m for m in server.messages if m.get("id") == 5)
            assert "lone UTF-16 surrogate (\\ud83d)" in surrogate["error"]["message"]
            # Invalid UTF-8 inside params still parses as a request: its params are refused, by id.
            await server.send_line(b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"\xed\xa0\xbd"}}')
            error = (await server.response(6))["error"]
            assert error["code"] == -32602
            assert error["message"].startswith("invalid params: the params of tools/call are not valid JSON text")
            assert (await server.request("tools/call", {"name": "echo", "arguments": {"text": "ok"}}))["result"][
                "content"
            ] == [{"type": "text", "text": "ok"}]


# --- ids in flight ----------------------------------------------------------------------

GATED = """
from xcsh_run.pi import CustomTool


def factory(api):
    def gate(tcid, params, on_update, ctx, signal_):
        on_update({{"content": [{{"type": "text", "text": "waiting"}}], "details": None}})
        with open({fifo!r}) as f:
            return f.read()

    return CustomTool(name="gate", description="Waits for its FIFO", parameters={{"type": "object"}}, execute=gate)
"""


async def start_gate(server: RawServer, request_id: object) -> None:
    params = {"name": "gate", "arguments": {}, "_meta": {"progressToken": "g"}}
    await server.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
    progress = await server.receive()  # the call is in flight
    assert progress is not None
    assert progress["method"] == "notifications/progress"


@pytest.mark.parametrize(
    ("second", "logged"),
    [
        (b'{"jsonrpc":"2.0","id":7,"method":"ping"}', b"id 7 is already in use by a request in flight"),
        (b'{"jsonrpc":"2.0","id":7,"method":"no/such"}', b"id 7 is already in use by a request in flight"),
        (b'{"jsonrpc":"1.0","id":7,"method":"ping"}', b"not answering malformed input with id 7"),
        (b'{"jsonrpc":"2.0","id":7,"method":"ping","x":"\xff', b"not answering malformed input with id 7"),
    ],
)
async def test_an_id_in_flight_is_never_answered_twice(tmp_path: Path, second: bytes, logged: bytes) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    (tmp_path / "gated.py").write_text(GATED.format(fifo=str(fifo)))
    with trio.fail_after(DEADLINE):
        async with raw_server(str(tmp_path / "gated.py")) as server:
            await server.initialize()
            await start_gate(server, 7)
            await server.send_line(second)
            await server.stderr_contains(logged)  # decided: no answer
            assert (await server.request("ping"))["result"] == {}
            await trio.to_thread.run_sync(fifo.write_text, "released", abandon_on_cancel=True)
            result = (await server.response(7))["result"]
            assert result["content"] == [{"type": "text", "text": "released"}]
            # Once answered, the id is free again.
            await server.send_line(b'{"jsonrpc":"2.0","id":7,"method":"ping"}')
            assert (await server.response(7))["result"] == {}
            assert await server.close_and_drain() == 0
            assert [m for m in server.messages if m.get("id") == 7 and "method" not in m] == [
                {"jsonrpc": "2.0", "id": 7, "result": result},
                {"jsonrpc": "2.0", "id": 7, "result": {}},
            ]


# --- initialize ---------------------------------------------------------------------------

INIT = {"capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}


async def test_a_second_initialize_is_refused_and_changes_nothing() -> None:
    with trio.fail_after(DEADLINE):
        async with raw_server(BASIC) as server:
            # Bad params do not count as an initialize: the client may try again.
            assert (await server.request("initialize", {}))["error"]["code"] == -32602
            first = await server.request("initialize", {"protocolVersion": "2025-06-18", **INIT})
            assert first["result"]["protocolVersion"] == "2025-06-18"
            again = await server.request("initialize", {"protocolVersion": "2025-03-26", **INIT})
            assert again["error"] == {
                "code": -32600,
                "message": "invalid request: the session is already initialized (protocol 2025-06-18); "
                "initialize is sent once, and a new session needs a new connection",
            }
            # Still 2025-06-18: a batch (which 2025-03-26 would take) is refused.
            await server.send_line(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
            assert "not part of protocol 2025-06-18" in (await server.response(1))["error"]["message"]


async def test_the_sdk_client_sees_a_second_initialize_fail() -> None:
    import mcp_types

    with trio.fail_after(DEADLINE):
        async with session(BASIC) as s:
            # The SDK answers initialize() from its cache; a client that sends it again gets an error.
            again = mcp_types.InitializeRequest(
                params=mcp_types.InitializeRequestParams(
                    protocol_version="2025-06-18",
                    capabilities=mcp_types.ClientCapabilities(),
                    client_info=mcp_types.Implementation(name="again", version="0"),
                )
            )
            with pytest.raises(MCPError) as caught:
                await s.send_request(again, mcp_types.InitializeResult)
            assert caught.value.error.code == -32600
            assert "already initialized (protocol 2025-11-25)" in caught.value.error.message
            assert text_of(await s.call_tool("add", {"a": 1, "b": 2})) == "3"


# --- batches ------------------------------------------------------------------------------


class BatchServer:
    def __init__(self, server: RawServer) -> None:
        self.server = server

    async def batch(self, *messages: object) -> Any:
        await self.server.send_line(json.dumps(list(messages)).encode())
        return await self.raw_receive()

    async def raw_receive(self) -> Any:
        # RawServer.receive wants objects; a batch answer is an array.
        server = self.server
        assert server.process.stdout is not None
        while b"\n" not in server._buffer:
            chunk = await server.process.stdout.receive_some(65536)
            assert chunk, "EOF"
            server._buffer += chunk
        line, server._buffer = server._buffer.split(b"\n", 1)
        return json.loads(line)


def ping(request_id: object) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "ping"}


NOTE = {"jsonrpc": "2.0", "method": "notifications/whatever"}


async def test_batches_are_served_under_2025_03_26() -> None:
    with trio.fail_after(DEADLINE):
        async with raw_server(BASIC) as server:
            init = await server.request("initialize", {"protocolVersion": "2025-03-26", **INIT})
            assert init["result"]["protocolVersion"] == "2025-03-26"
            b = BatchServer(server)
            add = {
                "jsonrpc": "2.0",
                "id": "a",
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 2}},
            }
            answer = await b.batch(ping(1), NOTE, add, 42, {"jsonrpc": "2.0", "id": 3, "method": "nope"}, ping(1))
            # No entry for the notification, nor for the second request with id 1 (a duplicate in flight).
            assert [entry.get("id", ABSENT) for entry in answer].count(1) == 1
            by_id = {entry.get("id", ABSENT): entry for entry in answer}
            assert sorted(by_id, key=repr) == sorted([1, 3, "a", ABSENT], key=repr)
            assert by_id[1]["result"] == {}
            assert by_id[3]["error"] == {"code": -32601, "message": "method not found: nope"}
            assert by_id["a"]["result"]["content"] == [{"type": "text", "text": "2"}]
            assert by_id[ABSENT]["error"]["code"] == -32600
            # A batch of notifications gets no answer at all: the next line is the ping's.
            await server.send_line(
                json.dumps([NOTE, {"jsonrpc": "2.0", "method": "notifications/initialized"}]).encode()
            )
            assert await b.batch(ping(4)) == [{"jsonrpc": "2.0", "id": 4, "result": {}}]
            # An empty batch is an invalid request, answered alone (not as an array).
            await server.send_line(b"[]")
            assert await b.raw_receive() == {
                "jsonrpc": "2.0",
                "error": {"code": -32600, "message": "invalid request: an empty batch"},
            }
            # Single messages still work beside batches.
            assert (await server.request("ping"))["result"] == {}


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2024-11-05", None])
async def test_batches_are_refused_per_request_id_otherwise(version: str | None) -> None:
    with trio.fail_after(DEADLINE):
        async with raw_server(BASIC) as server:
            if version is not None:
                await server.request("initialize", {"protocolVersion": version, **INIT})
                why = f"invalid request: batches are not part of protocol {version}, only of 2025-03-26"
            else:
                why = "invalid request: a batch before initialize (batches exist only in protocol 2025-03-26)"
            await server.send_line(json.dumps([ping(1), NOTE, ping(2), ping(1)]).encode())
            got = [await server.receive(), await server.receive()]
            assert sorted((m or {}).get("id", ABSENT) for m in got) == [1, 2]  # type: ignore[type-var]
            assert all(m is not None and m["error"] == {"code": -32600, "message": why} for m in got)
            # Nothing but notifications: one error without an id, so the client hears of it.
            await server.send_line(json.dumps([NOTE]).encode())
            assert await server.receive() == {"jsonrpc": "2.0", "error": {"code": -32600, "message": why}}
            assert (await server.request("ping"))["result"] == {}


# --- tool names -----------------------------------------------------------------------------

NAMED = """
from xcsh_run.pi import CustomTool


def factory(api):
    def make(name):
        return CustomTool(name=name, description=f"I am {{name}}", parameters={{"type": "object"}},
                          execute=lambda *a: name)

    return [make(n) for n in {names!r}]
"""
LONG = "x" * 130
NAMES = ["ok_name", "résumé", LONG, "工具"]
RULE = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def test_names_outside_the_rule_are_sanitized_deterministically_and_without_collisions() -> None:
    names = ToolNames(NAMES)
    served = [names.to_mcp(n) for n in NAMES]
    assert served[0] == "ok_name"
    assert re.fullmatch(r"resume-[0-9a-f]{8}", served[1])
    assert re.fullmatch(r"x{119}-[0-9a-f]{8}", served[2])
    assert re.fullmatch(r"__-[0-9a-f]{8}", served[3])
    assert all(RULE.fullmatch(s) for s in served) and len(set(served)) == 4
    assert [names.to_tool(s) for s in served] == NAMES
    assert ToolNames(reversed(NAMES)).to_mcp("résumé") == served[1]  # depends on the name alone
    # A tool already named like another's sanitized name keeps it; the other takes more digits.
    clash = ToolNames(["résumé", served[1]])
    assert clash.to_mcp(served[1]) == served[1]
    assert re.fullmatch(r"resume-[0-9a-f]{16}", clash.to_mcp("résumé"))
    assert clash.to_tool(served[1]) == served[1]
    # Names not served pass through (a tool's own name, a hidden tool's).
    assert names.to_tool("résumé") == "résumé"
    assert rename_listed([{"name": "résumé", "description": "d"}], names) == [{"name": served[1], "description": "d"}]
    assert valid_tool_name("a.b-C_9") and not valid_tool_name("") and not valid_tool_name("a b")


async def test_tool_names_are_served_under_mcps_rule_and_mapped_back(tmp_path: Path) -> None:
    (tmp_path / "named.py").write_text(NAMED.format(names=NAMES))
    with trio.fail_after(DEADLINE):
        async with session(str(tmp_path / "named.py")) as s:
            listed = {t.description: t.name for t in (await s.list_tools()).tools}
            assert set(listed) == {f"I am {n}" for n in NAMES}
            for name in NAMES:
                served = listed[f"I am {name}"]
                assert RULE.fullmatch(served), served
                assert text_of(await s.call_tool(served, {})) == name
            assert listed["I am ok_name"] == "ok_name"
            # The tool's own name still reaches it.
            assert text_of(await s.call_tool("résumé", {})) == "résumé"
    log = Path("serve.log").read_text()
    served = listed["I am résumé"]
    assert (
        f"tool 'résumé' breaks MCP's rule for tool names (1-128 characters of A-Z a-z 0-9 _ - .): served as '{served}'"
        in log
    )
    assert log.count("breaks MCP's rule") == 3
