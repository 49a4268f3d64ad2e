"""`serve --max-workers` and the queue deadline, through the official SDK client over stdio and Streamable HTTP.

Agents issue parallel calls: a quick call must not wait behind long ones when
the server is allowed enough workers, and a call that does wait is charged its
own timeout only from when it starts; past the queue deadline it ends `busy`.
"""

from __future__ import annotations

from pathlib import Path

import mcp_types
import trio
from mcp import ClientSession

from tests._support.mcp_clients import DEADLINE, open_session
from tests.conftest import TOOLS
from tests.mcp.test_mcp import error_of, text_of

QUEUE = str(TOOLS / "queue.py")
LONG_CALLS = 4  # the default max_workers on a 2-core machine (max(4, 2 x cores))


async def start_holding(
    nursery: trio.Nursery, s: ClientSession, release: Path, results: list[mcp_types.CallToolResult]
) -> None:
    """Start a `hold` call (it runs until `release` exists); return once it runs."""
    running = trio.Event()

    async def on_progress(progress: float, total: float | None, text: str | None) -> None:
        running.set()

    async def call() -> None:
        results.append(await s.call_tool("hold", {"path": str(release)}, progress_callback=on_progress))

    nursery.start_soon(call)
    await running.wait()


async def test_a_quick_call_runs_beside_max_workers_minus_one_long_calls(tmp_path: Path, transport: str) -> None:
    release = tmp_path / "release"
    held: list[mcp_types.CallToolResult] = []
    with trio.fail_after(DEADLINE):
        async with (
            open_session(transport, QUEUE, options=("--max-workers", str(LONG_CALLS + 1))) as s,
            trio.open_nursery() as nursery,
        ):
            for _ in range(LONG_CALLS):
                await start_holding(nursery, s, release, held)
            start = trio.current_time()
            quick = await s.call_tool("quick", {})
            elapsed = trio.current_time() - start
            # Answered while every long call still runs (none is released before this line).
            assert not held
            release.touch()
    assert not quick.is_error and text_of(quick).startswith("quick from "), quick
    assert elapsed < 5, f"the quick call took {elapsed:.2f} s beside {LONG_CALLS} long ones"
    assert len(held) == LONG_CALLS and not any(r.is_error for r in held)


async def test_past_the_queue_deadline_a_call_ends_busy_and_the_long_calls_carry_on(
    tmp_path: Path, transport: str
) -> None:
    release = tmp_path / "release"
    held: list[mcp_types.CallToolResult] = []
    options = ("--max-workers", "2", "--queue-timeout", "0.5")
    with trio.fail_after(DEADLINE):
        async with open_session(transport, QUEUE, options=options) as s:
            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    await start_holding(nursery, s, release, held)
                busy = await s.call_tool("quick", {})
                assert not held
                release.touch()
            after = await s.call_tool("quick", {})
    error = error_of(busy)
    assert error["kind"] == "busy"
    assert "did not start: the runner is busy; it waited 0.5 s (the queue deadline)" in text_of(busy)
    assert "2 calls running, max_workers=2" in text_of(busy) and "--max-workers" in text_of(busy)
    assert len(held) == 2 and not any(r.is_error for r in held)
    assert not after.is_error, after


async def test_a_queued_calls_own_timeout_starts_when_it_starts(tmp_path: Path, transport: str) -> None:
    # `quick` declares a 1 s timeout; it waits 1.5 s in the queue behind `hold`, then runs.
    release = tmp_path / "release"
    held: list[mcp_types.CallToolResult] = []
    results: list[mcp_types.CallToolResult] = []
    with trio.fail_after(DEADLINE):
        async with open_session(transport, QUEUE, options=("--max-workers", "1")) as s, trio.open_nursery() as nursery:
            await start_holding(nursery, s, release, held)

            async def queued() -> None:
                results.append(await s.call_tool("quick", {}))

            nursery.start_soon(queued)
            # Longer than quick's own timeout: not a race, a span in which it must not end.
            await trio.sleep(1.5)
            assert not results and not held
            release.touch()
    assert not results[0].is_error, results[0]
    assert not held[0].is_error
