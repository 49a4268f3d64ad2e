"""The worker pool: every worker's pool state in one slot, and the rules that decide over it.

Rules this module keeps (each one is a bug we do not want back):

1. Only the pool changes a worker's pool state, and it keeps it in the
   worker's :class:`Slot`, never in the worker: a worker is a process and a
   connection, nothing more.
2. A worker taken from the idle lists is removed from them in the same
   synchronous step that chose it: once the taker awaits, no reaper and no
   other taker can see it. A worker a call holds is never killed by the reaper.
3. A worker pinned by a pending action (a preview waiting for ``resolve``) is
   never reaped and never retired for its budget: over budget it is parked,
   and retired when its last pin goes.
4. Spares are refilled on demand, never on every take: a taken spare is
   replaced only once some call of that policy had to start a worker from
   scratch, so a one-shot run starts one worker, not two.
5. The decisions (reuse, park or retire a worker after a call; which idle
   workers expired; whether a policy keeps spares) are synchronous functions
   of the pool's state (:class:`PoolRules`), testable without processes.
6. Background work (spare refills, the reaper) runs in one
   :class:`Housekeeping` nursery that the runner's close cancels and waits
   for, bounded, before anything is torn down.
7. A worker that holds processes a ``keeps_processes`` tool left running
   (``Slot.background``, recorded by :mod:`xcsh_run._pool.background` when the
   call's answer is in) is never reaped and never retired for its budget
   while one of them lives: that would kill what the tool was promised to
   keep. A call that leaves other processes retires its worker as before.

Workers come from a :class:`WorkerFactory`: the real one starts
``WorkerLink`` (:class:`ProcessFactory`); tests inject fakes.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

import trio

from xcsh_run._discovery import JsRuntime, ToolEnv
from xcsh_run._errors import ConfigError, RemoteProtocolError, WorkerError
from xcsh_run._pool.housekeeping import Housekeeping
from xcsh_run._pool.interface import PoolWorker
from xcsh_run._sandbox import MiB, SandboxPolicy
from xcsh_run.worker import protocol as p

log: Final = logging.getLogger("xcsh_run")
R = TypeVar("R")


class WorkerFactory(Protocol):
    """Starts workers for the pool; the seam where tests put fake workers."""

    async def start(
        self, policy: SandboxPolicy, module: str | None, *, has_ui: bool, tool_env: ToolEnv | JsRuntime | None = None
    ) -> PoolWorker:
        """A started worker under ``policy``; ``module`` None for a spare (no module yet).

        ``tool_env``: the module's own environment (``xcsh_run._discovery.tool_envs``), whose interpreter it runs on; or
        for a JavaScript module, the Bun it runs on (``xcsh_run._discovery.bun``).

        Raises OSError, WorkerError, RemoteProtocolError or ConfigError; the
        worker is gone before it raises or is cancelled.
        """
        ...

    async def aclose(self) -> None:
        """Release what outlives single workers (the cgroup root, leftover workdirs); bounded."""
        ...


class SlotState(enum.Enum):
    SPARE = "spare"  # started and sandboxed, no module yet
    LOADING = "loading"  # taken to load a module
    IDLE = "idle"  # loaded, in the idle lists
    BUSY = "busy"  # running a call or a render
    PARKED = "parked"  # over its budget but pinned: retired when unpinned
    RETIRING = "retiring"  # being killed


class Slot:
    """One worker's pool state. Written only by :class:`WorkerPool` (``has_ui`` by the bridge)."""

    __slots__ = (
        "worker",
        "policy",
        "module",
        "state",
        "idle_since",
        "calls_served",
        "pins",
        "has_ui",
        "loaded",
        "complaints",
        "background",
    )

    def __init__(self, worker: PoolWorker, policy: SandboxPolicy, module: str, *, has_ui: bool) -> None:
        self.worker = worker
        self.policy = policy  # fixed at spawn: a worker's sandbox cannot change
        self.module = module  # "" for a spare
        self.state = SlotState.SPARE if not module else SlotState.LOADING
        self.idle_since = 0.0
        self.calls_served = 0
        self.pins = 0  # pending actions whose callables live in this worker
        self.has_ui = has_ui  # what the worker was last told
        # What its module defined when this worker loaded it (set by the registry):
        # the truth a call checks its planned tool against (the cache may be stale or forged).
        self.loaded: p.LoadResult | None = None
        self.complaints = 0  # warnings the bridge logged about what it sent (xcsh_run._host.host_api)
        # Pids a keeps_processes tool left running here (xcsh_run._pool.background): while one
        # lives the worker is neither reaped nor retired for its budget, so they live on.
        self.background: set[int] = set()

    def __repr__(self) -> str:
        return f"<Slot pid={self.worker.pid} {self.state.name} module={self.module!r} pins={self.pins}>"


