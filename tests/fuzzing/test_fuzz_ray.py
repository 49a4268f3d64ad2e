"""Fuzz campaigns sharded over a real 2-node Ray cluster started on this machine (``xcsh_run.fuzz._sharded``).

The cluster is tests/scale/test_ray.py's fixture (its processes carry a mark of
their own; the module's teardown stops it and checks none is left). The
shards' workers get the session's mark through ``worker_env``, so the
autouse ``no_survivors`` check sees any worker a shard leaves on a node.

The acceptance campaign is 50,000 examples: every near-miss of
``examples/buggy_tool.py`` runs, at 7 to 12 ms a call on this 2-core machine,
so 50,000 took 606 s locally (with other tests running) and 154 s over two
local nodes, far past a test's budget. It runs at that size under
``XCSH_RUN_STRESS=1`` (``make stress``) and at 1,000 examples otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import trio

from tests._support.scale import scaled
from tests.conftest import ROOT, XCSH_RUN
from tests.scale.test_ray import MARK_VAR, TEST_MARK, cluster
from xcsh_run import FuzzFailure, FuzzReport, fuzz_tool
from xcsh_run.fuzz._sharded import Campaign, Shard, _retarget, fuzz_tool_ray, merge, plan, shard_seed

__all__ = ["cluster"]  # the fixture, shared with tests/scale/test_ray.py

BUGGY = str(ROOT / "examples" / "buggy_tool.py")
EXAMPLES = scaled(1_000, 50_000)
TIMEOUT = 0.5
SEED = 7
CRASH = {"text": ""}
HANG = {"text": "0", "repeat": -1}


def _found(report: FuzzReport) -> list[tuple[str, str, str]]:
    # A timeout before any worker was ready, and one the judge marks flaky (it did
    # not happen again when retried), is this shared machine's load, not the tool:
    # it may come and go, in one shard and not in the local run.
    return sorted(
        (f.property, f.problem, json.dumps(f.arguments, sort_keys=True)) for f in _steady(report) if f.arguments
    )


async def _campaign(address: str, examples: int, seed: int = SEED, **more: Any) -> Campaign:
    return await fuzz_tool_ray(
        "buggy_echo",
        tool_paths=[BUGGY],
        address=address,
        examples=examples,
        seed=seed,
        timeout=TIMEOUT,
        max_timeouts=20,
        grace=0.5,
        worker_env={MARK_VAR: TEST_MARK},
        init_options={"logging_level": "WARNING"},
        **more,
    )


def _steady(report: FuzzReport) -> list[Any]:
    return [f for f in report.failures if not f.flaky and "before its worker was ready" not in f.message]


def _check_buggy(report: FuzzReport) -> None:
    found = _found(report)
    assert ("valid inputs", "crashed", json.dumps(CRASH)) in found, report.summary()
    assert ("valid inputs", "timeout", json.dumps(HANG, sort_keys=True)) in found, report.summary()
    (cleanup,) = [p for p in report.properties if p.name == "no process left behind"]
    assert cleanup.failures == [] and cleanup.error is None


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.stress  # make stress runs it at the acceptance campaign's 50,000 examples
@pytest.mark.timeout(scaled(400, 1800))
async def test_a_sharded_campaign_finds_the_local_runs_reproducers(cluster: Any) -> None:
    """Over both nodes, the same shrunk reproducers as one local run with the same seed (EXAMPLES: see above)."""
    with trio.fail_after(scaled(180, 1200)):
        local = await fuzz_tool(
            "buggy_echo", tool_paths=[BUGGY], examples=EXAMPLES, seed=SEED, timeout=TIMEOUT, max_timeouts=20, grace=0.5
        )
    with trio.fail_after(scaled(180, 1200)):
        campaign = await _campaign(cluster.address, EXAMPLES)
    report = campaign.report
    _check_buggy(local)
    _check_buggy(report)
    assert _found(report) == _found(local), (report.summary(), local.summary())
    # The reproducers name the tool file as given, not the nodes' staged copy.
    assert all(BUGGY in r for r in report.reproducers), report.reproducers
    # Both nodes ran shards, and every example of the campaign was run (near-misses never stop early).
    assert sorted(campaign.nodes) == sorted(n.node_id for n in [cluster.head_node, *cluster.worker_nodes])
    assert [s.examples for s in campaign.shards] == plan(EXAMPLES, 2)
    assert all(s.error is None for s in campaign.shards)
    (near,) = [p for p in report.properties if p.name == "near-misses"]
    assert near.calls == EXAMPLES and near.failures == []


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_the_same_seed_replays_the_same_campaign(cluster: Any) -> None:
    with trio.fail_after(250):
        first = await _campaign(cluster.address, 200, seed=11, shards=3)
        again = await _campaign(cluster.address, 200, seed=11, shards=3)
    assert [(s.index, s.seed, s.examples, s.node_id) for s in first.shards] == [
        (s.index, s.seed, s.examples, s.node_id) for s in again.shards
    ]
    assert [s.seed for s in first.shards] == [11, shard_seed(11, 1), shard_seed(11, 2)]
    # The same failures, but for timeouts the judge marks flaky (they did not happen again when
    # retried): those are this shared machine's load, not the campaign, and may come and go.
    assert _steady(first.report) == _steady(again.report)
    _check_buggy(first.report)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_cli_writes_one_junit_report(cluster: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    junit = out / "fuzz.xml"
    args = ["fuzz", "buggy_echo", "--tools", BUGGY, "--ray", cluster.address, "--examples", "100", "--seed", "3"]
    args += ["--timeout", str(TIMEOUT), "--junit", str(junit)]
    proc = subprocess.run(
        [XCSH_RUN, *args], cwd=tmp_path, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("campaign: 2 shards on 2 Ray node(s) (seed 3, --shards 2)\n"), proc.stdout
    assert 'reproduce: xcsh-run buggy_echo --args \'{"text": ""}\' --tools ' + BUGGY in proc.stdout
    assert list(out.iterdir()) == [junit]  # one report
    root = ET.parse(junit).getroot()
    (suite,) = root.findall("testsuite")
    failures = suite.findall("testcase/failure")
    assert {f.get("type") for f in failures} >= {"crashed", "timeout"}
    assert f'xcsh-run buggy_echo --args \'{{"text": ""}}\' --tools {BUGGY}' in {f.get("message") for f in failures}
    assert {p.get("name"): p.get("value") for p in suite.findall("properties/property")}["seed"] == "3"


@pytest.mark.timeout(60)
def test_without_ray_the_cli_says_how_to_get_it(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['ray'] = None; sys.argv = ['xcsh-run', *sys.argv[1:]]; "
        "from xcsh_run._cli.run import main; main()"
    )
    args = ["fuzz", "buggy_echo", "--tools", BUGGY, "--ray", "auto", "--examples", "5"]
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True, timeout=50)
    assert proc.returncode == 2, proc
    assert "pip install 'xcsh-run[ray]'" in proc.stderr, proc.stderr
    assert proc.stdout == ""


@pytest.mark.timeout(60)
def test_shards_needs_ray(tmp_path: Path) -> None:
    proc = subprocess.run(
        [XCSH_RUN, "fuzz", "buggy_echo", "--tools", BUGGY, "--shards", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=50,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2 and "--shards needs --ray" in proc.stderr, proc


def test_shards_and_their_seeds_are_a_function_of_the_campaign() -> None:
    assert plan(10, 3) == [4, 3, 3]
    assert plan(2, 5) == [1, 1]
    assert sum(plan(50_000, 7)) == 50_000
    assert shard_seed(5, 0) == 5
    seeds = [shard_seed(5, i) for i in range(100)]
    assert len(set(seeds)) == 100 and seeds == [shard_seed(5, i) for i in range(100)]
    assert shard_seed(6, 1) != shard_seed(5, 1)


def _failure(arguments: dict[str, Any], reproducer: str) -> FuzzFailure:
    result: dict[str, Any] = {
        "content": [],
        "details": None,
        "is_error": True,
        "error": {"kind": "crashed", "message": "exited", "exit_code": 3},
    }
    return FuzzFailure("t", "valid inputs", "crashed", "exited", arguments, reproducer, result=result)


def test_the_merge_keeps_the_smallest_reproducer_first_in_shard_order() -> None:
    from xcsh_run import PropertyReport

    def report(*failures: FuzzFailure) -> FuzzReport:
        return FuzzReport(seed=1, examples=10, properties=[PropertyReport("t", "valid inputs", 5, list(failures))])

    big = _failure({"text": "long"}, 'xcsh-run t --args \'{"text": "long"}\' --tools 0/t.py')
    small_a = _failure({"text": "a"}, 'xcsh-run t --args \'{"text": "a"}\' --tools 0/t.py')
    small_b = _failure({"text": "b"}, 'xcsh-run t --args \'{"text": "b"}\' --tools 0/t.py')
    shards = [Shard(i, i, 5, "n") for i in range(3)]
    died = Shard(3, 3, 5, "node-x", error="shard 3 on Ray node node-x did not finish")
    merged = merge(
        "t",
        1,
        20,
        [(shards[0], report(big)), (shards[1], report(small_a)), (shards[2], report(small_b)), (died, None)],
        {"0/t.py": "tools/t.py"},
    )
    (valid, near, cleanup) = merged.properties
    assert [f.arguments for f in valid.failures] == [{"text": "a"}]  # one key, the smallest, first among equals
    assert valid.failures[0].reproducer == 'xcsh-run t --args \'{"text": "a"}\' --tools tools/t.py'
    assert valid.calls == 15
    # A shard that did not finish is an error of every property, naming its node.
    assert all("node-x" in (p.error or "") for p in (valid, near, cleanup))
    assert merged.exit_code == 1
    assert _retarget("xcsh-run t --tools 1/x.py", {"0/t.py": "t.py"}) == "xcsh-run t --tools 1/x.py"


def test_ray_options_are_checked_before_connecting() -> None:
    with pytest.raises(ValueError, match="examples must be at least 1"):
        trio.run(lambda: fuzz_tool_ray("t", tool_paths=[BUGGY], examples=0))
    with pytest.raises(ValueError, match="shards must be at least 1"):
        trio.run(lambda: fuzz_tool_ray("t", tool_paths=[BUGGY], shards=0))
    assert os.path.exists(BUGGY)
