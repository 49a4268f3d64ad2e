"""Cancellation and closing through the blocking and asyncio faces, with real workers.

The asyncio tests give the loop a small default executor, as on a small
machine: a call, its cancel and the runner's opening and closing must not
need that executor at all (a cancel that queues behind the calls it should
stop arrives after they have finished).
"""

from __future__ import annotations

import asyncio
import faulthandler
import functools
import random
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests._support.scale import scaled
from tests.conftest import TOOLS
from xcsh_run import RunnerClosedError, RunnerError, ToolResult, open_asyncio_runner, open_blocking_runner

POOL = TOOLS / "pool.py"
T = TypeVar("T")


def run_asyncio(main: Callable[[], Awaitable[T]], deadline: float, executor_threads: int = 4) -> T:
    """``asyncio.run(main())`` with a small default executor, failing after ``deadline`` seconds."""

    async def guarded() -> T:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=executor_threads))
        return await asyncio.wait_for(main(), deadline)

    return asyncio.run(guarded())


def run_bounded(fn: Callable[[], T], deadline: float) -> T:
    """``fn()`` in a thread of its own; fails (with every thread's stack) if it has not returned in time."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="bounded", daemon=True)
    thread.start()
    thread.join(deadline)
    if thread.is_alive():
        faulthandler.dump_traceback(file=sys.stderr)
        pytest.fail(f"did not return within {deadline} s (the stacks are on stderr)")
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def ended(log: Path) -> set[str]:
    """The call ids whose tool ran to its end (pool.py's `work` writes `end <id> <pid>` last)."""
    if not log.exists():
        return set()
    return {line.split()[1] for line in log.read_text().splitlines() if line.startswith("end ")}


def test_a_cancel_does_not_queue_behind_running_calls(tmp_path: Path) -> None:
    """Cancelling one of many running calls stops it at once, not after the others have freed a thread."""
    log = tmp_path / "log"
    calls = 10  # more than the executor's 4 threads

    async def main() -> tuple[str, set[str], list[ToolResult]]:
        loop = asyncio.get_running_loop()
        first_started: asyncio.Future[str] = loop.create_future()

        def started(call_id: str) -> Callable[[object], None]:
            def note() -> None:
                if not first_started.done():
                    first_started.set_result(call_id)

            return lambda _: loop.call_soon_threadsafe(note)  # on_update runs on the runner's thread

        async with open_asyncio_runner([str(POOL)], grace=0.5, max_workers=calls, spare_workers=0) as runner:
            tasks = {
                f"s{i}": asyncio.create_task(
                    runner.call_tool(
                        "work", {"log": str(log), "seconds": 3}, tool_call_id=f"s{i}", on_update=started(f"s{i}")
                    )
                )
                for i in range(calls)
            }
            victim = await first_started
            tasks[victim].cancel()
            with pytest.raises(asyncio.CancelledError):
                await tasks[victim]
            ended_at_cancel = ended(log)
            others = await asyncio.gather(*(task for call_id, task in tasks.items() if call_id != victim))
        return victim, ended_at_cancel, others

    victim, ended_at_cancel, others = run_asyncio(main, 60)
    # Had the cancel waited for a free thread, the 3 s sleep would have run to its end.
    assert victim not in ended_at_cancel
    assert victim not in ended(log)
    assert all(not r.is_error for r in others), [r.text for r in others if r.is_error]
    assert ended(log) == {f"s{i}" for i in range(calls)} - {victim}


@pytest.mark.stress
def test_a_cancel_right_after_the_call_is_made_is_never_lost(tmp_path: Path) -> None:
    """A cancel that arrives before the runner has registered the call still cancels it: it never runs to its end."""
    log = tmp_path / "log"
    rounds = scaled(150, 1500)

    async def main() -> tuple[list[BaseException | ToolResult], ToolResult, int]:
        outcomes: list[BaseException | ToolResult] = []
        async with open_asyncio_runner([str(POOL)], grace=0.5) as runner:
            for i in range(rounds):
                task = asyncio.create_task(runner.call_tool("work", {"log": str(log), "seconds": 0.5}))
                # The cancel lands anywhere from before the call is submitted to while its
                # worker starts (a few loop turns) or its tool runs (a short wait, rarely).
                for _ in range(i % 6):
                    await asyncio.sleep(0)
                if i % 10 == 9:
                    await asyncio.wait([task], timeout=(i % 40) / 200)
                task.cancel()
                try:
                    outcomes.append(await task)
                except asyncio.CancelledError as exc:
                    outcomes.append(exc)
            after = await runner.call_tool("pid")  # the runner is still fine
            running = runner.statistics().running_calls
        return outcomes, after, running

    outcomes, after, running = run_asyncio(main, 100)
    completed = [o for o in outcomes if not isinstance(o, asyncio.CancelledError)]
    assert not completed, completed
    assert not ended(log), "a cancelled call ran to its end"
    assert isinstance(after.details, int)
    assert running == 0


@pytest.mark.stress
def test_the_asyncio_runner_with_random_cancels(tmp_path: Path) -> None:
    """Many calls, a random subset cancelled at random points: each ends with its result or CancelledError."""
    log = tmp_path / "log"
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    calls = scaled(40, 400)

    async def main() -> tuple[list[tuple[bool, BaseException | ToolResult]], int, int]:
        loop = asyncio.get_running_loop()
        async with open_asyncio_runner([str(POOL)], grace=0.5, max_workers=6) as runner:

            async def one(i: int) -> tuple[bool, BaseException | ToolResult]:
                started = asyncio.Event()
                task = asyncio.create_task(
                    runner.call_tool(
                        "work",
                        {"log": str(log), "seconds": rng.choice([0, 0.05, 0.3])},
                        tool_call_id=f"r{i}",
                        on_update=lambda _: loop.call_soon_threadsafe(started.set),
                    )
                )
                how = rng.choice(["never", "never", "at once", "yields", "started", "later"])
                if how == "yields":
                    for _ in range(rng.randrange(1, 20)):
                        await asyncio.sleep(0)
                elif how == "started":
                    await asyncio.wait([task, asyncio.create_task(started.wait())], return_when="FIRST_COMPLETED")
                elif how == "later":
                    await asyncio.wait([task], timeout=rng.uniform(0, 0.5))
                cancelled = how != "never" and task.cancel()
                try:
                    return cancelled, await task
                except asyncio.CancelledError as exc:
                    return cancelled, exc

            outcomes = await asyncio.gather(*(one(i) for i in range(calls)))
            stats = runner.statistics()
        return outcomes, stats.running_calls, stats.busy_workers

    outcomes, running, busy = run_asyncio(main, 110)
    for i, (cancelled, outcome) in enumerate(outcomes):
        if cancelled:
            assert isinstance(outcome, asyncio.CancelledError), (seed, i, outcome)
        else:
            assert isinstance(outcome, ToolResult) and not outcome.is_error, (seed, i, outcome)
    assert (running, busy) == (0, 0), seed


@pytest.mark.stress
def test_the_blocking_runner_from_16_threads_while_it_closes(tmp_path: Path) -> None:
    """16 threads call in a loop; the runner closes while calls start and run. Every thread ends, nothing is left."""
    log = tmp_path / "log"

    def one_round(close_after: int) -> dict[int, list[object]]:
        outcomes: dict[int, list[object]] = {i: [] for i in range(16)}
        lock = threading.Lock()
        starts = 0
        enough = threading.Event()
        if close_after == 0:
            enough.set()

        def on_update(_: object) -> None:
            nonlocal starts
            with lock:
                starts += 1
                if starts >= close_after:
                    enough.set()

        with open_blocking_runner([str(POOL)], grace=0.5, max_workers=8) as runner:

            def calls(i: int) -> None:
                while True:
                    try:
                        result = runner.call_tool(
                            "work", {"log": str(log), "seconds": 0.02 * (i % 5)}, on_update=on_update
                        )
                    except RunnerError as exc:
                        outcomes[i].append(exc)
                        return
                    outcomes[i].append(result)
                    if result.is_error:
                        return

            threads = [threading.Thread(target=calls, args=(i,), daemon=True) for i in range(16)]
            for thread in threads:
                thread.start()
            assert enough.wait(30)
        # The block is left: every thread's call has ended or ends now.
        for thread in threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in threads)
        return outcomes

    for round_ in range(scaled(4, 40)):
        outcomes = run_bounded(functools.partial(one_round, (0, 1, 4, 12)[round_ % 4]), 60)
        for i, got in outcomes.items():
            assert got, (round_, i)
            *done, last = got
            assert all(isinstance(r, ToolResult) and not r.is_error for r in done), (round_, i, done)
            # In flight when the runner closed: cancelled; started after: the runner is closed.
            if isinstance(last, ToolResult):
                assert last.kind == "cancelled", (round_, i, last)
            else:
                assert isinstance(last, RunnerClosedError) and "closed" in str(last), (round_, i, last)


