"""MCP 2026-07-28 (the stateless era) beside the handshake revisions, over Streamable HTTP and stdio.

The client is the official SDK's ``Client`` pinned to 2026-07-28 (no
``initialize``; each request carries its revision and capabilities in
``_meta``), and raw HTTP where the wire itself is the point. The server is a
real ``xcsh-run serve --http`` with real workers; the handshake revisions on
the same server are the other tests' business, and one test here checks that
both eras are served side by side.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
import trio
from mcp import StdioServerParameters
from mcp.client import Client
from mcp.client.subscriptions import SubscriptionLost

from tests._support.mcp_clients import BASIC, DEADLINE, http_server, sdk_session, serve_args
from tests.conftest import SDK_HTTP_LEFTOVERS, XCSH_RUN
from tests.mcp import test_mcp
from tests.mcp.test_mcp import error_of, text_of, tool_module, wait_exited

pytestmark = SDK_HTTP_LEFTOVERS

REVISION = "2026-07-28"

CHATTY = """
from xcsh_run.pi import CustomTool


def factory(api):
    def chatty(tcid, params, on_update, ctx, signal_):
        api.logger.debug("debug record")
        api.logger.warning("warning record")
        api.logger.error("error record")
        return "chatted"

    def prompts(tcid, params, on_update, ctx, signal_):
        with open(params["counter"], "a") as f:  # how many times the tool ran: once, whatever the rounds
            f.write("ran\\n")
        first = api.ui.confirm("Proceed", "Really?")
        colour = api.ui.select("Colour", ["red", "green"]) if first else None
        return f"confirmed={first!r} colour={colour!r} has_ui={api.has_ui}"

    def samples(tcid, params, on_update, ctx, signal_):
        answer = api.sample("Say hello", max_tokens=20)
        return "sampled: " + (answer["content"]["text"] if answer else "nothing")

    def named(tcid, params, on_update, ctx, signal_):
        form = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        answer = api.ui.elicit("Your name?", form, key="user_name")
        return "hello " + (answer["content"]["name"] if answer["action"] == "accept" else "nobody")

    def where(tcid, params, on_update, ctx, signal_):
        roots = api.roots(key="workspace")
        return "no roots" if roots is None else "roots: " + ", ".join(r["uri"] for r in roots)

    obj = {"type": "object"}
    return [
        CustomTool(name="named", description="Asks a name, by its own key", parameters=obj, execute=named),
        CustomTool(name="where", description="Names the client's roots", parameters=obj, execute=where),
        CustomTool(name="chatty", description="Logs three records", parameters=obj, execute=chatty),
        CustomTool(name="prompts", description="Asks to confirm, then to choose", parameters=obj, execute=prompts),
        CustomTool(name="samples", description="Asks the client's model", parameters=obj, execute=samples),
    ]