class Verdict(enum.Enum):
    REUSE = "reuse"
    PARK = "park"
    RETIRE = "retire"


@dataclass(frozen=True)
class PoolRules:
    """The pool's decisions, as plain functions of a slot and a few readings."""

    max_calls_per_worker: int | None = 1000
    idle_timeout: float | None = 300.0
    max_worker_rss_mb: int | None = 1024
    spare_count: int = 1

    def within_budget(self, slot: Slot, *, rss_bytes: int, cpu_seconds: float) -> bool:
        if self.max_calls_per_worker is not None and slot.calls_served >= self.max_calls_per_worker:
            return False
        if self.max_worker_rss_mb is not None and rss_bytes > self.max_worker_rss_mb * MiB:
            return False  # grown too big (a leak in the tool, or a cache): start afresh
        # RLIMIT_CPU counts a process's whole life: retire a warm worker well
        # before a later call could be killed for what earlier calls used.
        budget = slot.policy.cpu_seconds
        return budget is None or cpu_seconds < budget / 2

    def verdict(self, slot: Slot, *, healthy: bool, rss_bytes: int, cpu_seconds: float) -> Verdict:
        """After a call or a render: back to the idle lists, parked for a pending action, or retired."""
        if healthy:
            if slot.background:
                return Verdict.REUSE  # its kept processes live until the runner ends
            if self.within_budget(slot, rss_bytes=rss_bytes, cpu_seconds=cpu_seconds):
                return Verdict.REUSE
            if slot.pins:
                return Verdict.PARK  # over its budget but holding a preview: retired once resolved
        return Verdict.RETIRE

    def expired(self, slot: Slot, now: float) -> bool:
        return (
            self.idle_timeout is not None
            and slot.state is SlotState.IDLE
            and not slot.pins
            and not slot.background
            and now - slot.idle_since > self.idle_timeout
        )

    def keeps_spares(self, policy: SandboxPolicy) -> bool:
        # Not for strict: its Landlock rules name the module's folder, unknown until a call.
        return self.spare_count > 0 and policy.level != "strict"


