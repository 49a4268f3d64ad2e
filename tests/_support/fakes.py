"""Fake workers for the pool and call-lifecycle rules: no process, no pipe, trio's clock only.

A :class:`FakeWorker` answers ``load`` with the tools it is given and each
``call`` as its ``mode`` says; it records what the host did to it
(``$/cancel``, SIGTERM, kill, shutdown) in ``events``, and its resident size
and CPU time are plain attributes a test sets. :class:`FakeFactory` is the
pool's :class:`~xcsh_run._pool.worker_pool.WorkerFactory` seam: it counts and keeps every
worker it started. :func:`assemble` wires a pool, a catalog, its loader and the calls
the way the runner does, around the fake factory.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import trio

from xcsh_run._calls.deadlines import DeadlineKeeper
from xcsh_run._calls.ladder import CancelLadder
from xcsh_run._calls.lifecycle import Calls
from xcsh_run._calls.table import CallTable
from xcsh_run._config import RunnerConfig
from xcsh_run._discovery.catalog import Catalog, ToolInfo
from xcsh_run._discovery.finder import Candidate, ToolSource
from xcsh_run._errors import RemoteError, WorkerDied
from xcsh_run._pool.housekeeping import Housekeeping
from xcsh_run._pool.interface import InFlight
from xcsh_run._pool.loader import Loader
from xcsh_run._pool.worker_pool import PoolRules, WorkerPool
from xcsh_run._process.usage import HighWater
from xcsh_run._sandbox.policy import SandboxPolicy
from xcsh_run.worker import protocol as p

MODULE = "/fake/tools.py"
SOURCE = ToolSource("native", "test", "project")
POLICY = SandboxPolicy(level="none", cpu_seconds=10)
_pids = itertools.count(1000)

# How a fake answers a call: at once; when the test says (`answer_held`); only to `$/cancel`;
# only to SIGTERM; never (only a kill ends it).
Mode = Literal["answer", "hold", "cancel", "sigterm", "ignore"]


class FakeBoundary:
    def __init__(self) -> None:
        self.extra_members: list[int] = []  # processes a call left behind
        self.oom = 0
        self.pids_hits = 0
        self.cpu_exceeded = False

    def members(self) -> list[int]:
        return list(self.extra_members)

    has_memory_limit = True

    def oom_kills(self) -> int:
        return self.oom

    def pids_limit_hits(self) -> int:
        return self.pids_hits


class FakeTail:
    def __init__(self) -> None:
        self.data = ""

    def text(self, max_chars: int = 4000) -> str:
        return self.data[-max_chars:]


class FakeWorker:
    def __init__(
        self, tools: Iterable[str], mode: Mode = "answer", described: dict[str, p.ToolDescription] | None = None
    ) -> None:
        # What its load reports of a tool (Assembly.info sets it): the host checks its plan against it.
        self.described = described if described is not None else {}
        self.pid = next(_pids)
        self.module = ""
        self.tools = list(tools)
        self.mode: Mode = mode
        self.returncode: int | None = None
        self.unenforced: list[str] = []
        self.supervisor_pid = 0
        self.output_exceeded = False
        self.boundary = FakeBoundary()
        self.stderr_tail = FakeTail()
        self.rss = 0
        self.cpu = 0.0
        self.max_frame_bytes = p.DEFAULT_MAX_FRAME_BYTES
        self.events: list[str] = []
        self.call_ids: list[str] = []
        self.die_on_call = False
        self._ids = itertools.count(1)
        self._inflight: dict[int, InFlight[Any]] = {}
        self._exited = trio.Event()

    @property
    def alive(self) -> bool:
        return not self._exited.is_set()

    def cpu_seconds(self) -> float:
        return self.cpu

    def rss_bytes(self) -> int:
        return self.rss

    def high_water(self) -> HighWater:
        return HighWater(-1, -1, -1, -1)

    async def call(self, method: p.Method[Any, Any], params: Any) -> Any:
        pending = await self.start_call(method, params)
        try:
            await pending.wait()
        finally:
            pending.abandon()
        return pending.outcome()

    async def start_call(self, method: p.Method[Any, Any], params: Any, *, on_update: Any = None) -> InFlight[Any]:
        if not self.alive:
            raise WorkerDied(self.returncode or -9, "")
        await trio.lowlevel.checkpoint()
        return self.start_call_nowait(method, params, on_update=on_update)

    def start_call_nowait(self, method: p.Method[Any, Any], params: Any, *, on_update: Any = None) -> InFlight[Any]:
        if not self.alive:
            raise WorkerDied(self.returncode or -9, "")
        pending: InFlight[Any] = InFlight(next(self._ids), on_abandon=self._forget)
        if method is p.LOAD:
            described = [self.described.get(n) or p.ToolDescription(n, n, "", {}, "struct") for n in self.tools]
            self._answer(pending, p.LoadResult(tools=described))
        elif method is p.CALL and self.die_on_call:
            self._exit(-11)
            raise WorkerDied(-11, "")
        elif method is p.CALL:
            self.call_ids.append(params.call_id)
            self._inflight[pending.req_id] = pending
            if self.mode == "answer":
                self._answer(pending, p.CallResult(content=[{"type": "text", "text": f"done by {self.pid}"}]))
        else:
            self._answer(pending, None)
        return pending

    def answer_held(self) -> None:
        for pending in list(self._inflight.values()):
            self._answer(pending, p.CallResult(content=[{"type": "text", "text": f"done by {self.pid}"}]))

    def _answer(self, pending: InFlight[Any], value: Any) -> None:
        pending.set_result(value)
        self._inflight.pop(pending.req_id, None)

    def _refuse(self, how: str) -> None:
        for pending in list(self._inflight.values()):
            pending.set_error(RemoteError(p.ErrorObject(int(p.ErrorCode.CANCELLED), f"stopped by {how}")))
        self._inflight.clear()

    def _forget(self, pending: InFlight[Any]) -> None:
        self._inflight.pop(pending.req_id, None)

    async def notify(self, notice: p.Notice[Any], params: Any) -> None:
        await trio.lowlevel.checkpoint()
        self.events.append(notice.name)
        if notice is p.CANCEL and self.mode == "cancel":
            self._refuse("$/cancel")

    def terminate(self) -> None:
        self.events.append("SIGTERM")
        if self.mode == "sigterm":
            self._refuse("SIGTERM")

    def _exit(self, returncode: int) -> None:
        if self._exited.is_set():
            return
        self.returncode = returncode
        self._exited.set()
        for pending in self._inflight.values():
            pending.set_error(WorkerDied(returncode, ""))
        self._inflight.clear()

    async def kill(self) -> None:
        await trio.lowlevel.checkpoint()
        if self.alive:
            self.events.append("kill")
        self._exit(-9)

    async def wait_exited(self) -> None:
        await self._exited.wait()

    async def shutdown(self, grace: float) -> None:
        await trio.lowlevel.checkpoint()
        self.events.append("shutdown")
        self._exit(0)

    def die(self) -> None:
        """Exit on its own (a crash while idle)."""
        self._exit(-11)


class FakeFactory:
    """Starts fake workers; ``start_seconds`` of trio time each."""

    def __init__(self, tools: Iterable[str] = ("echo",), mode: Mode = "answer", start_seconds: float = 0.1) -> None:
        self.tools = list(tools)
        self.mode: Mode = mode
        self.start_seconds = start_seconds
        self.started: list[FakeWorker] = []
        self.modules: list[str | None] = []
        self.described: dict[str, p.ToolDescription] = {}

    async def start(self, policy: SandboxPolicy, module: str | None, *, has_ui: bool) -> FakeWorker:
        await trio.sleep(self.start_seconds)
        worker = FakeWorker(self.tools, self.mode, self.described)
        self.started.append(worker)
        self.modules.append(module)
        return worker

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


@dataclass
class Assembly:
    factory: FakeFactory
    pool: WorkerPool
    catalog: Catalog
    loader: Loader
    calls: Calls
    housekeeping: Housekeeping
    deadlines: DeadlineKeeper

    def info(self, name: str = "echo", **fields: Any) -> ToolInfo:
        info = ToolInfo(name, name, "", {}, MODULE, SOURCE, params_kind="struct", **fields)
        self.catalog.tools[name] = info
        # The fake module defines it so too, or every call would be planned again from the worker's load.
        self.factory.described[name] = p.ToolDescription(
            **{f: getattr(info, f) for f in p.ToolDescription.__struct_fields__}
        )
        return info

    async def call(self, name: str = "echo", *, timeout: float = 10.0, **options: Any) -> Any:
        info = self.catalog.tools.get(name) or self.info(name)
        return await self.calls.call(info, {}, timeout=timeout, policy=POLICY, default_timeout=60.0, ctx={}, **options)


@asynccontextmanager
async def assemble(
    factory: FakeFactory | None = None,
    *,
    rules: PoolRules | None = None,
    max_workers: int = 4,
    grace: float = 1.0,
    spares: bool = False,
    queue_timeout: float | None = None,
) -> AsyncIterator[Assembly]:
    """A pool, a catalog, its loader and the calls, as the runner wires them, around fake workers."""
    factory = factory or FakeFactory()
    rules = rules or PoolRules(spare_count=0, idle_timeout=None)
    async with trio.open_nursery() as nursery:
        housekeeping = Housekeeping(nursery)
        nursery.start_soon(housekeeping.run)
        await housekeeping.ready.wait()
        pool = WorkerPool(factory, rules, nursery=nursery, housekeeping=housekeeping, start_timeout=10.0)
        config = RunnerConfig(cwd="/fake", sandbox=POLICY, cache=False)
        catalog = Catalog(config, None, [])
        catalog.candidates[MODULE] = Candidate(MODULE, MODULE, SOURCE)
        loader = Loader(config, pool, catalog, None)
        deadlines = DeadlineKeeper(housekeeping)
        calls = Calls(
            loader, table=CallTable(), max_workers=max_workers, probe=None,  # type: ignore[arg-type]
            checked={POLICY: []}, deliver_cancel=CancelLadder(grace), deadlines=deadlines,
            queue_timeout=queue_timeout,
        )  # fmt: skip
        if spares:
            pool.want_spares(POLICY)
        try:
            yield Assembly(factory, pool, catalog, loader, calls, housekeeping, deadlines)
        finally:
            pool.closed = True
            with trio.CancelScope(shield=True):
                await housekeeping.stop(5.0)
                await pool.shutdown_all(grace)
