"""MCP tests: `xcsh-run serve` as a subprocess, driven by the official SDK client.

Most tests use the official `mcp` SDK (``ClientSession``, and the high-level
``Client``) on trio, through anyio; those that take the ``transport`` fixture
run over stdio and over Streamable HTTP (tests/_support/mcp_clients.py). What the SDK
hides (error responses to garbage, the absence of a response, what exactly is
on stdout) is checked on a raw stdio subprocess. FastMCP's client, which needs
asyncio, runs in a plain test of its own.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import trio
import trio.testing
from mcp import ClientSession, StdioServerParameters
from mcp.client import Client
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

from tests._support.mcp_clients import BASIC, DEADLINE, HOSTILE, http_server, open_session, serve_args, stdio_session
from tests.conftest import XCSH_RUN, marked_processes
from xcsh_run import open_runner

# Tools written into each test's directory: a hidden one, a labelled one, and
# busy tools that report their worker's pid in their first update.
EXTRA_TOOLS = """
import os
import signal

from xcsh_run.pi import CustomTool

OBJ = {"type": "object"}


def factory(api):
    def shown(tcid, params, on_update, ctx, signal_):
        return "shown!"

    def secret(tcid, params, on_update, ctx, signal_):
        return "secret!"

    def spin(tcid, params, on_update, ctx, signal_):
        on_update({"content": [{"type": "text", "text": f"started {os.getpid()}"}], "details": None})
        while True:
            pass

    def stubborn(tcid, params, on_update, ctx, signal_):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        on_update({"content": [{"type": "text", "text": f"started {os.getpid()}"}], "details": None})
        while True:
            pass

    return [
        CustomTool(name="shown", label="Shown Tool", description="A visible tool", parameters=OBJ, execute=shown),
        CustomTool(name="secret", label="Secret", description="Hidden", parameters=OBJ, execute=secret, hidden=True),
        CustomTool(name="spin", description="Spins", parameters=OBJ, execute=spin),
        CustomTool(name="stubborn", description="Spins, ignores SIGTERM", parameters=OBJ, execute=stubborn),
    ]
"""


def tool_module(folder: Path, name: str, tool: str, description: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(
        "from xcsh_run.pi import CustomTool\n\n"
        "def factory(api):\n"
        f"    return CustomTool(name={tool!r}, description={description!r}, parameters={{'type': 'object'}},\n"
        f"                      execute=lambda *a: {tool + ' says hi'!r})\n"
    )
    return path


@pytest.fixture
def extra(tmp_path: Path) -> str:
    path = tmp_path / "extra.py"
    path.write_text(EXTRA_TOOLS)
    return str(path)


def error_of(result: mcp_types.CallToolResult) -> dict[str, Any]:
    assert result.is_error, result
    assert result.meta is not None
    error: dict[str, Any] = result.meta["xcsh-run/error"]
    assert result.structured_content is not None
    assert result.structured_content["error"]["kind"] == error["kind"]
    return error


def text_of(result: mcp_types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


def session(
    *tools: str, options: tuple[str, ...] = (), message_handler: Callable[[Any], Awaitable[None]] | None = None
) -> AbstractAsyncContextManager[ClientSession]:
    """An initialized SDK session with `xcsh-run serve` on stdio; its stderr goes to serve.log."""
    return stdio_session(*tools, options=options, message_handler=message_handler)


async def start_busy(
    nursery: trio.Nursery, s: ClientSession, tool: str
) -> tuple[trio.CancelScope, str, list[mcp_types.CallToolResult]]:
    """Start `tool` in the background; return once its first update (as progress) arrived."""
    scope = trio.CancelScope()
    started = trio.Event()
    message: list[str] = []
    results: list[mcp_types.CallToolResult] = []

    async def on_progress(progress: float, total: float | None, text: str | None) -> None:
        if text is not None and not started.is_set():
            message.append(text)
            started.set()

    async def call() -> None:
        with scope:
            results.append(await s.call_tool(tool, {}, progress_callback=on_progress))

    nursery.start_soon(call)
    await started.wait()
    return scope, message[0], results


async def wait_exited(pid: int) -> None:
    """Wait (without polling) until process `pid` is gone: a pidfd turns readable when it exits."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


# --- the handshake -------------------------------------------------------------


