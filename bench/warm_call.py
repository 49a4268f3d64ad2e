"""Warm per-call latency of the host: one worker, calls one after another.

Usage: python bench/warm_call.py [N]   (prints the median and p90 in microseconds)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from xcsh_run import open_runner

TOOL = """
from xcsh_run.pi import CustomTool

def factory(api):
    def echo(tool_call_id, params, on_update, ctx, signal):
        return {"content": [], "details": params}
    return CustomTool(name="echo", description="echo", parameters={"type": "object"}, execute=echo)
"""


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "echo_tool.py"
        path.write_text(TOOL)
        async with open_runner([str(path)], cwd=tmp) as runner:
            for _ in range(200):  # warm-up
                await runner.call_tool("echo", {"x": 1})
            samples = []
            for i in range(n):
                start = time.perf_counter()
                await runner.call_tool("echo", {"x": i})
                samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    print(f"warm echo call: median {statistics.median(samples):.1f} us, p90 {samples[int(n * 0.9)]:.1f} us, n={n}")


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
