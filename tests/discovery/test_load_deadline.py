"""The load deadline measures the module, not the machine: CPU time for a loop, a wall bound for a block.

A module that loops at import is caught by the load timeout, which counts the
CPU time of the loading worker's tree (a loop in a child of the module too);
one that blocks (sleep, a pipe, a socket) uses no CPU and is caught by the
longer wall bound, each with its own message; a worker that gets no CPU for
longer than the load timeout (stopped: what a starved machine does to it)
still loads, on every start path (Popen, spare, fork server, Bun). Last, the
load test: concurrent `xcsh-run TOOL` CLIs on an empty cache while two CPU
hogs take the machine's cores; every one answers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import pytest
import trio

from tests._support.clis import Outcome, collect, describe
from tests._support.leftovers import cgroup_dirs, remove_cgroups, workdirs
from tests._support.scale import STRESS, scaled
from tests.conftest import BROKEN, TOOLS, XCSH_RUN, make_runner, marked_processes
from xcsh_run import ConfigError, RunnerConfig
from xcsh_run._pool.load_deadline import LoadDeadline

# A load's CPU budget in these tests: a worker's start and the import of a
# small module use a tenth of it, a loop reaches it within a second or two.
LOAD_TIMEOUT = 1.0
# The wall bound for the blocking modules: short, so that each case takes seconds.
WALL = 2.5
# The same for a TypeScript module: Bun's first import in a worker (transpiling the
# module and the loader's package stand-ins) costs about 0.3 s of CPU on these
# machines, more than a tenth of WALL, the share the "almost no CPU" verdict allows; and on a
# loaded CI run a Bun worker was not even ready within 5 s ("no worker was ready to import").
WALL_JS = 10.0
# How long a stopped worker gets no CPU at all: well past LOAD_TIMEOUT of wall time.
STOPPED = 2.5

HEALTHY_PY = """
from xcsh_run.pi import CustomTool

def factory(api):
    return [CustomTool(name="{name}", label="{name}", description="d",
                       parameters={{"type": "object"}}, execute=lambda *a: "{name} answered")]
"""
BLOCKERS = {
    "sleep": "import time\ntime.sleep(600)\n",
    "pipe": "import os\nr, w = os.pipe()\nos.read(r, 1)\n",
    "socket": "import socket\na, b = socket.socketpair()\na.recv(1)\n",
}
# Stops itself at import once it has said where: from outside it is a worker the machine gives no CPU.
STOPS_PY = """
import os, signal
with open({pidfile!r}, "w") as f:
    f.write(str(os.getpid()))
