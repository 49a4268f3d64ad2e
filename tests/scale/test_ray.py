"""Calls on a real multi-node Ray cluster started on this machine (``ray.cluster_utils.Cluster``).

The cluster's own processes carry a mark of their own (the session's mark plus
``-ray``), so the autouse ``no_survivors`` check leaves them alone between
tests; the workers the nodes start get the session's mark through
``worker_env``, so that check does see every worker and grandchild a test
leaves on any node. The module's teardown stops the cluster and checks that
none of its processes is left.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests.conftest import TOOLS, make_runner
from xcsh_run import RayMissing, ToolResult, open_ray_runner
from xcsh_run.fuzz._leftovers import marked_processes

pytestmark = [pytest.mark.ray, pytest.mark.slow]

MARK_VAR = "XCSH_RUN_TEST_MARK"
TEST_MARK = os.environ[MARK_VAR]
CLUSTER_MARK = TEST_MARK + "-ray"
# Small nodes: this machine has 2 cores and others share it.
NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 100 * 1024 * 1024}
HEAD_ARGS: dict[str, Any] = {**NODE_ARGS, "include_dashboard": False}
TIMEOUT = 2.0
GRACE = 0.5


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("Ray is not installed: the ray extra (pip install -e '.[ray]') is part of the CI set-up")
        pytest.skip("Ray is not installed (pip install 'xcsh-run[ray]')")
    return ray


class _ClusterMark:
    """The cluster's processes inherit the environment they are started from: give them their own mark."""

    def __enter__(self) -> None:
        os.environ[MARK_VAR] = CLUSTER_MARK

    def __exit__(self, *exc: object) -> None:
        os.environ[MARK_VAR] = TEST_MARK


def _bounded(fn: Any, seconds: float) -> None:
    """``fn()`` in a thread, waited for at most ``seconds`` (a stuck Ray shutdown must not hang the session)."""
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    thread.join(seconds)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    _ray()
    from ray.cluster_utils import Cluster

    with _ClusterMark():
        started = Cluster(initialize_head=True, head_node_args=HEAD_ARGS)
        try:
            started.add_node(**NODE_ARGS)
        except BaseException:
            started.shutdown()
            raise
    try:
        yield started
    finally:
        import ray

        _bounded(ray.shutdown, 30)
        _bounded(started.shutdown, 60)
        left = marked_processes(CLUSTER_MARK, MARK_VAR)
        for pid, _, _ in left:
            with __import__("contextlib").suppress(OSError):
                os.kill(pid, 9)
        assert not left, f"Ray processes left after the cluster's shutdown: {left}"


def _staging_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("xcsh-ray-stage-*")}


@pytest.fixture(autouse=True)
def _no_staging_left() -> Iterator[None]:
    """A Ray runner removes the folder it staged the tool files in, however it ends."""
    before = _staging_dirs()
    yield
    assert _staging_dirs() - before == set()


