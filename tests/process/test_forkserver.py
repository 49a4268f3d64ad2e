"""The fork server (``RunnerConfig.forkserver``): forked workers are each in their own cgroup and sandbox.

The rest of the suite runs with it on under ``XCSH_RUN_FORKSERVER=1``; these
tests turn it on themselves and check what only a forked worker could get wrong.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests.conftest import TOOLS, make_runner
from xcsh_run import SandboxPolicy
from xcsh_run._process import forkserver

pytestmark = pytest.mark.skipif(not forkserver.forkserver_supported(), reason="the fork server needs Linux 6.15+")

PROBE = """
import contextlib
import os
from xcsh_run.pi import CustomTool

OBJ = {"type": "object"}


def factory(api):
    def where(tcid, params, on_update, ctx, signal_):
        with open("/proc/self/cgroup") as f:
            cgroup = f.read()
        return {"content": [{"type": "text", "text": "ok"}],
                "details": {"pid": os.getpid(), "ppid": os.getppid(), "cgroup": cgroup, "sid": os.getsid(0)}}

    def read(tcid, params, on_update, ctx, signal_):
        try:
            with open(params["path"]) as f:
                return f.read()
        except OSError as exc:
            return f"denied: {exc.errno}"

    def wait(tcid, params, on_update, ctx, signal_):
        on_update({"content": [{"type": "text", "text": "running"}]})
        signal_.wait(params["seconds"])
        return "waited"

    return [CustomTool(name=fn.__name__ + "_" + NAME, description="probe", parameters=OBJ, execute=fn)
            for fn in (where, read, wait)]
"""


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every uid can read (pytest's are not): a strict worker may run as nobody."""
    path = Path(tempfile.mkdtemp())
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _probe_module(folder: Path, name: str) -> Path:
    folder.mkdir(mode=0o755)
    (folder.parent / "outside.txt").write_text("outside")
    (folder / "secret.txt").write_text(f"secret of {name}")
    path = folder / f"probe_{name}.py"
    path.write_text(f"NAME = {name!r}\n" + PROBE)
    return path


def _zygotes() -> list[psutil.Process]:
    return [c for c in psutil.Process().children() if "--zygote" in c.cmdline()]


async def test_a_forked_worker_is_in_its_own_cgroup_and_session(shared: Path) -> None:
    module = _probe_module(shared / "a", "a")
    with trio.fail_after(30):
        async with make_runner(module, forkserver=True, discover_sources=False) as runner:
            first = await runner.call_tool("where_a", {})
            second = await runner.call_tool("where_a", {}, sandbox=SandboxPolicy(memory_mb=512))
    zygote_pids = {first.details["ppid"]}
    assert os.getpid() not in zygote_pids, "the worker was started with Popen, not forked"
    for got in (first.details, second.details):
        cgroup = got["cgroup"].strip().rpartition("/")
        assert cgroup[0].rpartition("/")[2].startswith(f"xcsh-run.{os.getpid()}."), got
        assert cgroup[2].startswith("w"), got
        assert got["sid"] == got["pid"], "a forked worker leads its own session"
    assert first.details["cgroup"] != second.details["cgroup"]


async def test_two_policies_each_get_their_own_sandbox(shared: Path) -> None:
    a = _probe_module(shared / "a", "a")
    b = _probe_module(shared / "b", "b")
    strict = SandboxPolicy(level="strict")
    with trio.fail_after(30):
        async with make_runner(
            a, b, forkserver=True, discover_sources=False, cwd=shared / "a", tool_policies={"read_b": strict}
        ) as runner:
            assert len(_zygotes()) == 2, "one zygote per policy"
            # strict, forked after the fork: Landlock names b's folder, not a's.
            own = await runner.call_tool("read_b", {"path": str(b.parent / "secret.txt")})
            other = await runner.call_tool("read_b", {"path": str(a.parent.parent / "outside.txt")})
            # contained: no Landlock at all.
            contained = await runner.call_tool("read_a", {"path": str(b.parent / "secret.txt")})
            where = await runner.call_tool("where_b", {})
    assert own.text == "secret of b", own
    assert other.text.startswith("denied: 13") or other.text.startswith("denied: 2"), other
    assert contained.text == "secret of b", contained
    assert where.details["ppid"] != os.getpid()