async def test_initialize_negotiates_the_sdks_latest_handshake_version() -> None:
    """Stdio: the SDK's handshake on its own (over HTTP: tests/mcp/test_mcp_http.py)."""
    with trio.fail_after(DEADLINE):
        params = StdioServerParameters(command=XCSH_RUN, args=serve_args(BASIC), env=dict(os.environ))
        async with stdio_client(params, errlog=sys.stderr) as (read, write), ClientSession(read, write) as s:
            result = await s.initialize()
            assert result.protocol_version == LATEST_HANDSHAKE_VERSION == "2025-11-25"
            assert result.capabilities.tools is not None
            assert result.capabilities.tools.list_changed is True
            assert result.server_info.name == "xcsh-run"
            assert await s.send_ping() is not None


async def test_high_level_client_probes_discover_and_speaks_2026_07_28() -> None:
    """Stdio: the high-level client's probe decides the connection's era (tests/mcp/test_mcp_stateless.py)."""
    # Client(mode="auto") first sends server/discover, which carries the
    # 2026-07-28 envelope: the connection is then a stateless one.
    with trio.fail_after(DEADLINE):
        params = StdioServerParameters(command=XCSH_RUN, args=serve_args(BASIC), env=dict(os.environ))
        async with Client(params, read_timeout_seconds=DEADLINE) as client:
            assert client.protocol_version == "2026-07-28"
            result = await client.call_tool("add", {"a": 40, "b": 2})
            assert text_of(result) == "42"


@pytest.mark.parametrize("asked", [*HANDSHAKE_PROTOCOL_VERSIONS, "2026-07-28", "1999-01-01"])
async def test_version_negotiation_echoes_supported_versions_else_offers_the_latest(asked: str) -> None:
    """Stdio only: raw JSON-RPC, to ask for revisions the SDK client never asks for."""
    with trio.fail_after(DEADLINE):
        async with raw_server(BASIC) as server:
            init = await server.request("initialize", {"protocolVersion": asked, "capabilities": {}, "clientInfo": {}})
            expected = asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else "2025-11-25"
            assert init["result"]["protocolVersion"] == expected
            tools = (await server.request("tools/list"))["result"]["tools"]
            add = next(t for t in tools if t["name"] == "add")
            # `title` arrived in 2025-06-18: older clients do not get it.
            assert ("title" in add) == (expected >= "2025-06-18")


# --- tools/list and tools/call ---------------------------------------------------


async def test_list_tools_maps_label_to_title_and_leaves_hidden_tools_out(extra: str, transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, BASIC, extra) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert "secret" not in tools
            assert {"echo", "add", "progress", "shown", "spin"} <= set(tools)
            assert tools["add"].title == "Add"
            assert tools["shown"].title == "Shown Tool"
            assert tools["shown"].description == "A visible tool"
            schema = tools["add"].input_schema
            assert schema["type"] == "object"
            assert schema["required"] == ["a"]
            assert schema["properties"]["a"] == {"type": "integer"}
            echo = tools["echo"].input_schema
            assert echo["additionalProperties"] is False
            # Not listed, but still callable by name, like through the runner.
            assert text_of(await s.call_tool("secret", {})) == "secret!"


async def test_call_tool_returns_content_and_details(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, BASIC) as s:
            result = await s.call_tool("add", {"a": 2, "b": 3})
            assert not result.is_error
            assert text_of(result) == "5"
            assert result.meta == {"xcsh-run/details": {"sum": 5}}
            # Details that are a JSON object reach the model as structuredContent too.
            assert result.structured_content == {"sum": 5}
            result = await s.call_tool("echo", {"text": "ab", "times": 3})
            assert text_of(result) == "ababab"


async def test_progress_notifications_count_up_to_the_last_update(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, BASIC) as s:
            seen: list[float] = []
            last = trio.Event()

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append(progress)
                if progress == 50:
                    last.set()

            result = await s.call_tool("progress", {"count": 50}, progress_callback=on_progress)
            assert text_of(result) == "done"
            # The SDK runs progress callbacks in tasks of their own: wait for the last one.
            await last.wait()
            # Updates may be coalesced when they outpace the client, but the
            # counter only increases and the last update is always sent.
            assert seen == sorted(set(seen))
            assert seen[-1] == 50


@pytest.mark.parametrize("tool", ["busy_loop", "sleeper", "async_sleeper"])
async def test_cancelling_a_hostile_tool_keeps_the_session_usable(tool: str, transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport) as s, trio.open_nursery() as nursery:
            scope, message, results = await start_busy(nursery, s, tool)
            assert message == "started"  # the tool's first update, as the progress message
            scope.cancel()  # the SDK sends notifications/cancelled for the request
            assert results == []
            assert text_of(await s.call_tool("add", {"a": 1})) == "1"
            # Survivors are checked when the session ends, by the autouse fixture.


