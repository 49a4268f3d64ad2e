"""Workdirs: named after their host, swept when that host is dead, and removable whatever a tool left in them.

``remove_workdir`` must survive trees a tool built to be hard to remove: deeper
than Python's recursion limit, with paths longer than PATH_MAX, symlinks out
of the tree, directories chmod-ed to 0. The big trees are built on tmpfs when
there is one (on this project's VMs, ext4 with ``discard`` takes about 1 ms per
mkdir and per rmdir, which is the filesystem's cost, not the code's).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import select
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from tests._support.scale import scaled
from tests.conftest import make_runner
from xcsh_run._process.workdir import make_workdir, remove_workdir, sweep_stale_workdirs

NOBODY = 65534
IS_ROOT = os.geteuid() == 0


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """An empty directory on tmpfs if there is one (else under tmp_path), removed afterwards."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        path = Path(tempfile.mkdtemp(prefix="xcsh-run-test-", dir=shm))
    else:
        path = tmp_path / "fast"
        path.mkdir()
    try:
        yield path
    finally:
        # Not remove_workdir: a test of it that failed must not also break the cleanup.
        subprocess.run(["chmod", "-R", "u+rwx", str(path)], capture_output=True, timeout=120)
        subprocess.run(["rm", "-rf", str(path)], capture_output=True, timeout=120)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every tree, which the tree's symlinks point at: it must survive."""
    path = tmp_path / "outside"
    (path / "sub").mkdir(parents=True)
    (path / "keep.txt").write_text("keep")
    (path / "sub" / "keep.txt").write_text("keep")
    return path


def assert_intact(outside: Path) -> None:
    assert (outside / "keep.txt").read_text() == "keep"
    assert (outside / "sub" / "keep.txt").read_text() == "keep"
    assert os.stat(outside).st_mode & 0o777 == 0o755


def build_nested(top: Path, depth: int, outside: Path, *, name: str = "d") -> None:
    """``depth`` nested folders under ``top``, each with a file and two symlinks out of the tree.

    Built relative to a directory fd: the paths get far longer than PATH_MAX.
    """
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
            os.symlink(outside, "to_dir", dir_fd=fd)
            os.symlink(outside / "keep.txt", "to_file", dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@contextlib.contextmanager
def fd_headroom(spare: int) -> Iterator[None]:
    """Lower RLIMIT_NOFILE to ``spare`` fds above the highest open one: a walk that kept an fd per level fails."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + spare, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.stress
@pytest.mark.parametrize("depth", [1_100, scaled(20_000, 100_000)])
def test_deep_tree_is_removed_and_symlink_targets_survive(fast_dir: Path, outside: Path, depth: int) -> None:
    top = fast_dir / "w"
    build_nested(top, depth, outside)
    before = open_fds()
    with fd_headroom(16):
        ok = remove_workdir(top, timeout=scaled(60, 300))
    assert ok
    assert not top.exists()
    assert open_fds() == before
    assert_intact(outside)


def test_paths_far_beyond_path_max_do_not_matter(fast_dir: Path, outside: Path) -> None:
    top = fast_dir / "w"
    build_nested(top, 1_100, outside, name="n" * 200)  # a path of about 220,000 characters
    assert remove_workdir(top, timeout=60)
    assert not top.exists()
    assert_intact(outside)


def test_symlinked_workdir_removes_the_link_not_the_target(fast_dir: Path, outside: Path) -> None:
    link = fast_dir / "w"
    link.symlink_to(outside, target_is_directory=True)
    assert remove_workdir(link)
    assert not link.is_symlink()
    assert_intact(outside)


def test_missing_workdir_is_already_removed(fast_dir: Path) -> None:
    assert remove_workdir(fast_dir / "never-made")
    assert remove_workdir(fast_dir / "no-parent" / "never-made")


def build_locked(top: Path, outside: Path) -> None:
    """A tree whose directories a tool chmod-ed to 0, read-only, or not searchable."""
    for mode in (0o000, 0o500, 0o600, 0o100):
        d = top / f"mode{mode:03o}"
        (d / "inner").mkdir(parents=True)
        (d / "file").write_text("x")
        (d / "inner" / "file").write_text("x")
        (d / "link").symlink_to(outside)
        os.chmod(d / "inner", mode)
        os.chmod(d, mode)


def test_chmod_000_directories_are_removed(fast_dir: Path, outside: Path) -> None:
    top = fast_dir / "w"
    (top / "home").mkdir(parents=True)
    build_locked(top, outside)
    os.chmod(top, 0)  # the workdir itself, too
    assert remove_workdir(top)
    assert not top.exists()
    assert_intact(outside)


def run_as(uid: int, action: Callable[[], int], timeout: float) -> int:
    """``action()``'s return value, computed in a forked child that became ``uid`` (its exit status carries it)."""
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() with threads (pytest's faulthandler
        # watchdog); the child only makes system calls, then _exit()s.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status only
        code = 99
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            code = action()
        finally:
            os._exit(code)
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"the child running as uid {uid} did not finish within {timeout} s")
    waited = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(waited[1])


@pytest.mark.skipif(not IS_ROOT, reason="root runs it as nobody; any other user already ran the test above as itself")
def test_chmod_000_directories_are_removed_by_an_unprivileged_owner(fast_dir: Path, outside: Path) -> None:
    """As root, modes bind nothing: the same removal runs as ``nobody``, owner of the tree, as a host would be."""
    os.chmod(fast_dir, 0o755)
    base = fast_dir / "nobody"
    base.mkdir()
    top = base / "w"
    top.mkdir()
    build_locked(top, outside)
    os.chmod(top, 0)
    for path in [base, top, *sorted(top.rglob("*"))]:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)

    def remove() -> int:
        try:
            os.listdir(top)
            return 4  # as nobody the modes should bind
        except PermissionError:
            return 0 if remove_workdir(top) else 1

    code = run_as(NOBODY, remove, timeout=60)
    assert code == 0, "4: the modes did not bind as nobody; 1: remove_workdir returned False"
    assert not top.exists()
    assert_intact(outside)