os.kill(os.getpid(), signal.SIGSTOP)
"""
STOPS_TS = """
import {{ writeFileSync }} from "node:fs";
writeFileSync({pidfile!r}, String(process.pid));
process.kill(process.pid, "SIGSTOP");
export default (pi) => ({{
  name: "woke", description: "d", parameters: pi.typebox.Type.Object({{}}),
  execute: async () => "woke answered",
}});
"""
# The loop runs in a child; the module itself only waits for it: its own /proc CPU stays near zero.
LOOPING_CHILD_PY = """
import subprocess, sys
subprocess.run([sys.executable, "-c", "while True: pass"])
"""


def tool(folder: Path, stem: str, body: str = "", name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.py"
    path.write_text(body + HEALTHY_PY.format(name=name or stem))
    return path


def test_the_wall_bound_defaults_to_six_load_timeouts_and_at_least_a_minute() -> None:
    assert RunnerConfig().load_wall_bound == 60.0
    assert RunnerConfig(load_timeout=1).load_wall_bound == 60.0
    assert RunnerConfig(load_timeout=30).load_wall_bound == 180.0
    assert RunnerConfig(load_timeout=1, load_wall_timeout=2.5).load_wall_bound == 2.5
    with pytest.raises(ConfigError, match=r"load_wall_timeout .* must be at least load_timeout"):
        RunnerConfig(load_timeout=10, load_wall_timeout=5)
    with pytest.raises(ConfigError, match="load_wall_timeout must be a positive number"):
        RunnerConfig(load_wall_timeout=0)


def test_each_way_a_load_runs_out_of_time_has_its_own_words() -> None:
    class Worker:
        def __init__(self, cpu: float) -> None:
            self.cpu = cpu

        def cpu_seconds(self) -> float:
            return self.cpu

    def told(expired: Literal["cpu", "wall"], worker: Worker | None, used: float) -> str:
        deadline = LoadDeadline(10, 60)
        deadline.expired, deadline.worker, deadline.used = expired, worker, used  # type: ignore[assignment]
        return deadline.message("m.py")

    assert told("cpu", Worker(10.2), 10.2) == (
        "m.py: the module used 10.2 s of CPU importing (load timeout 10 s of CPU); it may loop at import time "
        "(raise --load-timeout if it really needs longer)"
    )
    assert "while using almost no CPU (0.12 s); it may block at import time (stdin, network, sleep)" in told(
        "wall", Worker(0.12), 0.12
    )
    busy = told("wall", Worker(8), 8.0)
    assert "in 60 s of wall time, using 8.0 s of CPU (load timeout 10 s); the machine may be overloaded" in busy
    assert "almost no CPU" not in busy
    assert "no worker was ready to import the module within 60 s of wall time" in told("wall", None, 0.0)
    # The wall bound is never shorter than the CPU bound: a call's own longer timeout keeps its worth.
    assert LoadDeadline(90, 60).wall_seconds == 90


@pytest.mark.parametrize("forkserver", [False, True], ids=["popen", "forkserver"])
async def test_a_loop_at_import_is_caught_by_the_cpu_deadline(forkserver: bool) -> None:
    with trio.fail_after(40):
        start = trio.current_time()
        async with make_runner(
            BROKEN / "loops.py", TOOLS / "basic.py", load_timeout=LOAD_TIMEOUT, load_wall_timeout=30,
            forkserver=forkserver,
        ) as runner:  # fmt: skip
            elapsed = trio.current_time() - start
            errors = runner.errors
            ok = await runner.call_tool("add", {"a": 2, "b": 3})
    (error,) = errors
    assert ok.text == "5"
    assert "s of CPU importing (load timeout 1 s of CPU); it may loop at import time" in error.message, error.message
    used = float(error.message.split(" used ")[1].split(" s of CPU")[0])
    assert used >= LOAD_TIMEOUT, error.message
    # Caught by its CPU, long before the wall bound (30 s) would have caught it.
    assert elapsed < 20, elapsed


async def test_a_loop_in_a_child_of_the_module_counts_against_the_load_timeout(tmp_path: Path) -> None:
    module = tool(tmp_path / "tools", "spawns_a_loop", LOOPING_CHILD_PY)
    with trio.fail_after(40):
        async with make_runner(module, load_timeout=LOAD_TIMEOUT, load_wall_timeout=30) as runner:
            reliable = runner.statistics().reliable_boundary
            errors = runner.errors
    if not reliable:
        pytest.skip("no cgroup boundary: only the worker's own CPU is counted, and the module itself only waits")
    (error,) = errors
    # The module's own process used almost nothing: only the tree's count (its cgroup) reaches the budget.
    assert "s of CPU importing (load timeout 1 s of CPU)" in error.message, error.message


@pytest.mark.parametrize("how", sorted(BLOCKERS))
async def test_a_module_blocked_at_import_is_caught_by_the_wall_bound(tmp_path: Path, how: str) -> None:
    blocked = tool(tmp_path / "tools", f"blocks_on_{how}", BLOCKERS[how])
    with trio.fail_after(30):
        start = trio.current_time()
        async with make_runner(
            blocked, TOOLS / "basic.py", load_timeout=LOAD_TIMEOUT, load_wall_timeout=WALL
        ) as runner:
            elapsed = trio.current_time() - start
            errors = runner.errors
            ok = await runner.call_tool("add", {"a": 1})
    (error,) = errors
    assert ok.text == "1"
    assert (
        f"did not finish importing in {WALL:g} s of wall time while using almost no CPU" in error.message
        and "it may block at import time (stdin, network, sleep)" in error.message
    ), error.message
    assert WALL <= elapsed < WALL + 10, elapsed


async def test_a_js_module_blocked_at_import_is_caught_by_the_wall_bound(tmp_path: Path, bun: str) -> None:
    blocked = tmp_path / "tools" / "sleeps.ts"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("await Bun.sleep(600_000);\nexport default () => [];\n")
    with trio.fail_after(30):
        async with make_runner(blocked, load_timeout=LOAD_TIMEOUT, load_wall_timeout=WALL_JS) as runner:
            errors = runner.errors
    (error,) = errors
    assert f"did not finish importing in {WALL_JS:g} s of wall time while using almost no CPU" in error.message, (
        error.message
    )


def _state(pidfile: Path) -> str:
    """The state letter of the process whose pid is in ``pidfile`` ("" before it wrote it)."""
    try:
        with open(f"/proc/{int(pidfile.read_text())}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError):
        return ""


async def _wake_when_stopped(pidfile: Path) -> float:
    """Wait for the module to stop itself, leave it stopped ``STOPPED`` s, SIGCONT it; how long it was stopped."""
    # Another process's state has no event to wait on: it is looked at until seen (the caller's deadline bounds it).
    while _state(pidfile) != "T":  # noqa: ASYNC110
        await trio.sleep(0.01)
    pid = int(pidfile.read_text())
    stopped_at = trio.current_time()
    await trio.sleep(STOPPED)  # the scenario itself: a worker that gets no CPU for this long
    os.kill(pid, signal.SIGCONT)
    return trio.current_time() - stopped_at


@pytest.mark.parametrize(
    ("path", "options"),
    [
        ("popen", {}),
        ("spare", {"spare_workers": 1}),
        ("forkserver", {"forkserver": True}),
        ("bun", {}),
    ],
    ids=["popen", "spare", "forkserver", "bun"],
)
async def test_a_worker_that_gets_no_cpu_for_longer_than_the_load_timeout_still_loads(
    tmp_path: Path, path: str, options: dict[str, object], request: pytest.FixtureRequest
) -> None:
    pidfile = tmp_path / "worker.pid"
    if path == "bun":
        request.getfixturevalue("bun")
        module = tmp_path / "tools" / "woke.ts"
        module.parent.mkdir(parents=True)
        module.write_text(STOPS_TS.format(pidfile=str(pidfile)))
    else:
        module = tool(tmp_path / "tools", "woke", STOPS_PY.format(pidfile=str(pidfile)))
    stopped: list[float] = []
    with trio.fail_after(40):
        async with trio.open_nursery() as nursery:

            async def wake() -> None:
                stopped.append(await _wake_when_stopped(pidfile))

            nursery.start_soon(wake)
            async with make_runner(module, load_timeout=LOAD_TIMEOUT, load_wall_timeout=30, **options) as runner:
                errors = runner.errors
                result = await runner.call_tool("woke")
    # The positive control: it really was stopped for longer than its load timeout, in wall time.
    assert stopped and stopped[0] >= STOPPED > LOAD_TIMEOUT
    assert errors == [], [e.message for e in errors]
    assert result.text == "woke answered"


# --- the load test: concurrent CLIs on an empty cache, with the CPUs taken -------------------------------

PROCESSES = scaled(10, 40)
HOGS = 2
# 40 cold CLIs beside 2 hogs took 9-21 s on 2 cores. The deadline is for a hang, not for slowness.
DEADLINE = 240.0
# Small, so that the starvation below is many times it in wall time: a worker's start and the import use
# 0.05-0.25 s of CPU (fork server, Popen, Bun), and with a deadline in wall time 2 to 22 of 40 of these
# CLIs ended "did not finish loading within 1 s (load timeout)"; with one in CPU time none does.
CLI_LOAD_TIMEOUT = 1
HOG = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def _run_all(tools: Path, env: dict[str, str], deadline: float) -> list[Outcome]:
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [
                XCSH_RUN,
                "quick",
                "--args",
                f'{{"n": {i}}}',
                "--tools",
                str(tools),
                "--load-timeout",
                str(CLI_LOAD_TIMEOUT),
            ],
            env=env,
            # Each in its own session, as each agent's shell starts it: with the scheduler's
            # autogroups, a session is what gets a fair share, and a CLI must get only its own.
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    return collect(procs, started, deadline)


QUICK_PY = """
import msgspec
from xcsh_run.pi import CustomTool


