"""Section (i): local batches. ``run_batch`` against the embedding API's own throughput, same runner.

Both sides make N echo calls through one runner (default settings, so
``max_workers`` is twice the cores, at least 4) with that many calls in
flight: the reference is a plain trio nursery of ``max_workers`` tasks, each
looping over ``call_tool``; the subject is ``run_batch(..., concurrency=max_workers)``
over N ``(index, arguments)`` inputs, its results read as they complete.
Rounds run the two back to back, in a random order, on the same warm
workers; the median of the rounds' ratios is the batch layer's own cost (on a
shared machine, far steadier than the ratio of the medians). A last row times the whole
``xcsh-run batch`` command over a file of N lines (process start, discovery
and the output file included), for scale.

Usage: python -m bench.batch [N] [ROUNDS]; ``make bench`` runs it as section (i).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from bench._table import Row, Section
from xcsh_run import Runner, open_runner, run_batch

ECHO = str(Path(__file__).resolve().parent / "tools" / "echo_tool.py")
NURSERY = "call_tool from a nursery of max_workers tasks (the embedding API)"
BATCH = "run_batch(concurrency=max_workers), results read as they complete"
PAIRED = "run_batch / call_tool nursery, per round (median of the rounds' ratios)"
CLI = "xcsh-run batch echo --input FILE --output FILE (whole command)"


async def _nursery(runner: Runner, n: int, concurrency: int) -> float:
    numbers = iter(range(n))

    async def loop() -> None:
        for x in numbers:  # shared: each task takes the next call as it frees up
            result = await runner.call_tool("echo", {"x": x})
            if result.is_error or result.details != {"x": x}:
                raise RuntimeError(f"echo failed: {result}")

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(loop)
    return time.perf_counter() - start


async def _batch(runner: Runner, n: int, concurrency: int) -> float:
    start = time.perf_counter()
    seen = 0
    async with run_batch(runner, "echo", ((x, {"x": x}) for x in range(n)), concurrency=concurrency) as results:
        async for item in results:
            if item.result.is_error or item.result.details != {"x": item.index}:
                raise RuntimeError(f"echo failed: {item.result}")
            seen += 1
    if seen != n:
        raise RuntimeError(f"{seen} results for {n} calls")
    return time.perf_counter() - start


async def _measure(n: int, rounds: int) -> tuple[int, dict[str, list[float]]]:
    seconds: dict[str, list[float]] = {NURSERY: [], BATCH: []}
    with tempfile.TemporaryDirectory(prefix="xcsh-bench-") as tmp:
        async with open_runner([ECHO], cwd=tmp, cache_dir=str(Path(tmp) / "cache")) as runner:
            concurrency = runner.config.worker_limit
            await _nursery(runner, 200, concurrency)  # warm: every worker started and loaded
            for _ in range(rounds):
                order = [(NURSERY, _nursery), (BATCH, _batch)]
                random.shuffle(order)
                for label, run in order:
                    seconds[label].append(await run(runner, n, concurrency))
    return concurrency, seconds


def _cli(n: int, concurrency: int, rounds: int) -> list[float]:
    xcsh_run = str(Path(sys.executable).parent / "xcsh-run")
    out = []
    with tempfile.TemporaryDirectory(prefix="xcsh-bench-") as tmp:
        inputs = Path(tmp) / "args.jsonl"
        inputs.write_text("".join(json.dumps({"x": x}) + "\n" for x in range(n)))
        for i in range(rounds):
            output = Path(tmp) / f"out{i}.jsonl"
            argv = [xcsh_run, "batch", "echo", "--tools", ECHO, "--input", str(inputs), "--output", str(output)]
            start = time.perf_counter()
            proc = subprocess.run(
                [*argv, "--concurrency", str(concurrency)], cwd=tmp, capture_output=True, text=True, check=False
            )
            out.append(time.perf_counter() - start)
            lines = output.read_text().splitlines() if output.exists() else []
            if proc.returncode != 0 or len(lines) != n:
                raise RuntimeError(f"xcsh-run batch: exit {proc.returncode}, {len(lines)} lines: {proc.stderr[-300:]}")
    return out


def measure(n: int, rounds: int) -> Section:
    section = Section(
        "i",
        f"Local batch: {n} echo calls, us per call (one sample per round; same runner, same concurrency)",
        "vs the embedding API's own throughput: a nursery of call_tool tasks",
    )
    try:
        concurrency, seconds = trio.run(_measure, n, rounds)
    except Exception as exc:  # the section says so instead of failing the whole run
        section.add(Row(NURSERY, ref=True, error=str(exc)[:300]))
        return section
    for label in (NURSERY, BATCH):
        row = section.add(Row(label, samples=[s / n * 1e6 for s in seconds[label]], p90=False, ref=label == NURSERY))
        row.rounds = list(row.samples)
        row.note = f"{1e6 / row.median:,.0f} calls/s, {concurrency} in flight" if row.median else ""
    # Each round runs both back to back: their ratio is what the neighbours' noise moves least.
    ratios = [b / a for a, b in zip(seconds[NURSERY], seconds[BATCH], strict=True)]
    section.add(Row(PAIRED, samples=ratios, unit="x", p90=False, compare=False, note="the target's figure"))
    row = section.add(Row(CLI, p90=False, compare=False))
    try:
        row.samples = [s / n * 1e6 for s in _cli(n, concurrency, max(1, rounds // 2))]
        row.note = (
            f"{1e6 / row.median:,.0f} calls/s including start, discovery and the output file" if row.median else ""
        )
    except (OSError, RuntimeError) as exc:
        row.error = str(exc)[:300]
    return section


if __name__ == "__main__":
    from bench._table import render_section

    args = [int(a) for a in sys.argv[1:]]
    print(render_section(measure(*(args + [2000, 8][len(args) :]))))
