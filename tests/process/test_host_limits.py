"""The host defends its own limits (xcsh_run._host.host_limits): the second line behind the sandbox's pid rules.

A tool at ``none`` has no pid rules, so it can do what the sandbox refuses at
``contained`` and ``strict``: change the host's limits. These tests let it,
against limits whose change cannot hurt the test process for the half second
the watch needs, and check that the host notices, puts the limit back, ends
that call with an error that says what happened, and answers the next call.
What could kill the host (a lowered CPU limit) runs in a host of its own, a
subprocess, so that a failure is that process's death, not pytest's.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
import trio

from tests._support.leftovers import cgroup_dirs, workdirs
from tests.conftest import TOOLS, XCSH_RUN, make_runner
from xcsh_run import SandboxPolicy
from xcsh_run._host.host_limits import HostLimits, Snapshot
from xcsh_run._process.boundary import CgroupRoot
from xcsh_run._process.workdir import sweep_stale_workdirs

NONE = SandboxPolicy(level="none")

LOWERING = """
    import ctypes, os, resource, time
    from xcsh_run.pi import CustomTool

    libc = ctypes.CDLL(None, use_errno=True)

    class Rlimit(ctypes.Structure):
        _fields_ = [("cur", ctypes.c_uint64), ("max", ctypes.c_uint64)]

    def factory(api):
        def lower(tcid, params, on_update, ctx, signal):
            new = Rlimit(params["soft"], params["hard"])
            rc = libc.prlimit64(params["pid"], params["which"], ctypes.byref(new), None)
            if rc != 0:
                return f"refused: errno {ctypes.get_errno()}"
            # Stays in the call until the host ends it (or 20 s pass).
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not signal.aborted:
                time.sleep(0.02)
            return "not stopped"

        def echo(tcid, params, on_update, ctx, signal):
            return "alive"

        return [CustomTool(name=fn.__name__, description=fn.__name__, parameters={"type": "object"}, execute=fn)
                for fn in (lower, echo)]
"""


def _module(tmp_path: Path) -> Path:
    path = tmp_path / "lowering.py"
    path.write_text(textwrap.dedent(LOWERING))
    return path


async def test_a_lowered_limit_is_restored_and_ends_the_call_that_could_have(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = max(256, soft - 7)  # still far above what the test process holds
    assert lowered < soft, "the test needs a NOFILE soft limit above 256"
    args = {"pid": os.getpid(), "which": int(resource.RLIMIT_NOFILE), "soft": lowered, "hard": hard}
    with trio.fail_after(60):
        async with make_runner(_module(tmp_path), sandbox=NONE) as runner:
            result = await runner.call_tool("lower", args, timeout=30)
            assert result.kind == "tool_error", result
            assert "RLIMIT_NOFILE" in result.text and "restored" in result.text, result.text
            assert result.error is not None and result.error.rung == "killed"
            assert resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)
            again = await runner.call_tool("echo", {}, timeout=30)
            assert again.text == "alive", again
    assert any(r.levelno == logging.ERROR and "RLIMIT_NOFILE" in r.getMessage() for r in caplog.records)


async def test_a_change_no_running_call_could_make_is_reported_and_ends_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The test process itself plays "another process of the host's uid", while a
    # contained call (which has the pid rules) runs: it is not blamed.
    which = resource.RLIMIT_MSGQUEUE
    soft, hard = resource.getrlimit(which)
    assert soft > 1
    with trio.fail_after(60):
        async with make_runner(_module(tmp_path)) as runner:
            reported = trio.Event()

            class Seen(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    if "no running call could have done it" in record.getMessage():
                        reported.set()  # the watch runs in a trio task of this thread

            seen = Seen()
            logging.getLogger("xcsh_run").addHandler(seen)
            resource.setrlimit(which, (soft - 1, hard))
            try:
                with trio.fail_after(10):
                    await reported.wait()
                assert resource.getrlimit(which) == (soft, hard)  # put back before the record was written
            finally:
                logging.getLogger("xcsh_run").removeHandler(seen)
                resource.setrlimit(which, (soft, hard))
            result = await runner.call_tool("echo", {}, timeout=30)
            assert result.text == "alive", result


def test_raised_limits_are_adopted_not_undone() -> None:
    which = resource.RLIMIT_CORE
    soft, hard = resource.getrlimit(which)
    if soft == hard:
        pytest.skip("RLIMIT_CORE's soft limit is already its hard limit")
    limits = HostLimits(Snapshot.take())
    try:
        resource.setrlimit(which, (hard, hard))
        assert limits.check() == []
        assert limits.snapshot.limits["RLIMIT_CORE"] == (hard, hard)
    finally:
        resource.setrlimit(which, (soft, hard))
    # Lowered back below the adopted value: now it counts, and is undone.
    changes = limits.check()
    assert [c.what.split()[0] for c in changes] == ["RLIMIT_CORE"] and changes[0].undone
    assert resource.getrlimit(which) == (hard, hard)
    resource.setrlimit(which, (soft, hard))


HOST = """
import os, resource, sys, time
import trio
from xcsh_run import SandboxPolicy, open_runner

