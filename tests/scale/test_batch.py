"""The batch API: run_batch (trio) and run_batch_sync (threads), on real workers.

Every index comes back once; no more than ``concurrency`` calls run at once
(seen from inside the tool, through a log its calls append to); an input
that is not a JSON object, a crash and a timeout are each that index's
result and the rest still run; leaving early cancels what is running. One
test drives a fake runner (the ``call_tool`` seam a remote runner plugs into)
to show that the inputs are pulled lazily.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from tests.conftest import TOOLS, make_runner
from xcsh_run import (
    BatchItem,
    ConfigError,
    ToolResult,
    jsonl_inputs,
    open_blocking_runner,
    run_batch,
    run_batch_sync,
)

BATCH = TOOLS / "batch.py"


def texts(n: int, **extra: Any) -> list[tuple[int, Any]]:
    return [(i, {"text": f"t{i}", **extra}) for i in range(n)]


def peak(log: Path) -> int:
    """The most calls ever running at once, from the tool's own start/end lines."""
    level = top = 0
    for line in log.read_text().splitlines():
        level += 1 if line.startswith("start") else -1
        top = max(top, level)
    return top


def count_lines(path: Path) -> int:
    return len(path.read_text().split()) if path.exists() else 0


async def collect(runner: Any, inputs: Any, **options: Any) -> list[BatchItem]:
    async with run_batch(runner, "batch_echo", inputs, **options) as results:
        return [item async for item in results]


@pytest.mark.timeout(60)
async def test_every_index_comes_back_once_with_its_own_result() -> None:
    async with make_runner(BATCH, max_workers=4) as runner:
        items = await collect(runner, texts(40), concurrency=4)
    assert sorted(item.index for item in items) == list(range(40))
    assert all(item.result.text == f"t{item.index}" and not item.result.is_error for item in items)
    assert json.loads(json.dumps(items[0].to_json()))["index"] == items[0].index


@pytest.mark.timeout(60)
async def test_no_more_than_concurrency_calls_run_at_once(tmp_path: Path) -> None:
    log = tmp_path / "log"
    # The runner would allow 8: the bound seen is the batch's own.
    async with make_runner(BATCH, max_workers=8) as runner:
        items = await collect(runner, texts(18, log=str(log), seconds=0.2), concurrency=3)
    assert len(items) == 18
    assert 2 <= peak(log) <= 3, log.read_text()


@pytest.mark.timeout(60)
async def test_bad_inputs_are_invalid_arguments_results_and_the_rest_run() -> None:
    lines: list[str | bytes] = [
        '{"text": "a"}',
        "not json",
        "[1, 2]",
        "",
        '{"text": 5}',
        '{"text": "b"}',
        b'{"text": "\xff"}',
    ]
    async with make_runner(BATCH, max_workers=2) as runner:
        items = {item.index: item.result for item in await collect(runner, jsonl_inputs(lines), concurrency=2)}
        direct = await runner.call_tool("batch_echo", [1, 2])  # type: ignore[arg-type]
        given = await collect(runner, [(0, [1, 2])], concurrency=1)
    assert sorted(items) == [0, 1, 2, 4, 5, 6]  # the blank line is no input
    assert items[0].text == "a" and items[5].text == "b"
    for index in (1, 2, 4, 6):
        assert items[index].kind == "invalid_arguments", items[index]
    assert "line 2 is not valid JSON" in items[1].error.message  # type: ignore[union-attr]
    assert "line 3 must be a JSON object" in items[2].error.message  # type: ignore[union-attr]
    assert "line 7 is not UTF-8" in items[6].error.message  # type: ignore[union-attr]
    # A non-object input gets the very result the runner gives such arguments.
    assert given[0].result == direct


@pytest.mark.timeout(60)
async def test_a_crash_and_a_timeout_are_results_and_the_batch_goes_on() -> None:
    ok = [(i, {"text": f"t{i}"}) for i in (0, 1, 2, 3, 4, 5, 8, 9, 10)]
    inputs = [*ok[:6], (6, {"text": "boom", "crash": True}), (7, {"text": "slow", "seconds": 30}), *ok[6:]]
    async with make_runner(BATCH, max_workers=3) as runner:
        items = {item.index: item.result for item in await collect(runner, inputs, concurrency=3, timeout=1.0)}
    assert sorted(items) == list(range(11))
    assert items[6].kind == "crashed"
    assert items[7].kind == "timeout"
    assert all(not items[i].is_error for i in (*range(6), 8, 9, 10))