def test_deadline_leaves_the_rest_and_a_later_call_finishes(fast_dir: Path, outside: Path) -> None:
    top = fast_dir / "w"
    build_nested(top, 2_000, outside)
    start = time.monotonic()
    assert remove_workdir(top, timeout=0) is False
    assert time.monotonic() - start < 1.0
    assert top.is_dir()
    assert remove_workdir(top, timeout=60)
    assert not top.exists()


@pytest.mark.stress
def test_deadline_midway_stops_within_the_deadline(fast_dir: Path, outside: Path) -> None:
    top = fast_dir / "w"
    build_nested(top, scaled(20_000, 50_000), outside)
    start = time.monotonic()
    done = remove_workdir(top, timeout=0.05)
    elapsed = time.monotonic() - start
    # A fast machine may finish in time; either way the call returns close to its deadline.
    assert done is not top.exists()
    assert elapsed < 0.05 + 0.5, elapsed
    assert remove_workdir(top, timeout=120)
    assert_intact(outside)


def test_never_raises(fast_dir: Path) -> None:
    assert remove_workdir("/") is False
    assert remove_workdir(fast_dir / ("x" * 300) / "y") in (True, False)  # ENAMETOOLONG: no exception


# --- names and the stale sweep -------------------------------------------------------------


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait(timeout=10)
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    return proc.pid


def stale(base: Path, pid: int, outside: Path) -> Path:
    path = base / f"xcsh-run-w{pid}-abc{pid}"
    (path / "home").mkdir(parents=True)
    (path / "tmp" / "deep" / "er").mkdir(parents=True)
    (path / "tmp" / "deep" / "file").write_text("x")
    (path / "tmp" / "out").symlink_to(outside)
    os.chmod(path / "tmp" / "deep", 0)
    return path


@pytest.fixture
def own_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tempfile's directory for this test only: what the host makes (and sweeps) lands here."""
    path = tmp_path / "tmpdir"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def test_workdir_name_carries_the_host_pid(own_tempdir: Path) -> None:
    workdir = make_workdir()
    try:
        assert workdir.parent == own_tempdir
        assert re.fullmatch(rf"xcsh-run-w{os.getpid()}-[a-z0-9_]+", workdir.name), workdir.name
        assert sorted(p.name for p in workdir.iterdir()) == ["home", "tmp"]
        assert workdir.stat().st_mode & 0o777 == 0o700
    finally:
        assert remove_workdir(workdir)


