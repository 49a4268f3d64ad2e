"""Batches over a real multi-node Ray cluster: ``xcsh-run batch --ray`` and ``run_batch`` over ``open_ray_runner``.

The cluster, its marks and its teardown are tests/scale/test_ray.py's (the same
module-scoped fixture): its processes are checked gone at the end, and the
workers a Ray runner opened here starts carry the session's mark.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import TOOLS, XCSH_RUN
from tests.scale.test_ray import NODE_ARGS, _alive, _ClusterMark, _markers, _no_staging_left, _options, cluster
from xcsh_run import BatchItem, open_ray_runner, run_batch

__all__ = ["_no_staging_left", "cluster"]  # fixtures, used by name

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CLUSTER_TOOL = str(TOOLS / "cluster.py")


def _node_ids(cluster: Any) -> set[str]:
    return {cluster.head_node.node_id, *(n.node_id for n in cluster.worker_nodes)}


@pytest.mark.timeout(200)
def test_the_batch_command_runs_500_calls_over_both_nodes(cluster: Any, tmp_path: Path) -> None:
    inputs = tmp_path / "args.jsonl"
    inputs.write_text("".join(json.dumps({"text": f"call {i}"}) + "\n" for i in range(500)))
    out = tmp_path / "out.jsonl"
    argv = [XCSH_RUN, "batch", "where", "--tools", CLUSTER_TOOL, "--input", str(inputs), "--output", str(out)]
    proc = subprocess.run(
        [*argv, "--grace", "0.5", "--ray", cluster.address],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(v["index"] for v in lines) == list(range(500))  # one line per index, none twice
    for value in lines:
        assert value["error"] is None, value
        assert value["content"] == [{"type": "text", "text": f"call {value['index']}"}]
    assert {v["details"]["node"] for v in lines} == _node_ids(cluster)
    assert "xcsh-run batch: 500 calls: 500 ok (500 run now in " in proc.stderr, proc.stderr
    # A rerun over the same output has nothing left to run (resume works over Ray as locally).
    again = subprocess.run(
        [*argv, "--ray", cluster.address], cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "500 calls: 500 ok (0 run now" in again.stderr, again.stderr
    assert len(out.read_text().splitlines()) == 500


@pytest.mark.timeout(150)
def test_without_tools_the_project_folder_travels_and_each_node_discovers(cluster: Any, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".xcsh" / "tools").mkdir(parents=True)
    shutil.copy(CLUSTER_TOOL, project / ".xcsh" / "tools" / "cluster.py")
    inputs = tmp_path / "args.jsonl"
    inputs.write_text("".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(40)))
    proc = subprocess.run(
        [XCSH_RUN, "batch", "where", "--input", str(inputs), "--ray", cluster.address, "--cwd", str(project)],
        cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sorted(v["index"] for v in lines) == list(range(40))
    assert all(v["content"] == [{"type": "text", "text": f"t{v['index']}"}] for v in lines), lines[:3]
    assert {v["details"]["node"] for v in lines} == _node_ids(cluster)


@pytest.mark.timeout(60)
def test_without_ray_the_batch_command_says_how_to_install_it(tmp_path: Path) -> None:
    # A `ray` package that cannot be imported stands for Ray not being installed.
    (tmp_path / "shadow" / "ray").mkdir(parents=True)
    (tmp_path / "shadow" / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    inputs = tmp_path / "args.jsonl"
    inputs.write_text('{"text": "x"}\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shadow")}
    proc = subprocess.run(
        [XCSH_RUN, "batch", "where", "--tools", CLUSTER_TOOL, "--input", str(inputs), "--ray", "auto"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'xcsh-run[ray]'" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.timeout(150)
async def test_run_batch_over_a_ray_runner_returns_500_correct_results(cluster: Any, tmp_path: Path) -> None:
    with trio.fail_after(120):
        async with open_ray_runner([CLUSTER_TOOL], address=cluster.address, **_options(tmp_path)) as rr:
            assert rr.worker_limit == sum(n.max_workers for n in rr.nodes) and rr.worker_limit >= 2
            got: dict[int, BatchItem] = {}
            inputs = ((i, {"text": f"call {i}"}) for i in range(500))
            async with run_batch(rr, "where", inputs, concurrency=rr.worker_limit, timeout=30) as results:
                async for item in results:
                    assert item.index not in got
                    got[item.index] = item
            assert sorted(got) == list(range(500))
            assert [got[i].result.text for i in range(500)] == [f"call {i}" for i in range(500)]
            assert {item.result.details["node"] for item in got.values()} == _node_ids(cluster)
            assert rr.in_flight() == {n.node_id: 0 for n in rr.nodes}


def _index(call_id: str) -> int:
    return int(call_id.rsplit("-", 1)[1])  # run_batch's ids end with the input's index


@pytest.mark.timeout(240)
async def test_a_node_killed_mid_batch_crashes_exactly_its_running_calls(cluster: Any, tmp_path: Path) -> None:
    held = tmp_path / "held"
    held.mkdir()
    release = tmp_path / "release"
    args = {"dir": str(held), "release": str(release)}
    n = 30
    doomed = None
    try:
        with trio.fail_after(200):
            async with open_ray_runner([CLUSTER_TOOL], address=cluster.address, **_options(tmp_path)) as rr:
                with _ClusterMark():
                    doomed = cluster.add_node(**NODE_ARGS)  # on the main thread: it sets a signal handler
                assert [n.node_id for n in await rr.add_nodes()] == [doomed.node_id]
                got: dict[int, BatchItem] = {}
                two_back = trio.Event()
                # 6 in flight over 3 nodes: least loaded first puts two on each, all holding.
                async with run_batch(rr, "hold", ((i, args) for i in range(n)), concurrency=6, timeout=90) as results:

                    async def collect() -> None:
                        async for item in results:
                            got[item.index] = item
                            if len(got) == 2:
                                two_back.set()

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(collect)
                        markers = await _markers(held, 6)
                        on_doomed = {_index(c) for c, m in markers.items() if m["node"] == doomed.node_id}
                        assert len(on_doomed) == 2, markers
                        await trio.to_thread.run_sync(lambda: cluster.remove_node(doomed))
                        with trio.fail_after(60):
                            await two_back.wait()
                        # Nothing else was back: the other calls still held when the node died.
                        assert set(got) == on_doomed
                        release.touch()
                assert sorted(got) == list(range(n))  # the batch went on: every input has its one result
                for index in on_doomed:
                    result = got[index].result
                    assert result.kind == "crashed", result
                    assert doomed.node_id in result.text and "not run again" in result.text
                    assert result.details["node_id"] == doomed.node_id
                for index in set(got) - on_doomed:
                    assert got[index].result.text == "released", got[index].result
                ran = [json.loads(p.read_text()) for p in held.glob("*.json")]
                assert len(ran) == n  # each input ran once: none again after its node died
                later = [m for m in ran if _index(m["call"]) not in on_doomed]
                assert doomed.node_id not in {m["node"] for m in later}
                # The dead node's workers went with their host; every call's child is gone.
                dead = [pid for m in ran if m["node"] == doomed.node_id for pid in (m["pid"], m["child"])]
                assert _alive(dead + [m["child"] for m in ran]) == []
            # Closed: the live nodes' warm workers are gone too.
            assert _alive([m["pid"] for m in ran]) == []
    finally:
        if doomed is not None and doomed in cluster.worker_nodes:
            await trio.to_thread.run_sync(lambda: cluster.remove_node(doomed))
