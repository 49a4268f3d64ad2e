"""`serve --http` admits its own clients first: stalled or token-less connections never lock them out.

The attacks run on loopback only, bounded in count and time: connections
that send half a request head and stall (and come back when the server drops
them), a flood of whole heads with a wrong token, and more connections than
the pool holds that each had one request answered (or refused) and then sit
idle on keep-alive. While they run, the
official SDK client with the right token must initialize, list and call
within a deadline. The first tests drive a real `xcsh-run serve --http`
subprocess (its sockets are counted in ``/proc``); the last ones run the
server in this process, where its admission state and its tasks can be seen.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from tests._support.mcp_clients import BASIC, DEADLINE, http_server, sdk_session
from tests.conftest import SDK_HTTP_LEFTOVERS, TOOLS
from tests.mcp.test_mcp import text_of
from tests.mcp.test_mcp_http import INIT
from xcsh_run._mcp.http.admission import MAX_PENDING
from xcsh_run._mcp.http.server import HttpServer
from xcsh_run._mcp.server import ToolServer

TOKEN = "s3cret-admission"
AUTH = {"authorization": f"Bearer {TOKEN}"}
STALLED_HEAD = b"POST /mcp HTTP/1.1\r\nX-Stalled: "
CLIENT_DEADLINE = 15.0  # seconds for initialize + tools/list + tools/call under attack
GATE = str(TOOLS / "gate.py")
POOL = 64  # MAX_CONNECTIONS
NO_SESSION = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}  # 400: no Mcp-Session-Id


def request_bytes(body: dict[str, Any], headers: dict[str, str]) -> bytes:
    data = json.dumps(body).encode()
    fields = {
        "host": "127.0.0.1",
        "content-type": "application/json",
        "accept": "application/json",
        "content-length": str(len(data)),
        **headers,
    }
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"POST /mcp HTTP/1.1\r\n{head}\r\n".encode() + data


async def read_until_closed(stream: trio.SocketStream) -> bytes:
    """Everything the server sends until it closes its end (a reset counts as the end)."""
    received = bytearray()
    while True:
        try:
            data = await stream.receive_some(65536)
        except (trio.BrokenResourceError, OSError):
            data = b""
        if not data:
            return bytes(received)
        received += data


async def read_response(stream: trio.SocketStream) -> tuple[int, bytes]:
    """One whole response with a ``Content-Length`` (the connection stays open): its status and body."""
    received = bytearray()
    while b"\r\n\r\n" not in received:
        data = await stream.receive_some(65536)
        assert data, bytes(received)
        received += data
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")
    )
    while len(body) < length:
        data = await stream.receive_some(65536)
        assert data, body
        body += data
    return status_of(head), body


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


class Attack:
    """``size`` connections on ``port``, each reopened when the server drops it, until cancelled or ``budget``."""

    def __init__(self, port: int, *, size: int, budget: int, payload: bytes) -> None:
        self.port, self.size, self.budget, self.payload = port, size, budget, payload
        self.opened = 0
        self.statuses: dict[int, int] = {}  # what the server answered; 0: closed without an answer
        self.all_opened = trio.Event()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(self.size):
                nursery.start_soon(self._one)

    async def _one(self) -> None:
        while self.opened < self.budget:
            stream = await trio.open_tcp_stream("127.0.0.1", self.port)
            self.opened += 1
            if self.opened >= self.size:
                self.all_opened.set()
            try:
                await stream.send_all(self.payload)
                answer = await read_until_closed(stream)
            except (trio.BrokenResourceError, OSError):
                answer = b""
            finally:
                await stream.aclose()
            status = status_of(answer)
            self.statuses[status] = self.statuses.get(status, 0) + 1


def open_sockets(pid: int) -> int:
    """How many sockets process ``pid`` holds (its listener and its connections)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except FileNotFoundError:
            pass  # closed while listed
    return count


async def wait_for(condition: Any, what: str, timeout: float = 10.0) -> None:
    with trio.move_on_after(timeout):
        while not condition():  # noqa: ASYNC110 - state of another process, or of sockets: nothing to wait on
            await trio.sleep(0.05)
        return
    raise AssertionError(f"no {what} within {timeout} s")