class WorkerPool:
    """Every worker of a runner, in idle lists by (module, policy), spares by policy, or held."""

    def __init__(
        self,
        factory: WorkerFactory,
        rules: PoolRules,
        *,
        nursery: trio.Nursery,
        housekeeping: Housekeeping,
        start_timeout: float,
    ) -> None:
        self.factory = factory
        self.rules = rules
        self._nursery = nursery
        self._housekeeping = housekeeping
        self._start_timeout = start_timeout
        self._slots: dict[PoolWorker, Slot] = {}
        self._idle: dict[tuple[str, SandboxPolicy], list[Slot]] = {}
        self._spares: dict[SandboxPolicy, list[Slot]] = {}
        self._spawning_spares: set[SandboxPolicy] = set()
        self._spare_events: dict[SandboxPolicy, trio.Event] = {}
        # Policies for which a call had to start a worker from scratch: only
        # then is a taken spare replaced (rule 4).
        self._spare_demand: set[SandboxPolicy] = set()
        self.starting = 0  # loads in progress (a spare taken or a worker starting, then `load`)
        self.started = 0
        self.closed = False
        self.has_ui = False  # what new workers are told

    # --- reading -------------------------------------------------------------------

    def slot(self, worker: PoolWorker) -> Slot | None:
        return self._slots.get(worker)

    def slots(self) -> list[Slot]:
        return list(self._slots.values())

    def counts(self) -> dict[str, int]:
        slots = self._slots.values()
        live = [s for s in slots if s.worker.alive]
        return {
            "idle": sum(s.state in (SlotState.IDLE, SlotState.PARKED) for s in live),
            "busy": sum(s.state is SlotState.BUSY for s in live),
            "spare": sum(len(v) for v in self._spares.values()),
            "pinned": sum(s.pins > 0 for s in slots),
        }

    # --- taking --------------------------------------------------------------------------

    async def take_idle(self, module: str, policy: SandboxPolicy) -> Slot | None:
        """A live idle worker that has ``module`` loaded under ``policy``, now busy; None if there is none."""
        idle = self._idle.get((module, policy), [])
        while idle:
            slot = idle.pop()  # rule 2: chosen and removed in one step
            if slot.worker.alive:
                slot.state = SlotState.BUSY
                return slot
            await self.retire(slot)
        return None

    def peek_idle(self, module: str, policy: SandboxPolicy) -> Slot | None:
        """The live idle worker :meth:`take_idle` would take now, left where it is; None if there is none."""
        idle = self._idle.get((module, policy))
        if idle and idle[-1].worker.alive:
            return idle[-1]
        return None

    def take(self, slot: Slot) -> None:
        """Take the slot :meth:`peek_idle` returned, in the same synchronous step (rule 2): now busy."""
        idle = self._idle[(slot.module, slot.policy)]
        assert idle[-1] is slot
        idle.pop()
        slot.state = SlotState.BUSY

    async def start_loaded(
        self,
        module: str,
        policy: SandboxPolicy,
        load: Callable[[PoolWorker], Awaitable[R]],
        tool_env: ToolEnv | JsRuntime | None = None,
    ) -> tuple[Slot, R]:
        """A spare (or a new worker) under ``policy`` given ``module``, and what ``load(worker)`` returned.

        The slot is LOADING: :meth:`occupy` or :meth:`release` it. On any
        failure, and on cancellation, the worker is retired (shielded) first.
        A module with its own environment (``tool_env``) always gets a new
        worker on that environment's interpreter: spares run the host's (a
        JavaScript module's is its Bun's: spares are Python workers).
        """
        slot: Slot | None = None
        ok = False
        self.starting += 1
        try:
            if tool_env is not None:
                slot = await self._start(policy, module, tool_env)
            else:
                slot = self._take_spare(policy)
            if slot is None and policy in self._spawning_spares:
                # A spare is already on its way (started with the runner,
                # overlapping discovery): waiting for it is never slower
                # than starting another worker from scratch.
                await self._spare_event(policy).wait()
                slot = self._take_spare(policy)
            if slot is None:
                self._note_spare_demand(policy)
                slot = await self._start(policy, module)
            slot.module, slot.state = module, SlotState.LOADING
            slot.worker.module = module  # its protocol errors and teardown logs name the tool file
            result = await load(slot.worker)
            ok = True
            return slot, result
        finally:
            self.starting -= 1
            if slot is not None and not ok:
                with trio.CancelScope(shield=True):
                    await self.retire(slot)

    def occupy(self, slot: Slot) -> None:
        slot.state = SlotState.BUSY

    def release(self, slot: Slot) -> None:
        """Back to the idle lists (or retired, once the pool is closed)."""
        slot.state = SlotState.IDLE
        slot.idle_since = trio.current_time()
        if self.closed:
            # The runner's close is killing every worker anyway; its nursery may be gone already.
            with contextlib.suppress(RuntimeError):
                self._nursery.start_soon(self.retire, slot)
            return
        self._idle.setdefault((slot.module, slot.policy), []).append(slot)

    async def finish(self, slot: Slot, *, healthy: bool, served_call: bool = True) -> None:
        """After a call (or a render): reuse, park or retire the worker (see :meth:`PoolRules.verdict`)."""
        if served_call:
            slot.calls_served += 1
        worker = slot.worker
        verdict = Verdict.RETIRE
        if healthy and not self.closed and self._clean(slot):
            verdict = self.rules.verdict(
                slot, healthy=True, rss_bytes=worker.rss_bytes(), cpu_seconds=worker.cpu_seconds()
            )
        if verdict is Verdict.REUSE:
            self.release(slot)
        elif verdict is Verdict.PARK:
            slot.state = SlotState.PARKED
        else:
            with trio.CancelScope(shield=True):
                await self.retire(slot)

    @staticmethod
    def _clean(slot: Slot) -> bool:
        # A call that left processes behind (a daemon, a background job)
        # retires its worker: nothing a call started may outlive the call,
        # unless its tool declared keeps_processes (slot.background).
        # Its supervisor was there before any tool code ran.
        worker = slot.worker
        if not worker.alive:
            return False
        members = set(worker.boundary.members())
        slot.background &= members
        return members <= {worker.pid, worker.supervisor_pid, *slot.background}

    async def retire(self, slot: Slot) -> None:
        idle = self._idle.get((slot.module, slot.policy))
        if idle and slot in idle:
            idle.remove(slot)
        slot.state, slot.pins = SlotState.RETIRING, 0
        await slot.worker.kill()
        self._slots.pop(slot.worker, None)

    # --- pins (rule 3) ---------------------------------------------------------------------

    def pin(self, worker: PoolWorker) -> None:
        # A worker already being retired may still deliver a pending action: it is not pinned back to life.
        slot = self._slots.get(worker)
        if slot is not None and slot.state is not SlotState.RETIRING and worker.alive and not self.closed:
            slot.pins += 1

    def unpin(self, worker: PoolWorker) -> None:
        slot = self._slots.get(worker)
        if slot is None or slot.pins == 0:
            return
        slot.pins -= 1
        if slot.pins == 0 and slot.state is SlotState.PARKED:
            with contextlib.suppress(RuntimeError):
                self._nursery.start_soon(self.retire, slot)

    # --- the reaper -------------------------------------------------------------------------

    def take_expired(self, now: float) -> list[Slot]:
        """Idle workers past ``idle_timeout``, taken out of the idle lists in this one synchronous step."""
        expired: list[Slot] = []
        for idle in self._idle.values():
            for slot in idle:
                if slot.background and slot.worker.alive:
                    slot.background &= set(slot.worker.boundary.members())  # kept ones that ended free it
            keep = [s for s in idle if not self.rules.expired(s, now)]
            expired += [s for s in idle if self.rules.expired(s, now)]
            idle[:] = keep
        return expired

    async def reap_idle(self) -> None:
        """Retire workers idle longer than ``idle_timeout`` (spares and pinned workers excepted)."""
        timeout = self.rules.idle_timeout
        assert timeout is not None
        while not self.closed:
            await trio.sleep(min(timeout / 2, 5.0))
            for slot in self.take_expired(trio.current_time()):
                await self.retire(slot)

    # --- spares (rule 4) --------------------------------------------------------------------

    def _take_spare(self, policy: SandboxPolicy) -> Slot | None:
        spares = self._spares.get(policy)
        while spares:
            slot = spares.pop()
            if slot.worker.alive:
                if policy in self._spare_demand:
                    self.want_spares(policy)
                return slot
            self._housekeeping.start_soon(self.retire, slot)
        return None

    def _note_spare_demand(self, policy: SandboxPolicy) -> None:
        if policy not in self._spare_demand:
            self._spare_demand.add(policy)
            self.want_spares(policy)

    def _spare_event(self, policy: SandboxPolicy) -> trio.Event:
        return self._spare_events.setdefault(policy, trio.Event())

    def want_spares(self, policy: SandboxPolicy) -> None:
        """Start filling ``policy``'s spares in the background, unless that is under way already."""
        if not self.rules.keeps_spares(policy) or self.closed or policy in self._spawning_spares:
            return
        # Marked now, not when the task first runs: a load that starts in
        # between waits for this spare instead of starting a worker of its own.
        self._spawning_spares.add(policy)
        if not self._housekeeping.start_soon(self._refill_spares, policy):
            self._spawning_spares.discard(policy)

    async def _refill_spares(self, policy: SandboxPolicy) -> None:
        try:
            spares = self._spares.setdefault(policy, [])
            while len(spares) < self.rules.spare_count and not self.closed:
                slot = await self._start_blank(policy)
                if slot is None:
                    return
                if self._closed_now():  # closed while it started
                    with trio.CancelScope(shield=True):
                        await self.retire(slot)
                    return
                spares.append(slot)
                self._spare_event(policy).set()
                self._spare_events.pop(policy, None)
        finally:
            self._spawning_spares.discard(policy)
            # Wake anyone still waiting: they will find a spare, or start their own.
            event = self._spare_events.pop(policy, None)
            if event is not None:
                event.set()

    def _closed_now(self) -> bool:
        return self.closed  # read afresh after an await (mypy would keep a narrowed attribute)

    async def _start_blank(self, policy: SandboxPolicy) -> Slot | None:
        try:
            with trio.move_on_after(self._start_timeout):
                return await self._start(policy, None)
        except (OSError, WorkerError, RemoteProtocolError, ConfigError) as exc:
            if not self.closed:
                log.warning("could not start a spare worker: %s", exc)
        return None

    async def _start(
        self, policy: SandboxPolicy, module: str | None, tool_env: ToolEnv | JsRuntime | None = None
    ) -> Slot:
        has_ui = self.has_ui
        if tool_env is None:  # a factory that knows no environments (a test's fake) is called as before
            worker = await self.factory.start(policy, module, has_ui=has_ui)
        else:
            worker = await self.factory.start(policy, module, has_ui=has_ui, tool_env=tool_env)
        slot = self._slots[worker] = Slot(worker, policy, module or "", has_ui=has_ui)
        self.started += 1
        what = f"for {module}" if module else "(a spare, for the next module to load)"
        log.info("worker %d started %s, sandbox %s", worker.pid, what, policy.level, extra={"pid": worker.pid})
        return slot

    # --- closing ------------------------------------------------------------------------------

    async def shutdown_all(self, grace: float) -> None:
        """``shutdown`` to every idle worker, a kill to every busy one; all gone when this returns."""
        self.closed = True
        async with trio.open_nursery() as nursery:
            for slot in list(self._slots.values()):
                nursery.start_soon(self._shutdown, slot, grace)
        for slot in self._slots.values():
            slot.pins = 0

    async def _shutdown(self, slot: Slot, grace: float) -> None:
        if slot.state is SlotState.BUSY:
            await slot.worker.kill()
        else:
            await slot.worker.shutdown(grace)
        self._slots.pop(slot.worker, None)
