"""trio-parallel: ``trio_parallel.run_sync`` from a trio host (its default worker type and cache)."""

from __future__ import annotations

import time

import trio
import trio_parallel

from bench._stats import now_us
from bench.peers._work import BIG_BYTES, big, busy, echo


class TrioParallel:
    loop = "trio"

    async def __aenter__(self) -> TrioParallel:
        self.limiter = trio.CapacityLimiter(2)
        async with trio.open_nursery() as nursery:  # two warm workers in the cache
            for _ in range(2):
                nursery.start_soon(self._loop, 20)
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def _loop(self, count: int) -> None:
        for i in range(count):
            await trio_parallel.run_sync(echo, i, limiter=self.limiter)

    async def op_warm(self, n: int) -> list[float]:
        await self._loop(200)
        samples = []
        for i in range(n):
            start = now_us()
            await trio_parallel.run_sync(echo, i, limiter=self.limiter)
            samples.append(now_us() - start)
        return samples

    async def op_throughput(self, n: int) -> float:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(self._loop, n // 2)
        return time.perf_counter() - start

    async def op_big(self, reps: int) -> list[float]:
        samples = []
        for i in range(reps + 1):
            start = time.perf_counter()
            if len(await trio_parallel.run_sync(big, limiter=self.limiter)) != BIG_BYTES:
                raise AssertionError("short big result")
            if i:
                samples.append((time.perf_counter() - start) * 1e3)
        return samples

    async def op_cancel(self, reps: int) -> dict[str, list[float]]:
        """ms from cancelling ``run_sync(busy, kill_on_cancel=True)`` to its return (the worker is killed)."""
        samples = []
        for _ in range(reps):
            mark: dict[str, float] = {}
            with trio.CancelScope() as scope:

                async def cancel_soon(scope: trio.CancelScope = scope, mark: dict[str, float] = mark) -> None:
                    await trio.sleep(0.2)  # a cached worker starts the loop within this
                    mark["start"] = time.perf_counter()
                    scope.cancel()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(cancel_soon)
                    await trio_parallel.run_sync(busy, kill_on_cancel=True, limiter=self.limiter)
            samples.append((time.perf_counter() - mark["start"]) * 1e3)
        return {"samples": samples}