async def use_the_tools(url: str) -> float:
    """The real client's whole visit with the SDK: initialize, tools/list, tools/call; its duration."""
    started = trio.current_time()
    with trio.fail_after(CLIENT_DEADLINE):
        async with sdk_session(url, headers=AUTH) as s:
            assert "add" in {t.name for t in (await s.list_tools()).tools}
            assert text_of(await s.call_tool("add", {"a": 2, "b": 3})) == "5"
    return trio.current_time() - started


# --- against `xcsh-run serve --http` -----------------------------------------------------


@SDK_HTTP_LEFTOVERS[0]
@SDK_HTTP_LEFTOVERS[1]
async def test_the_client_with_the_token_gets_through_200_stalled_connections() -> None:
    with trio.fail_after(60):
        async with http_server(BASIC, env={"XCSH_RUN_MCP_TOKEN": TOKEN}) as server:
            port = int(server.url.rsplit(":", 1)[1].split("/", 1)[0])
            idle = open_sockets(server.process.pid)
            attack = Attack(port, size=200, budget=20_000, payload=STALLED_HEAD)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(attack.run)
                await attack.all_opened.wait()
                took = await use_the_tools(server.url)
                nursery.cancel_scope.cancel()
            print(f"\nunder {attack.size} stalled connections ({attack.opened} opened): the client took {took:.2f} s")
            # The attack was at full pressure: the server had to drop stalled connections, silently.
            assert attack.statuses.get(0, 0) >= attack.size - MAX_PENDING, attack.statuses
            assert set(attack.statuses) == {0}, attack.statuses  # nothing was answered, not even 503
            await wait_for(
                lambda: open_sockets(server.process.pid) <= idle, "return to the sockets it had before the attack"
            )


@SDK_HTTP_LEFTOVERS[0]
@SDK_HTTP_LEFTOVERS[1]
async def test_a_flood_of_wrong_tokens_does_not_lock_the_client_out() -> None:
    wrong = request_bytes(INIT, {"authorization": "Bearer wrong", "connection": "keep-alive"})
    with trio.fail_after(60):
        async with http_server(BASIC, env={"XCSH_RUN_MCP_TOKEN": TOKEN}) as server:
            port = int(server.url.rsplit(":", 1)[1].split("/", 1)[0])
            idle = open_sockets(server.process.pid)
            attack = Attack(port, size=100, budget=20_000, payload=wrong)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(attack.run)
                await attack.all_opened.wait()
                took = await use_the_tools(server.url)
                nursery.cancel_scope.cancel()
            print(f"\nunder a flood of wrong tokens ({attack.opened} connections): the client took {took:.2f} s")
            # Each wrong head got its 401, then its connection closed (no keep-alive for it).
            assert attack.statuses.get(401, 0) >= attack.size, attack.statuses
            assert set(attack.statuses) <= {0, 401}, attack.statuses
            await wait_for(
                lambda: open_sockets(server.process.pid) <= idle, "return to the sockets it had before the attack"
            )


# --- the server in this process: its admission, its deadlines, its tasks ----------------


@asynccontextmanager
async def serving(
    token: str | None = TOKEN, tools_paths: tuple[str, ...] = (BASIC,), **limits: Any
) -> AsyncIterator[tuple[HttpServer, int]]:
    tools = ToolServer(list(tools_paths), grace=0.5)
    server = HttpServer(tools, max_body=2**20, token=token, **limits)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve, listeners)
        yield server, port
        tools.stop("the test is over")


async def stalled(port: int) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(STALLED_HEAD)
    return stream


async def finish(stream: trio.SocketStream, headers: dict[str, str]) -> int:
    """Complete a stalled head as an initialize with ``headers``; the status of the answer."""
    await stream.send_all(b"1\r\n" + request_bytes(INIT, headers).split(b"\r\n", 1)[1])
    answer = bytearray()
    while b"\r\n\r\n" not in answer:
        data = await stream.receive_some(65536)
        assert data, bytes(answer)
        answer += data
    return status_of(bytes(answer))


