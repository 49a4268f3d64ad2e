"""`xcsh-run serve --http`: Streamable HTTP, driven by the official SDK client and by raw HTTP (httpx2).

Each test starts a real `xcsh-run serve --http 127.0.0.1:0` subprocess, reads
the bound URL from its stderr (no port is ever guessed), and ends it with
SIGTERM, checking it exits 128 + 15 with no worker left (the autouse
``no_survivors`` fixture checks the rest). What is HTTP's own is here; the
feature tests run over both transports (``transport``, tests/_support/mcp_clients.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import trio

from tests._support.mcp_clients import BASIC, DEADLINE, http_server, sdk_session
from tests.conftest import SDK_HTTP_LEFTOVERS
from tests.mcp.test_mcp import EXTRA_TOOLS, text_of, wait_exited

pytestmark = SDK_HTTP_LEFTOVERS

JSON_AND_SSE = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


async def raw_initialize(client: httpx2.AsyncClient, url: str) -> str:
    response = await client.post(url, json=INIT, headers={**JSON_AND_SSE, "accept": "application/json"})
    assert response.status_code == 200, response.text
    assert response.json()["result"]["protocolVersion"] == "2025-11-25"
    session_id: str = response.headers["mcp-session-id"]
    return session_id


# --- the official client ---------------------------------------------------------


async def test_sdk_client_initializes_lists_calls_and_ends_its_session() -> None:
    # Progress, cancellation and list_changed over HTTP: the `transport` tests of test_mcp.py.
    with trio.fail_after(DEADLINE):
        async with http_server() as server:
            async with sdk_session(server.url) as s:
                tools = {t.name for t in (await s.list_tools()).tools}
                assert {"add", "echo", "progress"} <= tools
                assert text_of(await s.call_tool("add", {"a": 2, "b": 3})) == "5"
            # The client sent DELETE on exit: the server forgot the session (and kept serving).
            async with httpx2.AsyncClient() as client:
                assert (await client.post(server.url, json=INIT, headers=JSON_AND_SSE)).status_code == 200


async def test_a_client_gone_mid_call_stops_the_call(tmp_path: Path) -> None:
    extra = tmp_path / "extra.py"
    extra.write_text(EXTRA_TOOLS)
    with trio.fail_after(DEADLINE):
        async with http_server(BASIC, str(extra)) as server, httpx2.AsyncClient(timeout=DEADLINE) as client:
            session_id = await raw_initialize(client, server.url)
            headers = {**JSON_AND_SSE, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
            call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
            call["params"] = {"name": "spin", "arguments": {}, "_meta": {"progressToken": "p"}}
            async with client.stream("POST", server.url, json=call, headers=headers) as response:
                assert response.headers["content-type"] == "text/event-stream"
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        pid = int(json.loads(line[6:])["params"]["message"].split()[1])
                        break
            # The stream is closed; after the resume window the call goes through the ladder.
            await wait_exited(pid)


# --- raw HTTP -----------------------------------------------------------------


async def test_origin_token_session_and_version_checks() -> None:
    with trio.fail_after(DEADLINE):
        async with (
            http_server(env={"XCSH_RUN_MCP_TOKEN": "s3cret"}) as server,
            httpx2.AsyncClient(timeout=DEADLINE) as client,
        ):
            auth = {**JSON_AND_SSE, "authorization": "Bearer s3cret"}
            no_token = await client.post(server.url, json=INIT, headers=JSON_AND_SSE)
            assert no_token.status_code == 401
            assert no_token.headers["www-authenticate"].startswith("Bearer")
            wrong = await client.post(server.url, json=INIT, headers={**JSON_AND_SSE, "authorization": "Bearer nope"})
            assert wrong.status_code == 401
            assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
            foreign = await client.post(server.url, json=INIT, headers={**auth, "origin": "http://evil.example"})
            assert foreign.status_code == 403
            local = await client.post(server.url, json=INIT, headers={**auth, "origin": "http://localhost:5173"})
            assert local.status_code == 200
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            assert (await client.post(server.url, json=ping, headers=auth)).status_code == 400  # no session
            unknown = await client.post(server.url, json=ping, headers={**auth, "mcp-session-id": "nope"})
            assert unknown.status_code == 404
            session_id = local.headers["mcp-session-id"]
            bad_version = {**auth, "mcp-session-id": session_id, "mcp-protocol-version": "1999-01-01"}
            assert (await client.post(server.url, json=ping, headers=bad_version)).status_code == 400
            ok = {
                **auth,
                "mcp-session-id": session_id,
                "mcp-protocol-version": "2025-11-25",
                "accept": "application/json",
            }
            response = await client.post(server.url, json=ping, headers=ok)
            assert response.status_code == 200
            assert response.json() == {"jsonrpc": "2.0", "id": 2, "result": {}}
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await client.post(server.url, json=note, headers=ok)).status_code == 202
            assert (await client.delete(server.url, headers=ok)).status_code == 200
            assert (await client.post(server.url, json=ping, headers=ok)).status_code == 404


async def test_oversized_and_malformed_bodies_are_refused() -> None:
    with trio.fail_after(DEADLINE):
        async with (
            http_server(options=("--max-message-bytes", "2048")) as server,
            httpx2.AsyncClient(timeout=DEADLINE) as client,
        ):
            big = {**INIT, "params": {**INIT["params"], "pad": "x" * 5000}}  # type: ignore[dict-item]
            refused = await client.post(server.url, json=big, headers=JSON_AND_SSE)
            assert refused.status_code == 413
            limit = "the limit is 2048 bytes (--max-message-bytes)"
            assert (
                refused.json()["error"]["message"]
                == f"message too large: {len(refused.request.content)} bytes; {limit}"
            )

            async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit is found while reading
                for _ in range(5):
                    yield b"x" * 1000

            chunked = await client.post(server.url, content=chunks(), headers=JSON_AND_SSE)
            assert chunked.status_code == 413
            assert chunked.json()["error"]["message"].startswith("message too large: ")
            assert chunked.json()["error"]["message"].endswith(limit)
            garbage = await client.post(server.url, content=b"{nope", headers=JSON_AND_SSE)
            assert garbage.status_code == 400
            assert garbage.json()["error"]["code"] == -32700
            assert (await client.post(server.url, json=INIT, headers={"accept": "text/html"})).status_code == 406


async def test_a_lost_stream_resumes_with_last_event_id() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server() as server, httpx2.AsyncClient(timeout=DEADLINE) as client:
            session_id = await raw_initialize(client, server.url)
            headers = {**JSON_AND_SSE, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
            call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call"}
            call["params"] = {"name": "progress", "arguments": {"count": 3}, "_meta": {"progressToken": "p"}}
            async with client.stream("POST", server.url, json=call, headers=headers) as response:
                lines = response.aiter_lines()
                first_id = None
                async for line in lines:
                    if line.startswith("id: "):
                        first_id = line[4:]  # the priming event's id
                        break
            assert first_id is not None
            # Dropped right after the priming event: everything after it is replayed on a GET.
            get = {**headers, "last-event-id": first_id}
            async with client.stream("GET", server.url, headers=get) as resumed:
                assert resumed.status_code == 200
                data = [json.loads(line[6:]) async for line in resumed.aiter_lines() if line.startswith("data: {")]
            assert data[-1]["id"] == 9
            assert data[-1]["result"]["content"][0]["text"] == "done"
            assert len(data) >= 2, data  # the progress sent after the priming event is replayed too
            assert [m["params"]["progress"] for m in data[:-1]] == sorted(m["params"]["progress"] for m in data[:-1])


PROMPTING = """
from xcsh_run.pi import CustomTool


