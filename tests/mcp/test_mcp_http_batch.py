"""`xcsh-run serve --http`: batches per the negotiated revision, and bodies that hold no message, on raw HTTP.

The body of a POST is read by the same wire layer as a stdio line: a batch is
served as one JSON array when the session negotiated 2025-03-26 (the one
revision with batches), refused with 400 otherwise, and a body that is not a
message gets 400 with the id it names when that id can be told, never a null one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.mcp.test_mcp import EXTRA_TOOLS, wait_exited
from tests.mcp.test_mcp_http import BASIC, DEADLINE, INIT, JSON_AND_SSE, http_server

# Leaving an SSE stream early leaves httpx2's line iterators to the garbage collector.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <async_generator object:pytest.PytestUnraisableExceptionWarning"
)

JSON_ONLY = {**JSON_AND_SSE, "accept": "application/json"}
NOTE = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def ping(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "ping"}


def echo(request_id: int, text: str) -> dict[str, Any]:
    params = {"name": "echo", "arguments": {"text": text}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def initialize(client: httpx2.AsyncClient, url: str, version: str) -> dict[str, str]:
    """A session speaking ``version``; the headers its later POSTs carry."""
    init = {**INIT, "params": {**INIT["params"], "protocolVersion": version}}  # type: ignore[dict-item]
    response = await client.post(url, json=init, headers=JSON_ONLY)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["protocolVersion"] == version
    headers = {**JSON_ONLY, "mcp-session-id": response.headers["mcp-session-id"]}
    assert (await client.post(url, json=NOTE, headers=headers)).status_code == 202
    return headers


def by_id(answers: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    assert len({a["id"] for a in answers}) == len(answers), answers
    return {a["id"]: a for a in answers}


async def test_a_batch_is_one_json_array_under_2025_03_26() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server() as server, httpx2.AsyncClient(timeout=DEADLINE) as client:
            headers = await initialize(client, server.url, "2025-03-26")
            batch = [ping(2), NOTE, echo(3, "hi"), {"jsonrpc": "2.0", "id": 4, "method": "nope"}, {"jsonrpc": "2.0"}]
            response = await client.post(server.url, json=batch, headers=headers)
            assert response.status_code == 200, response.text
            assert response.headers["content-type"] == "application/json"
            body = response.json()
            assert isinstance(body, list)
            answers = by_id([a for a in body if "id" in a])
            assert answers[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}
            assert answers[3]["result"]["content"][0]["text"] == "hi"
            assert answers[4]["error"]["code"] == -32601
            # The element with no method and no id: an error with no id member (never null).
            assert [a["error"]["code"] for a in body if "id" not in a] == [-32600]
            assert len(body) == 4


async def test_a_batch_on_an_sse_stream_ends_with_its_array() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server() as server, httpx2.AsyncClient(timeout=DEADLINE) as client:
            headers = {**await initialize(client, server.url, "2025-03-26"), "accept": JSON_AND_SSE["accept"]}
            async with client.stream("POST", server.url, json=[echo(5, "a"), echo(6, "b")], headers=headers) as sse:
                assert sse.status_code == 200
                assert sse.headers["content-type"] == "text/event-stream"
                data = [json.loads(line[6:]) async for line in sse.aiter_lines() if line.startswith("data: [")]
            assert len(data) == 1, data
            answers = by_id(data[0])
            assert sorted(answers) == [5, 6]
            assert answers[5]["result"]["content"][0]["text"] == "a"
            assert answers[6]["result"]["content"][0]["text"] == "b"


async def test_a_batch_of_notifications_and_responses_gets_202() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server() as server, httpx2.AsyncClient(timeout=DEADLINE) as client:
            headers = await initialize(client, server.url, "2025-03-26")
            # A response to no prompt of the server's is dropped, never answered.
            answer = {"jsonrpc": "2.0", "id": 77, "result": {"action": "accept"}}
            response = await client.post(server.url, json=[NOTE, answer], headers=headers)
            assert response.status_code == 202
            assert response.content == b""
            # The session still serves.
            assert (await client.post(server.url, json=ping(8), headers=headers)).json()["result"] == {}


async def test_a_batch_is_refused_under_other_revisions() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server() as server, httpx2.AsyncClient(timeout=DEADLINE) as client:
            for version in ("2025-11-25", "2025-06-18"):
                headers = await initialize(client, server.url, version)
                response = await client.post(server.url, json=[ping(2), ping(3)], headers=headers)
                assert response.status_code == 400
                body = response.json()
                assert "id" not in body
                assert body["error"] == {
                    "code": -32600,
                    "message": f"invalid request: batches are not part of protocol {version}, only of 2025-03-26",
                }
                # Nothing of it ran, and the session goes on.
                assert (await client.post(server.url, json=ping(4), headers=headers)).json()["id"] == 4
            headers = await initialize(client, server.url, "2025-03-26")
            empty = await client.post(server.url, content=b"[]", headers=headers)
            assert empty.status_code == 400
            assert empty.json() == {
                "jsonrpc": "2.0",
                "error": {"code": -32600, "message": "invalid request: an empty batch"},
            }


async def test_a_body_that_is_not_a_message_gets_400_with_its_id_when_it_can_be_told() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server() as server, httpx2.AsyncClient(timeout=DEADLINE) as client:
            headers = await initialize(client, server.url, "2025-11-25")
            # A lone surrogate (an emoji cut in two) makes the body invalid JSON; the id is still certain.
            arguments = b'"arguments":{"text":"\\ud83d"}'
            cut = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo",' + arguments + b"}}"
            response = await client.post(server.url, content=cut, headers=headers)
            assert response.status_code == 400
            body = response.json()
            assert body["id"] == 7
            assert body["error"]["code"] == -32700
            assert "lone UTF-16 surrogate" in body["error"]["message"]
            # Invalid UTF-8 before the id is read: still the id.
            bad_utf8 = b'{"jsonrpc":"2.0","method":"ping","params":{"x":"\xff"},"id":"k"}'
            assert (await client.post(server.url, content=bad_utf8, headers=headers)).json()["id"] == "k"
            # No id to tell: no id member at all, not null.
            for content in (b"{nope", b"", b'{"jsonrpc":"2.0","id":12'):
                response = await client.post(server.url, content=content, headers=headers)
                assert response.status_code == 400
                assert "id" not in response.json(), (content, response.text)
                assert response.json()["error"]["code"] == -32700
            # A well-formed message that is not a request: -32600 with its id.
            no_method = await client.post(server.url, json={"jsonrpc": "2.0", "id": 13}, headers=headers)
            assert no_method.status_code == 400
            assert no_method.json() == {
                "jsonrpc": "2.0",
                "id": 13,
                "error": {"code": -32600, "message": 'invalid request: no "method"'},
            }
            # A broken response to a prompt is never answered with its id (the server's, not the client's).
            broken_answer = b'{"jsonrpc":"2.0","id":1,"result":{"x":"\\ud800"}}'
            response = await client.post(server.url, content=broken_answer, headers=headers)
            assert response.status_code == 400
            assert "id" not in response.json()


def spin(request_id: int) -> dict[str, Any]:
    params = {"name": "spin", "arguments": {}, "_meta": {"progressToken": f"p{request_id}"}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_a_client_gone_from_a_batch_stops_its_calls_and_ids_in_flight_are_never_named(tmp_path: Path) -> None:
    extra = tmp_path / "extra.py"
    extra.write_text(EXTRA_TOOLS)
    with trio.fail_after(DEADLINE):
        async with http_server(BASIC, str(extra)) as server, httpx2.AsyncClient(timeout=DEADLINE) as client:
            headers = {**await initialize(client, server.url, "2025-03-26"), "accept": JSON_AND_SSE["accept"]}
            pids: list[int] = []
            async with client.stream("POST", server.url, json=[spin(7), spin(8)], headers=headers) as response:
                assert response.headers["content-type"] == "text/event-stream"
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        pids.append(int(json.loads(line[6:])["params"]["message"].split()[1]))
                        if len(pids) == 2:
                            break
                # While id 7 is in flight, a body that names it is refused without the id.
                cut = b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":"\\udc00"}}'
                refused = await client.post(server.url, content=cut, headers=headers)
                assert refused.status_code == 400
                assert "id" not in refused.json()
                assert refused.json()["error"]["code"] == -32700
            # The stream is closed; after the resume window both calls go through the ladder.
            for pid in pids:
                await wait_exited(pid)