@pytest.mark.parametrize("tool", ["spin", "stubborn"])
async def test_cancel_kills_the_worker_through_the_ladder(extra: str, tool: str, transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, BASIC, extra) as s:
            async with trio.open_nursery() as nursery:
                scope, message, _ = await start_busy(nursery, s, tool)
                pid = int(message.split()[1])
                assert os.path.exists(f"/proc/{pid}")
                scope.cancel()
            # `stubborn` ignores SIGTERM: the ladder's kill ends it after the grace.
            await wait_exited(pid)
            assert text_of(await s.call_tool("echo", {"text": "still here"})) == "still here"


@pytest.mark.parametrize(
    ("tool", "evidence"),
    [("os_exit", {"exit_code": 13}), ("segfault", {"signal": "SIGSEGV"}), ("sigkill_self", {"signal": "SIGKILL"})],
)
async def test_a_crash_is_an_error_result_and_the_session_survives(
    tool: str, evidence: dict[str, Any], transport: str
) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport) as s:
            result = await s.call_tool(tool, {})
            error = error_of(result)
            assert error["kind"] == "crashed"
            assert evidence.items() <= error.items()
            # What the model reads names the tool, then the message without the worker's last stderr line.
            message = error["message"].split("; last stderr: ")[0]
            assert message.startswith(f"the worker running {tool!r} ")
            assert text_of(result) == f"{tool}: crashed: " + message.replace(repr(tool), "the tool")
            assert result.structured_content is not None
            assert result.structured_content["error"]["message"] == message
            assert text_of(await s.call_tool("add", {"a": 2})) == "2"


@pytest.mark.parametrize(
    ("tool", "arguments", "kind"),
    [
        ("raises", {}, "tool_error"),
        ("bad_result", {}, "tool_error"),
        ("add", {"a": "x"}, "invalid_arguments"),
        ("echo", {"text": 1}, "invalid_arguments"),
        ("ad", {}, "not_found"),
        ("sys_exit", {}, "tool_error"),  # SystemExit is caught in the worker
    ],
)
async def test_every_failure_kind_is_an_is_error_result(tool: str, arguments: dict[str, Any], kind: str) -> None:
    """Stdio only: a kind is rendered alike on both transports (crashes, timeouts and errors run on both)."""
    with trio.fail_after(DEADLINE):
        async with session(BASIC) as s:
            result = await s.call_tool(tool, arguments)
            error = error_of(result)
            assert error["kind"] == kind
            if kind == "not_found":
                assert "did you mean 'add'" in error["message"]
            if kind == "invalid_arguments":
                assert error["path"].startswith("$")


async def test_timeout_is_an_error_result_with_its_rung(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, HOSTILE, options=("--timeout", "0.5")) as s:
            error = error_of(await s.call_tool("sleeper", {}))
            assert error["kind"] == "timeout"
            assert error["rung"] in ("cooperative", "killed")


async def test_a_long_call_does_not_block_other_requests(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport) as s, trio.open_nursery() as nursery:
            scope, _, results = await start_busy(nursery, s, "busy_loop")
            await s.send_ping()
            assert "busy_loop" in {t.name for t in (await s.list_tools()).tools}
            assert text_of(await s.call_tool("echo", {"text": "meanwhile"})) == "meanwhile"
            assert results == []  # still running
            scope.cancel()


async def test_oversized_request_from_the_sdk_fails_that_request_only(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, BASIC, options=("--max-message-bytes", "4096")) as s:
            with pytest.raises(MCPError) as caught:
                await s.call_tool("echo", {"text": "x" * 10_000})
            assert caught.value.code == -32600
            # The same words over stdio (a line) and HTTP (a 413): what to change, and where.
            assert "message too large: " in caught.value.error.message
            assert "the limit is 4096 bytes (--max-message-bytes)" in caught.value.error.message
            assert text_of(await s.call_tool("echo", {"text": "x" * 3000})) == "x" * 3000


