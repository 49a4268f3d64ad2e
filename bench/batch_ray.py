"""Section (j): the Ray path. Its overhead per call, and a batch's throughput on 1 and 2 local Ray nodes.

Overhead: sequential echo calls (one in flight) through a local runner and
through ``open_ray_runner`` on a 1-node local cluster; the difference of the
medians is what the Ray path adds to a call (driver -> actor -> the node's
runner -> back). Scaling: ``run_batch`` over N echo calls, with as many in
flight as the runner has workers (``worker_limit``: the nodes' summed
``max_workers`` over Ray), for a local runner, Ray with 1 node and Ray with 2
nodes. The nodes are ``ray.cluster_utils.Cluster`` nodes on this machine
(``num_cpus=1`` each, a 100 MiB object store, no dashboard), so 2 nodes share
the same cores as 1: the table shows the cost of the path, not more hardware.
The cluster is always shut down. Without Ray, the Ray rows say so and are empty.

Usage: python -m bench.batch_ray [N] [ROUNDS] [SEQUENTIAL]; ``make bench`` runs it as section (j).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import trio

from bench._table import Row, Section
from xcsh_run import open_ray_runner, open_runner, run_batch
from xcsh_run._embed.batch import CallsTools

ECHO = str(Path(__file__).resolve().parent / "tools" / "echo_tool.py")
SEQ_LOCAL = "sequential echo call_tool, local runner"
SEQ_RAY = "sequential echo call_tool, Ray runner, 1 local node"
SEQ_DIFF = "Ray path's overhead per call (difference of the medians)"
TP_LOCAL = "run_batch, local runner"
TP_RAY1 = "run_batch, Ray runner, 1 local node"
TP_RAY2 = "run_batch, Ray runner, 2 local nodes"
TP_RAY2_DEEP = "run_batch, Ray runner, 2 local nodes, 4x as many in flight"
NODE: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 100 * 1024 * 1024}
NO_RAY = "skipped: Ray is not installed (pip install 'xcsh-run[ray]')"


async def _sequential(runner: CallsTools, n: int) -> list[float]:
    out = []
    for x in range(n):
        start = time.perf_counter()
        result = await runner.call_tool("echo", {"x": x})
        out.append((time.perf_counter() - start) * 1e6)
        if result.is_error or result.details != {"x": x}:
            raise RuntimeError(f"echo failed: {result}")
    return out


async def _batch(runner: CallsTools, n: int, concurrency: int) -> float:
    start = time.perf_counter()
    seen = 0
    async with run_batch(runner, "echo", ((x, {"x": x}) for x in range(n)), concurrency=concurrency) as results:
        async for item in results:
            if item.result.is_error or item.result.details != {"x": item.index}:
                raise RuntimeError(f"echo failed: {item.result}")
            seen += 1
    if seen != n:
        raise RuntimeError(f"{seen} results for {n} calls")
    return n / (time.perf_counter() - start)


@contextlib.contextmanager
def _cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        yield cluster
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()


@contextlib.asynccontextmanager
async def _ray_runner(address: str, tmp: str) -> AsyncIterator[Any]:
    async with open_ray_runner(
        [ECHO], address=address, cache_dir=str(Path(tmp, "cache")), init_options={"logging_level": "WARNING"}
    ) as runner:
        yield runner


async def _measure(n: int, rounds: int, seq: int, cluster: Any | None, tmp: str) -> dict[str, Any]:
    got: dict[str, Any] = {}
    async with open_runner([ECHO], cwd=tmp, cache_dir=str(Path(tmp, "cache"))) as runner:
        await _batch(runner, 200, runner.config.worker_limit)  # warm: every worker started
        got[SEQ_LOCAL] = await _sequential(runner, seq)
        got[TP_LOCAL] = [await _batch(runner, n, runner.config.worker_limit) for _ in range(rounds)]
        got["local workers"] = runner.config.worker_limit
    if cluster is None:
        return got
    async with _ray_runner(cluster.address, tmp) as rr:
        await _batch(rr, 200, rr.worker_limit)
        got[SEQ_RAY] = await _sequential(rr, seq)
        got[TP_RAY1] = [await _batch(rr, n, rr.worker_limit) for _ in range(rounds)]
        got["ray1 workers"] = rr.worker_limit
    cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    async with _ray_runner(cluster.address, tmp) as rr:
        if len(rr.nodes) != 2:
            raise RuntimeError(f"expected 2 Ray nodes, got {len(rr.nodes)}")
        await _batch(rr, 400, rr.worker_limit)
        got[TP_RAY2] = [await _batch(rr, n, rr.worker_limit) for _ in range(rounds)]
        got["ray2 workers"] = rr.worker_limit
        got["ray2 split"] = sorted(node.calls for node in rr.nodes)
        # Over Ray a call's round trip, not the workers, bounds the rate: more in flight hides it.
        got[TP_RAY2_DEEP] = [await _batch(rr, n, 4 * rr.worker_limit) for _ in range(rounds)]
        got["ray2 deep workers"] = 4 * rr.worker_limit
    return got


def _ray_installed() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def measure(n: int, rounds: int, seq: int = 500) -> Section:
    section = Section(
        "j",
        f"Ray path: overhead per call (us, {seq} sequential echo calls) and throughput of {n} echo calls (calls/s)",
        "the local runner",
    )
    rows = {
        SEQ_LOCAL: section.add(Row(SEQ_LOCAL, ref=True)),
        SEQ_RAY: section.add(Row(SEQ_RAY)),
        SEQ_DIFF: section.add(Row(SEQ_DIFF, compare=False, p90=False)),
    }
    throughput = {
        label: section.add(Row(label, unit="calls/s", p90=False, compare=False))
        for label in (TP_LOCAL, TP_RAY1, TP_RAY2, TP_RAY2_DEEP)
    }
    has_ray = _ray_installed()
    try:
        with tempfile.TemporaryDirectory(prefix="xcsh-bench-") as tmp:
            if has_ray:
                logging.getLogger("ray").setLevel(logging.WARNING)
                with _cluster() as cluster:
                    got = trio.run(_measure, n, rounds, seq, cluster, tmp)
            else:
                got = trio.run(_measure, n, rounds, seq, None, tmp)
    except Exception as exc:  # the section says so instead of failing the whole run
        rows[SEQ_LOCAL].error = f"{type(exc).__name__}: {str(exc)[:300]}"
        return section
    for label, row in rows.items():
        if label in got:
            row.samples = got[label]
    local, ray = rows[SEQ_LOCAL].median, rows[SEQ_RAY].median
    if local is not None and ray is not None:
        rows[SEQ_DIFF].value = ray - local
        rows[SEQ_DIFF].note = f"{ray / local:.1f}x a local call"
    base = None
    for label, row in throughput.items():
        if label not in got:
            continue
        row.samples = got[label]
        row.rounds = list(row.samples)
        base = base or row.median
        key = {TP_LOCAL: "local", TP_RAY1: "ray1", TP_RAY2: "ray2", TP_RAY2_DEEP: "ray2 deep"}[label]
        workers = got[f"{key} workers"]
        row.note = f"{workers} in flight; x local {row.median / base:.2f}" if row.median and base else ""
    if "ray2 split" in got:
        throughput[TP_RAY2].note += f"; calls per node {got['ray2 split']}"
    if not has_ray:
        for label in (SEQ_RAY, SEQ_DIFF, TP_RAY1, TP_RAY2, TP_RAY2_DEEP):
            (rows.get(label) or throughput[label]).note = NO_RAY
    return section


if __name__ == "__main__":
    from bench._table import render_section

    args = [int(a) for a in sys.argv[1:]]
    print(render_section(measure(*(args + [2000, 3, 500][len(args) :]))))
