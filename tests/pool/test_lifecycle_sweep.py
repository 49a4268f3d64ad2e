"""The checkpoint-cancellation sweep: cancellation at every task step of a runner's life.

The promise under test: nothing that happens to a call can hang the host or
leave anything behind; every ``call_tool`` ends in exactly one ToolResult, or
raises ``trio.Cancelled`` when the caller's own scope was cancelled (after the
worker's tree is gone).

How: a :class:`StepCanceller` instrument counts trio task steps once armed and,
at step N, cancels the scope around the lifecycle (or, in the ``cancel_id``
variant, calls ``runner.cancel(call_id)``). Each N = 1, 2, 3, ... gets a fresh
``trio.run`` of ``open_runner -> call_tool -> close``, until a run completes
without the instrument firing: then every step of the phase has had a
cancellation land on it. Each run is guarded by a watchdog thread
(:func:`conftest.run_guarded`) so that a hang is a reported failure, not a
hung pytest; after each run nothing may be left (processes, cgroups, worker
workdirs, fds of this process).

Every N up to :data:`MANDATORY` is run in every profile; beyond it ``make
test`` takes a stride and ``make stress`` (``XCSH_RUN_STRESS=1``) takes every
step and every combination of phase, spares and cache. Failures are collected
across N and reported together, with the phase, N and what was left.

Every phase is at least :data:`MANDATORY` steps of real work, and the sweep
asserts it (a change that shortens a phase fails): the swept call streams
partial results and log records one by one (``stream`` in
tests/fixtures/tools/lifecycle.py), the close stops workers of two modules, one pinned
by a pending action and owed the `shutdown` session event, and a spare, and
the bare runner waits for its spare before it is left.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import trio

from tests._support.scale import STRESS, scaled
from tests.conftest import SUMMARY, TOOLS, Guarded, leaks_since, run_guarded, snapshot
from xcsh_run import Runner, ToolResult, open_runner

MODULE = str(TOOLS / "lifecycle.py")
HOSTAPI = str(TOOLS / "hostapi.py")
# The same tools for the Bun worker: its start (the Python step, the exec of
# Bun, the handoff) and its calls are swept as the Python worker's are.
JS_MODULE = str(TOOLS / "lifecycle.ts")
CALL_ID = "sweep-call"
GRACE = 0.5
# The streaming call's partial results (each followed by a log record), and
# the tool's work between two messages: enough for the host to read each
# message on its own, so that their delivery is many steps, not one. A warm
# call checkpoints only where it must wait, so it takes enough parts to keep
# the phase over MANDATORY steps.
STREAM_PARTS = 48
STREAM_INTERVAL = 0.0005
# How often a runner's statistics are looked at while its spares start.
SPARE_POLL = 0.02
# A normal iteration takes well under a second (one worker start, one call,
# the close); ten times that is a hang, not a slow machine.
WATCHDOG = 10.0
# Every N up to here is run in every profile; beyond it, short runs stride.
MANDATORY = 60
STRIDE = scaled(8, 1)
# A sweep that never ends (a task polling forever) must still stop somewhere.
MAX_N = 3000
# After this many hangs in one phase the rest of it is skipped: each costs
# WATCHDOG seconds, and the cause is the same bug.
MAX_HANGS = scaled(2, 5)

Arm = Literal["open", "call", "close"]
Action = Literal["scope", "cancel_id"]


@dataclass(frozen=True)
class Call:
    """The swept call: its tool, and the partial results it streams before its result."""

    tool: str = "ping"
    parts: int = 0

    @property
    def arguments(self) -> dict[str, object]:
        return {"count": self.parts, "interval": STREAM_INTERVAL} if self.parts else {}

    @property
    def answer(self) -> str:
        """The text of the result of a call nothing disturbed."""
        return "streamed" if self.parts else "pong"


PING = Call()
# Partial results and log records, in order, one by one: delivery (and the
# in-flight call) is many steps, each a place for a cancellation to land.
STREAM = Call("stream", STREAM_PARTS)
# The queued phase's call ahead: long enough that the swept call is queued
# behind it (that phase checks it was) and waits there for many steps.
AHEAD_PARTS = 8


@dataclass(frozen=True)
class Phase:
    """Where the counter is armed, what it does at step N, and the runner's shape."""

    arm: Arm
    spares: int
    cache: bool
    action: Action = "scope"
    warm: bool = False  # a first call, before arming, leaves a warm worker for the swept one
    module: bool = True  # False: open_runner([]) with no call (the bare spare start and close)
    call: Call = PING  # the swept call
    # Before arming, the runner is given more to close: a warm worker of a
    # second module (hostapi.py), pinned by a pending action and told of a
    # session event (so that the close delivers `shutdown` to it), and its
    # spares ready. See :func:`occupy`.
    busy: bool = False
    # The block waits until the spares have started before it goes on (as an
    # embedding app waits for its runner to be ready before taking work).
    settle: bool = False
    # The fewest steps the phase's untouched run may take: a change that
    # makes the phase shorter (less of a runner's life under the sweep) fails.
    min_steps: int = MANDATORY
    # max_workers=1, and a call ahead (streaming AHEAD_PARTS) holds the only
    # worker when the swept call is made: the swept call queues for it, is
    # handed the worker as the call ahead ends, and takes it warm.
    queued: bool = False
    # The module is lifecycle.ts, in a Bun worker (which never takes a spare).
    js: bool = False

    @property
    def module_path(self) -> str:
        return JS_MODULE if self.js else MODULE

    @property
    def name(self) -> str:
        # Without the cache, discovery's worker stays idle and the call takes
        # it: such a call is warm whatever the phase asked for.
        warm = self.warm or not self.cache
        what = {"open": "discovery", "call": "call-warm" if warm else "call-cold", "close": "close"}[self.arm]
        if not self.module:
            what = "spare-only"
        if self.queued:
            what = "call-queued"
        return "/".join(
            [what, f"spares={self.spares}", "cache" if self.cache else "nocache"]
            + (["runner.cancel"] if self.action == "cancel_id" else [])
            + (["bun"] if self.js else [])
        )