def _options(tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {
        "grace": GRACE,
        "load_timeout": 20.0,
        "spare_workers": 0,
        # The nodes share this machine: a cache of the test's own, not the user's.
        "cache_dir": str(tmp_path / "node-cache"),
        "worker_env": {MARK_VAR: TEST_MARK},
        "init_options": {"logging_level": "WARNING"},
        **more,
    }


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


async def _markers(folder: Path, count: int) -> dict[str, dict[str, Any]]:
    """The ``hold`` calls' markers, once ``count`` of them are there (by call id)."""
    while len(found := sorted(folder.glob("*.json"))) < count:  # noqa: ASYNC110 - written by tools on other nodes
        await trio.sleep(0.02)
    return {json.loads(p.read_text())["call"]: json.loads(p.read_text()) for p in found}


@pytest.mark.timeout(150)
async def test_500_calls_spread_over_both_nodes(cluster: Any, tmp_path: Path) -> None:
    with trio.fail_after(120):
        async with open_ray_runner([str(TOOLS / "cluster.py")], address=cluster.address, **_options(tmp_path)) as rr:
            assert [t.name for t in rr.tools] == ["where", "hold"]
            assert len(rr.nodes) == 2
            results: dict[int, ToolResult] = {}

            async def one(i: int) -> None:
                results[i] = await rr.call_tool("where", {"text": f"call {i}"}, timeout=30)

            async with trio.open_nursery() as nursery:
                for i in range(500):
                    nursery.start_soon(one, i)
            assert [results[i].text for i in range(500)] == [f"call {i}" for i in range(500)]
            used = {r.details["node"] for r in results.values()}
            assert used == {n.node_id for n in rr.nodes}
            assert rr.in_flight() == {n.node_id: 0 for n in rr.nodes}
            assert sum(n.calls for n in rr.nodes) == 500
            assert min(n.calls for n in rr.nodes) >= 200  # least loaded first: an even split


@pytest.mark.timeout(150)
async def test_cancel_on_a_remote_node_runs_the_ladder_there(cluster: Any, tmp_path: Path) -> None:
    (worker_node,) = cluster.worker_nodes
    held = tmp_path / "held"
    held.mkdir()
    release = tmp_path / "release"
    args = {"dir": str(held), "release": str(release)}
    with trio.fail_after(120):
        async with open_ray_runner([str(TOOLS / "cluster.py")], address=cluster.address, **_options(tmp_path)) as rr:
            results: dict[str, ToolResult] = {}
            ended = {call_id: trio.Event() for call_id in ("hold-a", "hold-b")}

            async def one(call_id: str) -> None:
                results[call_id] = await rr.call_tool("hold", args, tool_call_id=call_id, timeout=60)
                ended[call_id].set()

            async with trio.open_nursery() as nursery:
                for call_id in ("hold-a", "hold-b"):
                    nursery.start_soon(one, call_id)
                markers = await _markers(held, 2)
                # One call per node (least loaded first): cancel the one away from the driver's node.
                assert {m["node"] for m in markers.values()} == {n.node_id for n in rr.nodes}
                (remote,) = [m for m in markers.values() if m["node"] == worker_node.node_id]
                assert rr.cancel(remote["call"], "stop it")
                with trio.fail_after(30):
                    await ended[remote["call"]].wait()  # while the other still holds
                release.touch()
            cancelled = results[remote["call"]]
            assert cancelled.kind == "cancelled", cancelled
            assert "stop it" in cancelled.text
            # The worker and the child it started are gone from that node, not only the call.
            assert _alive([remote["pid"], remote["child"]]) == []
            (other,) = [r for call_id, r in results.items() if call_id != remote["call"]]
            assert other.text == "released", other
            assert not rr.cancel(remote["call"])  # no longer running


@pytest.mark.timeout(150)
async def test_a_cancelled_caller_stops_its_call_on_the_node_before_it_returns(cluster: Any, tmp_path: Path) -> None:
    held = tmp_path / "held"
    held.mkdir()
    args = {"dir": str(held), "release": str(tmp_path / "never")}
    with trio.fail_after(120):
        async with open_ray_runner([str(TOOLS / "cluster.py")], address=cluster.address, **_options(tmp_path)) as rr:
            markers: dict[str, dict[str, Any]] = {}
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    for call_id in ("hold-a", "hold-b"):
                        nursery.start_soon(lambda c=call_id: rr.call_tool("hold", args, tool_call_id=c, timeout=60))
                    markers = await _markers(held, 2)
                    scope.cancel()
            assert scope.cancelled_caught
            # Cancelled propagated only once each node's ladder had ended the call and its tree.
            assert _alive([pid for m in markers.values() for pid in (m["pid"], m["child"])]) == []
            assert rr.in_flight() == {n.node_id: 0 for n in rr.nodes}


@pytest.mark.timeout(150)
async def test_a_cancel_that_overtakes_its_call_still_cancels_it(cluster: Any, tmp_path: Path) -> None:
    """The cancel travels apart from its call (another concurrency group): it may reach the node first."""
    held = tmp_path / "held"
    held.mkdir()
    args = {"dir": str(held), "release": str(tmp_path / "never")}
    with trio.fail_after(120):
        async with open_ray_runner([str(TOOLS / "cluster.py")], address=cluster.address, **_options(tmp_path)) as rr:
            results: dict[str, ToolResult] = {}

            async def one(call_id: str, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                task_status.started()
                results[call_id] = await rr.call_tool("hold", args, tool_call_id=call_id, timeout=60)

            async with trio.open_nursery() as nursery:
                for i in range(10):
                    await nursery.start(one, f"early-{i}")
                    await trio.lowlevel.checkpoint()  # the call is submitted: its cancel follows at once
                    assert rr.cancel(f"early-{i}", "at once")
            assert sorted(results) == sorted(f"early-{i}" for i in range(10))
            assert {r.kind for r in results.values()} == {"cancelled"}, [r.text for r in results.values()]
            # Whichever began held a worker: that worker and its child are gone.
            started = [json.loads(p.read_text()) for p in held.glob("*.json")]
            assert _alive([pid for m in started for pid in (m["pid"], m["child"])]) == []


@pytest.mark.timeout(150)
async def test_closing_with_calls_running_ends_them_cancelled(cluster: Any, tmp_path: Path) -> None:
    held = tmp_path / "held"
    held.mkdir()
    args = {"dir": str(held), "release": str(tmp_path / "never")}
    results: list[ToolResult] = []
    with trio.fail_after(120):
        async with (
            trio.open_nursery() as nursery,
            open_ray_runner([str(TOOLS / "cluster.py")], address=cluster.address, **_options(tmp_path)) as rr,
        ):

            async def one() -> None:
                results.append(await rr.call_tool("hold", args, timeout=60))

            for _ in range(4):
                nursery.start_soon(one)
            markers = await _markers(held, 4)
    assert [r.kind for r in results] == ["cancelled"] * 4, results
    assert _alive([pid for m in markers.values() for pid in (m["pid"], m["child"])]) == []


@pytest.mark.timeout(200)
async def test_a_node_that_joins_then_dies_crashes_exactly_its_calls(cluster: Any, tmp_path: Path) -> None:
    held = tmp_path / "held"
    held.mkdir()
    release = tmp_path / "release"
    args = {"dir": str(held), "release": str(release)}
    doomed = None
    try:
        with trio.fail_after(160):
            async with open_ray_runner(
                [str(TOOLS / "cluster.py")], address=cluster.address, **_options(tmp_path)
            ) as rr:
                assert len(rr.nodes) == 2
                with _ClusterMark():
                    doomed = cluster.add_node(**NODE_ARGS)  # on the main thread: it sets a signal handler
                added = await rr.add_nodes()
                assert [n.node_id for n in added] == [doomed.node_id]
                assert await rr.add_nodes() == []
                results: dict[str, ToolResult] = {}
                ended = {f"hold-{i}": trio.Event() for i in range(6)}

                async def one(call_id: str) -> None:
                    results[call_id] = await rr.call_tool("hold", args, tool_call_id=call_id, timeout=90)
                    ended[call_id].set()

                async with trio.open_nursery() as nursery:
                    for call_id in ended:
                        nursery.start_soon(one, call_id)
                    markers = await _markers(held, 6)
                    on_doomed = {c for c, m in markers.items() if m["node"] == doomed.node_id}
                    assert len(on_doomed) == 2, markers  # least loaded: two calls per node
                    await trio.to_thread.run_sync(lambda: cluster.remove_node(doomed))
                    with trio.fail_after(60):
                        for call_id in on_doomed:
                            await ended[call_id].wait()
                    # Only now: the other calls were still running when the node died.
                    assert set(results) == on_doomed
                    release.touch()
                crashed = {c for c, r in results.items() if r.is_error}
                assert crashed == on_doomed
                for call_id in on_doomed:
                    result = results[call_id]
                    assert result.kind == "crashed", result
                    assert doomed.node_id in result.text
                    assert result.details["node_id"] == doomed.node_id
                    assert "not run again" in result.text
                    # The node's workers went with their host (the lifeline), their children too.
                    assert _alive([markers[call_id]["pid"], markers[call_id]["child"]]) == []
                for call_id in set(results) - on_doomed:
                    assert results[call_id].text == "released", results[call_id]
                assert len(list(held.glob("*.json"))) == 6  # no call ran again elsewhere
                # The batch goes on elsewhere: later calls avoid the dead node.
                after = [await rr.call_tool("where", {"text": str(i)}, timeout=30) for i in range(6)]
                assert [r.text for r in after] == [str(i) for i in range(6)]
                assert doomed.node_id not in {r.details["node"] for r in after}
                assert [n.alive for n in rr.nodes if n.node_id == doomed.node_id] == [False]
    finally:
        if doomed is not None and doomed in cluster.worker_nodes:
            await trio.to_thread.run_sync(lambda: cluster.remove_node(doomed))


HOSTILE = [
    ("segfault", {}, None),
    ("busy_loop", {}, TIMEOUT),
    ("daemon", {"seconds": 3600}, None),
]


def _shape(result: ToolResult) -> tuple[Any, ...]:
    error = result.error
    return (result.kind, error and error.signal, error and error.rung, error and error.exit_code)


@pytest.mark.timeout(200)
async def test_hostile_tools_behave_on_a_node_as_locally(cluster: Any, tmp_path: Path) -> None:
    local: dict[str, ToolResult] = {}
    with trio.fail_after(60):
        async with make_runner(TOOLS / "hostile.py", grace=GRACE) as runner:
            for tool, args, timeout in HOSTILE:
                local[tool] = await runner.call_tool(tool, args, timeout=timeout)
    with trio.fail_after(150):
        async with open_ray_runner([str(TOOLS / "hostile.py")], address=cluster.address, **_options(tmp_path)) as rr:
            for tool, args, timeout in HOSTILE:
                # Each on every node: the head's and the other's.
                for _ in rr.nodes:
                    remote = await rr.call_tool(tool, args, timeout=timeout)
                    assert _shape(remote) == _shape(local[tool]), (tool, remote, local[tool])
                    if tool == "daemon":
                        assert _alive(remote.details["pids"]) == []
                    if tool == "segfault":
                        assert "Fatal Python error: Segmentation fault" in (remote.error.stderr_tail or "")
            assert sorted(n.calls for n in rr.nodes) == [3, 3]
    assert _shape(local["segfault"]) == ("crashed", "SIGSEGV", None, None)
    assert local["busy_loop"].kind == "timeout"
    assert local["daemon"].kind is None


@pytest.mark.timeout(150)
async def test_an_existing_connection_is_used_and_left_open(cluster: Any, tmp_path: Path) -> None:
    ray = _ray()
    await trio.to_thread.run_sync(lambda: ray.init(address=cluster.address, logging_level="WARNING"))
    try:
        with trio.fail_after(120):
            options = _options(tmp_path)
            async with open_ray_runner([str(TOOLS / "cluster.py")], **options) as rr:
                result = await rr.call_tool("where", {"text": "shipped"}, timeout=30)
                assert result.text == "shipped", result
        assert ray.is_initialized()
    finally:
        await trio.to_thread.run_sync(ray.shutdown)


async def test_without_ray_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(RayMissing, match=r"pip install 'xcsh-run\[ray\]'"):
        async with open_ray_runner([str(TOOLS / "cluster.py")]):
            pass


def test_tool_paths_are_staged_apart_and_checked(tmp_path: Path) -> None:
    from xcsh_run.ray._launch import stage_tools

    for name in ("a", "b"):
        (tmp_path / name / "tools").mkdir(parents=True)
        (tmp_path / name / "tools" / "t.py").write_text(f"# {name}")
    staged = stage_tools(["a/tools/t.py", "b/tools"], None, str(tmp_path))
    try:
        assert staged.temporary == staged.working_dir
        assert staged.node_paths == ["0/t.py", "1/tools"]
        root = Path(staged.working_dir)
        assert (root / "0" / "t.py").read_text() == "# a"
        assert (root / "1" / "tools" / "t.py").read_text() == "# b"
    finally:
        shutil.rmtree(staged.working_dir)
    shipped = stage_tools(["a/tools/t.py"], "a", str(tmp_path))
    assert (shipped.working_dir, shipped.node_paths, shipped.temporary) == (str(tmp_path / "a"), ["tools/t.py"], None)
    with pytest.raises(ValueError, match="outside working_dir"):
        stage_tools(["b/tools"], "a", str(tmp_path))
    with pytest.raises(ValueError, match="does not exist"):
        stage_tools(["c.py"], None, str(tmp_path))
    with pytest.raises(ValueError, match="give tool_paths, or a working_dir"):
        stage_tools([], None, str(tmp_path))


def test_import_runner_does_not_import_ray() -> None:
    """Ray is the `ray` extra: the library and the CLI import it only when a Ray runner opens."""
    import subprocess

    code = (
        "import sys, xcsh_run, xcsh_run._cli.run, xcsh_run.ray._launch, xcsh_run.ray._actor; "
        "xcsh_run.open_runner; print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


async def test_options_that_mean_nothing_on_a_node_are_refused() -> None:
    with pytest.raises(ValueError, match="does not take env, home"):
        async with open_ray_runner([str(TOOLS / "cluster.py")], env={}, home="/"):
            pass
    with pytest.raises(ValueError, match="grace must be a positive number"):
        async with open_ray_runner([str(TOOLS / "cluster.py")], grace=-1):
            pass
    with pytest.raises(ValueError, match="max_calls_per_node must be a positive integer"):
        async with open_ray_runner([str(TOOLS / "cluster.py")], max_calls_per_node=0):
            pass


async def test_the_working_dir_is_given_as_itself_not_in_the_runtime_env() -> None:
    _ray()
    with pytest.raises(ValueError, match=r"as working_dir=\.\.\., not inside runtime_env"):
        async with open_ray_runner([str(TOOLS / "cluster.py")], runtime_env={"working_dir": "."}):
            pass