def task_count() -> int:
    """The HTTP server's tasks: its accept loops and each connection's (the tools' workers come and go apart)."""
    tasks, count = [trio.lowlevel.current_root_task()], 0
    while tasks:
        task = tasks.pop()
        count += task.name.startswith("xcsh_run._mcp.http.")
        tasks += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    return count


async def test_the_oldest_pending_connection_is_dropped_for_a_new_one() -> None:
    with trio.fail_after(DEADLINE):
        async with serving(max_pending=4) as (server, port):
            first, *rest = [await stalled(port) for _ in range(4)]
            await wait_for(lambda: server.admission.counts == (0, 4), "four pending connections")
            rest.append(await stalled(port))
            assert await read_until_closed(first) == b""  # dropped without an answer
            assert server.admission.dropped == 1
            # The four newest are alive: each completes its head and is served.
            assert [await finish(s, {**AUTH, "connection": "close"}) for s in rest] == [200] * 4
            for stream in [first, *rest]:
                await stream.aclose()


async def test_a_pending_connection_has_a_deadline_for_its_first_head() -> None:
    with trio.fail_after(DEADLINE):
        async with serving(head_timeout=0.5) as (server, port):
            started = trio.current_time()
            stream = await stalled(port)
            # A trickle does not reset the deadline: the whole head is due.
            async with trio.open_nursery() as nursery:

                async def trickle() -> None:
                    for _ in range(50):
                        try:
                            await stream.send_all(b"x")
                        except trio.BrokenResourceError:
                            return  # the server closed it
                        await trio.sleep(0.05)

                nursery.start_soon(trickle)
                assert await read_until_closed(stream) == b""
                nursery.cancel_scope.cancel()
            assert 0.5 <= trio.current_time() - started < 2.5
            assert server.admission.counts == (0, 0)
            await stream.aclose()


async def test_a_wrong_token_or_origin_is_answered_and_closed_and_never_admitted() -> None:
    with trio.fail_after(DEADLINE):
        async with serving(max_connections=1) as (server, port):
            for headers, status in (
                ({"authorization": "Bearer wrong"}, 401),
                ({}, 401),
                ({**AUTH, "origin": "http://evil.example"}, 403),
            ):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                await stream.send_all(request_bytes(INIT, {**headers, "connection": "keep-alive"}))
                answer = await read_until_closed(stream)  # closed even though keep-alive was asked
                assert status_of(answer) == status, answer[:200]
                assert b"connection: close" in answer.lower()
                await stream.aclose()
            # The one place in the pool is still free for the right client.
            keep = await trio.open_tcp_stream("127.0.0.1", port)
            await keep.send_all(request_bytes(INIT, AUTH))
            assert (await read_response(keep))[0] == 200
            assert server.admission.counts == (1, 0)
            # Idle on keep-alive, it gives its place to a second client with the token: closed, unanswered.
            other = await trio.open_tcp_stream("127.0.0.1", port)
            await other.send_all(request_bytes(INIT, AUTH))
            assert (await read_response(other))[0] == 200
            assert await read_until_closed(keep) == b""
            assert server.admission.counts == (1, 0) and server.admission.evicted == 1
            for stream in (keep, other):
                await stream.aclose()


async def test_a_head_over_the_limit_in_one_read_is_refused() -> None:
    # h11 bounds only a head still incomplete; one that comes whole in one read is measured.
    with trio.fail_after(DEADLINE):
        async with serving() as (_, port):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(request_bytes(INIT, {**AUTH, "x-big": "a" * 40_000}))
            answer = await read_until_closed(stream)
            assert status_of(answer) == 431, answer[:200]
            await stream.aclose()