def test_calls_on_a_closed_runner_raise_a_clear_error() -> None:
    def blocking() -> None:
        with open_blocking_runner([str(POOL)], grace=0.5) as runner:
            pass
        with pytest.raises(RunnerClosedError, match="closed"):
            runner.call_tool("pid")
        with pytest.raises(RunnerClosedError, match="closed"):
            runner.statistics()

    async def asyncio_main() -> None:
        async with open_asyncio_runner([str(POOL)], grace=0.5) as runner:
            pass
        with pytest.raises(RunnerClosedError, match="closed"):
            await runner.call_tool("pid")
        with pytest.raises(RunnerClosedError, match="closed"):
            await runner.emit_session_event({"reason": "tree", "previousSessionFile": None})

    run_bounded(blocking, 30)
    run_asyncio(asyncio_main, 30)


def test_the_asyncio_runner_needs_no_executor_thread(tmp_path: Path) -> None:
    """With the loop's only executor thread blocked, the runner still opens, calls, cancels and closes."""
    log = tmp_path / "log"
    release = threading.Event()

    async def main() -> tuple[ToolResult, list[str]]:
        loop = asyncio.get_running_loop()
        blocker = loop.run_in_executor(None, release.wait)
        try:
            async with open_asyncio_runner([str(POOL)], grace=0.5) as runner:
                result = await runner.call_tool("pid")
                warnings = await runner.emit_session_event({"reason": "tree", "previousSessionFile": None})
                started = asyncio.Event()
                task = asyncio.create_task(
                    runner.call_tool(
                        "work",
                        {"log": str(log), "seconds": 30},
                        tool_call_id="long",
                        on_update=lambda _: loop.call_soon_threadsafe(started.set),
                    )
                )
                await started.wait()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert runner.statistics().busy_workers == 0
        finally:
            release.set()
            await blocker
        return result, warnings

    result, warnings = run_asyncio(main, 60, executor_threads=1)
    assert isinstance(result.details, int)
    assert warnings == []
    assert "long" not in ended(log)


def test_a_blocking_call_from_the_runners_own_thread_is_refused(tmp_path: Path) -> None:
    """A blocking call from an ``on_update`` callback would wait on its own thread forever: it raises instead."""
    errors: list[BaseException] = []

    def main() -> ToolResult:
        with open_blocking_runner([str(POOL)], grace=0.5) as runner:

            def on_update(_: object) -> None:
                try:
                    runner.call_tool("pid")
                except RuntimeError as exc:
                    errors.append(exc)

            return runner.call_tool("work", {"log": str(tmp_path / "log"), "seconds": 0}, on_update=on_update)

    result = run_bounded(main, 30)
    assert not result.is_error
    assert len(errors) == 1 and "own thread" in str(errors[0])