class StepCanceller(trio.abc.Instrument):
    """Counts task steps once armed; at step ``n`` cancels the target (once).

    It acts from ``before_task_step``, so the cancellation is in place before
    the chosen task resumes: that task sees it at its next checkpoint, and
    every task blocked in the scope is woken with it. ``CancelScope.cancel``
    and ``Runner.cancel`` are synchronous and safe outside any task.
    """

    def __init__(self, n: int, action: Action) -> None:
        self.n = n
        self.action = action
        self.armed = False
        self.steps = 0
        self.fired = False
        self.fired_at: str = ""  # the task about to step when it fired
        self.scope: trio.CancelScope | None = None
        self.runner: Runner | None = None

    def arm(self) -> None:
        self.armed = True
        self.steps = 0

    def disarm(self) -> None:
        self.armed = False

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if not self.armed:
            return
        self.steps += 1
        if self.steps != self.n:
            return
        if self.action == "scope":
            assert self.scope is not None
            self.scope.cancel()
            self.fired = True
        else:
            # False once the call is over: then nothing was cancelled and the
            # run counts as one the instrument never touched.
            self.fired = self.runner is not None and self.runner.cancel(CALL_ID, "sweep")
        if self.fired:
            self.fired_at = task.name


@dataclass
class Record:
    """What one lifecycle run did, as seen from inside it."""

    # Where the busy phase's hostapi workers write each session event they
    # receive (hostapi.py's `marker`); None: no marker asked for.
    marker: Path | None = None
    opened: bool = False
    errors: list[str] = field(default_factory=list)
    setup: list[tuple[str, ToolResult]] = field(default_factory=list)  # calls before the swept one
    setup_problems: list[str] = field(default_factory=list)
    call_started: bool = False
    call_ended: bool = False
    outcomes: list[ToolResult | str] = field(default_factory=list)  # a result, or "Cancelled"
    updates: list[object] = field(default_factory=list)  # the swept call's partial results' details
    late_updates: list[object] = field(default_factory=list)  # any delivered after call_tool ended
    cancelled_caught: bool = False
    most_queued: int = 0  # the queued phase: the most calls queued while the call ahead ran

    def on_update(self, partial: Mapping[str, Any]) -> None:
        (self.late_updates if self.call_ended else self.updates).append(partial["details"])