@pytest.mark.parametrize("token", [TOKEN, None], ids=["token", "no-token"])
async def test_stalled_connections_leave_no_task_or_socket_behind(token: str | None) -> None:
    # Without a token, a connection is admitted at its first complete head that passes the Origin check.
    headers = AUTH if token else {}
    with trio.fail_after(45):
        async with serving(token) as (server, port):
            warm = await trio.open_tcp_stream("127.0.0.1", port)
            await warm.send_all(request_bytes(INIT, {**headers, "connection": "close"}))
            assert status_of(await read_until_closed(warm)) == 200
            await warm.aclose()
            await wait_for(lambda: server.admission.counts == (0, 0), "the warm-up connection to close")
            await trio.testing.wait_all_tasks_blocked(0.1)
            assert task_count() == 2  # HttpServer.serve and the accept loop
            tasks, sockets = task_count(), open_sockets(os.getpid())
            attack = Attack(port, size=200, budget=2_000, payload=STALLED_HEAD)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(attack.run)
                await attack.all_opened.wait()
                # The quota is full, and stays so: the attack is real.
                await wait_for(lambda: server.admission.counts[1] == MAX_PENDING, "full quota of pending connections")
                client = await trio.open_tcp_stream("127.0.0.1", port)
                await client.send_all(request_bytes(INIT, {**headers, "connection": "close"}))
                assert status_of(await read_until_closed(client)) == 200
                await client.aclose()
                nursery.cancel_scope.cancel()

            # Connections the kernel still held are accepted and closed too: then nothing is left.
            def settled() -> bool:
                return server.admission.counts == (0, 0) and (task_count(), open_sockets(os.getpid())) == (
                    tasks,
                    sockets,
                )

            await wait_for(settled, "return to the tasks and sockets of before the attack")
            assert server.admission.dropped > 0


async def test_a_refused_head_is_answered_whatever_its_body() -> None:
    # The body of a refused head is read past, so the 401 arrives instead of a reset; a client
    # waiting for `100 Continue` sends none and gets the 401 at once.
    big = request_bytes({**INIT, "pad": "x" * 500_000}, {"authorization": "Bearer wrong"})
    waiting = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 5000\r\nexpect: 100-continue\r\n\r\n"
    with trio.fail_after(DEADLINE):
        async with serving() as (server, port):
            for payload in (big, waiting):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                started = trio.current_time()
                await stream.send_all(payload)
                answer = await read_until_closed(stream)
                assert status_of(answer) == 401, answer[:200]
                if payload is waiting:  # not after the 2 s a body is waited for
                    assert trio.current_time() - started < 1.5
                await stream.aclose()
            assert server.admission.counts[0] == 0  # never admitted


async def test_an_admitted_connection_has_request_timeout_for_a_trickled_head(monkeypatch: pytest.MonkeyPatch) -> None:
    import xcsh_run._mcp.http.h11_io as wire

    monkeypatch.setattr(wire, "REQUEST_TIMEOUT", 0.5)
    with trio.fail_after(DEADLINE):
        async with serving() as (server, port):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(request_bytes(INIT, {**AUTH, "connection": "keep-alive"}))
            first = b""
            while b"\r\n\r\n" not in first:
                first += await stream.receive_some(65536)
            assert status_of(first) == 200
            assert server.admission.counts == (1, 0)  # admitted: out of the pending quota's deadline
            started = trio.current_time()
            async with trio.open_nursery() as nursery:

                async def trickle() -> None:
                    for byte in STALLED_HEAD * 3:
                        try:
                            await stream.send_all(bytes([byte]))
                        except trio.BrokenResourceError:
                            return
                        await trio.sleep(0.05)

                nursery.start_soon(trickle)
                rest = await read_until_closed(stream)
                nursery.cancel_scope.cancel()
            assert b"HTTP/1.1" not in rest  # closed, not answered: the head never came whole
            assert 0.5 <= trio.current_time() - started < 2.5
            await stream.aclose()


# --- admitted connections that hold places: idle ones give them up, busy ones keep them ----------


async def quiet_or_closed(stream: trio.SocketStream) -> bool:
    """Whether the server closed ``stream`` (it sends nothing unasked on a keep-alive connection)."""
    with trio.move_on_after(0.02):
        try:
            return await stream.receive_some(65536) == b""
        except (trio.BrokenResourceError, OSError):
            return True
    return False