def test_sweep_removes_dead_hosts_workdirs_only(own_tempdir: Path, outside: Path) -> None:
    dead = stale(own_tempdir, dead_pid(), outside)
    live = stale(own_tempdir, 1, outside)  # init is always alive
    ours = make_workdir()
    not_ours = stale(own_tempdir, dead_pid(), outside)
    if IS_ROOT:
        os.chown(not_ours, NOBODY, NOBODY)
    old_style = own_tempdir / "xcsh-run-wab12cd_9"  # before names carried the pid: whose, nobody knows
    old_style.mkdir()
    other = own_tempdir / "unrelated-999999999-x"
    other.mkdir()
    # A symlink that looks like a dead host's workdir: neither it nor its target is touched.
    link = own_tempdir / f"xcsh-run-w{dead_pid()}-link"
    link.symlink_to(outside, target_is_directory=True)

    left = sweep_stale_workdirs()

    assert left == []
    assert not dead.exists()
    assert live.is_dir() and ours.is_dir() and old_style.is_dir() and other.is_dir()
    assert not_ours.is_dir() is IS_ROOT  # only another uid's dir is kept (as non-root it is ours)
    assert link.is_symlink()
    assert_intact(outside)
    leftovers = {p.name for p in own_tempdir.iterdir()}
    assert not any("-swept-" in name for name in leftovers), leftovers
    for path in (live, not_ours, ours, old_style):
        if path.exists():
            assert remove_workdir(path)


def test_sweep_of_an_explicit_dir_and_of_nothing(tmp_path: Path, outside: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    for i in range(500):
        (base / f"entry-{i}").mkdir()
    start = time.monotonic()
    assert sweep_stale_workdirs(base) == []
    assert time.monotonic() - start < 1.0  # one listdir, no stat of unrelated entries
    assert len(os.listdir(base)) == 500
    dead = stale(base, dead_pid(), outside)
    assert sweep_stale_workdirs(base) == []
    assert not dead.exists()
    assert sweep_stale_workdirs(tmp_path / "missing") == []


def test_sweep_takes_over_a_sweep_whose_host_died(own_tempdir: Path, outside: Path) -> None:
    # What a sweeper that died mid-way leaves: its claim, under its (now dead) pid.
    claimed = stale(own_tempdir, dead_pid(), outside).rename(own_tempdir / f"xcsh-run-w{dead_pid()}-swept-0a1b2c3d")
    assert sweep_stale_workdirs() == []
    assert not claimed.exists()
    assert os.listdir(own_tempdir) == []


# --- through a real worker ------------------------------------------------------------------------

NESTING_TOOL = """
import os

from xcsh_run.pi import CustomTool


def factory(api):
    def nest(tool_call_id, params, on_update, ctx, signal):
        # Relative mkdir/chdir: the path outgrows PATH_MAX long before the end.
        os.chdir(os.environ["TMPDIR"])
        for _ in range(params["depth"]):
            os.mkdir("n" * 100)
            os.chdir("n" * 100)
            with open("f", "w") as f:
                f.write("x")
        os.chdir(os.environ["TMPDIR"])
        os.mkdir("locked")
        os.chmod("locked", 0)
        os.chmod(os.environ["HOME"], 0)
        return {"content": [{"type": "text", "text": "nested"}]}

    return [
        CustomTool(
            name="nest",
            description="Leaves deep folders in TMPDIR",
            parameters={"type": "object", "properties": {"depth": {"type": "integer"}}},
            execute=nest,
        )
    ]
"""


async def test_a_worker_that_leaves_1100_nested_folders_is_cleaned_up(tmp_path: Path, own_tempdir: Path) -> None:
    module = tmp_path / "nest.py"
    module.write_text(NESTING_TOOL)
    with trio.fail_after(60):
        async with make_runner(module) as runner:
            result = await runner.call_tool("nest", {"depth": 1_100}, timeout=50)
            assert result.text == "nested", result
            made = [p.name for p in own_tempdir.iterdir()]
    assert any(name.startswith(f"xcsh-run-w{os.getpid()}-") for name in made), made
    assert os.listdir(own_tempdir) == []
