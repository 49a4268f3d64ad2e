"""Load: many `xcsh-run` CLI processes at once, sharing one initially empty cache.

Each round starts ``PROCESSES`` CLIs together, each calling ``add`` from a tools
folder, with one ``XDG_CACHE_HOME`` for all (the first round finds it empty:
every process probes, imports and writes the cache at the same moment) and
one ``TMPDIR`` for all. Every process must exit 0 with its own sum within the
round's deadline, and each round must leave nothing: no process (checked
after every round, not only by the autouse fixture at the end), no
``xcsh-run.<cli pid>.*`` cgroup, no workdir.

A CLI still running at the deadline has hung: it gets SIGABRT with
``PYTHONFAULTHANDLER`` set, so its stderr carries every thread's Python stack,
and the failure message shows that, its process tree and its output.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests._support.clis import Outcome, collect, describe
from tests._support.leftovers import cgroup_dirs, remove_cgroups, workdirs
from tests._support.scale import scaled
from tests.conftest import DAEMON_MODE, TOOLS, XCSH_RUN, marked_processes

PROCESSES = scaled(30, 30)
ROUNDS = scaled(2, 10)
# A cold CLI costs about a second of CPU (interpreter, imports, probe, two
# workers); 30 of them on 2 loaded cores take 15-40 s. The deadline is for a
# hang, not for slowness.
ROUND_DEADLINE = 150.0


def _run_round(tools: Path, env: dict[str, str], round_no: int, deadline: float) -> list[Outcome]:
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [XCSH_RUN, "add", "--args", f'{{"a": {i}, "b": {round_no}}}', "--tools", str(tools)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    return collect(procs, started, deadline)


@pytest.mark.stress
@pytest.mark.slow
@pytest.mark.timeout(ROUNDS * (ROUND_DEADLINE + 30) + 60)
def test_concurrent_cli_processes_with_a_shared_cold_cache(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "basic.py").write_text((TOOLS / "basic.py").read_text())
    cache = tmp_path / "shared-cache"  # created by the CLIs themselves, concurrently
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "TMPDIR": str(tmpdir), "PYTHONFAULTHANDLER": "1"}
    slowest: list[float] = []
    for round_no in range(ROUNDS):
        outcomes = _run_round(tools, env, round_no, ROUND_DEADLINE)
        pids = [o.pid for o in outcomes]
        left_processes = marked_processes()
        for pid, _ in left_processes:  # so that one hang fails this test only
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        left_cgroups = cgroup_dirs(pids)
        remove_cgroups(left_cgroups)
        # Through the suite's daemon, the workers stay warm after their calls, workdirs and all.
        left_workdirs = workdirs(tmpdir) if not DAEMON_MODE else []

        hung = [o for o in outcomes if o.hung]
        wrong = [
            o
            for o in outcomes
            if not o.hung and (o.returncode != 0 or o.stdout != f"{o.index + round_no}\n" or o.stderr != "")
        ]
        problems = []
        if hung:
            problems.append(
                f"{len(hung)} of {PROCESSES} CLIs still running after {ROUND_DEADLINE:.0f} s "
                "(killed with SIGABRT: their Python stacks are in their stderr below)"
            )
        if wrong:
            problems.append(f"{len(wrong)} of {PROCESSES} CLIs ended wrongly (exit code, output, or stderr)")
        if left_processes:
            problems.append(f"processes left behind: {left_processes}")
        if left_cgroups:
            problems.append(f"cgroups left behind: {left_cgroups}")
        if left_workdirs:
            problems.append(f"workdirs left behind in {tmpdir}: {left_workdirs}")
        if problems:
            details = "\n\n".join(describe(o) for o in (hung + wrong)[:10])
            pytest.fail(f"round {round_no + 1} of {ROUNDS}: " + "; ".join(problems) + "\n\n" + details)
        slowest.append(max(o.seconds for o in outcomes))
    # The cache was really shared: the CLIs wrote it (an empty cache dir would mean it was never used).
    assert any(cache.rglob("*")), f"nothing was cached in {cache}"
    print(f"{ROUNDS} rounds of {PROCESSES} CLIs; each round's slowest: {', '.join(f'{s:.1f} s' for s in slowest)}")
