"""The official MCP SDK (mcp 2.x): ``ClientSession`` over ``stdio_client`` to an SDK ``MCPServer`` (asyncio).

Warm ``call_tool`` on one session; throughput over two sessions (two server
processes) with at most 32 calls in flight each; the 10 MiB result. The cold
spawn + initialize + call is a whole process of its own: ``bench.peers.mcp_cold``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from bench._stats import now_us

SERVER = str(Path(__file__).resolve().parent / "mcp_server.py")


def server_params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[SERVER], env=dict(os.environ))


class Mcp:
    loop = "asyncio"

    async def __aenter__(self) -> Mcp:
        self._stack = contextlib.AsyncExitStack()
        self._devnull = self._stack.enter_context(open(os.devnull, "w"))  # noqa: ASYNC230, SIM115 - at setup
        self.sessions: list[ClientSession] = []
        for _ in range(2):
            read, write = await self._stack.enter_async_context(stdio_client(server_params(), errlog=self._devnull))
            session = await self._stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            self.sessions.append(session)
        for session in self.sessions:
            for i in range(20):
                await self._echo(session, i)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    @staticmethod
    async def _echo(session: ClientSession, x: int) -> None:
        result = await session.call_tool("echo", {"x": x})
        if result.is_error:
            raise RuntimeError(f"echo failed: {result}")

    async def op_warm(self, n: int) -> list[float]:
        session = self.sessions[0]
        for i in range(50):
            await self._echo(session, i)
        samples = []
        for i in range(n):
            start = now_us()
            await self._echo(session, i)
            samples.append(now_us() - start)
        return samples

    async def op_throughput(self, n: int, in_flight: int = 32) -> float:
        async def one_session(session: ClientSession, count: int) -> None:
            gate = asyncio.Semaphore(in_flight)

            async def one(i: int) -> None:
                async with gate:
                    await self._echo(session, i)

            await asyncio.gather(*(one(i) for i in range(count)))

        start = time.perf_counter()
        await asyncio.gather(*(one_session(s, n // 2) for s in self.sessions))
        return time.perf_counter() - start

    async def op_big(self, reps: int) -> list[float]:
        samples = []
        session = self.sessions[0]
        for _ in range(reps):  # no extra warm-up call: building the string is 1 ms of several seconds
            start = time.perf_counter()
            result: Any = await session.call_tool("big", {})
            if result.is_error or len(result.content[0].text) != 10 * 2**20:
                raise RuntimeError("big failed")
            samples.append((time.perf_counter() - start) * 1e3)
        return samples
