"""Shared fixtures. The autouse ``no_survivors`` fixture fails any test that leaves a process,
a cgroup or a worker workdir behind.

Every process a test starts (workers, their children, setsid daemons, CLI
hosts) inherits ``XCSH_RUN_TEST_MARK`` from this process's environment, so a
scan of ``/proc/*/environ`` finds them wherever they were reparented to.

For tests that must survive a host that hangs (the lifecycle sweep, the fault
matrix), :func:`run_guarded` runs one ``trio.run`` in a thread under a
watchdog, and :func:`snapshot` / :func:`leaks_since` say what one run left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from xcsh_run import Runner, open_runner
from xcsh_run._discovery import bun as _bun
from xcsh_run._process.boundary import CgroupRoot
from xcsh_run._sandbox.policy import Probe
from xcsh_run._sandbox.policy import probe as host_probe
from xcsh_run.fuzz._leftovers import marked_processes as scan_marked

MARK = f"XCSH_RUN_TEST_MARK={uuid.uuid4().hex}"
os.environ["XCSH_RUN_TEST_MARK"] = MARK.split("=", 1)[1]
# The colour a CLI under test writes is the test's to choose (tests/cli/test_cli_progress_watch.py), not the shell's.
for _colour_variable in ("NO_COLOR", "FORCE_COLOR"):
    os.environ.pop(_colour_variable, None)

TESTS = Path(__file__).parent
FIXTURES = TESTS / "fixtures"  # the tools and other files the tests use, in one place
TOOLS = FIXTURES / "tools"
BROKEN = FIXTURES / "broken"
ROOT = TESTS.parent
XCSH_RUN = str(Path(sys.executable).parent / "xcsh-run")


def _machine() -> Probe:
    """What this machine's kernel can enforce, as the host probes it (uncached)."""
    root = CgroupRoot.create()
    try:
        return host_probe(
            None,
            cgroup_v2=root is not None,
            memory_cgroup=root is not None and root.memory is not None,
            pids_cgroup=root is not None and root.pids is not None,
        )
    finally:
        if root is not None:
            root.remove()


# Bun for the JavaScript tools' tests, found once, before each test's empty HOME and
# cache hide the default install dir: the runners and CLI hosts the tests start inherit it.
if not os.environ.get(_bun.BUN_ENV) and (_found := _bun.locate()) is not None:
    os.environ[_bun.BUN_ENV] = _found.bun
BUN = os.environ.get(_bun.BUN_ENV) or None


@pytest.fixture
def bun() -> str:
    """The Bun executable; a test of JS tools is skipped without one, except under CI=true where it fails."""
    if BUN is None or not os.access(BUN, os.X_OK):
        message = f"no Bun for the JavaScript tools' tests: {_bun.missing()}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return BUN


MACHINE = _machine()
needs_strict = pytest.mark.skipif(
    MACHINE.landlock_abi < 6 or not MACHINE.seccomp or MACHINE.arch != "x86_64",
    reason=f"strict needs Landlock ABI 6+ and seccomp on x86_64 (here: ABI {MACHINE.landlock_abi}, "
    f"seccomp {MACHINE.seccomp}, {MACHINE.arch})",
)


def marked_processes() -> list[tuple[int, str]]:
    """Live (non-zombie) processes carrying this session's mark, other than us (and the suite's daemon's, if on)."""
    name, value = MARK.split("=", 1)
    found = scan_marked(value, name)
    kept = daemon_tree({pid: ppid for pid, ppid, _ in found}) if DAEMON_MODE else set()
    return [(pid, cmd) for pid, _, cmd in found if pid not in kept]


# `XCSH_RUN_TEST_DAEMON=1` (make test's second pass of tests/cli): every `xcsh-run` a test starts
# goes through one daemon for the whole session, in a folder of its own. What that daemon keeps
# warm between tests (its hosts, their idle workers) is not a test's leftover; the session's end
# stops it and checks that nothing it ran survives it (pytest_sessionfinish).
DAEMON_MODE = os.environ.get("XCSH_RUN_TEST_DAEMON") == "1"
if DAEMON_MODE:
    os.environ["XCSH_RUN_DAEMON"] = "1"
    os.environ["XCSH_RUN_DAEMON_DIR"] = tempfile.mkdtemp(prefix="xcsh-run-d")