async def test_tools_list_changed_when_tool_files_change(tmp_path: Path, transport: str) -> None:
    folder = tmp_path / "tools"
    folder.mkdir()
    tool_module(folder, "a", "alpha", "first")
    send, receive = trio.open_memory_channel[None](10)

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            await send.send(None)

    async def names(s: ClientSession) -> dict[str, str | None]:
        return {t.name: t.description for t in (await s.list_tools()).tools}

    with trio.fail_after(DEADLINE * 2):
        async with open_session(transport, str(folder), message_handler=on_message) as s:
            assert await names(s) == {"alpha": "first"}
            tool_module(folder, "b", "beta", "second")  # a new file in a watched folder
            await receive.receive()
            assert await names(s) == {"alpha": "first", "beta": "second"}
            assert text_of(await s.call_tool("beta", {})) == "beta says hi"
            tool_module(folder, "a", "alpha", "first, edited")  # a changed file
            await receive.receive()
            assert await names(s) == {"alpha": "first, edited", "beta": "second"}
            (folder / "b.py").unlink()  # a removed file
            await receive.receive()
            assert await names(s) == {"alpha": "first, edited"}
            result = await s.call_tool("beta", {})
            assert error_of(result)["kind"] == "not_found"


# A tool module whose `gate` waits, after its first update, until the test
# writes to a FIFO: an event across processes, with no sleep.
GATED = """
import os

from xcsh_run.pi import CustomTool

OBJ = {{"type": "object"}}


def factory(api):
    def gate(tcid, params, on_update, ctx, signal_):
        on_update({{"content": [{{"type": "text", "text": f"started {{os.getpid()}}"}}], "details": None}})
        with open({fifo!r}) as f:
            return f"{{f.read()}} on {version}"

    def version(tcid, params, on_update, ctx, signal_):
        return "{version}"

    return [
        CustomTool(name="gate", description="Waits, {version}", parameters=OBJ, execute=gate),
        CustomTool(name="version", description="Says its version", parameters=OBJ, execute=version),
    ]
"""


async def test_a_reload_serves_new_calls_while_calls_in_flight_finish_on_the_old_runner(
    tmp_path: Path, transport: str
) -> None:
    folder = tmp_path / "tools"
    folder.mkdir()
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    (folder / "gated.py").write_text(GATED.format(fifo=str(fifo), version="v1"))
    changed = trio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    with trio.fail_after(DEADLINE * 2):
        async with open_session(transport, str(folder), message_handler=on_message) as s:
            async with trio.open_nursery() as nursery:
                _, message, results = await start_busy(nursery, s, "gate")
                old_worker = int(message.split()[1])
                (folder / "gated.py").write_text(GATED.format(fifo=str(fifo), version="v2"))
                await changed.wait()  # sent once the new runner serves
                # A new call runs on the new runner and completes while the old one still waits at its gate.
                assert text_of(await s.call_tool("version", {})) == "v2"
                assert results == []
                # Opening the FIFO for writing waits for its reader: the old call's worker.
                await trio.to_thread.run_sync(fifo.write_text, "opened", abandon_on_cancel=True)
            # The nursery waited for the old call: it finished, on the old runner.
            assert text_of(results[0]) == "opened on v1"
            # That runner closes once its last call ended, while the server keeps serving.
            await wait_exited(old_worker)
            assert text_of(await s.call_tool("version", {})) == "v2"


class InProcess:
    """An `McpServer` in this process, on memory streams: for what needs a seam inside the server."""

    def __init__(self) -> None:
        self.client_send, self.server_receive = trio.testing.memory_stream_one_way_pair()
        self.server_send, self.client_receive = trio.testing.memory_stream_one_way_pair()
        self._buffer = b""
        self._ids = iter(range(1, 10**6))

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self._ids)
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            message = await self.receive()
            if message.get("id") == request_id:
                return message

    async def send(self, message: dict[str, Any]) -> None:
        await self.client_send.send_all(json.dumps(message).encode() + b"\n")

    async def receive(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            chunk = await self.client_receive.receive_some()
            assert chunk, "the server ended its output"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        assert "method" not in message or message["method"] != "notifications/tools/list_changed", message
        return message


async def test_a_reload_that_fails_outright_keeps_the_old_runner_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from xcsh_run._mcp import reload as _mcp_reload
    from xcsh_run._mcp.stdio import McpServer

    folder = tmp_path / "tools"
    folder.mkdir()
    tool_module(folder, "a", "alpha", "first")
    opened = 0
    retried = trio.Event()

    @asynccontextmanager
    async def open_then_fail(*args: Any, **options: Any) -> AsyncIterator[Any]:
        # The seam: the first runner is real, every later one cannot be opened.
        nonlocal opened
        opened += 1
        if opened > 1:
            if opened == 4:
                retried.set()
            raise OSError("no cgroup left")
        async with open_runner(*args, **options) as runner:
            yield runner

    monkeypatch.setattr(_mcp_reload, "open_runner", open_then_fail)
    server = McpServer([str(folder)], cwd=str(tmp_path), grace=0.5, poll_interval=0.05)
    client = InProcess()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.serve, client.server_receive, client.server_send)
            await client.request("initialize", {"protocolVersion": "2025-11-25"})
            await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            call = {"name": "alpha", "arguments": {}}
            assert (await client.request("tools/call", call))["result"]["content"][0]["text"] == "alpha says hi"
            (folder / "a.py").unlink()
            tool_module(folder, "b", "beta", "second")
            await retried.wait()  # the reload failed, and so did two retries at the next polls
            # Calls and the listing are still the old runner's; no list_changed was sent (InProcess checks).
            assert (await client.request("tools/call", call))["result"]["content"][0]["text"] == "alpha says hi"
            tools = (await client.request("tools/list", {}))["result"]["tools"]
            assert [t["name"] for t in tools] == ["alpha"]
            await client.client_send.aclose()
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    # Said once, not at every poll.
    assert failures == ["reloading the tools failed (OSError('no cgroup left')); still serving the tools loaded before"]


