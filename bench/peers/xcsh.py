"""xcsh-run itself, through its public embedding API only (``open_runner``, ``call_tool``, ``cancel``).

Nothing here reaches into ``runner._*``. Worker processes are found from the
outside (the children of this process, with psutil) for the memory rows.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import trio

from bench._stats import now_us
from xcsh_run import Runner, SandboxPolicy, open_runner

TOOLS = Path(__file__).resolve().parent.parent / "tools"
ECHO = str(TOOLS / "echo_tool.py")
BIG = str(TOOLS / "big_tool.py")
CANCEL = str(TOOLS / "cancel_tools.py")
ECHO_TS = str(TOOLS / "echo_tool.ts")
# What each worker language loads, and the tools it must have: the Bun worker runs only the echo.
LANGUAGES = {
    "python": ([ECHO, BIG, CANCEL], {"echo", "echo_schema", "big", "busy", "ignore_sigterm"}),
    "bun": ([ECHO_TS], {"echo"}),
}
_ids = itertools.count()


def _spares(runner: Runner) -> int:
    """Started workers the runner keeps in reserve (0 where this version has none)."""
    return int(getattr(runner.statistics(), "spare_workers", 0))


def _worker_processes() -> list[psutil.Process]:
    me = psutil.Process()
    found = []
    for child in me.children():
        with contextlib.suppress(psutil.Error):
            cmd = child.cmdline()
            if "-m" in cmd and "xcsh_run.worker" in cmd:
                found.append(child)
    return found


class Xcsh:
    """One runner with the given sandbox level, kept open across ops.

    ``language="bun"`` loads the TypeScript echo tool instead (a Bun worker, found
    as the host finds it: ``XCSH_RUN_BUN``, then ``PATH``); only the echo ops apply.
    """

    loop = "trio"

    def __init__(self, sandbox: str = "contained", language: str = "python") -> None:
        self.policy = SandboxPolicy(level=sandbox)  # type: ignore[arg-type]
        self.paths, self.wanted = LANGUAGES[language]
        self._stack = contextlib.AsyncExitStack()

    def _open(self, **options: Any) -> contextlib.AbstractAsyncContextManager[Runner]:
        return open_runner(
            self.paths,
            cwd=self.tmp,
            cache=True,
            cache_dir=self.cache_dir,
            discover_sources=False,
            sandbox=self.policy,
            **options,
        )

    async def __aenter__(self) -> Xcsh:
        self.tmp = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="xcsh-bench-"))
        self.cache_dir = str(Path(self.tmp) / "cache")
        self.runner = await self._stack.enter_async_context(self._open())
        names = {t.name for t in self.runner.tools}
        if not self.wanted <= names:
            raise RuntimeError(f"bench tools did not load: {names}; errors: {self.runner.errors}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _echo(self, x: int, tool: str = "echo", runner: Runner | None = None) -> None:
        result = await (runner or self.runner).call_tool(tool, {"x": x})
        if result.is_error or result.details != {"x": x}:
            raise RuntimeError(f"echo failed: {result}")

    async def op_info(self) -> dict[str, Any]:
        s = self.runner.statistics()
        return {"reliable_boundary": s.reliable_boundary, "grace": self.runner.grace, "level": self.policy.level}

    async def op_warm(self, n: int, tool: str = "echo") -> dict[str, Any]:
        for i in range(200):
            await self._echo(i, tool)
        before = self.runner.statistics().workers_started
        samples = []
        for i in range(n):
            start = now_us()
            await self._echo(i, tool)
            samples.append(now_us() - start)
        return {"samples": samples, "spawned": self.runner.statistics().workers_started - before}

    async def op_throughput(self, n: int, workers: int = 2, in_flight: int = 0) -> dict[str, float]:
        """Seconds for n echo calls from ``workers`` tasks, each with one call in flight (one worker each).

        With ``in_flight``, that many tasks share the n calls in a runner of
        ``max_workers=workers``: callers keep many calls in flight, as Pool's
        ``apply_async`` loop does, and the runner queues them.
        """
        if in_flight:
            return await self._throughput_queued(n, workers, in_flight)

        async def loop(count: int) -> None:
            for i in range(count):
                await self._echo(i)

        async with trio.open_nursery() as nursery:  # warm-up: makes sure `workers` workers exist
            for _ in range(workers):
                nursery.start_soon(loop, 50)
        before = self.runner.statistics().workers_started
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(workers):
                nursery.start_soon(loop, n // workers)
        elapsed = time.perf_counter() - start
        return {"seconds": elapsed, "spawned": self.runner.statistics().workers_started - before}

    async def _throughput_queued(self, n: int, workers: int, in_flight: int) -> dict[str, float]:
        async with self._open(max_workers=workers) as runner:
            left = iter(range(n))

            async def loop(count: int) -> None:
                for i in range(count):
                    await self._echo(i, runner=runner)

            async def drain() -> None:
                for i in left:
                    await self._echo(i, runner=runner)

            async with trio.open_nursery() as nursery:  # warm-up: `workers` workers exist
                for _ in range(workers):
                    nursery.start_soon(loop, 50)
            before = runner.statistics().workers_started
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(in_flight):
                    nursery.start_soon(drain)
            elapsed = time.perf_counter() - start
            return {"seconds": elapsed, "spawned": runner.statistics().workers_started - before}

    async def op_big(self, reps: int) -> list[float]:
        samples = []
        for i in range(reps + 1):
            start = time.perf_counter()
            result = await self.runner.call_tool("big", {})
            if result.is_error or len(result.content[0]["text"]) != 10 * 2**20:
                raise RuntimeError(f"big failed: {result.text[:200]}")
            if i:  # the first builds the string in the worker
                samples.append((time.perf_counter() - start) * 1e3)
        return samples

    async def op_first_call(self, reps: int, spares: bool = True, forkserver: bool = False) -> dict[str, Any]:
        """ms of the first call in a new runner whose module is cached: a worker that never ran this module.

        With ``spares`` (the default settings), the runner may keep a started
        worker in reserve: the call is timed once it is ready (up to 1 s after
        open), so it pays for loading the module and the call. Without, the
        call also pays for spawning the worker.
        """
        samples, cache_misses = [], 0
        options: dict[str, Any] = {}
        if not spares:
            if "spare_workers" not in inspect.signature(open_runner).parameters:
                raise RuntimeError("open_runner has no spare_workers option in this version")
            options["spare_workers"] = 0
        if forkserver:
            # Its zygote imports while the runner opens; the wait below lets it get ready.
            options["forkserver"] = True
        for i in range(reps):
            async with self._open(**options) as runner:
                if runner.statistics().workers_started - _spares(runner):
                    cache_misses += 1  # the module was loaded (and its worker kept) at open
                with trio.move_on_after(1.0):
                    await trio.sleep(0.3 if forkserver else 0.05)
                    while spares and (_spares(runner) < 1 or runner.statistics().starting_workers):  # noqa: ASYNC110 - polls public stats
                        await trio.sleep(0.01)
                start = time.perf_counter()
                await self._echo(i, runner=runner)
                samples.append((time.perf_counter() - start) * 1e3)
        return {"samples": samples, "cache_misses": cache_misses}

    async def op_cancel(self, reps: int, tool: str) -> dict[str, Any]:
        """ms from ``runner.cancel`` to the call's terminal result, for a tool that is running."""
        samples, rungs, kinds = [], [], []
        for _ in range(reps):
            call_id = f"bench-{next(_ids)}"
            running = trio.Event()
            mark: dict[str, float] = {}

            async def call(
                call_id: str = call_id, running: trio.Event = running, mark: dict[str, float] = mark
            ) -> None:
                result = await self.runner.call_tool(tool, {}, tool_call_id=call_id, on_update=lambda _: running.set())
                mark["end"] = time.perf_counter()
                kinds.append(result.kind)
                rungs.append(result.error.rung if result.error is not None else None)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await running.wait()
                await trio.sleep(0.01)  # well inside the loop
                mark["start"] = time.perf_counter()
                self.runner.cancel(call_id, "bench")
            samples.append((mark["end"] - mark["start"]) * 1e3)
        return {"samples": samples, "rungs": rungs, "kinds": kinds, "grace": self.runner.grace}

    async def op_idle_rss(self, calls: int = 200) -> dict[str, Any]:
        """RSS and USS (MiB) of an idle worker that served ``calls`` echo calls, in a new runner.

        A new runner, so that the worker measured has done nothing else; its
        spare (if any, no module loaded) is reported beside it.
        """
        before = {proc.pid for proc in _worker_processes()}
        async with self._open() as runner:
            for i in range(calls):
                await self._echo(i, runner=runner)
            await trio.sleep(0.2)
            found = []
            for proc in _worker_processes():
                if proc.pid not in before:
                    with contextlib.suppress(psutil.Error):
                        info = proc.memory_full_info()
                        found.append((info.rss / 2**20, info.uss / 2**20))
            spares = _spares(runner)
        if not found:
            raise RuntimeError("no idle worker found among this process's children")
        found.sort()
        rss, uss = found[-1]  # the worker that loaded the module and served the calls is the larger
        return {"rss": rss, "uss": uss, "others": [r for r, _ in found[:-1]], "spares": spares}

    async def op_host_memory(self, n: int) -> dict[str, float]:
        """Host RSS (MiB) after a warm-up, after n/2 and after n echo calls."""
        me = psutil.Process()
        for i in range(1000):
            await self._echo(i)
        gc.collect()
        marks = [me.memory_info().rss / 2**20]
        start = time.perf_counter()
        for half in range(2):
            for i in range(n // 2):
                await self._echo(half * n + i)
            gc.collect()
            marks.append(me.memory_info().rss / 2**20)
        return {"rss0": marks[0], "rss_half": marks[1], "rss_end": marks[2], "seconds": time.perf_counter() - start}