class Params(msgspec.Struct):
    n: int


def factory(api):
    return [CustomTool(name="quick", label="quick", description="imports in milliseconds",
                       parameters=Params, execute=lambda call_id, params, *rest: f"quick {params.n}")]
"""


@pytest.mark.stress
@pytest.mark.slow
@pytest.mark.timeout(DEADLINE + 120)
def test_concurrent_cold_clis_beside_cpu_hogs_all_answer(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "quick.py").write_text(QUICK_PY)
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = {
        **os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmpdir), "PYTHONFAULTHANDLER": "1",
    }  # fmt: skip
    # Each hog ends by itself after the deadline too, should the finally below never run.
    hogs = [
        subprocess.Popen(
            [sys.executable, "-c", HOG.format(seconds=DEADLINE + 60)], stdin=subprocess.DEVNULL, start_new_session=True
        )
        for _ in range(HOGS)
    ]
    try:
        # The hogs are running (a busy loop is runnable from its first instruction): the cores are taken.
        for hog in hogs:
            assert hog.poll() is None
        started = time.monotonic()
        outcomes = _run_all(tools, env, DEADLINE)
        wall = time.monotonic() - started
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    pids = [o.pid for o in outcomes]
    left_processes = marked_processes()
    for pid, _ in left_processes:  # so that one hang fails this test only
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    left_cgroups = cgroup_dirs(pids)
    remove_cgroups(left_cgroups)
    answered = [o for o in outcomes if not o.hung and o.returncode == 0 and o.stdout == f"quick {o.index}\n"]
    wrong = [o for o in outcomes if o not in answered or o.stderr]
    print(
        f"{PROCESSES} cold CLIs beside {HOGS} CPU hogs{' (stress)' if STRESS else ''}: "
        f"{len(answered)} answered in {wall:.1f} s (slowest {max(o.seconds for o in outcomes):.1f} s)"
    )
    assert not wrong, f"{len(wrong)} of {PROCESSES} CLIs did not answer cleanly\n\n" + "\n\n".join(
        describe(o) for o in wrong[:10]
    )
    assert not left_processes, left_processes
    assert not left_cgroups, left_cgroups
    assert not workdirs(tmpdir), workdirs(tmpdir)
    assert any((tmp_path / "cache").rglob("*")), "nothing was cached: the CLIs never shared the cold cache"