def test_every_method_of_the_table_has_a_handler() -> None:
    from xcsh_run._mcp.methods import MCP_PROTOCOL
    from xcsh_run._mcp.stdio import McpServer
    from xcsh_run.worker.protocol.methods import Role

    client_sent = {name for name, method in MCP_PROTOCOL.requests.items() if method.sender is Role.HOST}
    assert set(McpServer()._routes) == client_sent


def test_refusals_keep_the_servers_own_wording_whatever_the_connection_says() -> None:
    import msgspec

    from xcsh_run._mcp.stdio import McpServer
    from xcsh_run.worker import protocol as p

    server = McpServer()
    conn = server._conn

    def refusal(message: p.Message) -> tuple[p.RefusalReason, int, str]:
        conn.receive_message(message)
        event = conn.next_event()
        assert isinstance(event, p.RequestRefused)
        return event.reason, event.error.code, server._refusal(event)

    assert refusal(p.Request(id=10, method="server/discover")) == (
        p.RefusalReason.UNKNOWN_METHOD, -32601, "method not found: server/discover"
    )  # fmt: skip
    assert refusal(p.Request(id=12, method="tools/call", params=msgspec.Raw(b"[1,2]"))) == (
        p.RefusalReason.BAD_PARAMS, -32602, 'invalid params: "params" of tools/call must be an object'
    )  # fmt: skip
    conn.receive_message(p.Request(id=5, method="ping"))
    assert isinstance(conn.next_event(), p.RequestReceived)
    assert refusal(p.Request(id=5, method="ping")) == (
        p.RefusalReason.DUPLICATE_ID, -32600, "invalid request: id 5 is already in use by a request in flight"
    )  # fmt: skip
    conn.close()
    assert refusal(p.Request(id=6, method="ping")) == (
        p.RefusalReason.OUT_OF_STATE, -32600, "invalid request: 'ping' is not allowed while the connection is CLOSED"
    )  # fmt: skip


@pytest.mark.parametrize(
    "params",
    [b"5", b"{}", b"[]", b'{"requestId":null}', b'{"requestId":true}', b'{"requestId":1.5}', b'{"requestId":[1]}'],
)
def test_a_malformed_cancellation_is_dropped_never_fatal(params: bytes) -> None:
    import msgspec

    from xcsh_run._mcp.methods import server_connection
    from xcsh_run.worker import protocol as p

    conn = server_connection()
    conn.receive_message(p.Notification(method="notifications/cancelled", params=msgspec.Raw(params)))
    dropped = conn.next_event()
    assert isinstance(dropped, p.NotificationDropped) and dropped.reason.startswith("bad params: ")
    conn.receive_message(p.Request(id=1, method="ping"))
    assert isinstance(conn.next_event(), p.RequestReceived)


def test_a_cancellation_is_decoded_once_with_any_reason_and_extra_members() -> None:
    import msgspec

    from xcsh_run._mcp.methods import CANCELLED, CancelledParams, server_connection
    from xcsh_run.worker import protocol as p

    conn = server_connection()
    for params, expected in [
        (b'{"requestId":"a","reason":"user"}', CancelledParams(request_id="a", reason="user")),
        (b'{"requestId":3,"reason":5,"_meta":{}}', CancelledParams(request_id=3, reason=5)),
    ]:
        conn.receive_message(p.Notification(method="notifications/cancelled", params=msgspec.Raw(params)))
        assert conn.next_event() == p.NotificationReceived(method=CANCELLED, params=expected)
    # What the server writes is bounded only by the framing; the limit on lines is the transport's.
    assert conn.max_send_bytes is None


# --- the raw wire ------------------------------------------------------------------


