"""One call's lifecycle, with fake workers on trio's mock clock: queueing, deadlines, the ladder.

Each rung of the ladder is a fake that gives in at that rung: one honours
``$/cancel``, one SIGTERM, one nothing (only the kill after ``grace`` ends it).
Real workers prove the same through the tool API in tests/pool/test_calls.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from tests._support.fakes import Assembly, FakeFactory, FakeWorker, Mode, assemble
from xcsh_run import ToolResult

GRACE = 2.0


async def warm_up(a: Assembly, mode: Mode) -> FakeWorker:
    """One answered call, so that the next finds an idle worker (the warm path); it then answers as ``mode`` says."""
    assert (await a.call()).kind is None
    worker = a.factory.started[0]
    worker.mode = mode
    return worker


WARM = pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])


@WARM
@pytest.mark.parametrize(
    ("mode", "rung", "elapsed"),
    [("cancel", "cooperative", 5.0), ("sigterm", "cooperative", 5.0), ("ignore", "killed", 5.0 + GRACE)],
)
async def test_each_rung_of_the_ladder_ends_a_timed_out_call(
    autojump_clock: trio.testing.MockClock, mode: Mode, rung: str, elapsed: float, warm: bool
) -> None:
    async with assemble(FakeFactory(mode="answer" if warm else mode, start_seconds=0), grace=GRACE) as a:
        if warm:
            await warm_up(a, mode)
        start = trio.current_time()
        result = await a.call(timeout=5.0)
        assert trio.current_time() - start == pytest.approx(elapsed)
        assert result.kind == "timeout" and result.error is not None
        assert result.error.rung == rung
        assert "timed out after 5 s" in result.text
        worker = a.factory.started[0]
        assert len(a.factory.started) == 1
        # `$/cancel` first, then SIGTERM; then, for a tool that ignored both, the kill.
        assert worker.events == ["$/cancel", "SIGTERM", "kill"]
        assert not worker.alive  # a worker that went through the ladder is never reused
        assert a.pool.slots() == []


@WARM
async def test_a_cancelled_call_says_why(autojump_clock: trio.testing.MockClock, warm: bool) -> None:
    async with assemble(FakeFactory(mode="answer" if warm else "sigterm"), grace=GRACE) as a:
        if warm:
            await warm_up(a, "sigterm")
        async with trio.open_nursery() as nursery:
            results = []

            async def call() -> None:
                results.append(await a.call(tool_call_id="c1"))

            nursery.start_soon(call)
            await trio.sleep(1)
            # A warm call waits on the deadline keeper, not on a scope of its own.
            assert len(a.deadlines) == (1 if warm else 0)
            assert a.calls.table.cancel("c1", "user pressed stop")
            assert not a.calls.table.cancel("nope")
        assert results[0].kind == "cancelled"
        assert "was cancelled (user pressed stop)" in results[0].text
        assert results[0].error.rung == "cooperative"


@WARM
async def test_the_callers_cancellation_still_runs_the_ladder(
    autojump_clock: trio.testing.MockClock, warm: bool
) -> None:
    async with assemble(FakeFactory(mode="answer" if warm else "ignore"), grace=GRACE) as a:
        if warm:
            await warm_up(a, "ignore")
        start = trio.current_time()
        with trio.move_on_after(3):
            await a.call()
        worker = a.factory.started[0]
        assert worker.events == ["$/cancel", "SIGTERM", "kill"]
        assert trio.current_time() - start == pytest.approx(3 + GRACE)  # shielded: the ladder ran to its end
        assert a.pool.counts()["busy"] == 0 and len(a.calls.table) == 0
        assert len(a.deadlines) == 0  # nothing left watched


async def test_the_keeper_wakes_each_warm_call_at_its_own_deadline(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(FakeFactory(start_seconds=0), grace=GRACE) as a:
        async with trio.open_nursery() as nursery:  # three idle workers
            for _ in range(3):
                nursery.start_soon(a.call)
        assert len(a.factory.started) == 3
        for worker in a.factory.started:
            worker.mode = "cancel"
        start = trio.current_time()
        ended: dict[float, float] = {}

        async def call(timeout: float) -> None:
            assert (await a.call(timeout=timeout)).kind == "timeout"
            ended[timeout] = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            # Out of order: the keeper's scope must come earlier for the second.
            for timeout in (5.0, 3.0, 8.0):
                nursery.start_soon(call, timeout)
        assert ended == pytest.approx({3.0: 3.0, 5.0: 5.0, 8.0: 8.0})
        assert len(a.deadlines) == 0


async def test_a_warm_call_without_its_keeper_keeps_its_deadline(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(FakeFactory(start_seconds=0), grace=GRACE) as a:
        await warm_up(a, "cancel")
        # The runner's background work is gone (its nursery is being cancelled):
        # a call that finds its worker idle still ends at its deadline.
        assert await a.housekeeping.stop(1.0)
        start = trio.current_time()
        result = await a.call(timeout=4.0)
        assert result.kind == "timeout" and trio.current_time() - start == pytest.approx(4.0)


async def test_a_keeper_that_ends_hands_its_calls_their_own_deadlines(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(FakeFactory(start_seconds=0), grace=GRACE) as a:
        await warm_up(a, "cancel")
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            results = []

            async def call() -> None:
                results.append(await a.call(timeout=6.0))

            nursery.start_soon(call)
            await trio.sleep(1)
            assert len(a.deadlines) == 1
            assert await a.housekeeping.stop(1.0)  # the keeper ends while the call waits on it
        assert results[0].kind == "timeout" and trio.current_time() - start == pytest.approx(6.0)


async def test_an_abort_cancels_every_call_of_its_operation(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(FakeFactory(mode="sigterm"), grace=GRACE) as a:
        results: dict[str, str | None] = {}

        async def call(call_id: str, operation: str) -> None:
            results[call_id] = (await a.call(tool_call_id=call_id, operation_id=operation)).kind

        async with trio.open_nursery() as nursery:
            for call_id, operation in (("a1", "op-a"), ("a2", "op-a"), ("b1", "op-b")):
                nursery.start_soon(call, call_id, operation)
            await trio.sleep(1)
            a.calls.table.abort("a1", "giving up")
            await trio.sleep(GRACE + 1)
            assert results == {"a1": "cancelled", "a2": "cancelled"}
            a.calls.table.cancel("b1")


async def test_calls_past_max_workers_wait_their_turn_in_order(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(FakeFactory(mode="hold"), max_workers=2) as a:

        def started() -> set[str]:
            return {call_id for worker in a.factory.started for call_id in worker.call_ids}

        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(lambda n=n: a.call(tool_call_id=f"c{n}"))
                await trio.sleep(0.01)  # started in this order
            await trio.sleep(1)
            assert (started(), a.calls.queued()) == ({"c0", "c1"}, 3)
            for worker in a.factory.started:
                worker.answer_held()
            await trio.sleep(1)
            assert (started(), a.calls.queued()) == ({"c0", "c1", "c2", "c3"}, 1)  # first come, first served
            for worker in a.factory.started:
                worker.answer_held()
            await trio.sleep(1)
            assert started() == {"c0", "c1", "c2", "c3", "c4"}
            for worker in a.factory.started:
                worker.answer_held()
        assert len(a.factory.started) == 2  # the queued calls reused the two warm workers


async def test_an_exclusive_tool_runs_one_call_at_a_time(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(FakeFactory(mode="hold"), max_workers=4) as a:
        a.info("echo", concurrency="exclusive")
        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(lambda n=n: a.call(tool_call_id=f"x{n}"))
            await trio.sleep(1)
            assert a.calls.queued() == 2
            assert a.pool.counts()["busy"] == 1
            for _ in range(3):
                for worker in a.factory.started:
                    worker.answer_held()
                await trio.sleep(1)
        assert len(a.factory.started) == 1  # never two at once: one worker served all three


async def test_time_in_the_queue_is_not_the_calls_own(autojump_clock: trio.testing.MockClock) -> None:
    # The call ahead holds the only worker for 10 s; the queued call's 3 s start when it does.
    async with assemble(FakeFactory(mode="hold"), max_workers=1, queue_timeout=60) as a:
        results: dict[str, ToolResult] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: a.call(timeout=60))
            await trio.sleep(1)

            async def queued() -> None:
                results["queued"] = await a.call(timeout=3)

            nursery.start_soon(queued)
            await trio.sleep(10)
            assert a.calls.queued() == 1 and "queued" not in results
            a.factory.started[0].answer_held()  # the call ahead ends: the queued one is sent
            await trio.sleep(1)
            a.factory.started[0].answer_held()
        assert results["queued"].kind is None, results["queued"].text
        assert len(a.factory.started) == 1


async def test_a_queued_call_ends_busy_at_the_queue_deadline(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble(FakeFactory(mode="hold"), max_workers=1, queue_timeout=5) as a:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.call)
            await trio.sleep(1)
            start = trio.current_time()
            late = await a.call(timeout=60)
            assert trio.current_time() - start == pytest.approx(5)
            assert late.kind == "busy"
            assert late.text.startswith("'echo' did not start: the runner is busy; it waited 5 s (the queue deadline)")
            assert "1 calls running, max_workers=1" in late.text and "--max-workers" in late.text
            assert a.factory.started[0].call_ids == [a.factory.started[0].call_ids[0]]  # never sent
            a.factory.started[0].answer_held()
        assert len(a.factory.started) == 1


async def test_a_call_handed_its_token_just_before_the_queue_deadline_still_gets_its_own_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The token comes at t=2.9 of a 3 s queue deadline, but the queued task only
    # runs once the deadline is past (a busy loop): the call is out of the queue,
    # and its worker's start is on its own timeout, not the queue's.
    async with assemble(FakeFactory(mode="hold"), max_workers=1, queue_timeout=3) as a:
        wait_token = a.calls._wait_token

        async def late(*args: Any) -> bool:
            got = await wait_token(*args)
            autojump_clock.jump(1.0)  # the loop was busy: resumed past the queue deadline, no checkpoint between
            return got

        a.calls._wait_token = late  # type: ignore[method-assign]
        results: dict[str, ToolResult] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: a.call(timeout=60))
            await trio.sleep(1)

            async def queued() -> None:
                results["queued"] = await a.call(timeout=30)

            nursery.start_soon(queued)
            await trio.sleep(1.9)
            a.factory.started[0].die()  # the call ahead crashes: no idle worker for the queued one
            with trio.move_on_after(60):  # trio time: the queued call sent on a new worker, or ended
                while "queued" not in results and (len(a.factory.started) < 2 or not a.factory.started[1].call_ids):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            if len(a.factory.started) > 1:
                a.factory.started[1].answer_held()
        assert results["queued"].kind is None, results["queued"].text


async def test_an_exclusive_call_ends_busy_waiting_for_its_running_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with assemble(FakeFactory(mode="hold"), max_workers=4, queue_timeout=2) as a:
        a.info("echo", concurrency="exclusive")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.call)
            await trio.sleep(1)
            late = await a.call(timeout=60)
            assert late.kind == "busy"
            assert "for the running call of this exclusive tool to end" in late.text
            a.factory.started[0].answer_held()


async def test_a_worker_start_counts_against_the_calls_own_timeout(autojump_clock: trio.testing.MockClock) -> None:
    # Not queued, but no worker yet: the start (5 s here) is the call's time, not the queue's.
    async with assemble(FakeFactory(start_seconds=5), queue_timeout=60) as a:
        result = await a.call(timeout=2)
    assert result.kind == "timeout"
    assert "timed out after 2 s before its worker was ready" in result.text


async def test_a_module_that_no_longer_defines_the_tool_is_a_load_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with assemble(FakeFactory(tools=["other"])) as a:
        result = await a.call("echo")
        assert result.kind == "load_error"
        assert "no longer defines a tool named 'echo'" in result.text
        assert not a.factory.started[0].alive


async def test_a_worker_that_dies_before_the_call_is_sent_is_a_crash(autojump_clock: trio.testing.MockClock) -> None:
    async with assemble() as a:
        await a.call()
        a.factory.started[0].die_on_call = True  # taken alive, dead by the time the call is sent
        result = await a.call()
        assert result.kind == "crashed"
        assert "SIGSEGV" in result.text
        assert not (await a.call()).is_error  # and the next call gets a new worker
        assert len(a.factory.started) == 2


async def test_duplicate_call_ids_are_refused(autojump_clock: trio.testing.MockClock) -> None:
    from xcsh_run import ConfigError

    async with assemble(FakeFactory(mode="hold")) as a, trio.open_nursery() as nursery:
        nursery.start_soon(lambda: a.call(tool_call_id="same"))
        await trio.sleep(1)
        with pytest.raises(ConfigError, match="already running"):
            await a.call(tool_call_id="same")
        a.factory.started[0].answer_held()