async def test_strict_denies_the_other_modules_folder(shared: Path) -> None:
    a = _probe_module(shared / "a", "a")
    b = _probe_module(shared / "b", "b")
    strict = SandboxPolicy(level="strict")
    with trio.fail_after(30):
        async with make_runner(
            a, b, forkserver=True, discover_sources=False, cwd=shared / "a", sandbox=strict
        ) as runner:
            mine = await runner.call_tool("read_b", {"path": str(b.parent / "secret.txt")})
            theirs = await runner.call_tool("read_b", {"path": str(shared / "outside.txt")})
            a_reads_b = await runner.call_tool("read_a", {"path": str(b.parent / "secret.txt")})
    assert mine.text == "secret of b"
    assert theirs.text == "denied: 13", theirs
    assert a_reads_b.text == "denied: 13", a_reads_b


async def test_killing_the_zygote_mid_call_hangs_nothing(shared: Path) -> None:
    module = _probe_module(shared / "a", "a")
    running = trio.Event()
    results: list[Any] = []
    with trio.fail_after(30):
        async with make_runner(module, forkserver=True, discover_sources=False) as runner:

            async def call() -> None:
                results.append(await runner.call_tool("wait_a", {"seconds": 0.5}, on_update=lambda _: running.set()))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await running.wait()
                (zygote,) = _zygotes()
                zygote.send_signal(signal.SIGKILL)
                # A second worker is needed while the first one runs: Popen stands in.
                second = await runner.call_tool("where_a", {})
            third = await runner.call_tool("where_a", {})
    assert results[0].text == "waited", results
    assert second.details["ppid"] == os.getpid(), "started with Popen once the zygote died"
    assert not third.is_error


@pytest.mark.parametrize(
    ("tool", "args", "exit_code", "signal_name"),
    [("os_exit", {"code": 3}, 3, None), ("segfault", {}, None, "SIGSEGV"), ("sigkill_self", {}, None, "SIGKILL")],
)
@pytest.mark.parametrize("forked", [False, True])
async def test_exit_status_is_the_real_one(
    tool: str, args: dict[str, Any], exit_code: int | None, signal_name: str | None, forked: bool
) -> None:
    with trio.fail_after(30):
        async with make_runner(TOOLS / "hostile.py", forkserver=forked) as runner:
            result = await runner.call_tool(tool, args, timeout=10)
            assert len(_zygotes()) == (1 if forked else 0)
    assert result.kind == "crashed", result
    assert result.error.exit_code == exit_code
    assert result.error.signal == signal_name


async def test_the_exit_status_survives_the_zygote_or_is_reported_unknown() -> None:
    with trio.fail_after(30):
        async with make_runner(TOOLS / "hostile.py", forkserver=True) as runner:
            await runner.call_tool("sleeper", {"seconds": 0})
            (zygote,) = _zygotes()
            zygote.send_signal(signal.SIGKILL)
            zygote.wait(5)
            # The worker was forked by the dead zygote: init reaped it, the pidfd keeps its status.
            result = await runner.call_tool("os_exit", {"code": 3}, timeout=10)
    assert result.kind == "crashed", result
    # Its status is read from its pidfd once init has reaped it; an init that
    # reaps late (or never, in a container) leaves it unknown, and it is said so:
    # never a made-up "exited with code 0".
    if result.error.exit_code is None:
        assert "its exit status could not be read" in result.text, result.text
    else:
        assert result.error.exit_code == 3


def _pidfds() -> dict[int, bool]:
    """This process's pidfds, and whether each is inheritable."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") == "anon_inode:[pidfd]":
                found[int(name)] = os.get_inheritable(int(name))
    return found


async def test_no_pidfd_outlives_the_runner_nor_reaches_a_program_the_host_runs() -> None:
    before = set(_pidfds())
    with trio.fail_after(60):
        async with make_runner(TOOLS / "hostile.py", forkserver=True) as runner:
            assert (await runner.call_tool("sleeper", {"seconds": 0})).kind is None
            assert runner.statistics().workers_forked == 1
            # Received from the zygote, the worker's pidfd is close-on-exec like Popen's.
            assert not any(inheritable for fd, inheritable in _pidfds().items() if fd not in before)
            (zygote,) = _zygotes()
            zygote.send_signal(signal.SIGKILL)
            zygote.wait(5)
            for _ in range(2):  # each crash starts a new worker: with Popen, the zygote retired for good
                assert (await runner.call_tool("os_exit", {"code": 3}, timeout=10)).kind == "crashed"
            assert not _zygotes()
    assert set(_pidfds()) <= before