class RawServer:
    """`xcsh-run serve` on plain pipes: every stdout line must be one JSON-RPC message."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.messages: list[dict[str, Any]] = []  # everything received, in order
        self._buffer = b""
        self._ids = iter(range(1000, 10**6))
        self.stderr = b""
        self._stderr_changed = trio.Event()

    async def send_line(self, line: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(line + b"\n")

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_line(json.dumps(message).encode())

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None at EOF."""
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self.process.stdout.receive_some(65536)
            if not chunk:
                assert self._buffer == b"", f"a partial line before EOF: {self._buffer[:200]!r}"
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)  # fails the test if stdout carries anything else
        assert isinstance(message, dict)
        assert message["jsonrpc"] == "2.0"
        self.messages.append(message)
        return message

    async def response(self, request_id: object) -> dict[str, Any]:
        while True:
            message = await self.receive()
            assert message is not None, f"EOF before the response to {request_id!r}"
            if "method" not in message and message.get("id") == request_id:
                return message

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        request_id = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.response(request_id)

    async def initialize(self) -> None:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
        assert "result" in await self.request("initialize", init)
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def close_and_drain(self) -> int:
        """Close stdin, read stdout to EOF, and return the exit status."""
        assert self.process.stdin is not None
        await self.process.stdin.aclose()
        while await self.receive() is not None:
            pass
        return await self.process.wait()

    async def pump_stderr(self) -> None:
        assert self.process.stderr is not None
        while chunk := await self.process.stderr.receive_some(65536):
            self.stderr += chunk
            self._stderr_changed.set()
            self._stderr_changed = trio.Event()

    async def stderr_contains(self, fragment: bytes) -> None:
        while fragment not in self.stderr:
            await self._stderr_changed.wait()


