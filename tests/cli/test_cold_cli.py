"""The cold `xcsh-run`: the processes a command starts, counted, with the module cache warm and cold.

The CLI runs as a real process. Process starts are seen from inside it by an
audit hook (PEP 578): every way Python starts a process (``subprocess``,
``os.fork``, ``os.posix_spawn``, ``os.exec*``, ``os.system``, ...) raises an
audited event first, including a library's (``ctypes.util.find_library``
running ``ldconfig``). Where strace works, a second test counts them from
outside as well, which also sees a process started from C.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import XCSH_RUN
from tests.discovery.test_discovery import imported, write_tool

# The CLI as its console script runs it, with an audit hook installed first.
# The hook appends one line per process start; the file is opened only then.
LAUNCHER = r"""
import os, sys
EVENTS = {"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.exec", "os.system",
          "pty.spawn"}
log = os.environ["XCSH_RUN_SPAWN_LOG"]
def hook(event, args):
    if event in EVENTS:
        argv = args[1] if event in ("subprocess.Popen", "os.posix_spawn", "os.exec") else args
        with open(log, "a") as f:
            f.write(repr((event, [str(a) for a in argv] if isinstance(argv, (list, tuple)) else str(argv))) + "\n")
sys.addaudithook(hook)
modules_log = os.environ.get("XCSH_RUN_MODULES_LOG")
if modules_log:
    import atexit
    # Registered first, so it runs last: every module the command imported, up to its exit.
    atexit.register(lambda: open(modules_log, "w").write("\n".join(sorted(sys.modules))))
sys.argv = ["xcsh-run", *sys.argv[1:]]
from xcsh_run._cli.run import main
main()
"""


def counted(
    project: Path, tmp_path: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], list[tuple[str, list[str]]]]:
    """Run ``xcsh-run ARGS`` in ``project``; its result and every process it started, in order."""
    log = tmp_path / "spawned.log"
    log.write_text("")
    env = {**os.environ, "XCSH_RUN_SPAWN_LOG": str(log)}
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *args], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    return proc, [ast.literal_eval(line) for line in log.read_text().splitlines()]


def is_worker(argv: list[str]) -> bool:
    return argv[1:4] == ["-I", "-m", "xcsh_run.worker"]


@pytest.fixture
def import_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "imports.log"
    log.write_text("")
    monkeypatch.setenv("XCSH_RUN_IMPORT_LOG", str(log))
    return log


@pytest.fixture
def project(tmp_path: Path, import_log: Path) -> Path:
    folder = tmp_path / "project"
    (folder / ".git").mkdir(parents=True)
    write_tool(folder / ".xcsh" / "tools", "greetings", "greet", "wave", label="greetings")
    write_tool(Path(os.environ["HOME"]) / ".codex" / "tools", "later", "later", label="later")
    return folder


def test_a_cached_list_or_describe_starts_no_process(project: Path, tmp_path: Path) -> None:
    first, spawned = counted(project, tmp_path, "list", "--json")
    assert first.returncode == 0, first.stderr
    assert sum(is_worker(argv) for _, argv in spawned) == 2  # the hook sees process starts: one per module
    cached, spawned = counted(project, tmp_path, "list", "--json")
    assert cached.returncode == 0, cached.stderr
    assert spawned == []  # no worker, no ldconfig, nothing
    assert json.loads(cached.stdout) == json.loads(first.stdout)
    described, spawned = counted(project, tmp_path, "describe", "wave")
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout)["name"] == "wave"
    assert spawned == []


@pytest.mark.parametrize("cache", ["warm", "cold"])
def test_a_one_shot_call_starts_exactly_one_worker(project: Path, tmp_path: Path, cache: str) -> None:
    if cache == "warm":
        assert counted(project, tmp_path, "list")[0].returncode == 0
    else:
        # With nothing cached every module loads, each in a worker: leave one.
        shutil.rmtree(Path(os.environ["HOME"]) / ".codex")
    for sandbox in ("contained", "none"):
        proc, spawned = counted(project, tmp_path, "wave", "--args", "{}", "--sandbox", sandbox)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "greetings\n"
        # The spare started with the runner runs the call; nothing refills it.
        assert [event for event, _ in spawned] == ["subprocess.Popen"], spawned
        assert is_worker(spawned[0][1]), spawned


def test_a_cached_run_notices_an_earlier_module_that_changed(project: Path, tmp_path: Path, import_log: Path) -> None:
    """The cache says `later` (a Codex module) defines it; a module before it now does too, unseen by stat."""
    assert counted(project, tmp_path, "list")[0].returncode == 0
    proc, _ = counted(project, tmp_path, "later")
    assert proc.stdout == "later\n"
    module = project / ".xcsh" / "tools" / "greetings.py"
    before = module.stat()
    # Same length and mtime: only the content says it changed.
    module.write_text(module.read_text().replace("'greet', 'wave'", "'later', 'wavy'"))
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert module.stat().st_size == before.st_size
    import_log.write_text("")
    proc, spawned = counted(project, tmp_path, "later")
    assert proc.stdout == "greetings\n", proc.stderr  # the earlier module wins, as a full load says
    assert imported(import_log) == ["greetings"]
    assert sum(is_worker(argv) for _, argv in spawned) == 1
    listing = json.loads(counted(project, tmp_path, "list", "--json")[0].stdout)
    (later,) = [t for t in listing["tools"] if t["name"] == "later"]
    assert later["module"] == str(module)


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["wave", "--args", "{}"], ["list"], ["fuzz", "wave", "--examples", "2", "--seed", "1"]],
    ids=["version", "call", "list", "fuzz"],
)
def test_only_fuzz_imports_hypothesis(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """Hypothesis is a dependency, for the fuzzer alone: no other command pays for importing it."""
    log = tmp_path / "modules.log"
    monkeypatch.setenv("XCSH_RUN_MODULES_LOG", str(log))
    proc, _ = counted(project, tmp_path, *argv)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hypothesis = [name for name in log.read_text().splitlines() if name.split(".")[0] == "hypothesis"]
    if argv[0] == "fuzz":
        assert "hypothesis" in hypothesis  # the log sees what a command imports
    else:
        assert hypothesis == [], hypothesis


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    probe = subprocess.run(["strace", "-f", "-qq", "-o", os.devnull, "true"], capture_output=True, timeout=30)
    return probe.returncode == 0  # ptrace may be refused in a container


@pytest.mark.skipif(not _strace_works(), reason="strace is not installed or cannot trace here")
def test_a_cached_list_starts_no_process_seen_by_strace(project: Path, tmp_path: Path) -> None:
    """From outside, so that a fork from C (no audit event) would be seen too."""
    assert subprocess.run([XCSH_RUN, "list"], cwd=project, capture_output=True, timeout=60).returncode == 0
    trace = tmp_path / "trace"
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=execve,fork,vfork,clone,clone3", "-o", str(trace), XCSH_RUN, "list"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    calls = [line.split(None, 1)[1] for line in trace.read_text().splitlines() if "resumed>" not in line]
    execs = [c for c in calls if c.startswith("execve(")]
    # Threads (trio's, for blocking file reads) are clones with CLONE_THREAD; anything else is a process.
    processes = [c for c in calls if c.startswith(("fork(", "vfork(", "clone")) and "CLONE_THREAD" not in c]
    assert len(execs) == 1 and XCSH_RUN in execs[0], execs  # the command itself
    assert processes == []
