"""Added spawn cost of each sandbox level against ``none``, measured side by side.

Each round starts one worker per level, in a shuffled order, and times it from
spawn to "module loaded" (the worker's sandbox is applied in between). The
table gives per-level medians and the median of the per-round differences
against ``none`` (paired, so machine noise cancels out).

Usage: python bench/sandbox_spawn.py [ROUNDS]; ``make bench`` runs it as section (h).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from xcsh_run import SandboxPolicy, open_runner
from xcsh_run._discovery.finder import Candidate, ToolSource

TOOL = """
from xcsh_run.pi import CustomTool

def factory(api):
    return CustomTool(name="echo", description="echo", parameters={"type": "object"}, execute=lambda *a: "ok")
"""

LEVELS = {
    "none": SandboxPolicy(level="none"),
    "contained": SandboxPolicy(),
    "strict": SandboxPolicy(level="strict"),
    "strict+netns": SandboxPolicy(level="strict", network="netns"),
}


async def measure(rounds: int) -> dict[str, list[float]]:
    """Per level, ``rounds`` times from spawn to 'module loaded', in ms, each round in a new order."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "echo_tool.py"
        path.write_text(TOOL)
        candidate = Candidate(path=str(path), resolved=str(path), source=ToolSource("config", "Config", "project"))
        samples: dict[str, list[float]] = {name: [] for name in LEVELS}
        # No spare: every row must pay for a worker start of its own level.
        async with open_runner(cwd=tmp, cache=False, discover_sources=False, spare_workers=0) as runner:
            registry, pool = runner._loader, runner._pool
            for _ in range(3):  # warm-up: page cache, probe, pyc
                for policy in LEVELS.values():
                    slot, _ = await registry.spawn_loaded(candidate, 30, policy)
                    await pool.retire(slot)
            for _ in range(rounds):
                order = list(LEVELS.items())
                random.shuffle(order)
                for name, policy in order:
                    start = time.perf_counter()
                    slot, _ = await registry.spawn_loaded(candidate, 30, policy)
                    samples[name].append((time.perf_counter() - start) * 1000)
                    await pool.retire(slot)
    return samples


async def main(rounds: int) -> None:
    samples = await measure(rounds)
    base = samples["none"]
    print(
        f"worker spawn to 'module loaded', {rounds} paired rounds, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print("| level | median ms | added vs none (median of paired diffs) |")
    print("| --- | ---: | ---: |")
    for name, values in samples.items():
        delta = statistics.median(v - b for v, b in zip(values, base, strict=True))
        print(f"| {name} | {statistics.median(values):.1f} | {delta:+.1f} ms |")


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 40)