"""


extra = test_mcp.extra  # the fixture: a module of tools that spin, or ignore SIGTERM


@pytest.fixture
def chatty(tmp_path: Path) -> str:
    path = tmp_path / "chatty.py"
    path.write_text(CHATTY)
    return str(path)


def envelope(**extra_meta: Any) -> dict[str, Any]:
    """The ``_meta`` a 2026-07-28 request carries."""
    return {
        "io.modelcontextprotocol/protocolVersion": REVISION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
        **extra_meta,
    }


async def post(url: str, method: str, params: dict[str, Any], *, name: str | None = None) -> httpx2.Response:
    """One raw 2026-07-28 request, with the standard headers (``Mcp-Name`` for tools/call)."""
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": REVISION,
        "mcp-method": method,
    }
    if name is not None:
        headers["mcp-name"] = name
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    async with httpx2.AsyncClient(timeout=DEADLINE) as client:
        return await client.post(url, headers=headers, content=json.dumps(body))


def answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC response in a JSON body or in the last data event of an SSE body."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        messages = [json.loads(e) for e in events if e]
        return next(m for m in reversed(messages) if "id" in m)
    decoded: dict[str, Any] = response.json()
    return decoded


async def test_a_2026_client_lists_and_calls_tools_without_initialize() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(BASIC) as server, Client(server.url, mode=REVISION) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"echo", "add", "progress", "raises"} <= names
            assert text_of(await client.call_tool("echo", {"text": "stateless"})) == "stateless"
            added = await client.call_tool("add", {"a": 2, "b": 3})
            assert not added.is_error
            assert text_of(added) == "5"


async def test_results_carry_their_type_and_the_listing_a_cache_hint_and_no_session_is_opened() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(BASIC) as server:
            listed = await post(server.url, "tools/list", {"_meta": envelope()})
            assert listed.status_code == 200
            assert "mcp-session-id" not in listed.headers
            result = answer(listed)["result"]
            assert result["resultType"] == "complete"
            assert result["ttlMs"] == 1000  # the poll interval: the tool files are checked that often
            assert result["cacheScope"] == "public"
            assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "xcsh-run"
            called = answer(
                await post(
                    server.url,
                    "tools/call",
                    {"name": "echo", "arguments": {"text": "x"}, "_meta": envelope()},
                    name="echo",
                )
            )
            assert called["result"]["resultType"] == "complete"
            assert called["result"]["content"] == [{"type": "text", "text": "x"}]


async def test_discover_names_both_eras_and_an_unknown_revision_is_refused_with_the_ones_served() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(BASIC) as server:
            discovered = answer(await post(server.url, "server/discover", {"_meta": envelope()}))["result"]
            assert REVISION in discovered["supportedVersions"]
            assert "tools" in discovered["capabilities"]
            async with httpx2.AsyncClient(timeout=DEADLINE) as http:
                body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": envelope()}}
                body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
                headers = {
                    "accept": "application/json, text/event-stream",
                    "content-type": "application/json",
                    "mcp-protocol-version": "2099-01-01",
                    "mcp-method": "tools/list",
                }
                refused = await http.post(server.url, headers=headers, content=json.dumps(body))
            assert refused.status_code == 400
            error = answer(refused)["error"]
            assert error["code"] == mcp_types.UNSUPPORTED_PROTOCOL_VERSION
            assert error["data"]["requested"] == "2099-01-01"
            assert REVISION in error["data"]["supported"]


async def test_removed_methods_are_not_found_under_2026() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(BASIC) as server:
            for method in ("ping", "logging/setLevel", "initialize"):
                response = await post(server.url, method, {"_meta": envelope()})
                assert response.status_code == 404, method
                assert answer(response)["error"]["code"] == mcp_types.METHOD_NOT_FOUND, method


async def test_both_eras_are_served_side_by_side_on_one_endpoint() -> None:
    with trio.fail_after(DEADLINE):
        async with (
            http_server(BASIC) as server,
            sdk_session(server.url) as legacy,
            Client(server.url, mode=REVISION) as modern,
        ):
            assert text_of(await legacy.call_tool("echo", {"text": "handshake"})) == "handshake"
            assert text_of(await modern.call_tool("echo", {"text": "stateless"})) == "stateless"
            assert text_of(await legacy.call_tool("echo", {"text": "again"})) == "again"


async def test_progress_rides_the_requests_stream() -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    with trio.fail_after(DEADLINE):
        async with http_server(BASIC) as server, Client(server.url, mode=REVISION) as client:
            result = await client.call_tool("progress", {"count": 3}, progress_callback=on_progress)
            assert not result.is_error
            assert len(seen) >= 1
            assert seen == sorted(seen)


async def test_an_error_names_the_tool_and_the_exception() -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(BASIC) as server, Client(server.url, mode=REVISION) as client:
            result = await client.call_tool("raises", {})
            assert error_of(result)["kind"] == "tool_error"
            assert text_of(result).startswith("raises failed: ")
            invalid = await client.call_tool("add", {"a": "two", "b": 3})
            assert text_of(invalid).startswith("add: invalid arguments: at $.a: expected ")


async def test_log_records_come_only_when_the_request_asks_and_only_from_its_level_up(chatty: str) -> None:
    records: list[mcp_types.LoggingMessageNotificationParams] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        records.append(params)

    with trio.fail_after(DEADLINE):
        async with http_server(chatty) as server:
            async with Client(server.url, mode=REVISION, logging_callback=on_log) as quiet:
                assert text_of(await quiet.call_tool("chatty", {})) == "chatted"
            assert records == []  # no logLevel in _meta: no records (the revision's per-request opt-in)
            async with Client(server.url, mode=REVISION, logging_callback=on_log, log_level="warning") as asking:
                assert text_of(await asking.call_tool("chatty", {})) == "chatted"
            assert [(r.level, r.data) for r in records] == [("warning", "warning record"), ("error", "error record")]
            assert {r.logger for r in records} == {"chatty"}


async def test_prompts_become_input_requests_answered_over_rounds_of_the_same_call(chatty: str, tmp_path: Path) -> None:
    asked: list[str] = []

    async def on_elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        assert isinstance(params, mcp_types.ElicitRequestFormParams)
        (field,) = params.requested_schema["properties"]
        value: str | bool = True if field == "confirm" else "green"
        return mcp_types.ElicitResult(action="accept", content={field: value})

    counter = tmp_path / "ran"
    with trio.fail_after(DEADLINE):
        async with (
            http_server(chatty) as server,
            Client(server.url, mode=REVISION, elicitation_callback=on_elicit) as c,
        ):
            result = await c.call_tool("prompts", {"counter": str(counter)})
    assert text_of(result) == "confirmed=True colour='green' has_ui=True"
    assert asked == ["Really?", "Colour"]  # two rounds of input requests, then the result
    assert counter.read_text() == "ran\n"  # one call across three rounds: the tool never ran again


async def test_a_prompt_of_a_request_without_elicitation_gets_its_no_op_answer_at_once(
    chatty: str, tmp_path: Path
) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(chatty) as server, Client(server.url, mode=REVISION) as client:
            result = await client.call_tool("prompts", {"counter": str(tmp_path / "ran")})
    assert text_of(result) == "confirmed=False colour=None has_ui=True"


async def test_a_sample_is_an_input_request_and_without_the_capability_the_request_is_refused(chatty: str) -> None:
    async def on_sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        return mcp_types.CreateMessageResult(
            role="assistant", content=mcp_types.TextContent(type="text", text="hello"), model="m"
        )

    with trio.fail_after(DEADLINE):
        async with http_server(chatty) as server:
            async with Client(server.url, mode=REVISION, sampling_callback=on_sample) as client:
                assert text_of(await client.call_tool("samples", {})) == "sampled: hello"
            called = answer(
                await post(server.url, "tools/call", {"name": "samples", "_meta": envelope()}, name="samples")
            )
            error = called["error"]
            assert error["code"] == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
            assert error["data"]["requiredCapabilities"] == {"sampling": {}}
            assert "'samples' asks for sampling" in error["message"]


async def test_a_tampered_or_unknown_request_state_is_refused_and_the_parked_call_is_kept(
    chatty: str, tmp_path: Path
) -> None:
    meta = envelope()
    meta["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
    params: dict[str, Any] = {"name": "prompts", "arguments": {"counter": str(tmp_path / "ran")}, "_meta": meta}
    with trio.fail_after(DEADLINE):
        async with http_server(chatty) as server:
            first = answer(await post(server.url, "tools/call", params, name="prompts"))["result"]
            assert first["resultType"] == "input_required"
            (key,) = first["inputRequests"]
            state = first["requestState"]
            tampered = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
            for bad in (tampered, "not-a-state"):
                refused = answer(await post(server.url, "tools/call", {**params, "requestState": bad}, name="prompts"))
                assert refused["error"]["code"] == mcp_types.INVALID_PARAMS
            # A retry that answers nothing is asked again, never an error (the call is still parked).
            again = answer(await post(server.url, "tools/call", {**params, "requestState": state}, name="prompts"))
            assert again["result"]["resultType"] == "input_required"
            assert list(again["result"]["inputRequests"]) == [key]
            declined = {key: {"action": "decline"}}
            retry = {**params, "requestState": again["result"]["requestState"], "inputResponses": declined}
            done = answer(await post(server.url, "tools/call", retry, name="prompts"))["result"]
            assert done["resultType"] == "complete"
            assert done["content"] == [{"type": "text", "text": "confirmed=False colour=None has_ui=True"}]


async def test_closing_the_stream_cancels_the_call_through_the_ladder(extra: str) -> None:
    started = trio.Event()
    pid: list[int] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if message is not None and message.startswith("started "):
            pid.append(int(message.split()[1]))
            started.set()

    with trio.fail_after(DEADLINE):
        async with http_server(BASIC, extra) as server, Client(server.url, mode=REVISION) as client:
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def call() -> None:
                    with scope:
                        await client.call_tool("stubborn", {}, progress_callback=on_progress)

                nursery.start_soon(call)
                await started.wait()
                assert os.path.exists(f"/proc/{pid[0]}")
                scope.cancel()  # the client closes the request's response stream: the cancel of 2026-07-28
            await wait_exited(pid[0])  # it ignores SIGTERM: the ladder's kill ends it after the grace
            assert text_of(await client.call_tool("echo", {"text": "still here"})) == "still here"


async def test_a_traceparent_is_kept_with_the_call_and_a_malformed_one_is_ignored(tmp_path: Path) -> None:
    log = tmp_path / "host.log"
    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with trio.fail_after(DEADLINE):
        async with http_server(BASIC, options=("--log-file", str(log), "-vv")) as server:
            for traceparent in (good, "00-not-a-trace-01"):
                params = {"name": "echo", "arguments": {"text": "t"}, "_meta": envelope(traceparent=traceparent)}
                called = answer(await post(server.url, "tools/call", params, name="echo"))
                assert called["result"]["content"] == [{"type": "text", "text": "t"}]
    text = log.read_text()
    assert f"continues trace {good}" in text
    assert "not-a-trace" not in text


# --- over stdio: the first request decides the connection's era ---------------------------


def stdio_server(*tools: str) -> StdioServerParameters:
    return StdioServerParameters(command=XCSH_RUN, args=serve_args(*tools), env=dict(os.environ), cwd=os.getcwd())


async def test_over_stdio_a_2026_client_is_served_statelessly_prompts_included(chatty: str, tmp_path: Path) -> None:
    async def on_elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        assert isinstance(params, mcp_types.ElicitRequestFormParams)
        (field,) = params.requested_schema["properties"]
        return mcp_types.ElicitResult(action="accept", content={field: True if field == "confirm" else "red"})

    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    with trio.fail_after(DEADLINE):
        async with Client(stdio_server(BASIC, chatty), mode=REVISION, elicitation_callback=on_elicit) as client:
            assert {"echo", "prompts"} <= {t.name for t in (await client.list_tools()).tools}
            assert text_of(await client.call_tool("echo", {"text": "over stdio"})) == "over stdio"
            assert not (await client.call_tool("progress", {"count": 2}, progress_callback=on_progress)).is_error
            prompted = await client.call_tool("prompts", {"counter": str(tmp_path / "ran")})
            assert text_of(prompted) == "confirmed=True colour='red' has_ui=True"
    assert len(seen) >= 1


async def test_over_stdio_an_auto_client_gets_2026_and_a_handshake_client_still_gets_its_session() -> None:
    with trio.fail_after(DEADLINE):
        async with Client(stdio_server(BASIC)) as auto:  # probes server/discover first
            assert text_of(await auto.call_tool("echo", {"text": "auto"})) == "auto"
            assert auto.session.protocol_version == REVISION
        async with Client(stdio_server(BASIC), mode="legacy") as legacy:
            assert text_of(await legacy.call_tool("echo", {"text": "legacy"})) == "legacy"
            assert legacy.session.protocol_version == "2025-11-25"


async def test_a_parked_call_gives_way_to_a_new_call_when_every_worker_is_busy(chatty: str, tmp_path: Path) -> None:
    meta = envelope()
    meta["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
    params: dict[str, Any] = {"name": "prompts", "arguments": {"counter": str(tmp_path / "ran")}, "_meta": meta}
    with trio.fail_after(DEADLINE):
        async with http_server(chatty, options=("--max-workers", "1")) as server:
            parked = answer(await post(server.url, "tools/call", params, name="prompts"))["result"]
            assert parked["resultType"] == "input_required"  # it holds the one worker, waiting for its client
            # A new call finds every worker busy: the parked call stops through the ladder, and this one runs.
            called = answer(await post(server.url, "tools/call", {**params, "name": "chatty"}, name="chatty"))
            assert called["result"]["content"] == [{"type": "text", "text": "chatted"}]
            retry = {**params, "requestState": parked["requestState"]}
            late = answer(await post(server.url, "tools/call", retry, name="prompts"))
            assert late["error"]["code"] == mcp_types.INVALID_PARAMS
            assert "is over" in late["error"]["message"]


async def test_a_tool_names_its_input_requests_and_asks_for_the_clients_roots(chatty: str) -> None:
    caps = {"elicitation": {}, "roots": {}}
    meta = envelope(**{"io.modelcontextprotocol/clientCapabilities": caps})
    with trio.fail_after(DEADLINE):
        async with http_server(chatty) as server:
            first = answer(await post(server.url, "tools/call", {"name": "named", "_meta": meta}, name="named"))
            assert list(first["result"]["inputRequests"]) == ["user_name"]  # the tool's key, not input-1
            retry = {
                "name": "named",
                "_meta": meta,
                "requestState": first["result"]["requestState"],
                "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}},
            }
            assert answer(await post(server.url, "tools/call", retry, name="named"))["result"]["content"] == [
                {"type": "text", "text": "hello Ada"}
            ]
            asked = answer(await post(server.url, "tools/call", {"name": "where", "_meta": meta}, name="where"))
            assert asked["result"]["inputRequests"] == {"workspace": {"method": "roots/list", "params": {}}}
            # A request whose client declared no roots: the tool learns that none are known, at once.
            plain = answer(await post(server.url, "tools/call", {"name": "where", "_meta": envelope()}, name="where"))
            assert plain["result"]["content"] == [{"type": "text", "text": "no roots"}]

            async def on_roots(context: Any) -> mcp_types.ListRootsResult:
                return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri="file:///work/app", name="app")])

            async with Client(server.url, mode=REVISION, list_roots_callback=on_roots) as client:
                assert text_of(await client.call_tool("where", {})) == "roots: file:///work/app"


async def test_a_handshake_client_is_asked_for_its_roots_when_it_offers_them(chatty: str) -> None:
    async def on_roots(context: Any) -> mcp_types.ListRootsResult:
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri="file:///srv/repo")])

    with trio.fail_after(DEADLINE):
        async with http_server(chatty) as server:
            async with sdk_session(server.url, list_roots_callback=on_roots) as offering:
                assert text_of(await offering.call_tool("where", {})) == "roots: file:///srv/repo"
            async with sdk_session(server.url) as silent:
                assert text_of(await silent.call_tool("where", {})) == "no roots"


async def test_a_listening_client_hears_that_the_tools_changed(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    folder.mkdir()
    tool_module(folder, "a", "alpha", "first")
    with trio.fail_after(DEADLINE * 2):
        async with http_server(str(folder)) as server, Client(server.url, mode=REVISION) as client:
            discovered = answer(await post(server.url, "server/discover", {"_meta": envelope()}))["result"]
            assert discovered["capabilities"]["tools"]["listChanged"] is True
            # Listed first: the first load has ended, so the new file is a change, not part of it.
            assert {tool.name for tool in (await client.list_tools()).tools} == {"alpha"}
            async with client.listen(tools_list_changed=True) as subscription:
                tool_module(folder, "b", "beta", "second")  # a new file in a watched folder
                async for event in subscription:
                    assert type(event).__name__ == "ToolsListChanged"
                    break
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == {"alpha", "beta"}


async def test_a_server_that_stops_with_a_client_listening_exits_at_once() -> None:
    events: list[object] = []
    with trio.fail_after(DEADLINE):
        async with http_server(BASIC) as server, Client(server.url, mode=REVISION) as client:
            # The connections go with the server's main loop, the listen stream among them: the client
            # sees it dropped (no replay; it would listen again) and the server does not wait for it.
            async def listen_through_the_stop() -> None:
                async with client.listen(tools_list_changed=True) as subscription:
                    server.process.send_signal(signal.SIGTERM)
                    async for event in subscription:
                        events.append(event)

            with pytest.raises(SubscriptionLost):
                await listen_through_the_stop()
            assert await server.process.wait() == 128 + signal.SIGTERM
    assert events == []