def daemon_tree(parents: dict[int, int]) -> set[int]:
    """The suite daemon's pid and its descendants among ``parents`` (pid -> ppid)."""
    from xcsh_run import _daemon

    try:
        state = _daemon.status()
    except (OSError, _daemon.DaemonError, _daemon.DaemonDirUnsafe):
        state = None
    if state is None or not isinstance(state.get("pid"), int):
        return set()
    tree = {state["pid"]}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return tree


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not DAEMON_MODE:
        return
    from xcsh_run import _daemon

    _daemon.stop()
    deadline = time.monotonic() + 30
    while marked_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = kill_marked()
    shutil.rmtree(os.environ["XCSH_RUN_DAEMON_DIR"], ignore_errors=True)
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nthe suite's daemon left processes behind: {left}", file=sys.stderr)


def own_cgroup_dirs() -> list[str]:
    """This process's runner cgroups (v2 boundaries, v1 memory and pids limits) still present."""
    found: list[str] = []
    mine = f"xcsh-run.{os.getpid()}."
    for hierarchy in ("unified", "memory", "pids"):
        # os.walk, not Path.glob("**"): other hosts on this machine (another
        # pytest) create and remove their cgroups while we walk, and glob lets
        # the FileNotFoundError of a vanished directory escape; os.walk skips it.
        for parent, dirs, _ in os.walk(Path("/sys/fs/cgroup") / hierarchy):
            found += [os.path.join(parent, d) for d in dirs if d.startswith(mine)]
            dirs[:] = [d for d in dirs if not d.startswith("xcsh-run.")]  # no runner cgroup nests another
    return sorted(found)


WORKDIR_PREFIX = "xcsh-run-w"

# Lines the sweep and fault tests add (iterations and time per phase); printed
# at the end of the session, passing or failing, by pytest_terminal_summary.
SUMMARY: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SUMMARY:
        terminalreporter.section("lifecycle sweep and fault matrix")
        for line in SUMMARY:
            terminalreporter.write_line(line)


def worker_workdirs() -> set[str]:
    """This process's worker workdirs (``xcsh-run-w*``) now present in the temp folder, by path.

    Earlier tests' leftovers are in this set too: compare a set taken before
    with one taken after, never the set itself with nothing.
    """
    base = tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return set()
    found = set()
    for name in names:
        if not name.startswith(WORKDIR_PREFIX):
            continue
        # ``xcsh-run-w<host pid>-<random>`` names its host: other hosts (another
        # pytest on this machine) make and remove theirs while ours run. The
        # older ``xcsh-run-w<random>`` cannot be told apart, so it counts.
        owner, dash, _ = name[len(WORKDIR_PREFIX) :].partition("-")
        if dash and owner.isdigit() and int(owner) != os.getpid():
            continue
        if os.path.isdir(os.path.join(base, name)):
            found.add(os.path.join(base, name))
    return found


def fd_count() -> int:
    """How many fds this process has open (the listing's own fd included, every time alike)."""
    return len(os.listdir("/proc/self/fd"))