async def busy(done):
    # The kernel checks a CPU limit on the ticks a process runs through: a host
    # that only slept in epoll could miss SIGXCPU for a while. This one keeps working.
    while not done.is_set():
        spin = time.process_time() + 0.005
        while time.process_time() < spin:
            pass
        await trio.sleep(0)

async def main():
    async with open_runner([sys.argv[1]], sandbox=SandboxPolicy(level="none"), spare_workers=0) as runner:
        deadline = time.process_time() + 1.5
        while time.process_time() < deadline:  # burn over a second of CPU, so 1 s is below what was used
            pass
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(busy, done)
            result = await runner.call_tool(
                "lower", {"pid": os.getpid(), "which": int(resource.RLIMIT_CPU), "soft": 1, "hard": hard}, timeout=30
            )
            done.set()
        print("RESULT", result.kind, result.text.replace("\\n", " "), flush=True)
        print("LIMIT", resource.getrlimit(resource.RLIMIT_CPU) == (resource.RLIM_INFINITY, hard), flush=True)
        print("NEXT", (await runner.call_tool("echo", {}, timeout=30)).text, flush=True)

trio.run(main)
"""


def test_a_lowered_cpu_limit_does_not_kill_the_host(tmp_path: Path) -> None:
    if resource.getrlimit(resource.RLIMIT_CPU)[0] != resource.RLIM_INFINITY:
        pytest.skip("the test process already has a CPU limit")
    script = tmp_path / "host.py"
    script.write_text(HOST)
    done = subprocess.run(
        [sys.executable, str(script), str(_module(tmp_path))],
        capture_output=True, text=True, timeout=90, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-3000:])
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["RESULT"].startswith("tool_error") and "RLIMIT_CPU" in lines["RESULT"], lines
    assert lines["LIMIT"] == "True" and lines["NEXT"] == "alive", lines


def test_a_host_killed_anyway_leaves_only_what_the_next_runner_sweeps(tmp_path: Path) -> None:
    """SIGKILL (a lowered hard CPU limit's) cannot be caught: the tree dies with the host, the rest is swept."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    proc = subprocess.Popen(
        [XCSH_RUN, "sleeper", "--stream", "--tools", str(TOOLS / "hostile.py")],
        env={**os.environ, "TMPDIR": str(tmpdir)},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["type"] == "update"  # the call runs in its worker
        workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert workers
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.communicate(timeout=10)  # and closes its pipes
    # The lifeline: the worker sees its host's end of the pipe close and kills its own tree.
    _, alive = psutil.wait_procs([psutil.Process(pid) for pid in workers if psutil.pid_exists(pid)], timeout=10)
    assert alive == []
    assert workdirs(tmpdir) != [] or cgroup_dirs([proc.pid]) != [], "nothing was left to sweep: the test proves nothing"
    assert sweep_stale_workdirs(tmpdir) == []
    assert workdirs(tmpdir) == []
    CgroupRoot.create().remove()  # a new runner's cgroup root sweeps dead hosts' cgroups as it is made
    assert cgroup_dirs([proc.pid]) == []
