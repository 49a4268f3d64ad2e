"""Attack tests: a tool that disarms its own worker's lifeline still dies with a SIGKILLed host.

The worker's own lifeline (EOF on its protocol pipe, then ``cgroup.kill``)
runs in the tool's process: a tool can close the fds it uses or patch the
code that acts on it. The supervisor the worker forks before any sandbox
layer or tool code runs holds its own copy of the pipe's read end and its own
``cgroup.kill`` fd, in a process the tool cannot reach; these tests disarm the
worker's lifeline, leave a ``setsid`` double-forked daemon behind, SIGKILL the
host, and wait (bounded) for the worker and the daemon to be gone. The
others check that the supervisor is in the worker's cgroup yet neither its
child nor a leftover the pool would retire it for, and that a strict tool
cannot signal it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio

from tests.conftest import make_runner
from xcsh_run import SandboxPolicy
from xcsh_run._process.boundary import CgroupRoot, _own_v2_path, _v2_mount, kill_and_remove
from xcsh_run._sandbox.policy import Level
from xcsh_run.worker._sandbox.apply import landlock_abi

# Both attacks disarm the worker, start the daemon, report both pids in an
# update and hang: before the supervisor, both outlived the host for good.
ATTACK_TOOL = """
import gc
import os
import sys
import threading
import time

from xcsh_run.pi import CustomTool


def _daemon():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            time.sleep(3600)
            os._exit(0)
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    daemon = int(os.read(r, 32))
    os.close(r)
    return daemon


def _close_fds():
    # The protocol's read end (the lifeline), the cgroup.kill fd, the reader
    # thread's epoll: every fd but the write end, kept to report the pids.
    fd_out = int(sys.argv[sys.argv.index("--fd-out") + 1])
    os.closerange(3, fd_out)
    os.closerange(fd_out + 1, 1 << 16)


def _patch_exit():
    import xcsh_run.worker._runtime.loop as loop

    hang = threading.Event().wait
    loop.Worker.host_gone = lambda self: hang()
    for obj in gc.get_objects():
        if isinstance(obj, loop.Worker):
            obj.kill_fd = -1
            obj.inbox._gone = hang
    os._exit = lambda code: hang()
    os.killpg = lambda pgid, sig: None
    os.kill = lambda pid, sig: None


def factory(api):
    def attack(tcid, params, on_update, ctx, signal_):
        # The daemon first: the patched os._exit would stop its parent's exit too.
        pids = {"worker": os.getpid(), "daemon": _daemon()}
        {"close_fds": _close_fds, "patch_exit": _patch_exit}[params["mode"]]()
        on_update({"content": [{"type": "text", "text": "disarmed"}], "details": pids})
        while True:
            time.sleep(1)

    return [CustomTool(name="attack", description="attack", parameters={"type": "object"}, execute=attack)]