def open_fds() -> dict[int, str]:
    """This process's open fds and what each points to (``pipe:[…]``, ``anon_inode:[pidfd]``, a path)."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd is gone by now
            found[int(entry)] = os.readlink(f"/proc/self/fd/{entry}")
    return found


@dataclass(frozen=True)
class Snapshot:
    """What the test process holds before a run: compared with :func:`leaks_since` after it."""

    fds: dict[int, str]
    workdirs: frozenset[str]


def snapshot() -> Snapshot:
    return Snapshot(open_fds(), frozenset(worker_workdirs()))


def leaks_since(before: Snapshot, *, clean: bool = True) -> list[str]:
    """What a run left behind since ``before``: processes, cgroups, workdirs, fds (empty if nothing).

    With ``clean``, left processes are killed and left workdirs removed, so
    that one leaky run does not make every later run of a sweep fail too.
    Leaked fds and cgroups cannot be cleaned from here (the host owns them).
    """
    problems: list[str] = []
    survivors = marked_processes()
    if survivors:
        problems.append(f"processes: {survivors}")
        if clean:
            kill_marked()
    cgroups = own_cgroup_dirs()
    if cgroups:
        problems.append(f"cgroups: {cgroups}")
    workdirs = sorted(worker_workdirs() - before.workdirs)
    if workdirs:
        problems.append(f"workdirs: {workdirs}")
        if clean:
            for path in workdirs:
                shutil.rmtree(path, ignore_errors=True)
    after = open_fds()
    # By count, as the brief's invariant; the listing names what is new, so a
    # leaked pipe or pidfd is recognisable in the report.
    if len(after) != len(before.fds):
        new = sorted(f"{fd}->{target}" for fd, target in after.items() if before.fds.get(fd) != target)
        problems.append(f"fds: {len(before.fds)} -> {len(after)} (new or changed: {new})")
    return problems


def kill_marked() -> list[tuple[int, str]]:
    """SIGKILL every live process carrying this session's mark; returns what was found."""
    survivors = marked_processes()
    for pid, _ in survivors:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return survivors


@dataclass
class Guarded:
    """How one :func:`run_guarded` went."""

    value: Any = None
    error: BaseException | None = None
    hung: bool = False  # the watchdog fired: trio.run did not return in time
    stuck: bool = False  # and it still had not returned after every marked process was killed
    dump: str = ""  # where it hung: trio's task tree and the blocked threads
    killed: list[tuple[int, str]] = field(default_factory=list)  # what the watchdog killed
    seconds: float = 0.0


