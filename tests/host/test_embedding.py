"""End-to-end tests of the embedding faces: trio, blocking, asyncio; parallelism, exclusivity,
warm-worker reuse and retirement. Real workers throughout."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel

from tests.conftest import TOOLS, make_runner
from xcsh_run import open_blocking_runner

POOL = TOOLS / "pool.py"


def intervals(log: Path) -> dict[str, tuple[int, int]]:
    """call id -> (line of its start, line of its end)."""
    spans: dict[str, list[int]] = {}
    for i, line in enumerate(log.read_text().splitlines()):
        _, call_id, _ = line.split()
        spans.setdefault(call_id, []).append(i)
    return {k: (v[0], v[1]) for k, v in spans.items()}


def max_overlap(spans: dict[str, tuple[int, int]]) -> int:
    events = sorted([(s, 1) for s, _ in spans.values()] + [(e, -1) for _, e in spans.values()])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


async def test_calls_run_in_parallel_up_to_the_bound_then_queue_in_order(tmp_path: Path) -> None:
    log = tmp_path / "log"
    go = tmp_path / "go"
    queued = []
    running = 0
    two_running = trio.Event()

    def started(_: object) -> None:
        nonlocal running
        running += 1
        if running == 2:
            two_running.set()

    with trio.fail_after(60):
        async with make_runner(POOL, max_workers=2) as runner, trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(
                    lambda i=i: runner.call_tool(
                        "work", {"log": str(log), "until": str(go)}, tool_call_id=f"c{i}", on_update=started
                    )
                )
                await trio.lowlevel.checkpoint()  # let each call queue before the next one starts
            await two_running.wait()
            queued.append(runner.statistics().queued_calls)
            go.touch()  # the two running calls end only now: three are still queued above
    spans = intervals(log)
    assert max_overlap(spans) == 2
    assert queued == [3]
    starts = sorted(spans, key=lambda c: spans[c][0])
    assert starts == ["c0", "c1", "c2", "c3", "c4"] or starts[:2] in (["c0", "c1"], ["c1", "c0"])  # FIFO


async def test_exclusive_tool_runs_one_at_a_time(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with trio.fail_after(60):
        async with make_runner(POOL) as runner, trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(
                    lambda i=i: runner.call_tool(
                        "exclusive_work", {"log": str(log), "seconds": 0.2}, tool_call_id=f"x{i}"
                    )
                )
                nursery.start_soon(
                    lambda i=i: runner.call_tool(
                        "work", {"log": str(tmp_path / "shared"), "seconds": 0.2}, tool_call_id=f"s{i}"
                    )
                )
    assert max_overlap(intervals(log)) == 1
    assert max_overlap(intervals(tmp_path / "shared")) > 1  # shared tools still ran together


async def test_warm_worker_is_reused_then_retired_after_n_calls() -> None:
    with trio.fail_after(60):
        async with make_runner(POOL, max_calls_per_worker=3) as runner:
            pids = [(await runner.call_tool("pid")).details for _ in range(5)]
    assert pids[0] == pids[1] == pids[2]
    assert pids[3] != pids[0] and pids[3] == pids[4]


async def test_worker_grown_too_big_is_retired() -> None:
    with trio.fail_after(60):
        async with make_runner(POOL, max_worker_rss_mb=1) as runner:
            pids = [(await runner.call_tool("pid")).details for _ in range(3)]
    assert len(set(pids)) == 3


async def test_idle_worker_is_retired_after_the_idle_timeout() -> None:
    with trio.fail_after(30):
        async with make_runner(POOL, idle_timeout=0.3, spare_workers=0) as runner:
            first = (await runner.call_tool("pid")).details
            assert runner.statistics().idle_workers == 1
            while runner.statistics().idle_workers:  # noqa: ASYNC110 - time-driven: the reaper wakes every 0.15 s
                await trio.sleep(0.05)
            second = (await runner.call_tool("pid")).details
    assert first != second


async def test_a_spare_worker_serves_the_first_call_of_a_module() -> None:
    with trio.fail_after(60):
        async with make_runner(POOL, cache=True) as runner:
            pass  # fills the cache: the next runner starts no worker for discovery
        async with make_runner(POOL, spare_workers=1) as runner:
            while runner.statistics().spare_workers < 1:  # noqa: ASYNC110 - started in the background
                await trio.sleep(0.01)
            started = runner.statistics().workers_started
            await runner.call_tool("pid")
            after_one_call = runner.statistics()
    assert started == 1  # only the spare
    # The spare became the module's worker, and nothing replaced it: a one-shot
    # run (the CLI) starts exactly one worker.
    assert after_one_call.workers_started == 1
    assert after_one_call.spare_workers == 0


async def test_a_taken_spare_is_replaced_once_a_call_had_to_start_a_worker(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with make_runner(POOL, cache=True) as runner:
            pass
        async with make_runner(POOL, spare_workers=1) as runner, trio.open_nursery() as nursery:
            while runner.statistics().spare_workers < 1:  # noqa: ASYNC110 - started in the background
                await trio.sleep(0.01)
            # Two calls at once: one takes the spare, the other must start a
            # worker from scratch, which is the demand that keeps spares coming.
            both_running = trio.Event()
            running = 0

            def started(_: object) -> None:
                nonlocal running
                running += 1
                if running == 2:
                    both_running.set()

            for i in range(2):
                nursery.start_soon(
                    lambda i=i: runner.call_tool(
                        "work", {"log": str(tmp_path / "log"), "seconds": 0.3}, tool_call_id=f"w{i}", on_update=started
                    )
                )
            await both_running.wait()
            while runner.statistics().spare_workers < 1:  # noqa: ASYNC110 - refilled in the background
                await trio.sleep(0.01)
            stats = runner.statistics()
    assert stats.workers_started == 3  # the spare, the cold start, and the spare that replaced the first


def test_blocking_api_from_several_threads(tmp_path: Path) -> None:
    log = tmp_path / "log"
    results: dict[int, Any] = {}
    with open_blocking_runner([str(POOL)], grace=0.5) as runner:
        assert "work" in [t.name for t in runner.tools]

        def call(i: int) -> None:
            results[i] = runner.call_tool("work", {"log": str(log), "seconds": 0.3}, tool_call_id=f"t{i}")

        threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        started = threading.Event()
        cancelled: list[Any] = []
        worker = threading.Thread(
            target=lambda: cancelled.append(
                runner.call_tool(
                    "work",
                    {"log": str(tmp_path / "long"), "seconds": 30},
                    tool_call_id="long",
                    on_update=lambda _: started.set(),
                )
            )
        )
        worker.start()
        assert started.wait(30)
        assert runner.cancel("long", "from another thread")
        worker.join(30)
        stats = runner.statistics()
    assert all(not r.is_error for r in results.values()) and len({r.details for r in results.values()}) == 3
    assert max_overlap(intervals(log)) >= 2
    assert cancelled[0].kind == "cancelled" and "from another thread" in cancelled[0].text
    assert stats.busy_workers == 0


ASYNCIO_PROGRAM = """
import asyncio, json, sys
from xcsh_run import open_asyncio_runner

async def main():
    out = {}
    async with open_asyncio_runner([sys.argv[1]], grace=0.5) as runner:
        out["tools"] = sorted(t.name for t in runner.tools)
        result = await runner.call_tool("pid")
        out["pid_ok"] = isinstance(result.details, int)
        try:
            await asyncio.wait_for(runner.call_tool("work", {"log": sys.argv[2], "seconds": 30}), 1.0)
        except asyncio.TimeoutError:
            out["timed_out"] = True
        out["busy_after_cancel"] = runner.statistics().busy_workers
    print(json.dumps(out))

asyncio.run(main())
"""


def test_asyncio_program(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(ASYNCIO_PROGRAM)
    proc = subprocess.run(
        [sys.executable, str(script), str(POOL), str(tmp_path / "log")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out == {
        "tools": ["exclusive_work", "pid", "work"],
        "pid_ok": True,
        "timed_out": True,
        "busy_after_cancel": 0,
    }