@pytest.mark.timeout(60)
async def test_skipped_indices_never_run(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    async with make_runner(BATCH, max_workers=2) as runner:
        items = await collect(runner, texts(10, counter=str(counter)), concurrency=2, skip={0, 3, 9})
    assert sorted(item.index for item in items) == [1, 2, 4, 5, 6, 7, 8]
    assert sorted(counter.read_text().split()) == sorted(f"t{i}" for i in (1, 2, 4, 5, 6, 7, 8))


@pytest.mark.timeout(60)
async def test_leaving_early_cancels_the_running_calls_and_starts_no_more(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    inputs = [
        (0, {"text": "quick"}),
        *((i, {"text": f"t{i}", "counter": str(counter), "seconds": 60}) for i in range(1, 20)),
    ]
    async with make_runner(BATCH, max_workers=3) as runner:
        with trio.fail_after(20):  # well under the slow calls' 60 s: they were cancelled
            async with run_batch(runner, "batch_echo", inputs, concurrency=3) as results:
                async for item in results:
                    assert item.index == 0
                    # The three slow calls that took the free places, in other processes: their file
                    # is all the test sees of them.
                    while count_lines(counter) < 3:  # noqa: ASYNC110
                        await trio.sleep(0.02)
                    break
        assert runner.statistics().running_calls == 0
    # Only what was running when the block was left ever started.
    assert count_lines(counter) == 3


@pytest.mark.timeout(60)
async def test_stop_cancels_the_running_calls_and_the_iteration_ends(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    inputs = [
        (0, {"text": "quick"}),
        *((i, {"text": f"t{i}", "counter": str(counter), "seconds": 60}) for i in range(1, 20)),
    ]
    seen = []
    async with make_runner(BATCH, max_workers=3) as runner:
        with trio.fail_after(20):  # well under the slow calls' 60 s
            async with run_batch(runner, "batch_echo", inputs, concurrency=3) as results:
                async for item in results:
                    seen.append(item.index)
                    while count_lines(counter) < 3:  # noqa: ASYNC110 - see above
                        await trio.sleep(0.02)
                    assert len(results.running) == 3
                    results.stop()
                assert results.running == {}
        assert runner.statistics().running_calls == 0
    assert seen == [0]  # the cancelled calls yield nothing
    assert count_lines(counter) == 3


@pytest.mark.timeout(30)
async def test_concurrency_must_be_a_positive_int() -> None:
    with pytest.raises(ConfigError, match="concurrency"):
        async with run_batch(object(), "t", [], concurrency=0):  # type: ignore[arg-type]
            pass
    with pytest.raises(ConfigError, match="concurrency"):
        run_batch_sync(object(), "t", [], concurrency=0)  # type: ignore[arg-type]


class FakeRunner:
    """The ``call_tool`` contract alone, as a remote runner would offer it: counts calls in flight."""

    def __init__(self, concurrency: int) -> None:
        self.in_flight = 0
        self.peak = 0
        self._concurrency = concurrency
        self._full = trio.Event()

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, timeout: float | None = None,
        tool_call_id: str | None = None,
    ) -> ToolResult:  # fmt: skip
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight == self._concurrency:
            self._full.set()
        await self._full.wait()  # the first calls wait for the batch to fill up: the peak is then certain
        self.in_flight -= 1
        return ToolResult(content=[{"type": "text", "text": str(dict(arguments or {})["n"])}])


@pytest.mark.timeout(30)
async def test_inputs_are_pulled_lazily_and_any_runner_with_the_contract_works() -> None:
    pulled = 0

    def endless() -> Iterator[tuple[int, Any]]:
        nonlocal pulled
        for i in itertools.count():
            pulled += 1
            yield i, {"n": i}

    fake = FakeRunner(5)
    seen = 0
    async with run_batch(fake, "t", endless(), concurrency=5) as results:
        async for item in results:
            assert item.result.text == str(item.index)
            seen += 1
            if seen == 200:
                break
    assert fake.peak == 5
    # In flight and waiting to be read: about two batches' worth, never the whole (endless) input.
    assert pulled <= seen + 2 * 5 + 1


@pytest.mark.timeout(60)
def test_the_blocking_api_returns_every_index_and_stops_early_on_close(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    with open_blocking_runner([str(BATCH)], max_workers=3, grace=0.5, spare_workers=0) as runner:
        items = list(
            run_batch_sync(runner, "batch_echo", [*texts(12), (12, ValueError("line 13 is bad"))], concurrency=3)
        )
        assert sorted(item.index for item in items) == list(range(13))
        bad = next(item for item in items if item.index == 12)
        assert bad.result.kind == "invalid_arguments" and bad.result.error.message == "line 13 is bad"  # type: ignore[union-attr]
        slow = [
            (0, {"text": "quick"}),
            *((i, {"text": f"t{i}", "counter": str(counter), "seconds": 60}) for i in range(1, 20)),
        ]
        with contextlib.closing(run_batch_sync(runner, "batch_echo", slow, concurrency=3)) as results:
            for item in results:
                assert item.index == 0
                deadline = time.monotonic() + 20
                while count_lines(counter) < 3 and time.monotonic() < deadline:
                    time.sleep(0.02)  # the calls run in other processes: their file is all the test sees
                break
        assert runner.statistics().running_calls == 0
    assert count_lines(counter) == 3


class BrokenRunner(FakeRunner):
    """A runner that breaks its contract: raises instead of returning a result."""

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, timeout: float | None = None,
        tool_call_id: str | None = None,
    ) -> ToolResult:  # fmt: skip
        await trio.lowlevel.checkpoint()
        raise RuntimeError("the runner broke")


@pytest.mark.timeout(30)
async def test_an_error_comes_out_as_itself_not_wrapped_in_a_group() -> None:
    async def reader_raises() -> None:
        # The reader's own exception, while calls are still in flight.
        async with run_batch(FakeRunner(2), "t", ((i, {"n": i}) for i in range(100)), concurrency=2) as results:
            async for _ in results:
                raise KeyError("reader")

    async def runner_raises() -> None:
        # The runner's (not a call's failure, which would be a result): the batch stops and says so.
        async with run_batch(BrokenRunner(2), "t", [(0, {"n": 0}), (1, {"n": 1})], concurrency=2) as results:
            async for _ in results:
                pass

    with pytest.raises(KeyError):
        await reader_raises()
    with pytest.raises(RuntimeError, match="the runner broke"):
        await runner_raises()