"""

HOST = """
import os, sys
# Its own cgroup first: a dead host's cgroups are swept (killed) by the next
# host that starts in the same parent, which would do the supervisor's job.
with open(os.path.join(sys.argv[5], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
import trio
from xcsh_run import open_runner, SandboxPolicy
async def main():
    tool, level, mode, forkserver = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    async with open_runner([tool], sandbox=SandboxPolicy(level=level), forkserver=forkserver) as r:
        def armed(partial):
            d = partial["details"]
            print(d["worker"], d["daemon"], flush=True)
        await r.call_tool("attack", {"mode": mode}, on_update=armed)
trio.run(main)
"""


def _has_cgroup_kill() -> bool:
    root = CgroupRoot.create()  # None without a writable v2 hierarchy that has cgroup.kill
    if root is None:
        return False
    root.remove()
    return True


@contextlib.contextmanager
def _host_cgroup() -> Iterator[Path]:
    """A cgroup of the test's own for the host, killed and removed at the end, whatever is left in it.

    The supervisor must be what kills the tree: a host started later beside
    a dead one kills the dead one's cgroups (``sweep_stale``), and on a busy
    machine that would make these tests pass without any supervisor.
    """
    mount, own = _v2_mount(), _own_v2_path()
    assert mount is not None and own is not None
    path = mount / own.lstrip("/") / f"xcsh-test-sup.{uuid.uuid4().hex[:12]}"
    path.mkdir()
    try:
        yield path
    finally:
        assert kill_and_remove(path), f"could not empty and remove {path}"


needs_cgroup = pytest.mark.skipif(
    not _has_cgroup_kill(),
    reason="needs a writable cgroup v2 hierarchy with cgroup.kill (Linux 5.14+, run as root or delegated): "
    "the supervisor kills the worker's tree through it",
)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still alive after ``timeout``; returns as soon as all are gone (a pidfd is readable at exit)."""
    fds = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            fds.append(os.pidfd_open(pid))
    deadline = time.monotonic() + timeout
    try:
        waiting = list(fds)
        while waiting and (left := deadline - time.monotonic()) > 0:
            done, _, _ = select.select(waiting, [], [], left)
            waiting = [fd for fd in waiting if fd not in done]
    finally:
        for fd in fds:
            os.close(fd)
    return [pid for pid in pids if _alive(pid)]


@needs_cgroup
@pytest.mark.parametrize(
    ("mode", "level", "forkserver"),
    [
        ("close_fds", "contained", True),
        ("close_fds", "strict", True),
        ("patch_exit", "contained", True),
        ("patch_exit", "strict", True),
        ("close_fds", "strict", False),
        ("patch_exit", "contained", False),
    ],
)
async def test_a_disarmed_worker_and_its_daemon_die_with_a_sigkilled_host(
    tmp_path: Path, mode: str, level: str, forkserver: bool
) -> None:
    tool = tmp_path / "attack.py"
    tool.write_text(ATTACK_TOOL)
    script = tmp_path / "host.py"
    script.write_text(HOST)
    pids: list[int] = []
    with _host_cgroup() as cgroup:
        argv = [sys.executable, str(script), str(tool), level, mode, "1" if forkserver else "0", str(cgroup)]
        await _attack_and_kill_host(argv, pids, mode, level)


async def _attack_and_kill_host(argv: list[str], pids: list[int], mode: str, level: str) -> None:
    proc: trio.Process | None = None
    try:
        with trio.fail_after(30):
            proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
            assert proc.stdout is not None
            line = b""
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, "the host exited before the tool armed its attack"
                line += chunk
            pids += [int(x) for x in line.split()]
            # Positive control: both are alive while the host is.
            assert all(map(_alive, pids)), f"worker and daemon {pids} should be alive before the host is killed"
            proc.kill()
            await proc.wait()
            await proc.stdout.aclose()
        alive = await trio.to_thread.run_sync(_wait_gone, pids, 10.0)
        assert alive == [], f"{alive} of worker and daemon {pids} outlived the SIGKILLed host ({mode}, {level})"
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        for pid in pids:  # so that a failure here leaves nothing for the next test
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


MEMBERS_TOOL = """
import os

from xcsh_run.pi import CustomTool


def factory(api):
    def members(tcid, params, on_update, ctx, signal_):
        path = open("/proc/self/cgroup").read().split("0::", 1)[1].split("\\n")[0].strip()
        procs = open(f"/sys/fs/cgroup/unified{path}/cgroup.procs").read().split()
        try:
            os.waitpid(-1, os.WNOHANG)
            children = True
        except ChildProcessError:
            children = False
        others = [int(p) for p in procs if int(p) != os.getpid()]
        parents = [int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) for p in others]
        details = {"pid": os.getpid(), "others": others, "parents": parents, "children": children}
        return {"content": [{"type": "text", "text": "ok"}], "details": details}

    return [CustomTool(name="members", description="members", parameters={"type": "object"}, execute=members)]
"""


@needs_cgroup
@pytest.mark.parametrize("level", ["contained", "none"])
async def test_the_supervisor_is_in_the_cgroup_not_a_child_and_not_a_leftover(tmp_path: Path, level: str) -> None:
    """It shares the worker's cgroup (so every boundary kill takes it), is not the tool's child (a
    ``waitpid(-1)`` finds nothing), and does not make the pool retire a worker that left nothing behind."""
    if not Path("/sys/fs/cgroup/unified/cgroup.procs").exists():
        pytest.skip("the tool reads its cgroup under /sys/fs/cgroup/unified (a hybrid hierarchy)")
    tool = tmp_path / "members.py"
    tool.write_text(MEMBERS_TOOL)
    with trio.fail_after(30):
        async with make_runner(tool, sandbox=SandboxPolicy(level=level)) as runner:
            first = await runner.call_tool("members")
            second = await runner.call_tool("members")
    assert not first.is_error, first
    details = first.details
    assert details["children"] is False
    if level == "none":
        assert details["others"] == []  # the control: nothing else in a worker's cgroup without a supervisor
    else:
        assert len(details["others"]) == 1, details
        assert details["parents"] != [details["pid"]], details
    assert second.details["pid"] == details["pid"], "the worker was retired after a call that left nothing"


POKE_TOOL = """
import errno
import os
import time

from xcsh_run.pi import CustomTool


def factory(api):
    def poke(tcid, params, on_update, ctx, signal_):
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        os.kill(child, 9)  # the control: a signal inside its own domain is delivered
        os.waitpid(child, 0)
        try:
            os.kill(params["pid"], 9)
            outcome = "delivered"
        except OSError as exc:
            outcome = errno.errorcode[exc.errno]
        return {"content": [{"type": "text", "text": outcome}], "details": {"pid": os.getpid()}}

    def whoami(tcid, params, on_update, ctx, signal_):
        return {"content": [{"type": "text", "text": "me"}], "details": {"pid": os.getpid()}}

    return [CustomTool(name=fn.__name__, description=fn.__name__, parameters={"type": "object"}, execute=fn)
            for fn in (poke, whoami)]
"""


def _cgroup_peers(pid: int) -> list[int]:
    """The other members of ``pid``'s cgroup v2, read from outside (the test runs as the host's user)."""
    with open(f"/proc/{pid}/cgroup") as f:
        path = next(line for line in f.read().splitlines() if line.startswith("0::"))[3:]
    mount = _v2_mount()
    assert mount is not None
    procs = (mount / path.lstrip("/") / "cgroup.procs").read_text().split()
    return [int(p) for p in procs if int(p) != pid]


@needs_cgroup
@pytest.mark.skipif(landlock_abi() < 6, reason="Landlock's signal scope needs ABI 6 (Linux 6.12)")
@pytest.mark.parametrize("level", ["contained", "strict"])
async def test_a_tool_cannot_kill_its_supervisor(tmp_path: Path, level: Level) -> None:
    tool = tmp_path / "poke.py"
    tool.write_text(POKE_TOOL)
    with trio.fail_after(30):
        async with make_runner(tool, sandbox=SandboxPolicy(level=level)) as runner:
            me = await runner.call_tool("whoami")
            peers = _cgroup_peers(me.details["pid"])
            assert len(peers) == 1, f"the worker's cgroup should hold it and its supervisor only: {peers}"
            poked = await runner.call_tool("poke", {"pid": peers[0]})
            assert poked.details["pid"] == me.details["pid"]
            assert _alive(peers[0])
    assert poked.text == "EPERM", poked


# Without a cgroup (the documented fallback): a "host" that holds the pipe's
# write end, a "worker" leading its own group with a child in it, and the
# supervisor the worker starts with no cgroup.kill fd.
NO_CGROUP = """
import os, sys, time
from xcsh_run.worker._runtime import supervisor as _supervisor
r, w = os.pipe()
worker = os.fork()
if worker == 0:
    os.close(w)
    os.setsid()
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    supervisor = _supervisor.start(r, -1)
    os.close(r)
    print(os.getpid(), child, supervisor, flush=True)
    if sys.argv[1] == "worker_exits":
        os._exit(0)
    time.sleep(60)
    os._exit(0)
os.close(r)
sys.stdin.read()  # the test says when the host goes
"""


@pytest.mark.parametrize("event", ["host_gone", "worker_exits"])
async def test_without_a_cgroup_the_supervisor_kills_the_workers_group(tmp_path: Path, event: str) -> None:
    """Host gone: it kills the worker's group. Worker gone: it kills the group too and exits, since
    the host's fallback kill (the worker's group and descendants) cannot reach it once orphaned."""
    script = tmp_path / "no_cgroup.py"
    script.write_text(NO_CGROUP)
    pids: list[int] = []
    with trio.fail_after(30):
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(script), event], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            line = b""
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, "the script exited before its worker started the supervisor"
                line += chunk
            pids += [int(x) for x in line.split()]
            _, child, supervisor = pids
            if event == "host_gone":
                assert all(map(_alive, pids)), "the worker, its child and the supervisor live while the host does"
                await proc.stdin.aclose()  # the host exits: its write end closes
                await proc.wait()
            # worker_exits: the host lives on (its write end stays open), and
            # the worker's exit alone must end the supervisor and the group.
            alive = await trio.to_thread.run_sync(_wait_gone, [child, supervisor], 10.0)
            assert alive == [], f"{alive} of child {child} and supervisor {supervisor} outlived the {event} event"
        finally:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            await proc.stdin.aclose()
            await proc.stdout.aclose()