@SDK_HTTP_LEFTOVERS[0]
@SDK_HTTP_LEFTOVERS[1]
@pytest.mark.parametrize("token", [TOKEN, None], ids=["token", "no-token"])
async def test_idle_keep_alive_and_refused_connections_do_not_lock_the_client_out(token: str | None) -> None:
    headers = AUTH if token else {}
    idle_count = POOL + 16
    with trio.fail_after(90):
        async with http_server(BASIC, env={"XCSH_RUN_MCP_TOKEN": TOKEN} if token else {}) as server:
            port = int(server.url.rsplit(":", 1)[1].split("/", 1)[0])
            pid = server.process.pid
            baseline = open_sockets(pid)
            # A request the transport refuses (400) ends its connection, keep-alive or not.
            for _ in range(POOL):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                await stream.send_all(request_bytes(NO_SESSION, {**headers, "connection": "keep-alive"}))
                answer = await read_until_closed(stream)
                assert status_of(answer) == 400 and b"connection: close" in answer.lower(), answer[:300]
                await stream.aclose()
            # More connections than the pool holds, each with one request answered, then idle on keep-alive.
            idle: list[trio.SocketStream] = []
            try:
                for _ in range(idle_count):
                    idle.append(stream := await trio.open_tcp_stream("127.0.0.1", port))
                    await stream.send_all(request_bytes(INIT, {**headers, "connection": "keep-alive"}))
                    assert (await read_response(stream))[0] == 200
                # The attack is real: the pool is full of idle connections (a 503 for newcomers before).
                assert open_sockets(pid) >= baseline + POOL
                took = await use_the_tools(server.url)
                closed = [await quiet_or_closed(stream) for stream in idle]
                print(f"\nwith {POOL} idle connections held: the client took {took:.2f} s; {sum(closed)} closed")
                # The oldest gave their places to the newest, then to the SDK client's connections.
                assert sum(closed) >= idle_count - POOL + 1, closed
                assert closed[: idle_count - POOL] == [True] * (idle_count - POOL)
            finally:
                for stream in idle:
                    await stream.aclose()
            await wait_for(lambda: open_sockets(pid) <= baseline, "return to the sockets it had before the attack")


async def test_busy_connections_keep_their_places_and_a_newcomer_gets_503(tmp_path: Any) -> None:
    gate = tmp_path / "open"
    with trio.fail_after(60):
        async with serving(None, (GATE,)) as (server, port):
            opener = await trio.open_tcp_stream("127.0.0.1", port)
            await opener.send_all(request_bytes(INIT, {"connection": "close"}))
            answer = await read_until_closed(opener)
            await opener.aclose()
            session = next(
                line.split(b":", 1)[1].strip().decode()
                for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
                if line.lower().startswith(b"mcp-session-id:")
            )
            await wait_for(lambda: server.admission.counts == (0, 0), "the first connection to close")
            headers = {"mcp-session-id": session}
            busy = []
            try:
                for i in range(POOL):
                    call = {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "tools/call",
                        "params": {"name": "gate", "arguments": {"path": str(gate)}},
                    }
                    busy.append(stream := await trio.open_tcp_stream("127.0.0.1", port))
                    await stream.send_all(request_bytes(call, headers))
                await wait_for(lambda: server.admission.busy == POOL, f"{POOL} calls in flight")
                newcomer = await trio.open_tcp_stream("127.0.0.1", port)
                await newcomer.send_all(request_bytes(INIT, {}))
                answer = await read_until_closed(newcomer)
                await newcomer.aclose()
                assert status_of(answer) == 503, answer[:300]
                assert b"too many connections (64 open), all busy" in answer, answer[:300]
                assert server.admission.busy == POOL and server.admission.evicted == 0
                gate.touch()
                # None was dropped: every call is answered on its own connection.
                for i, stream in enumerate(busy):
                    status, body = await read_response(stream)
                    assert status == 200 and json.loads(body)["id"] == i, body[:300]
            finally:
                for stream in busy:
                    await stream.aclose()
            await wait_for(lambda: server.admission.counts == (0, 0), "the busy connections to close")
