"""Load in one runner: many more calls than workers, some cancelled, timed out or crashing, at once."""

from __future__ import annotations

import random

import pytest
import trio

from tests._support.scale import scaled
from tests.conftest import TOOLS, make_runner
from xcsh_run import ToolResult

CALLS = scaled(200, 1000)


@pytest.mark.stress
async def test_200_concurrent_calls_with_a_small_max_workers() -> None:
    rng = random.Random(11)
    results: dict[str, ToolResult] = {}
    plan: dict[str, str] = {}
    with trio.fail_after(scaled(120, 600)):
        async with make_runner(TOOLS / "basic.py", max_workers=3, spare_workers=1) as runner:
            async with trio.open_nursery() as nursery:
                for i in range(CALLS):
                    call_id = f"c{i}"
                    what = rng.choice(["add", "add", "add", "raises", "cancel", "timeout"])
                    plan[call_id] = what

                    async def one(call_id: str = call_id, what: str = what, i: int = i) -> None:
                        if what == "add":
                            results[call_id] = await runner.call_tool("add", {"a": i, "b": 1}, tool_call_id=call_id)
                        elif what == "raises":
                            results[call_id] = await runner.call_tool("raises", {}, tool_call_id=call_id)
                        elif what == "timeout":
                            results[call_id] = await runner.call_tool(
                                "add", {"a": i}, tool_call_id=call_id, timeout=rng.choice([0.001, 0.003, 0.01])
                            )
                        else:
                            results[call_id] = await runner.call_tool("add", {"a": i}, tool_call_id=call_id)

                    nursery.start_soon(one)
                    if what == "cancel":
                        # Cancelled after a random number of scheduler turns:
                        # queued, starting, or running.
                        for _ in range(rng.randrange(5)):
                            await trio.lowlevel.checkpoint()
                        runner.cancel(call_id, "load test")
            stats = runner.statistics()
            after = await runner.call_tool("add", {"a": 1, "b": 1})
    assert len(results) == CALLS  # exactly one result each
    for call_id, what in plan.items():
        result = results[call_id]
        i = int(call_id[1:])
        if what == "add":
            assert result.text == str(i + 1), (call_id, result.text)
        elif what == "raises":
            assert result.kind == "tool_error", (call_id, result.text)
        elif what == "timeout":
            assert result.kind in (None, "timeout"), (call_id, result.text)
        else:
            assert result.kind in (None, "cancelled"), (call_id, result.text)
    assert stats.running_calls == 0 and stats.busy_workers == 0 and stats.queued_calls == 0
    assert stats.teardown_overruns == 0
    assert after.text == "2"
