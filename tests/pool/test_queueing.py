"""Calls queued behind ``max_workers``: what happens to the calls ahead of them is never theirs.

A queued call holds no worker, so a crash, a cancellation or a timeout of the
call ahead of it cannot reach it: it runs on a worker of its own once one is
free, and a queued call that is stopped before that never runs at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.conftest import TOOLS, make_runner
from xcsh_run import Runner

QUEUE = TOOLS / "queue.py"


async def _hold(runner: Runner, release: Path, results: dict[str, Any], running: trio.Event, **args: Any) -> None:
    def started(update: dict[str, Any]) -> None:
        results["ahead pid"] = update["details"]
        running.set()

    results["ahead"] = await runner.call_tool(
        "hold", {"path": str(release), **args}, tool_call_id="ahead", on_update=started
    )


async def _wait_queued(runner: Runner, count: int) -> None:
    while runner.statistics().queued_calls < count:  # noqa: ASYNC110 - polls the runner's public statistics
        await trio.sleep(0.005)


async def test_a_queued_call_is_not_taken_down_by_the_crash_ahead_of_it(tmp_path: Path) -> None:
    release = tmp_path / "release"
    results: dict[str, Any] = {}
    with trio.fail_after(30):
        async with make_runner(QUEUE, max_workers=1) as runner:
            running = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: _hold(runner, release, results, running, crash=True))
                await running.wait()

                async def queued() -> None:
                    results["queued"] = await runner.call_tool("mark", {"path": str(tmp_path / "mark")})

                nursery.start_soon(queued)
                await _wait_queued(runner, 1)
                release.touch()
    assert results["ahead"].kind == "crashed" and "SIGSEGV" in results["ahead"].text
    assert results["queued"].kind is None, results["queued"].text
    assert results["queued"].details != results["ahead pid"]  # it ran, on a worker of its own
    assert (tmp_path / "mark").exists()


async def test_a_queued_call_cancelled_before_it_starts_never_runs(tmp_path: Path) -> None:
    release, marked = tmp_path / "release", tmp_path / "mark"
    results: dict[str, Any] = {}
    with trio.fail_after(30):
        async with make_runner(QUEUE, max_workers=1) as runner:
            running = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: _hold(runner, release, results, running))
                await running.wait()

                ended = trio.Event()

                async def queued() -> None:
                    results["queued"] = await runner.call_tool("mark", {"path": str(marked)}, tool_call_id="q")
                    ended.set()

                nursery.start_soon(queued)
                await _wait_queued(runner, 1)
                assert runner.cancel("q", "not needed")
                await ended.wait()  # ended while the call ahead still holds the only worker
                release.touch()
    assert results["queued"].kind == "cancelled"
    assert "before its worker was ready" in results["queued"].text
    assert results["ahead"].kind is None  # the call ahead is untouched
    assert not marked.exists()  # the withdrawn call never ran


async def test_a_queued_call_ends_busy_at_the_queue_deadline_and_never_runs(tmp_path: Path) -> None:
    release, marked = tmp_path / "release", tmp_path / "mark"
    results: dict[str, Any] = {}
    with trio.fail_after(30):
        async with make_runner(QUEUE, max_workers=1, queue_timeout=0.3) as runner:
            running = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: _hold(runner, release, results, running))
                await running.wait()
                results["queued"] = await runner.call_tool("mark", {"path": str(marked)}, timeout=30)
                release.touch()
    assert results["queued"].kind == "busy"
    assert "did not start: the runner is busy; it waited 0.3 s" in results["queued"].text
    assert results["ahead"].kind is None
    assert not marked.exists()


async def test_a_queued_calls_own_timeout_starts_when_it_leaves_the_queue(tmp_path: Path) -> None:
    # The queued call's timeout (1 s) is shorter than its wait in the queue: it still runs.
    release, marked = tmp_path / "release", tmp_path / "mark"
    results: dict[str, Any] = {}
    with trio.fail_after(30):
        async with make_runner(QUEUE, max_workers=1) as runner:
            running = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: _hold(runner, release, results, running))
                await running.wait()

                async def queued() -> None:
                    results["queued"] = await runner.call_tool("mark", {"path": str(marked)}, timeout=1)

                nursery.start_soon(queued)
                await _wait_queued(runner, 1)
                # Queued for longer than its own timeout: not a race, a span in which it must not end.
                await trio.sleep(1.5)
                assert "queued" not in results, results["queued"].text
                release.touch()
    assert results["queued"].kind is None, results["queued"].text
    assert marked.exists()