def factory(api):
    def ask(tcid, params, on_update, ctx, signal_):
        return f"has_ui={api.has_ui} confirmed={api.ui.confirm('Proceed', 'Really?')} sampled={api.sample('hi')}"

    return CustomTool(name="ask", description="prompts and samples", parameters={"type": "object"}, execute=ask)
"""


async def test_a_json_only_client_gets_the_no_op_answer_to_prompts_at_once(tmp_path: Path) -> None:
    # A prompt cannot travel in a single JSON body: the tool must not wait for an answer that never
    # comes (the server's --timeout is 20 s; the deadline here is well under it).
    tools = tmp_path / "prompting.py"
    tools.write_text(PROMPTING)
    init = {**INIT, "params": {**INIT["params"], "capabilities": {"elicitation": {}, "sampling": {}}}}  # type: ignore[dict-item]
    with trio.fail_after(10):
        async with (
            http_server(str(tools), options=("--timeout", "20")) as server,
            httpx2.AsyncClient(timeout=DEADLINE) as client,
        ):
            first = await client.post(server.url, json=init, headers={**JSON_AND_SSE, "accept": "application/json"})
            headers = {"content-type": "application/json", "accept": "application/json"}
            headers |= {"mcp-session-id": first.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ask", "arguments": {}}}
            response = await client.post(server.url, json=call, headers=headers)
    result = response.json()["result"]
    assert not result["isError"], result
    assert result["content"][0]["text"] == "has_ui=True confirmed=False sampled=None"


async def test_a_malformed_last_event_id_is_a_400_not_a_dropped_connection() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server() as server, httpx2.AsyncClient(timeout=DEADLINE) as client:
            session_id = await raw_initialize(client, server.url)
            headers = {**JSON_AND_SSE, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
            for bad in ("\u00b2-1", "1" * 5000 + "-1", "x", "1-"):
                response = await client.get(server.url, headers={**headers, "last-event-id": bad.encode()})
                assert response.status_code == 400, (bad[:20], response.status_code)
                assert "not an event id of this server" in response.json()["error"]["message"]


async def test_a_closed_stream_is_done_so_its_session_can_let_it_go() -> None:
    from xcsh_run._mcp.http.streams import EventStream

    stream = EventStream(1, request_ids=(7,))
    await stream.send(b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}')
    assert not stream.done
    stream.close()  # the client left and never came back for the rest
    assert stream.done
