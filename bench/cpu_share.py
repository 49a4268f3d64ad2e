"""Where the CPU goes when callers keep many calls in flight: the host's share against the workers'.

    .venv/bin/python -m bench.cpu_share [--calls 4000] [--in-flight 64] [--rounds 3]

A runner with ``max_workers=2`` serves ``--calls`` echo calls from
``--in-flight`` tasks. The host's CPU comes from ``time.process_time()``, the
workers' from psutil's ``cpu_times`` of this process's worker children. When
the host is near a whole core and the workers mostly idle, throughput is
bounded by the host's CPU per call: sending requests to a worker ahead of time
(pipelining) would only shorten the workers' idle time.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import trio

from bench.peers.xcsh import Xcsh, _worker_processes


def _worker_cpu() -> dict[int, float]:
    return {w.pid: sum(w.cpu_times()[:2]) for w in _worker_processes()}


async def main(calls: int, in_flight: int, rounds: int) -> None:
    async with Xcsh() as xcsh, xcsh._open(max_workers=2) as runner:

        async def drain(numbers: Iterator[int]) -> None:
            for i in numbers:
                await xcsh._echo(i, runner=runner)

        async with trio.open_nursery() as nursery:  # warm-up: both workers exist
            for _ in range(2):
                nursery.start_soon(drain, iter(range(50)))
        for _ in range(rounds):
            before = _worker_cpu()
            wall, host = time.perf_counter(), time.process_time()
            numbers = iter(range(calls))
            async with trio.open_nursery() as nursery:
                for _ in range(in_flight):
                    nursery.start_soon(drain, numbers)
            wall, host = time.perf_counter() - wall, time.process_time() - host
            workers = sum(cpu - before.get(pid, 0.0) for pid, cpu in _worker_cpu().items())
            print(
                f"{in_flight} in flight: wall {wall / calls * 1e6:.0f} us/call ({calls / wall:,.0f} calls/s); "
                f"host cpu {host / calls * 1e6:.0f} us/call ({host / wall:.0%} of a core); "
                f"workers cpu {workers / calls * 1e6:.0f} us/call ({workers / wall / 2:.0%} of each worker)",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trio.run(main, args.calls, args.in_flight, args.rounds)