@asynccontextmanager
async def raw_server(*tools: str, options: tuple[str, ...] = ()) -> AsyncIterator[RawServer]:
    process = await trio.lowlevel.open_process(
        [XCSH_RUN, *serve_args(*tools, options=options)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    server = RawServer(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.pump_stderr)
            yield server
            if process.returncode is None:
                assert await server.close_and_drain() == 0, server.stderr.decode(errors="replace")
    finally:
        if process.returncode is None:  # only on failures: the test already failed
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


# The id the error carries: the request's when it can be told (even from a
# line that is not JSON), else none at all (ABSENT), never null.
ABSENT = "absent"
GARBAGE: list[tuple[bytes, int, object]] = [
    (b"not json", -32700, ABSENT),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"', -32700, 1),
    (b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}', -32700, 1),
    (b"[" * 100_000, -32700, ABSENT),
    (b"[]", -32600, ABSENT),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600, 1),
    (b"42", -32600, ABSENT),
    (b"{}", -32600, ABSENT),
    (b'{"jsonrpc":"1.0","id":7,"method":"ping"}', -32600, 7),
    (b'{"jsonrpc":"2.0","id":8}', -32600, 8),
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600, ABSENT),
    (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', -32600, ABSENT),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', -32600, ABSENT),
    (b'{"jsonrpc":"2.0","id":9,"method":5}', -32600, 9),
    (b'{"jsonrpc":"2.0","id":10,"method":"no/such/method"}', -32601, 10),
    (b'{"jsonrpc":"2.0","id":11,"method":"server/discover","params":{}}', -32601, 11),
    (b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":[1,2]}', -32602, 12),
    (b'{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"arguments":{}}}', -32602, 13),
    (b'{"jsonrpc":"2.0","id":"s","method":"tools/list","params":{"cursor":"x"}}', -32602, "s"),
    (b'{"jsonrpc":"2.0","id":14,"method":"initialize","params":{}}', -32600, 14),  # initialized already
]


async def test_garbage_gets_json_rpc_errors_and_the_server_keeps_serving() -> None:
    """Stdio only: raw bytes on stdin (HTTP's malformed bodies: tests/mcp/test_mcp_http.py)."""
    with trio.fail_after(DEADLINE):
        async with raw_server(BASIC) as server:
            await server.initialize()
            for line, code, request_id in GARBAGE:
                # One at a time: error responses to garbage have no id to match.
                await server.send_line(line)
                message = await server.receive()
                assert message is not None
                assert message.get("id", ABSENT) == request_id, line[:80]
                assert message["error"]["code"] == code, (line[:80], message)
            # Notifications are never answered, even malformed ones: the next
            # message is the ping's response.
            await server.send_line(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}')
            await server.send_line(b'{"jsonrpc":"2.0","method":"notifications/whatever"}')
            await server.send_line(b"")
            await server.send({"jsonrpc": "2.0", "id": 99, "method": "ping"})
            assert await server.receive() == {"jsonrpc": "2.0", "id": 99, "result": {}}
            result = (await server.request("tools/call", {"name": "add", "arguments": {"a": 3}}))["result"]
            assert result["content"] == [{"type": "text", "text": "3"}]


@pytest.mark.parametrize("limit", [4096, None])
async def test_oversized_lines_are_rejected_and_the_server_keeps_serving(limit: int | None) -> None:
    """Stdio only: raw lines over the limit (HTTP's 413: tests/mcp/test_mcp_http.py)."""
    size = 10_000 if limit is not None else 16 * 2**20 + 1000
    options = ("--max-message-bytes", str(limit)) if limit is not None else ()
    with trio.fail_after(DEADLINE):
        async with raw_server(BASIC, options=options) as server:
            await server.initialize()
            call = {"name": "echo", "arguments": {"text": "x" * size}}
            await server.send({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": call})
            error = (await server.response(21))["error"]
            assert error["code"] == -32600
            assert "too large" in error["message"]
            # The id last, as the TypeScript SDK writes it: read from the line's last bytes.
            await server.send({"method": "tools/call", "params": call, "jsonrpc": "2.0", "id": 22})
            error = (await server.response(22))["error"]
            assert error["code"] == -32600
            # No id to be told (a notification, or a request cut short): an error without one.
            await server.send({"method": "tools/call", "params": call, "jsonrpc": "2.0"})
            message = await server.receive()
            assert message is not None
            assert "id" not in message
            assert message["error"]["code"] == -32600
            result = (await server.request("tools/call", {"name": "echo", "arguments": {"text": "fits"}}))["result"]
            assert result["content"] == [{"type": "text", "text": "fits"}]


async def test_progress_precedes_the_response_on_the_wire() -> None:
    """Stdio only: the order of lines on stdout."""
    with trio.fail_after(DEADLINE):
        async with raw_server(BASIC) as server:
            await server.initialize()
            params = {"name": "progress", "arguments": {"count": 200}, "_meta": {"progressToken": "tok"}}
            response = await server.request("tools/call", params)
            assert response["result"]["_meta"]["xcsh-run/details"] == 200
            progress = [m["params"] for m in server.messages if m.get("method") == "notifications/progress"]
            assert progress, "no progress notification before the response"
            assert all(p["progressToken"] == "tok" for p in progress)
            counters = [p["progress"] for p in progress]
            assert counters == sorted(set(counters))
            assert counters[-1] == 200
            # Without a progressToken, no progress at all.
            before = len(server.messages)
            await server.request("tools/call", {"name": "progress", "arguments": {"count": 5}})
            assert [m for m in server.messages[before:] if "method" in m] == []


async def test_a_cancelled_request_gets_no_response(extra: str) -> None:
    """Stdio only: what is *not* on stdout, read to the end."""
    with trio.fail_after(DEADLINE):
        async with raw_server(BASIC, extra) as server:
            await server.initialize()
            params = {"name": "spin", "arguments": {}, "_meta": {"progressToken": 1}}
            await server.send({"jsonrpc": "2.0", "id": 31, "method": "tools/call", "params": params})
            first = await server.receive()
            assert first is not None
            assert first["method"] == "notifications/progress"
            pid = int(first["params"]["message"].split()[1])
            await server.send(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 31, "reason": "test"}}
            )
            await wait_exited(pid)
            # The server logs when it decided not to answer: from then on, a
            # response to 31 could no longer come.
            await server.stderr_contains(b"request 31 (tools/call) ended after its cancellation; no response sent")
            # A late cancel for a finished request, or one for an unknown id, is ignored.
            for stale in (31, 12345, "nope"):
                await server.send(
                    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": stale}}
                )
            assert (await server.request("ping"))["result"] == {}
            assert await server.close_and_drain() == 0
            assert [m for m in server.messages if m.get("id") == 31] == []


async def test_stdin_eof_stops_calls_and_exits_zero_with_no_worker_left() -> None:
    """Stdio only: the end of stdin is stdio's own way to end a session."""
    with trio.fail_after(DEADLINE):
        async with raw_server() as server:
            await server.initialize()
            params = {"name": "ignore_sigterm", "arguments": {}, "_meta": {"progressToken": "t"}}
            await server.send({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": params})
            started = await server.receive()
            assert started is not None
            assert started["params"]["message"] == "started"
            assert await server.close_and_drain() == 0
            assert marked_processes() == []
            # The call was not cancelled by the client, so it is answered: why it stopped.
            response = next(m for m in server.messages if m.get("id") == 41)
            error = response["result"]["_meta"]["xcsh-run/error"]
            assert response["result"]["isError"] is True
            assert error["kind"] == "cancelled"
            assert "stdin closed" in error["message"]


async def test_stdout_carries_nothing_but_protocol_whatever_tools_print() -> None:
    """Stdio only: the bytes on stdout."""
    with trio.fail_after(DEADLINE):
        async with raw_server() as server:
            await server.initialize()
            flood = await server.request("tools/call", {"name": "flood", "arguments": {"rounds": 20}})
            assert flood["result"]["content"] == [{"type": "text", "text": "flooded"}]
            # Garbage written to every fd, the worker's protocol pipe included: that call
            # breaks its own pipe (protocol_error), never the MCP stream.
            garbage = await server.request("tools/call", {"name": "garbage_fds", "arguments": {}})
            assert garbage["result"]["_meta"]["xcsh-run/error"]["kind"] == "protocol_error"
            # Every line so far parsed as JSON-RPC (RawServer.receive asserts it), and so do the last ones.
            assert await server.close_and_drain() == 0
            # The fake frames the tool printed (a result saying FORGED) stayed data: at most
            # quoted in a stderr tail, never a result.
            texts = [b.get("text") for m in server.messages for b in m.get("result", {}).get("content", [])]
            assert "FORGED" not in texts


# --- FastMCP's client ------------------------------------------------------------------


def test_fastmcp_client_lists_calls_streams_and_sees_errors(extra: str) -> None:
    """Stdio: another client, on the transport clients register most."""
    # FastMCP's stdio transport needs asyncio, so this test runs its own loop.
    import asyncio

    from fastmcp import Client as FastClient
    from fastmcp.client.transports import StdioTransport

    async def main() -> None:
        transport = StdioTransport(XCSH_RUN, serve_args(BASIC, HOSTILE, extra), env=dict(os.environ), keep_alive=False)
        async with FastClient(transport, timeout=DEADLINE) as client:
            tools = {t.name: t for t in await client.list_tools()}
            assert "secret" not in tools
            assert tools["add"].title == "Add"
            result = await client.call_tool("add", {"a": 20, "b": 22})
            assert result.content[0].text == "42"  # type: ignore[union-attr]
            # FastMCP speaks 2026-07-28 (it probes server/discover): the SDK stamps its results with the
            # server's name (a SHOULD of that revision), beside this server's own details.
            assert result.meta is not None
            assert result.meta["xcsh-run/details"] == {"sum": 42}
            assert result.meta.get("io.modelcontextprotocol/serverInfo", {"name": "xcsh-run"})["name"] == "xcsh-run"
            seen: list[float] = []
            done = asyncio.Event()

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append(progress)
                if progress == 30:
                    done.set()

            await client.call_tool("progress", {"count": 30}, progress_handler=on_progress)
            await done.wait()
            assert seen == sorted(set(seen))
            crashed = await client.call_tool("segfault", {}, raise_on_error=False)
            assert crashed.is_error
            assert crashed.meta is not None
            assert crashed.meta["xcsh-run/error"]["signal"] == "SIGSEGV"
            assert (await client.call_tool("echo", {"text": "ok"})).content[0].text == "ok"  # type: ignore[union-attr]

    asyncio.run(asyncio.wait_for(main(), DEADLINE))


async def test_fastmcp_client_lists_and_calls_over_http() -> None:
    """Streamable HTTP: FastMCP's client (asyncio, so in a thread of its own) against a real `serve --http`."""
    import asyncio

    from fastmcp import Client as FastClient
    from fastmcp.client.transports import StreamableHttpTransport

    async def main(url: str) -> tuple[set[str], str, bool, str]:
        async with FastClient(StreamableHttpTransport(url), timeout=DEADLINE) as client:
            names = {t.name for t in await client.list_tools()}
            added = await client.call_tool("add", {"a": 2, "b": 40})
            failed = await client.call_tool("raises", {}, raise_on_error=False)
            return names, added.content[0].text, failed.is_error, failed.content[0].text  # type: ignore[union-attr]

    with trio.fail_after(DEADLINE):
        async with http_server(BASIC) as server:
            names, added, is_error, text = await trio.to_thread.run_sync(
                lambda: asyncio.run(asyncio.wait_for(main(server.url), DEADLINE))
            )
    assert {"add", "echo", "raises"} <= names
    assert added == "42"
    assert is_error is True
    assert text == "raises failed: ValueError: the tool failed on purpose"
