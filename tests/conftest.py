"""Shared fixtures. The autouse ``no_survivors`` fixture fails any test that leaves a process behind.

Every process a test starts (workers, their children, setsid daemons, CLI
hosts) inherits ``XCSH_RUN_TEST_MARK`` from this process's environment, so a
scan of ``/proc/*/environ`` finds them wherever they were reparented to.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from runner import Runner, open_runner

MARK = f"XCSH_RUN_TEST_MARK={uuid.uuid4().hex}"
os.environ["XCSH_RUN_TEST_MARK"] = MARK.split("=", 1)[1]

TESTS = Path(__file__).parent
TOOLS = TESTS / "tools"
BROKEN = TESTS / "broken"
ROOT = TESTS.parent
XCSH_RUN = str(Path(sys.executable).parent / "xcsh-run")


def marked_processes() -> list[tuple[int, str]]:
    """Live (non-zombie) processes carrying this session's mark, other than us."""
    found = []
    needle = MARK.encode()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            if state in (b"Z", b"X"):
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append((int(entry), cmd))
    return found


def own_cgroup_dirs() -> list[str]:
    """This process's runner cgroups (v2 boundaries, v1 memory and pids limits) still present."""
    found: list[str] = []
    for hierarchy in ("unified", "memory", "pids"):
        base = Path("/sys/fs/cgroup") / hierarchy
        found += [str(p) for p in base.glob(f"**/xcsh-run.{os.getpid()}.*")]
    return sorted(found)


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
    """Fail the test if any process it started is still alive afterwards."""
    yield
    survivors = marked_processes()
    for pid, _ in survivors:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not survivors, f"processes left behind: {survivors}"
    leftover = own_cgroup_dirs()
    assert not leftover, f"cgroups left behind: {leftover}"


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