def run_guarded(
    fn: Callable[..., Awaitable[Any]],
    *args: Any,
    timeout: float = 15.0,
    instruments: Sequence[trio.abc.Instrument] = (),
    after_kill: float = 5.0,
) -> Guarded:
    """``trio.run(fn, *args)`` in its own thread, under a watchdog.

    A host that hangs (a shielded wait that never ends, a thread blocked in
    ``Popen.wait``) cannot be interrupted from inside, and pytest-timeout would
    take the whole session down with it. So the run gets its own thread; if it
    has not returned after ``timeout`` seconds, the watchdog records where
    every task waits, SIGKILLs every marked process (which ends most hangs:
    they wait for a worker that will now exit) and waits ``after_kill`` more.
    A run that is still going after that is ``stuck``: its daemon thread is
    abandoned, and the caller should stop sweeping.
    """
    outcome = Guarded()
    tokens: list[trio.lowlevel.TrioToken] = []

    async def main() -> Any:
        tokens.append(trio.lowlevel.current_trio_token())
        return await fn(*args)

    def target() -> None:
        try:
            outcome.value = trio.run(main, instruments=list(instruments))
        except BaseException as exc:  # reported to the test, whatever it is
            outcome.error = exc

    start = time.monotonic()
    thread = threading.Thread(target=target, name="guarded-trio-run", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        outcome.hung = True
        outcome.dump = _where_it_hangs(tokens[0] if tokens else None, thread)
        outcome.killed = kill_marked()
        thread.join(after_kill)
        if thread.is_alive():
            outcome.stuck = True
            outcome.dump += "\n" + _where_it_hangs(tokens[0] if tokens else None, thread)
    outcome.seconds = time.monotonic() - start
    return outcome


def _where_it_hangs(token: trio.lowlevel.TrioToken | None, thread: threading.Thread) -> str:
    """trio's task tree with each task's innermost frames, and the stacks of threads in runner code."""
    lines: list[str] = []
    done = threading.Event()

    def walk() -> None:
        def visit(task: trio.lowlevel.Task, depth: int) -> None:
            # trio's own machinery (_core: nurseries, traps) says nothing about
            # where the host waits; the runner's frames and trio's API calls do.
            frames = [
                f"{_short(f.f_code.co_filename)}:{lineno} {f.f_code.co_name}"
                for f, lineno in task.iter_await_frames()
                if "/trio/_core/" not in f.f_code.co_filename
            ]
            lines.append("  " * depth + f"task {task.name}: " + " > ".join(frames[-4:]))
            for nursery in task.child_nurseries:
                for child in nursery.child_tasks:
                    visit(child, depth + 1)

        try:
            visit(trio.lowlevel.current_root_task(), 0)  # type: ignore[arg-type]
        finally:
            done.set()

    if token is not None:
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(walk)
            done.wait(1.0)
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        stack = traceback.extract_stack(frame)
        interesting = [s for s in stack if "/runner/" in s.filename or "subprocess" in s.filename]
        if ident == thread.ident or interesting:
            tail = (interesting or stack)[-3:]
            lines.append(f"thread {ident}: " + " > ".join(f"{_short(s.filename)}:{s.lineno} {s.name}" for s in tail))
    return "\n".join(lines)


def _short(filename: str) -> str:
    for marker in ("/runner/", "/worker/", "/tests/", "/trio/"):
        if marker in filename:
            return marker.strip("/") + "/" + filename.rsplit(marker, 1)[1]
    return os.path.basename(filename)


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test in an empty directory with an empty HOME and cache, so nothing stray is discovered."""
    work = tmp_path / "work"
    home = tmp_path / "home"
    work.mkdir()
    home.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def no_survivors() -> Iterator[None]:
    """Fail the test if any process, cgroup or worker workdir it made is still there afterwards."""
    # Only workdirs made during this test count: other tests' leftovers (and
    # other processes' workdirs in a shared /tmp) are already in this set.
    workdirs_before = worker_workdirs()
    yield
    survivors = kill_marked()
    assert not survivors, f"processes left behind: {survivors}"
    leftover = own_cgroup_dirs()
    assert not leftover, f"cgroups left behind: {leftover}"
    left_workdirs = sorted(worker_workdirs() - workdirs_before)
    for path in left_workdirs:
        shutil.rmtree(path, ignore_errors=True)  # so that one leak fails one test, not every later one
    assert not left_workdirs, f"worker workdirs left behind: {left_workdirs}"


# The SDK's HTTP client, run on trio, leaves its SSE readers' async
# generators to the garbage collector when it cancels its GET stream at exit
# (httpx2 / httpcore2 internals, not the server): their ResourceWarnings only,
# raised in a finalizer (so unraisable), or re-emitted as they are by a
# ``pytest.warns`` block the collection happened to run in.
SDK_HTTP_LEFTOVERS = [
    pytest.mark.filterwarnings(
        r"ignore:Exception ignored in. <async_generator object:pytest.PytestUnraisableExceptionWarning"
    ),
    pytest.mark.filterwarnings(r"ignore:Async generator 'http(x2|core2)\.:ResourceWarning"),
]


@pytest.fixture(params=["stdio", pytest.param("http", marks=SDK_HTTP_LEFTOVERS)])
def transport(request: pytest.FixtureRequest) -> str:
    """The MCP transport a client-level test runs over: each such test runs on both (tests/_support/mcp_clients.py)."""
    value: str = request.param
    return value


@asynccontextmanager
async def make_runner(*paths: Path | str, **options: Any) -> AsyncIterator[Runner]:
    options.setdefault("grace", 0.5)
    options.setdefault("load_timeout", 10.0)
    # No spare worker unless a test asks: counts of started workers stay exact.
    options.setdefault("spare_workers", 0)
    async with open_runner([str(p) for p in paths], **options) as runner:
        yield runner


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A git repository with repo_stats under .xcsh/tools and a few tracked files."""
    repo = tmp_path / "repo"
    (repo / ".xcsh" / "tools").mkdir(parents=True)
    (repo / ".xcsh" / "tools" / "repo_stats.py").write_text((ROOT / "examples" / "repo_stats.py").read_text())
    (repo / "pkg").mkdir()
    for name in ("a.py", "b.py", "notes.txt", "pkg/c.py"):
        (repo / name).write_text("x = 1\n")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "add", "a.py", "b.py", "notes.txt", "pkg/c.py"], cwd=repo, check=True, env=env)
    return repo