# What the busy phase's runner holds when its close begins, apart from spares:
# the warm lifecycle worker and the warm hostapi worker, pinned by a pending
# action; the hostapi one has on_session tools, so the close owes it `shutdown`.
BUSY_IDLE = 2
BUSY_PINNED = 1
BUSY_SESSION_WORKERS = 1
# A cancellation that reaches the runner's nursery must not kill workers
# behind the close's back: `shutdown` reaches them however the block is left.
SHUTDOWN_EVEN_IF_CANCELLED = True


async def occupy(runner: Runner, phase: Phase, record: Record) -> None:
    """Give the runner more to close: a second module's worker, a pending action, a session event, the spares.

    ``propose`` (deferrable) leaves a pending action that pins its worker, in
    which ``session_tool`` then runs; a `start` event (with the marker) reaches
    it, as the close's `shutdown` must. Last, the spares are waited for, so
    that every run closes the same set of workers.
    """
    for tool, arguments in (("propose", {"label": "sweep"}), ("session_tool", {})):
        record.setup.append((tool, await runner.call_tool(tool, arguments)))
    event: dict[str, object] = {"reason": "start", "previousSessionFile": None}
    if record.marker is not None:
        event["marker"] = str(record.marker)
    await runner.emit_session_event(event)
    if not await spares_ready(runner, phase.spares):
        record.setup_problems.append(f"the runner's {phase.spares} spares were not ready within {WATCHDOG / 2:g} s")
    stats = runner.statistics()
    shape = (stats.idle_workers, stats.pinned_workers, stats.spare_workers, stats.busy_workers)
    if shape != (BUSY_IDLE, BUSY_PINNED, phase.spares, 0):
        record.setup_problems.append(
            f"before the close the runner held (idle, pinned, spare, busy) = {shape}, "
            f"not {(BUSY_IDLE, BUSY_PINNED, phase.spares, 0)}"
        )


async def spares_ready(runner: Runner, spares: int) -> bool:
    """Wait (bounded) until ``spares`` spare workers are started; False if they were not."""
    with trio.move_on_after(WATCHDOG / 2):
        while runner.statistics().spare_workers < spares:  # noqa: ASYNC110 - started in the background
            await trio.sleep(SPARE_POLL)
        return True
    return False


async def start_ahead(runner: Runner, nursery: trio.Nursery, record: Record) -> None:
    """Start the queued phase's call ahead, and return once it runs (holding the only worker)."""
    running = trio.Event()

    def on_update(partial: Mapping[str, Any]) -> None:
        record.most_queued = max(record.most_queued, runner.statistics().queued_calls)
        running.set()

    async def ahead() -> None:
        arguments = {"count": AHEAD_PARTS, "interval": STREAM_INTERVAL}
        result = await runner.call_tool("stream", arguments, tool_call_id="ahead", on_update=on_update)
        record.setup.append(("stream (the call ahead)", result))

    nursery.start_soon(ahead)
    await running.wait()


async def lifecycle(phase: Phase, inst: StepCanceller, cache_dir: Path, record: Record) -> None:
    with trio.CancelScope() as scope:
        inst.scope = scope
        if phase.arm == "open":
            inst.arm()
        modules = [phase.module_path, HOSTAPI] if phase.busy else [phase.module_path] if phase.module else []
        async with open_runner(
            modules,
            discover_sources=False,
            spare_workers=phase.spares,
            cache=phase.cache,
            cache_dir=cache_dir,
            grace=GRACE,
            max_workers=1 if phase.queued else None,
        ) as runner:
            # No checkpoint since the block was entered: these are what
            # open_runner handed over, before any later cancellation.
            record.opened = True
            record.errors = [e.message for e in runner.errors]
            inst.runner = runner
            if phase.warm:
                record.setup.append(("ping", await runner.call_tool("ping")))
            if phase.busy:
                await occupy(runner, phase, record)
            if phase.settle and not await spares_ready(runner, phase.spares):
                record.setup_problems.append(f"{phase.spares} spares not ready within {WATCHDOG / 2:g} s")
            if phase.module:
                async with trio.open_nursery() as nursery:
                    if phase.queued:
                        await start_ahead(runner, nursery, record)
                    if phase.arm == "call":
                        inst.arm()
                    record.call_started = True
                    try:
                        result = await runner.call_tool(
                            phase.call.tool, phase.call.arguments, tool_call_id=CALL_ID, on_update=record.on_update
                        )
                    except trio.Cancelled:
                        record.outcomes.append("Cancelled")
                        raise
                    finally:
                        record.call_ended = True
                    record.outcomes.append(result)
                    if phase.action == "cancel_id":
                        inst.disarm()  # the call is over: its phase ends here
            if phase.arm == "close":
                inst.arm()
    inst.disarm()
    record.cancelled_caught = scope.cancelled_caught


