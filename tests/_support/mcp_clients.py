"""The official SDK client on either transport of `xcsh-run serve`: stdio or Streamable HTTP.

:func:`open_session` yields an initialized ``ClientSession`` with a real
``xcsh-run serve`` subprocess, over stdio (``stdio_client``) or over HTTP
(``serve --http 127.0.0.1:0``, its URL read from its stderr: no port is ever
guessed; ``streamable_http_client``). Either way the server's stderr ends up
in ``serve.log`` in the test's directory, complete once the session is over,
and the server is gone with its workers when the context exits. Feature
tests take the ``transport`` fixture (conftest.py) and run on both.

The SDK gives a stdio server only an allowlist of the environment; the tests
pass theirs whole, so that every process carries the session's test mark (and
the test's HOME and cache), and the autouse ``no_survivors`` fixture fails any
test that leaves one behind.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx2
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import TOOLS, XCSH_RUN, marked_processes

BASIC = str(TOOLS / "basic.py")
HOSTILE = str(TOOLS / "hostile.py")
DEADLINE = 30  # seconds; every test runs under one
LOG = "serve.log"


def serve_args(*tools: str, options: tuple[str, ...] = ()) -> list[str]:
    args = ["serve", "--grace", "0.5"]
    for tool in tools or (BASIC, HOSTILE):
        args += ["--tools", tool]
    return [*args, *options]


class HttpServer:
    """A running `serve --http`: its URL once it listens, and everything it wrote to stderr."""

    def __init__(self, process: trio.Process, log: str | None) -> None:
        self.process = process
        self.url = ""
        self.listening = trio.Event()
        self.stderr = bytearray()
        self._log = log

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        with open(self._log or os.devnull, "wb") as log:
            async for chunk in self.process.stderr:
                log.write(chunk)
                log.flush()
                self.stderr += chunk
                if not self.listening.is_set():
                    for line in bytes(self.stderr).splitlines():
                        if b"listening on " in line:
                            self.url = line.split(b"listening on ", 1)[1].decode().strip()
                            self.listening.set()
                            break


@asynccontextmanager
async def http_server(
    *tools: str, options: tuple[str, ...] = (), env: dict[str, str] | None = None, log: str | None = None
) -> AsyncIterator[HttpServer]:
    """`xcsh-run serve --http` on an ephemeral port (``tools`` default to basic.py), its stderr also to ``log``.

    Ended with SIGTERM: it must exit 128 + 15 with no process of the test left.
    """
    args = [XCSH_RUN, *serve_args(*(tools or (BASIC,)), options=("--http", "127.0.0.1:0", *options))]
    process = await trio.lowlevel.open_process(args, stderr=-1, env={**os.environ, **(env or {})})
    server = HttpServer(process, log)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.read_stderr)
            await server.listening.wait()
            yield server
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                code = await process.wait()
            assert code == 128 + signal.SIGTERM, server.stderr.decode()
            # read_stderr ends at EOF, so the nursery's end means the log is complete.
    finally:
        if process.returncode is None:  # the test failed: still stop it the clean way first
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(10) as scope:
                scope.shield = True
                await process.wait()
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(5) as scope:
                scope.shield = True
                await process.wait()
    assert marked_processes() == []


@asynccontextmanager
async def sdk_session(
    url: str, *, headers: dict[str, str] | None = None, **callbacks: Any
) -> AsyncIterator[ClientSession]:
    """An initialized SDK session over Streamable HTTP (the client DELETEs the session at exit).

    ``headers`` go with every request (``Authorization`` for a server with a token).
    """
    async with AsyncExitStack() as stack:
        http = None
        if headers is not None:  # else the SDK's own client, with its defaults
            timeout = httpx2.Timeout(DEADLINE, read=300)
            http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=timeout))
        read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
        s = await stack.enter_async_context(ClientSession(read, write, read_timeout_seconds=DEADLINE, **callbacks))
        await s.initialize()
        yield s


@asynccontextmanager
async def stdio_session(*tools: str, options: tuple[str, ...] = (), **callbacks: Any) -> AsyncIterator[ClientSession]:
    """An initialized SDK session with `xcsh-run serve` on stdio; its stderr goes to serve.log."""
    params = StdioServerParameters(
        command=XCSH_RUN, args=serve_args(*tools, options=options), env=dict(os.environ), cwd=os.getcwd()
    )
    with open(LOG, "w") as log:
        async with (
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(read, write, read_timeout_seconds=DEADLINE, **callbacks) as s,
        ):
            await s.initialize()
            yield s


@asynccontextmanager
async def open_session(
    transport: str, *tools: str, options: tuple[str, ...] = (), **callbacks: Any
) -> AsyncIterator[ClientSession]:
    """An initialized SDK session with a fresh `xcsh-run serve` over ``transport``, with the given callbacks.

    ``tools`` default to basic.py and hostile.py; ``callbacks`` are
    ``ClientSession``'s (``message_handler``, ``logging_callback``,
    ``elicitation_callback``, ``sampling_callback``...). The server's stderr
    is in serve.log once the context has exited.
    """
    assert transport in ("stdio", "http"), transport
    if transport == "stdio":
        async with stdio_session(*tools, options=options, **callbacks) as s:
            yield s
    else:
        async with (
            http_server(*(tools or (BASIC, HOSTILE)), options=options, log=LOG) as server,
            sdk_session(server.url, **callbacks) as s,
        ):
            yield s
