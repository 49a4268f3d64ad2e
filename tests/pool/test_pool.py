"""The pool's rules, with fake workers on trio's mock clock: reuse, retirement, spares, pins.

Real workers prove what a user sees (tests/host/test_embedding.py, test_reliability.py);
these prove the rules themselves, one at a time, in milliseconds.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from tests._support.fakes import MODULE, POLICY, FakeFactory, FakeWorker, assemble
from xcsh_run._pool.worker_pool import PoolRules, Slot, SlotState, Verdict
from xcsh_run._sandbox.policy import MiB, SandboxPolicy


def _slot(calls: int = 0, pins: int = 0, policy: SandboxPolicy = POLICY) -> Slot:
    slot = Slot(FakeWorker(["echo"]), policy, MODULE, has_ui=False)
    slot.calls_served, slot.pins = calls, pins
    return slot


def test_the_verdict_is_a_function_of_the_slot_and_its_readings() -> None:
    rules = PoolRules(max_calls_per_worker=3, max_worker_rss_mb=100)
    assert rules.verdict(_slot(calls=2), healthy=True, rss_bytes=0, cpu_seconds=0) is Verdict.REUSE
    assert rules.verdict(_slot(calls=3), healthy=True, rss_bytes=0, cpu_seconds=0) is Verdict.RETIRE
    assert rules.verdict(_slot(), healthy=True, rss_bytes=101 * MiB, cpu_seconds=0) is Verdict.RETIRE
    # Half the policy's CPU budget (10 s) used: a later call could be killed for it.
    assert rules.verdict(_slot(), healthy=True, rss_bytes=0, cpu_seconds=4.9) is Verdict.REUSE
    assert rules.verdict(_slot(), healthy=True, rss_bytes=0, cpu_seconds=5.0) is Verdict.RETIRE
    assert rules.verdict(_slot(calls=3, pins=1), healthy=True, rss_bytes=0, cpu_seconds=0) is Verdict.PARK
    assert rules.verdict(_slot(pins=1), healthy=False, rss_bytes=0, cpu_seconds=0) is Verdict.RETIRE
    unlimited = PoolRules(max_calls_per_worker=None, max_worker_rss_mb=None)
    no_cpu_limit = _slot(calls=10**6, policy=SandboxPolicy(level="none", cpu_seconds=None))
    assert unlimited.verdict(no_cpu_limit, healthy=True, rss_bytes=10**12, cpu_seconds=10**6) is Verdict.REUSE


def test_only_idle_unpinned_workers_past_the_timeout_expire() -> None:
    rules = PoolRules(idle_timeout=10)
    idle, pinned, busy = _slot(), _slot(pins=1), _slot()
    for slot in (idle, pinned, busy):
        slot.state, slot.idle_since = SlotState.IDLE, 0.0
    busy.state = SlotState.BUSY
    assert [rules.expired(s, 10.5) for s in (idle, pinned, busy)] == [True, False, False]
    assert not rules.expired(idle, 9.5)
    assert not PoolRules(idle_timeout=None).expired(idle, 1e9)


def test_a_worker_holding_kept_processes_is_neither_reaped_nor_retired_for_its_budget() -> None:
    rules = PoolRules(max_calls_per_worker=3, max_worker_rss_mb=100, idle_timeout=10)
    holding, plain = _slot(calls=3), _slot(calls=3)
    holding.background = {4242}
    for slot in (holding, plain):
        slot.state, slot.idle_since = SlotState.IDLE, 0.0
    assert rules.verdict(holding, healthy=True, rss_bytes=101 * MiB, cpu_seconds=9) is Verdict.REUSE
    assert rules.verdict(plain, healthy=True, rss_bytes=0, cpu_seconds=0) is Verdict.RETIRE
    assert rules.verdict(holding, healthy=False, rss_bytes=0, cpu_seconds=0) is Verdict.RETIRE
    assert [rules.expired(s, 1e9) for s in (holding, plain)] == [False, True]


def test_strict_policies_and_a_zero_count_keep_no_spares() -> None:
    assert PoolRules(spare_count=1).keeps_spares(SandboxPolicy())
    assert not PoolRules(spare_count=1).keeps_spares(SandboxPolicy(level="strict"))
    assert not PoolRules(spare_count=0).keeps_spares(SandboxPolicy())


async def test_a_warm_worker_serves_the_next_call(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble() as a:
        first = await a.call()
        second = await a.call()
        assert len(a.factory.started) == 1
        assert first.text == second.text == f"done by {a.factory.started[0].pid}"
        assert a.pool.counts() == {"idle": 1, "busy": 0, "spare": 0, "pinned": 0}
        assert a.pool.slots()[0].calls_served == 2


async def test_a_worker_is_retired_after_max_calls(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(rules=PoolRules(max_calls_per_worker=2, idle_timeout=None, spare_count=0)) as a:
        for _ in range(5):
            assert not (await a.call()).is_error
        assert len(a.factory.started) == 3
        assert [w.events for w in a.factory.started[:2]] == [["kill"], ["kill"]]
        assert a.factory.started[2].alive


@pytest.mark.parametrize(("rss_mb", "cpu", "reused"), [(1, 0.0, True), (3, 0.0, False), (1, 6.0, False)])
async def test_a_worker_over_its_memory_or_cpu_budget_is_retired(
    autojump_clock: trio.testing.MockClock, rss_mb: int, cpu: float, reused: bool
) -> None:
    async with assemble(rules=PoolRules(max_worker_rss_mb=2, idle_timeout=None, spare_count=0)) as a:
        await a.call()
        worker = a.factory.started[0]
        worker.rss, worker.cpu = rss_mb * MiB + 1, cpu
        await a.call()  # the readings are taken after each call
        await a.call()
        assert len(a.factory.started) == (1 if reused else 2)
        assert worker.alive is reused


async def test_a_call_that_leaves_processes_behind_retires_its_worker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with assemble() as a:
        a.factory.tools = ["echo"]
        await a.call()
        a.factory.started[0].boundary.extra_members = [4242]  # a daemon the tool started
        await a.call()
        assert not a.factory.started[0].alive
        assert a.pool.counts()["idle"] == 0


async def test_a_worker_that_died_idle_is_not_handed_out(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble() as a:
        await a.call()
        a.factory.started[0].die()
        assert a.pool.counts()["idle"] == 0  # a dead worker is not counted as idle
        result = await a.call()
        assert result.text == f"done by {a.factory.started[1].pid}"


async def test_idle_workers_are_reaped_after_the_idle_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(rules=PoolRules(idle_timeout=10, spare_count=0)) as a:
        a.housekeeping.start_soon(a.pool.reap_idle)
        await a.call()
        await trio.sleep(9)
        assert a.pool.counts()["idle"] == 1
        await trio.sleep(7)  # past the timeout, plus one reaper period (timeout / 2)
        assert a.pool.counts()["idle"] == 0
        assert a.factory.started[0].events == ["kill"]


async def test_a_pinned_worker_outlives_the_idle_timeout_and_goes_when_unpinned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with assemble(rules=PoolRules(idle_timeout=10, spare_count=0)) as a:
        a.housekeeping.start_soon(a.pool.reap_idle)
        await a.call()
        worker = a.factory.started[0]
        a.pool.pin(worker)  # a pending action's callables live in it
        await trio.sleep(60)
        assert worker.alive and a.pool.counts()["pinned"] == 1
        a.pool.unpin(worker)
        await trio.sleep(16)
        assert not worker.alive


async def test_a_pinned_worker_over_budget_is_parked_then_retired_when_unpinned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with assemble(rules=PoolRules(max_calls_per_worker=1, idle_timeout=None, spare_count=0)) as a:
        info = a.info("echo")
        slot = await a.loader.acquire(info, 10.0, POLICY)
        a.pool.pin(slot.worker)
        await a.pool.finish(slot, healthy=True)  # its one call is used up, but it holds a preview
        assert slot.state is SlotState.PARKED and slot.worker.alive
        assert await a.pool.take_idle(info.module, POLICY) is None  # parked is not idle
        a.pool.unpin(slot.worker)
        await trio.sleep(1)
        assert not slot.worker.alive


async def test_a_retiring_or_closed_pool_does_not_pin(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble() as a:
        await a.call()
        worker = a.factory.started[0]
        a.pool.closed = True
        a.pool.pin(worker)
        assert a.pool.counts()["pinned"] == 0


async def test_a_one_shot_call_starts_exactly_one_worker(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(rules=PoolRules(spare_count=1, idle_timeout=None), spares=True) as a:
        result = await a.call()  # overlaps the spare's start, and waits for it
        await trio.sleep(30)
        assert not result.is_error
        assert len(a.factory.started) == 1
        assert a.factory.modules == [None]  # it was the spare
        assert a.pool.counts()["spare"] == 0


async def test_a_taken_spare_is_replaced_once_a_call_had_to_start_a_worker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with assemble(FakeFactory(mode="hold"), rules=PoolRules(spare_count=1, idle_timeout=None), spares=True) as a:
        await trio.sleep(1)
        assert a.pool.counts()["spare"] == 1
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.call)
            nursery.start_soon(a.call)  # the spare is gone: this one starts from scratch
            await trio.sleep(1)
            for worker in a.factory.started:
                worker.answer_held()
        await trio.sleep(1)
        assert len(a.factory.started) == 3  # the spare, the cold start, the replacement
        assert sorted(a.factory.modules, key=str) == [MODULE, None, None]  # one cold start, two spares
        assert a.pool.counts()["spare"] == 1


async def test_counts_follow_the_slots(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(FakeFactory(mode="hold")) as a:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.call)
            await trio.sleep(1)
            assert a.pool.counts() == {"idle": 0, "busy": 1, "spare": 0, "pinned": 0}
            a.factory.started[0].answer_held()
        assert a.pool.counts() == {"idle": 1, "busy": 0, "spare": 0, "pinned": 0}
        assert a.pool.started == 1 and a.pool.starting == 0


async def test_closing_shuts_idle_workers_down_and_kills_busy_ones(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(FakeFactory(mode="ignore")) as a:
        await a.pool.start_loaded(MODULE, POLICY, _noop)  # one idle-ish, loading
        slot, _ = await a.pool.start_loaded(MODULE, POLICY, _noop)
        a.pool.release(slot)
        busy, _ = await a.pool.start_loaded(MODULE, POLICY, _noop)
        a.pool.occupy(busy)
        await a.pool.shutdown_all(1.0)
        assert slot.worker.events == ["shutdown"] and busy.worker.events == ["kill"]
        assert a.pool.slots() == []


async def _noop(worker: object) -> None:
    await trio.lowlevel.checkpoint()