def check_run(phase: Phase, inst: StepCanceller, record: Record, guarded: Guarded) -> list[str]:
    """What is wrong with one run, apart from leaks (empty if nothing)."""
    if guarded.hung:
        how = "and was still stuck after its processes were killed" if guarded.stuck else ""
        return [f"hang: no return within {WATCHDOG:g} s {how}; killed {guarded.killed}; where:\n{guarded.dump}"]
    if guarded.error is not None:
        return [f"raised {_describe(guarded.error)}"]
    problems: list[str] = list(record.setup_problems)
    if record.call_started and len(record.outcomes) != 1:
        problems.append(f"call_tool ended {len(record.outcomes)} times: {record.outcomes}")
    results = [o for o in record.outcomes if isinstance(o, ToolResult)]
    if record.errors:
        problems.append(f"load errors: {record.errors}")
    for tool, result in record.setup:
        if result.is_error:
            problems.append(f"set-up call {tool} failed: {result.kind}: {result.text}")
    problems += _check_updates(phase.call, record, results)
    if phase.busy and record.marker is not None:
        # Each worker with on_session tools saw the `start` event once, then,
        # as the runner closed, `shutdown` once (see SHUTDOWN_EVEN_IF_CANCELLED).
        seen = record.marker.read_text().splitlines() if record.marker.exists() else []
        full = ["start"] * BUSY_SESSION_WORKERS + ["shutdown"] * BUSY_SESSION_WORKERS
        strict = SHUTDOWN_EVEN_IF_CANCELLED or not inst.fired
        allowed = [full] if strict else [full[:k] for k in range(BUSY_SESSION_WORKERS, len(full) + 1)]
        if seen not in allowed:
            problems.append(f"{BUSY_SESSION_WORKERS} hostapi workers, but the session events they saw were {seen}")
    if not inst.fired:
        # Untouched: the whole lifecycle must have worked.
        if phase.module and not (results and results[0].text == phase.call.answer):
            problems.append(f"untouched run, but the call gave {_outcome(record)}")
        if record.cancelled_caught:
            problems.append("untouched run, but the scope caught a cancellation")
        if phase.queued and record.most_queued != 1:
            problems.append(f"untouched run, but {record.most_queued} calls (not 1) queued behind the call ahead")
    elif phase.action == "scope":
        # The caller's scope was cancelled: call_tool raises Cancelled, or
        # returns what it already had. An error result means a cancellation
        # was turned into a failure (and may have been cached as one).
        # (The scope itself need not catch anything: a cancellation that lands
        # after the last unshielded checkpoint, in the close, raises nowhere.)
        for result in results:
            if result.is_error:
                problems.append(f"caller cancelled, but call_tool returned an error result: {_outcome(record)}")
    else:
        # runner.cancel(call_id): always a result, never Cancelled out of call_tool.
        if not results:
            problems.append(f"runner.cancel() made call_tool end without a result: {_outcome(record)}")
        for result in results:
            if result.kind not in (None, "cancelled"):
                problems.append(f"runner.cancel() gave a {result.kind!r} result, not 'cancelled': {result.text}")
        if record.cancelled_caught:
            problems.append("runner.cancel() cancelled the caller's scope")
    return problems


def _check_updates(call: Call, record: Record, results: list[ToolResult]) -> list[str]:
    """on_update: each partial result once, in order, all before call_tool returns, all of them with a result."""
    problems: list[str] = []
    if record.late_updates:
        problems.append(f"on_update called after call_tool ended, with {record.late_updates}")
    if record.updates != list(range(len(record.updates))):
        problems.append(f"partial results out of order, repeated or foreign: {record.updates}")
    for result in results:
        # A result (not a cancellation) comes after every partial result.
        if result.kind is None and len(record.updates) != call.parts:
            problems.append(f"the result came with {len(record.updates)} of {call.parts} partial results")
    return problems


def _outcome(record: Record) -> str:
    parts = [o if isinstance(o, str) else f"{o.kind or 'ok'}: {o.text[:200]!r}" for o in record.outcomes]
    return ", ".join(parts) or "nothing"


def _describe(exc: BaseException) -> str:
    """An exception (groups flattened) with the innermost runner frame of each leaf."""
    leaves: list[BaseException] = []

    def flatten(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                flatten(inner)
        else:
            leaves.append(e)

    flatten(exc)
    described = []
    for leaf in leaves:
        where = ""
        tb = leaf.__traceback__
        while tb is not None:
            if "/runner/" in tb.tb_frame.f_code.co_filename:
                where = f" at runner/{tb.tb_frame.f_code.co_filename.rsplit('/runner/', 1)[1]}:{tb.tb_lineno}"
            tb = tb.tb_next
        described.append(f"{type(leaf).__name__}: {leaf}{where}")
    group = f"{type(exc).__name__} of " if isinstance(exc, BaseExceptionGroup) else ""
    return group + "; ".join(described)


@dataclass
class SweepReport:
    phase: str
    iterations: int = 0
    end: int | None = None  # the first N at which the instrument never fired
    steps: int = 0  # steps counted in that untouched run: the phase's length
    seconds: float = 0.0
    hangs: int = 0
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        end = f"ended at N={self.end} ({self.steps} steps in an untouched run)" if self.end else "did not end"
        return (
            f"{self.phase}: {self.iterations} runs in {self.seconds:.1f} s, {end}, "
            f"{self.hangs} hangs, {len(self.failures)} failing N"
        )


def _warm_cache(phase: Phase, cache_dir: Path) -> None:
    """One untouched run first: fills the module cache for ``cache`` phases and
    lets this process open whatever it keeps for good (trio's thread cache)."""
    inst = StepCanceller(0, phase.action)
    guarded = run_guarded(lifecycle, phase, inst, cache_dir, Record(), timeout=WATCHDOG * 3)
    assert not guarded.hung and guarded.error is None, f"warm-up run failed: {guarded}"


def sweep(phase: Phase, cache_dir: Path) -> SweepReport:
    report = SweepReport(phase.name)
    _warm_cache(phase, cache_dir)
    start = time.monotonic()
    n = 1
    while True:
        inst = StepCanceller(n, phase.action)
        record = Record(marker=cache_dir.parent / f"events-{n}" if phase.busy else None)
        before = snapshot()
        guarded = run_guarded(lifecycle, phase, inst, cache_dir, record, timeout=WATCHDOG, instruments=[inst])
        report.iterations += 1
        problems = check_run(phase, inst, record, guarded) + leaks_since(before)
        if problems:
            where = f" (fired before a step of task {inst.fired_at!r})" if inst.fired_at else ""
            report.failures.append(f"N={n} [{phase.name}]{where}: " + "; ".join(problems))
        report.hangs += guarded.hung
        if guarded.stuck or report.hangs >= MAX_HANGS:
            report.failures.append(f"[{phase.name}] sweep stopped at N={n} after {report.hangs} hangs")
            break
        if not inst.fired and not guarded.hung and guarded.error is None:
            report.end, report.steps = n, inst.steps
            break
        n += 1 if n < MANDATORY else STRIDE
        if n > MAX_N:
            report.failures.append(f"[{phase.name}] still firing at N={MAX_N}: the lifecycle never ends")
            break
    report.seconds = time.monotonic() - start
    SUMMARY.append(report.summary())
    return report


def assert_swept(phase: Phase, report: SweepReport) -> None:
    message = report.summary() + "\n" + "\n".join(report.failures)
    assert not report.failures, message
    assert report.end is not None, message
    # Every N below the end was run (no stride below MANDATORY): a phase
    # shorter than that was covered step by step, a longer one up to it.
    assert report.end > min(MANDATORY, report.steps), message
    # And the phase is as long as it must be: at least MANDATORY steps of
    # real work, every one of them swept in every profile.
    assert report.steps >= phase.min_steps, (
        f"{message}\n{phase.name}: its untouched run took {report.steps} steps, fewer than {phase.min_steps}: "
        "the phase no longer covers what it should"
    )


# Bun's timers fire no sooner than 1 ms and its worker writes each message as
# soon as it is made: on a loaded machine the host reads the stream in fewer,
# larger reads than a Python worker's (measured: 34 steps for a run that takes
# 112 on a quiet one). The floor still catches a phase that lost its stream.
JS_MIN_STEPS = 30
JS_PHASES = [
    # The Bun worker: discovery loading the module (cache off), a cold and a
    # warm streaming call, runner.cancel(call_id) at every step of a cold one.
    Phase("open", spares=0, cache=False, js=True, min_steps=JS_MIN_STEPS),
    Phase("call", spares=0, cache=True, call=STREAM, js=True, min_steps=JS_MIN_STEPS),
    Phase("call", spares=0, cache=True, warm=True, call=STREAM, js=True, min_steps=JS_MIN_STEPS),
    Phase("call", spares=0, cache=True, action="cancel_id", call=STREAM, js=True, min_steps=JS_MIN_STEPS),
]


def _phases() -> list[Phase]:
    """The short profile's phases, or under stress every combination."""
    if STRESS:
        phases = []
        for spares in (0, 1):
            for cache in (False, True):
                phases += [
                    Phase("open", spares, cache),
                    Phase("call", spares, cache, call=STREAM),
                    Phase("call", spares, cache, warm=True, call=STREAM),
                    Phase("close", spares, cache, warm=True, busy=True),
                    Phase("call", spares, cache, action="cancel_id", call=STREAM),
                    Phase("call", spares, cache, action="cancel_id", warm=True, call=STREAM),
                    Phase("call", spares, cache, warm=True, queued=True, call=STREAM),
                    Phase("call", spares, cache, action="cancel_id", warm=True, queued=True, call=STREAM),
                ]
            # With no spare, a bare runner has nothing to start or stop: its
            # whole life is about 20 steps, and that is its floor.
            floor = MANDATORY if spares else 15
            phases.append(Phase("open", spares=spares, cache=True, module=False, settle=True, min_steps=floor))
        phases += JS_PHASES
        # Without the cache a "cold" call is a warm one: keep one of each name.
        return list({phase.name: phase for phase in reversed(phases)}.values())[::-1]
    return [
        # Discovery loading the module in a worker (cache off), then the call
        # takes that warm worker; and with the cache warm and a spare starting
        # alongside (the spare phase), the call takes the spare.
        Phase("open", spares=0, cache=False),
        Phase("open", spares=1, cache=True),
        # A bare runner that waits for its spare: a cancellation at any step
        # of the spare's start leaves the block while the spare is still
        # starting; the untouched run closes a started spare.
        Phase("open", spares=1, cache=True, module=False, settle=True),
        # Worker spawn, the call in flight streaming its partial results and
        # log records, and result delivery: cold and warm.
        Phase("call", spares=0, cache=True, call=STREAM),
        Phase("call", spares=0, cache=True, warm=True, call=STREAM),
        # Close with warm workers of two modules (the hostapi one pinned by a
        # pending action and owed the `shutdown` session event), and a spare.
        Phase("close", spares=1, cache=True, warm=True, busy=True),
        # runner.cancel(call_id) at every step of a cold, streaming call.
        Phase("call", spares=0, cache=True, action="cancel_id", call=STREAM),
        # A call queued behind max_workers=1: its wait for the worker, the
        # hand-over as the call ahead ends, and the warm call that follows;
        # cancelled by its caller, and by runner.cancel(call_id).
        Phase("call", spares=0, cache=True, warm=True, queued=True, call=STREAM),
        Phase("call", spares=0, cache=True, action="cancel_id", warm=True, queued=True, call=STREAM),
        *JS_PHASES,
    ]


pytestmark = [pytest.mark.stress, pytest.mark.timeout(scaled(150, 7200))]


@pytest.mark.parametrize("phase", _phases(), ids=lambda phase: phase.name)
def test_cancellation_at_every_step(phase: Phase, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if phase.js:
        request.getfixturevalue("bun")  # skipped without Bun, failed under CI
    assert_swept(phase, sweep(phase, tmp_path / "cache"))


# --- deadlines rather than steps ----------------------------------------------------


async def _short_timeouts(timeout: float, spares: int, repeats: int, cache_dir: Path, module: str) -> list[str]:
    problems: list[str] = []
    async with open_runner(
        [module], discover_sources=False, spare_workers=spares, cache=True, cache_dir=cache_dir, grace=GRACE
    ) as runner:
        for i in range(repeats):
            # A timed-out worker is never reused: each call here starts cold,
            # so the deadline lands somewhere in the worker's start.
            result = await runner.call_tool("ping", timeout=timeout)
            if result.kind not in (None, "timeout"):
                problems.append(f"call {i}: a {result.kind!r} result: {result.text}")
        after = await runner.call_tool("ping")
        if after.is_error:
            problems.append(f"the call after the short timeouts failed: {after.kind}: {after.text}")
    return problems


def _guarded_rounds(label: str, rounds: int, fn: Any, *args: Any) -> list[str]:
    """``rounds`` guarded runs of ``fn(*args)`` (which returns its problems): the failing ones, with hangs and leaks."""
    failures: list[str] = []
    hangs = 0
    for round_ in range(rounds):
        before = snapshot()
        guarded = run_guarded(fn, *args, timeout=WATCHDOG)
        problems = list(guarded.value or []) if not (guarded.hung or guarded.error) else []
        if guarded.hung:
            hangs += 1
            problems.append(f"hang; killed {guarded.killed}; where:\n{guarded.dump}")
        elif guarded.error is not None:
            problems.append(f"raised {_describe(guarded.error)}")
        problems += leaks_since(before)
        if problems:
            failures.append(f"round {round_} [{label}]: " + "; ".join(problems))
        if guarded.stuck or hangs >= MAX_HANGS:
            break
    return failures


@pytest.mark.parametrize(("spares", "js"), [(0, False), (1, False), (0, True)], ids=["spares=0", "spares=1", "bun"])
@pytest.mark.parametrize("timeout", [0.001, 0.003, 0.010])
def test_very_short_call_timeouts(
    timeout: float, spares: int, js: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if js:
        request.getfixturevalue("bun")  # the deadline lands in the Python step, Bun's exec or the handoff
    rounds = scaled(3, 20)
    start = time.monotonic()
    phase = Phase("call", spares, cache=True, js=js)
    _warm_cache(phase, tmp_path / "cache")
    label = f"timeout={timeout:g}, spares={spares}" + (", bun" if js else "")
    failures = _guarded_rounds(
        label, rounds, _short_timeouts, timeout, spares, scaled(4, 10), tmp_path / "cache", phase.module_path
    )
    SUMMARY.append(
        f"short timeouts {timeout:g} s, {label.split(', ', 1)[1]}: {rounds} rounds in "
        f"{time.monotonic() - start:.1f} s, {len(failures)} failing"
    )
    assert not failures, "\n".join(failures)


async def _short_queue_deadlines(queue_timeout: float, repeats: int, cache_dir: Path) -> list[str]:
    """Queued calls whose queue deadline lands around the hand-over of the only worker."""
    problems: list[str] = []
    async with open_runner(
        [MODULE], discover_sources=False, spare_workers=0, cache=True, cache_dir=cache_dir, grace=GRACE,
        max_workers=1, queue_timeout=queue_timeout,
    ) as runner:  # fmt: skip
        for i in range(repeats):
            ended: list[ToolResult] = []
            async with trio.open_nursery() as nursery:

                async def other(ended: list[ToolResult] = ended) -> None:
                    ended.append(await runner.call_tool("stream", {"count": 2, "interval": queue_timeout / 4}))

                # Two calls for one worker: whichever is second queues, and its
                # deadline lands around the first one's end.
                nursery.start_soon(other)
                ended.append(await runner.call_tool("ping"))
            for result in ended:
                if result.kind not in (None, "busy"):
                    problems.append(f"round {i}: a call ended {result.kind!r}, not ok or busy: {result.text}")
            if all(result.kind == "busy" for result in ended):
                problems.append(f"round {i}: both calls ended busy, though one had the worker")
        after = await runner.call_tool("ping")
        if after.is_error:
            problems.append(f"the call after the short queue deadlines failed: {after.kind}: {after.text}")
    return problems


@pytest.mark.parametrize("queue_timeout", [0.001, 0.003, 0.010])
def test_very_short_queue_deadlines(queue_timeout: float, tmp_path: Path) -> None:
    rounds = scaled(3, 20)
    _warm_cache(Phase("call", 0, cache=True), tmp_path / "cache")
    label = f"queue_timeout={queue_timeout:g}"
    failures = _guarded_rounds(label, rounds, _short_queue_deadlines, queue_timeout, scaled(6, 12), tmp_path / "cache")
    SUMMARY.append(f"short queue deadlines {queue_timeout:g} s: {rounds} rounds, {len(failures)} failing")
    assert not failures, "\n".join(failures)


async def _open_with_deadline(seconds: float) -> bool:
    with trio.move_on_after(seconds) as scope:
        async with open_runner([], discover_sources=False, spare_workers=1, cache=False, grace=GRACE):
            await trio.lowlevel.checkpoint()
    return scope.cancelled_caught


def test_deadline_around_open_runner_with_a_spare() -> None:
    """A deadline anywhere in a bare runner's life: during the probe, the spare's start, the close."""
    failures: list[str] = []
    rng = random.Random(1234)
    count = scaled(40, 400)
    # Log-uniform from 0.1 ms to 100 ms: most of a spare's start is in there.
    deadlines = [math.exp(rng.uniform(math.log(1e-4), math.log(0.1))) for _ in range(count)]
    hangs = 0
    start = time.monotonic()
    for seconds in [0.0003, *deadlines]:
        before = snapshot()
        guarded = run_guarded(_open_with_deadline, seconds, timeout=WATCHDOG)
        problems = leaks_since(before)
        if guarded.hung:
            hangs += 1
            problems.insert(0, f"hang; killed {guarded.killed}; where:\n{guarded.dump}")
        elif guarded.error is not None:
            problems.insert(0, f"raised {_describe(guarded.error)}")
        if problems:
            failures.append(f"deadline {seconds * 1000:.2f} ms: " + "; ".join(problems))
        if guarded.stuck or hangs >= MAX_HANGS:
            failures.append(f"stopped after {hangs} hangs")
            break
    SUMMARY.append(f"deadline around open_runner: {count + 1} runs in {time.monotonic() - start:.1f} s")
    assert not failures, "\n".join(failures)


# --- the idle reaper --------------------------------------------------------------------


async def _reaper_race(rounds: int) -> list[str]:
    """Warm workers go idle and expire; calls arrive while the reaper retires them.

    The reaper walks a snapshot of the idle list and awaits each retirement:
    a call that takes a worker meanwhile must never have it killed under it.
    """
    problems: list[str] = []
    idle_timeout = 0.04
    rng = random.Random(99)
    async with open_runner(
        [MODULE], discover_sources=False, spare_workers=0, cache=False, grace=GRACE, idle_timeout=idle_timeout
    ) as runner:
        for round_ in range(rounds):
            # Several warm workers of one module, all idle from the same moment.
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(runner.call_tool, "nap", {"seconds": 0.02})
            await trio.sleep(idle_timeout * rng.uniform(0.8, 1.6))
            results: list[ToolResult] = []

            async def call(results: list[ToolResult] = results) -> None:
                results.append(await runner.call_tool("nap", {"seconds": 0.03}))

            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(call)
                    await trio.sleep(rng.uniform(0, 0.01))
            for result in results:
                if result.is_error:
                    problems.append(f"round {round_}: {result.kind}: {result.text}")
    return problems


def test_idle_reaper_never_kills_a_worker_a_call_took() -> None:
    rounds = scaled(15, 150)
    before = snapshot()
    guarded = run_guarded(_reaper_race, rounds, timeout=WATCHDOG + rounds)
    assert not guarded.hung, f"hang; where:\n{guarded.dump}"
    assert guarded.error is None, _describe(guarded.error)
    problems = list(guarded.value) + leaks_since(before)
    SUMMARY.append(f"idle reaper race: {rounds} rounds in {guarded.seconds:.1f} s, {len(problems)} failing")
    assert not problems, "\n".join(problems)
