"""Escapes from the default ``contained`` level, through real workers (docs/sandbox.md, "What `contained`
guarantees").

Each attack runs under ``contained``, where it must fail and leave no trace on the host, and, where
that is cheap, under ``none``, where it must succeed: the positive control that keeps a test from
passing because the attack itself is broken. The attack tool is written into the test's folder; its
one tool, ``attack``, takes ``{"name": <attack>, ...args}`` and returns the outcome as details:
``{"ok": bool, "errno": int | None, "value": any}``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests.conftest import MACHINE, make_runner, own_cgroup_dirs
from xcsh_run import Runner, SandboxPolicy

CONTAINED = SandboxPolicy()
NONE = SandboxPolicy(level="none")
IS_ROOT = os.geteuid() == 0

ATTACK = r"""
import ctypes, errno, fcntl, os, signal, sys, time

from xcsh_run.pi import CustomTool

libc = ctypes.CDLL(None, use_errno=True)
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10
TIOCSTI = 0x5412


def _read(path):
    with open(path, "rb") as f:
        return f.read(4096).decode(errors="replace")


def _append(path, data):
    with open(path, "a") as f:
        f.write(data)


def _inject(path, text):
    # O_NOCTTY: a terminal that already has a session cannot become ours anyway.
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    try:
        for ch in text.encode():
            fcntl.ioctl(fd, TIOCSTI, bytes([ch]))
    finally:
        os.close(fd)


def _open_sibling_pipe(pid, fd):
    # Opening a pipe's /proc entry for writing gives a write end of that very pipe.
    os.close(os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK))
    return "opened"


def _own_protocol():
    argv = sys.argv
    return {"pid": os.getpid(), "fd_in": int(argv[argv.index("--fd-in") + 1])}


def _chattr(path):
    with open(path, "w") as f:
        f.write("x")
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = ctypes.c_int(0)
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags)
        flags.value |= FS_IMMUTABLE_FL
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, flags)
    finally:
        os.close(fd)
    return path


def _mount_tmpfs(target):
    os.makedirs(target, exist_ok=True)
    if libc.mount(b"none", target.encode(), b"tmpfs", 0, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return target


def _fill(path, mib):
    chunk = b"x" * (1 << 20)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(chunk)
    return path


def _cgroup_daemon(procs, report):
    # A double-forked, setsid() daemon that moves itself to another cgroup and lives on.
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.close(r)
            try:
                _append(procs, str(os.getpid()))
                moved = "moved"
            except OSError as exc:
                moved = errno.errorcode.get(exc.errno, str(exc.errno))
            _append(report, f"{os.getpid()} {moved}\n")
            os.write(w, b"x")
            time.sleep(60)
            os._exit(0)
        os._exit(0)
    os.close(w)
    os.read(r, 1)  # the daemon has tried, and reported
    os.close(r)
    return "started"


def _map_exec(path):
    import mmap

    with open(path, "wb") as f:
        f.write(b"\xc3" * 4096)  # ret
    with open(path, "rb") as f:
        mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC).close()
    return "mapped"


def _statfs_type(path):
    # f_type of statfs(2): TMPFS_MAGIC is 0x01021994.
    buf = ctypes.create_string_buffer(120)
    if libc.statfs(path.encode(), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return hex(int.from_bytes(buf.raw[:8], "little"))


def _normal():
    # What ordinary tools do, all of which must keep working under contained.
    import asyncio, multiprocessing, subprocess, tempfile

    with multiprocessing.get_context("fork").Pool(2) as pool:  # its locks are POSIX semaphores in /dev/shm
        squares = pool.map(abs, [-1, -2])
    lock = multiprocessing.get_context("fork").Lock()
    with lock:
        pass
    child = subprocess.Popen(["sleep", "30"])
    os.kill(child.pid, signal.SIGTERM)  # a signal inside its own tree
    child.wait()
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"x")
    procs = _read("/proc/self/cgroup")
    return {
        "squares": squares,
        "child": child.returncode,
        "echo": subprocess.run(["echo", "hi"], capture_output=True, text=True).stdout,
        "asyncio": asyncio.run(asyncio.sleep(0, "ran")),
        "cgroup": procs.strip().splitlines()[-1],
    }


def _busy_children(count):
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            while True:
                pass
        pids.append(pid)
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]


def _cgroup_ns_hide():
    # A user and a cgroup namespace need no capability; in them a fresh cgroup2
    # mount is rooted at the worker's boundary, and writable. A cgroup made
    # there would take a daemon (or the supervisor) out of the boundary's own
    # member list, and could be killed or frozen on its own.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        step = "unshare(NEWUSER)"
        try:
            if libc.unshare(0x10000000) != 0:
                raise OSError(ctypes.get_errno(), step)
            # Unmapped is enough: the namespace's capabilities are what the mount needs.
            for name, text in (("setgroups", "deny"), ("uid_map", "0 0 1"), ("gid_map", "0 0 1")):
                try:
                    with open("/proc/self/" + name, "w") as f:
                        f.write(text)
                except OSError:
                    pass
            step = "unshare(NEWNS|NEWCGROUP)"
            if libc.unshare(0x20000 | 0x02000000) != 0:
                raise OSError(ctypes.get_errno(), step)
            target = os.path.join(os.environ["TMPDIR"], "cg")
            os.mkdir(target)
            step = "mount cgroup2"
            if libc.mount(b"none", target.encode(), b"cgroup2", 0, None) != 0:
                raise OSError(ctypes.get_errno(), step)
            step = "mkdir"
            os.mkdir(os.path.join(target, "hide"))
            outcome = "made"
        except OSError as exc:
            outcome = f"{step}:{errno.errorcode.get(exc.errno, exc.errno)}"
        os.write(w, outcome.encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    return os.read(r, 200).decode()


ATTACKS = {
    "cgroup_ns_hide": lambda a: _cgroup_ns_hide(),
    "read": lambda a: _read(a["path"]),
    "readlink": lambda a: os.readlink(a["path"]),
    "append": lambda a: _append(a["path"], a["data"]),
    "inject": lambda a: _inject(a["path"], a["text"]),
    "signal": lambda a: os.kill(a["pid"], a["signal"]),
    "own_protocol": lambda a: _own_protocol(),
    "open_sibling_pipe": lambda a: _open_sibling_pipe(a["pid"], a["fd"]),
    "chattr": lambda a: _chattr(os.path.join(a.get("dir") or os.environ["TMPDIR"], "immutable")),
    "mount": lambda a: _mount_tmpfs(os.path.join(a.get("dir") or os.environ["TMPDIR"], "mnt")),
    "fill": lambda a: _fill(a["path"], a["mib"]),
    "cgroup_daemon": lambda a: _cgroup_daemon(a["procs"], a["report"]),
    "busy_children": lambda a: _busy_children(a["count"]),
    "status": lambda a: _read("/proc/self/status"),
    "normal": lambda a: _normal(),
    "map_exec": lambda a: _map_exec(os.path.join(os.environ["TMPDIR"], "code")),
    "fs_type": lambda a: _statfs_type(os.environ[a["var"]]),
    "env": lambda a: {k: v for k, v in os.environ.items() if k in ("HOME", "TMPDIR")},
}


def factory(api):
    def attack(tool_call_id, params, on_update, ctx, signal_):
        try:
            outcome = {"ok": True, "errno": None, "value": ATTACKS[params["name"]](params)}
        except OSError as exc:
            outcome = {"ok": False, "errno": exc.errno, "value": str(exc)}
        return {"content": [{"type": "text", "text": str(outcome)}], "details": outcome}

    return CustomTool(name="attack", description="attacks", parameters={"type": "object"}, execute=attack)
"""


needs_root = pytest.mark.skipif(not IS_ROOT, reason="the attack needs the root host it is about")
needs_scopes = pytest.mark.skipif(
    MACHINE.landlock_abi < 6, reason=f"needs Landlock ABI 6 (signal scoping); this kernel has {MACHINE.landlock_abi}"
)
needs_cgroups = pytest.mark.skipif(not MACHINE.cgroup_v2, reason="needs a writable cgroup v2 hierarchy")
POLICIES = pytest.mark.parametrize("policy", [CONTAINED, NONE], ids=["contained", "none"])


@pytest.fixture
def attack_tool(tmp_path: Path) -> Path:
    path = tmp_path / "tools" / "attacker.py"
    path.parent.mkdir()
    path.write_text(ATTACK)
    return path


# Every test runs with workers started by Popen and forked by the fork server's
# zygote: a forked worker inherits the zygote's state, dumpable flag included.
_SPAWN = {"forkserver": False}


@pytest.fixture(autouse=True, params=[False, True], ids=["popen", "forkserver"])
def spawn_mode(request: pytest.FixtureRequest) -> Iterator[None]:
    _SPAWN["forkserver"] = request.param
    yield
    _SPAWN["forkserver"] = False


@asynccontextmanager
async def runner_for(policy: SandboxPolicy, *tools: Path, **options: Any) -> AsyncIterator[Runner]:
    options.setdefault("forkserver", _SPAWN["forkserver"])
    async with make_runner(*tools, sandbox=policy, **options) as runner:
        yield runner


async def attack(runner: Runner, name: str, **args: Any) -> dict[str, Any]:
    result = await runner.call_tool("attack", {"name": name, **args})
    assert not result.is_error, result
    details: dict[str, Any] = result.details
    return details


async def attack_once(policy: SandboxPolicy, tool: Path, name: str, **args: Any) -> dict[str, Any]:
    with trio.fail_after(30):
        async with runner_for(policy, tool) as runner:
            return await attack(runner, name, **args)


def denied(out: dict[str, Any]) -> bool:
    return not out["ok"] and out["errno"] in (errno.EACCES, errno.EPERM)


# --- finding 10: the host and sibling workers, through /proc, signals and the terminal ---------


@needs_root
@POLICIES
async def test_host_environment_is_out_of_reach(policy: SandboxPolicy, attack_tool: Path) -> None:
    # /proc/<pid>/environ is the environment the host started with: every
    # secret the scrub keeps out of the worker's own environment is in it.
    host = os.getpid()
    started_with = Path(f"/proc/{host}/environ").read_text(errors="replace")[:4000]
    with trio.fail_after(30):
        async with runner_for(policy, attack_tool) as runner:
            environ = await attack(runner, "read", path=f"/proc/{host}/environ")
            mem = await attack(runner, "read", path=f"/proc/{host}/mem")
            fd = await attack(runner, "readlink", path=f"/proc/{host}/fd/0")
            own = await attack(runner, "status")
    if policy is NONE:
        assert environ["ok"] and environ["value"] and environ["value"] in started_with
        assert fd["ok"] and fd["value"] == os.readlink("/proc/self/fd/0")
        # /proc/<pid>/mem at offset 0 is unmapped (EIO): what matters is that it opened.
        assert mem["ok"] or mem["errno"] == errno.EIO
    else:
        assert denied(environ) and denied(mem) and denied(fd), (environ, mem, fd)
    # The worker's own /proc stays readable: tools read their own status and limits.
    assert own["ok"] and "Name:" in own["value"]


@needs_root
@POLICIES
async def test_host_stdout_cannot_be_written(
    policy: SandboxPolicy, attack_tool: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Under `serve`, the host's fd 1 is the MCP channel to the client.
    marker = f"forged-{os.getpid()}-{policy.level}"
    out = await attack_once(policy, attack_tool, "append", path=f"/proc/{os.getpid()}/fd/1", data=marker + "\n")
    captured = capfd.readouterr().out
    if policy is NONE:
        assert out["ok"] and marker in captured
    else:
        assert denied(out), out
        assert marker not in captured


@pytest.fixture
def foreign_terminal() -> Iterator[tuple[str, int]]:
    """A pty whose slave is another session's controlling terminal (a user's shell), and its slave fd.

    Injected input shows up as input on the slave: the test reads it from there.
    """
    master, slave = os.openpty()
    path = os.ttyname(slave)
    code = (
        "import fcntl, os, sys, termios\n"
        "os.setsid()\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "fcntl.ioctl(fd, termios.TIOCSCTTY, 0)\n"
        "os.write(1, b'r')\n"
        "sys.stdin.read()\n"
    )
    shell = subprocess.Popen(
        [sys.executable, "-c", code, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True
    )
    try:
        assert shell.stdout is not None and shell.stdout.read(1) == b"r"
        os.set_blocking(slave, False)
        yield path, slave
    finally:
        shell.kill()
        shell.wait()
        for stream in (shell.stdin, shell.stdout):
            if stream is not None:
                stream.close()
        os.close(slave)
        os.close(master)


@needs_root
@POLICIES
async def test_no_keystrokes_into_a_terminal(
    policy: SandboxPolicy, attack_tool: Path, foreign_terminal: tuple[str, int]
) -> None:
    path, slave = foreign_terminal
    out = await attack_once(policy, attack_tool, "inject", path=path, text="echo pwned\n")
    try:
        typed = os.read(slave, 100)
    except BlockingIOError:
        typed = b""
    if policy is NONE:
        assert out["ok"] and typed == b"echo pwned\n", (out, typed)
    else:
        # ENOENT: the worker's own devpts instance has no such pty (test_escape_terminal.py). Where it
        # could open it: EPERM, or EIO where TIOCSTI is off without CAP_SYS_ADMIN (dev.tty.legacy_tiocsti=0).
        assert out["errno"] in (errno.ENOENT, errno.EPERM, errno.EIO), out
        assert typed == b""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@needs_scopes
@POLICIES
async def test_cannot_stop_the_host_or_a_bystander(policy: SandboxPolicy, attack_tool: Path) -> None:
    # SIGSTOP on the host itself would freeze this test under `none`: the host gets a
    # signal 0 (the same permission check), a bystander of the same uid the SIGSTOP.
    bystander = subprocess.Popen(["sleep", "60"])  # noqa: ASYNC220 - returns at once
    try:
        with trio.fail_after(30):
            async with runner_for(policy, attack_tool) as runner:
                host = await attack(runner, "signal", pid=os.getpid(), signal=0)
                stop = await attack(runner, "signal", pid=bystander.pid, signal=int(signal.SIGSTOP))
        state = _state(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()
    if policy is NONE:
        assert host["ok"] and stop["ok"] and state == "T"
    else:
        assert host["errno"] == errno.EPERM and stop["errno"] == errno.EPERM, (host, stop)
        assert state != "T"


@POLICIES
async def test_cannot_write_into_a_sibling_workers_protocol(
    policy: SandboxPolicy, attack_tool: Path, tmp_path: Path
) -> None:
    # A second module, so a second worker, which stays warm after its call.
    victim_tool = tmp_path / "victim" / "victim.py"
    victim_tool.parent.mkdir()
    victim_tool.write_text(ATTACK.replace('name="attack"', 'name="victim"'))
    with trio.fail_after(30):
        async with runner_for(policy, attack_tool, victim_tool) as runner:
            victim = (await runner.call_tool("victim", {"name": "own_protocol"})).details["value"]
            out = await attack(runner, "open_sibling_pipe", pid=victim["pid"], fd=victim["fd_in"])
            after = await runner.call_tool("victim", {"name": "own_protocol"})
    assert after.details["value"]["pid"] == victim["pid"]  # the same warm worker all along
    if policy is NONE:
        assert out["ok"], out
    else:
        assert denied(out), out


@needs_cgroups
@POLICIES
async def test_no_daemon_leaves_its_cgroup(policy: SandboxPolicy, attack_tool: Path, tmp_path: Path) -> None:
    # The host's own cgroup: outside every boundary and every runner's cgroup.
    own = Path("/proc/self/cgroup").read_text().splitlines()
    v2 = next(line.split(":", 2)[2] for line in own if line.startswith("0::"))
    mount = "/sys/fs/cgroup/unified" if Path("/sys/fs/cgroup/unified/cgroup.procs").exists() else "/sys/fs/cgroup"
    procs = f"{mount}{v2.rstrip('/')}/cgroup.procs"
    report = tmp_path / "daemon"
    report.touch()
    report.chmod(0o666)
    daemon = 0
    try:
        with trio.fail_after(30):
            async with runner_for(policy, attack_tool) as runner:
                out = await attack(runner, "cgroup_daemon", procs=procs, report=str(report))
        pid_text, moved = report.read_text().split()
        daemon = int(pid_text)
        alive = psutil.pid_exists(daemon) and psutil.Process(daemon).status() != psutil.STATUS_ZOMBIE
    finally:
        if daemon:
            with contextlib.suppress(OSError):
                os.kill(daemon, signal.SIGKILL)
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(daemon).wait(5)
            # An escaped daemon kept the runner's v1 groups populated past its close.
            for path in reversed(own_cgroup_dirs()):
                for parent, _, _ in sorted(os.walk(path), reverse=True):
                    with contextlib.suppress(OSError):
                        os.rmdir(parent)
    assert out["ok"], out
    if policy is NONE:
        assert moved == "moved" and alive
    else:
        assert moved in ("EROFS", "EACCES", "EPERM"), moved
        assert not alive


@needs_cgroups
async def test_no_cgroup_below_the_boundary(attack_tool: Path) -> None:
    """The way to a cgroup of the tool's own starts with a user namespace, which contained refuses.

    (It once got as far as mounting a cgroup2 whose root was its boundary: from there it could move
    any process of its uid into that boundary; tests/sandbox/test_escape_namespaces.py.)
    """
    out = await attack_once(CONTAINED, attack_tool, "cgroup_ns_hide")
    assert out["ok"], out
    assert out["value"] == "unshare(NEWUSER):EPERM", out


async def test_contained_keeps_what_tools_need(attack_tool: Path) -> None:
    out = await attack_once(CONTAINED, attack_tool, "normal")
    assert out["ok"], out
    value = out["value"]
    assert value["squares"] == [1, 2] and value["child"] == -signal.SIGTERM
    assert value["echo"] == "hi\n" and value["asyncio"] == "ran"
    assert "xcsh-run." in value["cgroup"]  # its own cgroup files stay readable


# --- finding 11: nothing a tool makes survives its worker ----------------------------------


def _clear_immutable(root: str) -> None:
    """Undo a leaked ``chattr +i`` under ``root`` so that the folder can be removed."""
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(parent, name)
            with contextlib.suppress(OSError):
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    flags = ctypes.c_int(0)
                    fcntl.ioctl(fd, 0x80086601, flags)
                    flags.value &= ~0x10
                    fcntl.ioctl(fd, 0x40086602, flags)
                finally:
                    os.close(fd)


def _mounts_under(path: str) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == path or point.startswith(path.rstrip("/") + "/"):
            found.append(point)
    return found


def _umount(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(path.encode(), 2)  # MNT_DETACH


@needs_root
@POLICIES
async def test_no_immutable_file_outlives_the_worker(policy: SandboxPolicy, attack_tool: Path, tmp_path: Path) -> None:
    before = set(os.listdir(tempfile.gettempdir()))
    where = tmp_path / "none-tmp" if policy is NONE else None
    if where is not None:
        where.mkdir()
    try:
        out = await attack_once(policy, attack_tool, "chattr", dir=str(where) if where else None)
        left = sorted(set(os.listdir(tempfile.gettempdir())) - before)
        if policy is NONE:
            assert out["ok"], out
            with pytest.raises(PermissionError):
                os.unlink(out["value"])
        else:
            assert out["errno"] == errno.EPERM, out
            # Only this host's workdirs: other hosts on the machine make and remove theirs meanwhile.
            assert not [name for name in left if name.startswith(f"xcsh-run-w{os.getpid()}-")], left
    finally:
        for name in set(os.listdir(tempfile.gettempdir())) - before:
            _clear_immutable(os.path.join(tempfile.gettempdir(), name))
        _clear_immutable(str(tmp_path))


@needs_root
@POLICIES
async def test_no_mount_in_tmpdir(policy: SandboxPolicy, attack_tool: Path, tmp_path: Path) -> None:
    where = tmp_path / "none-tmp" if policy is NONE else None
    if where is not None:
        where.mkdir()
    out = await attack_once(policy, attack_tool, "mount", dir=str(where) if where else None)
    try:
        if policy is NONE:
            assert out["ok"] and _mounts_under(out["value"]), out
        else:
            assert out["errno"] == errno.EPERM, out
            assert not _mounts_under(tempfile.gettempdir())
    finally:
        if out["ok"]:
            _umount(out["value"])


@needs_root
@POLICIES
async def test_dev_shm_is_private_and_bounded(policy: SandboxPolicy, attack_tool: Path) -> None:
    name = f"/dev/shm/ctn-{os.getpid()}-{policy.level}"
    try:
        with trio.fail_after(60):
            async with runner_for(policy.replace(file_size_mb=16), attack_tool) as runner:
                first = await attack(runner, "fill", path=name + "-a", mib=12)
                second = await attack(runner, "fill", path=name + "-b", mib=12)
        seen = [p for p in (name + "-a", name + "-b") if os.path.exists(p)]
    finally:
        for suffix in ("-a", "-b"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name + suffix)
    assert first["ok"], first
    if policy is NONE:
        assert second["ok"] and len(seen) == 2
    else:
        # Its own /dev/shm, capped at file_size_mb, gone with the worker.
        assert second["errno"] in (errno.ENOSPC, errno.EFBIG), second
        assert seen == []


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])


async def test_workdirs_of_a_dead_host_with_a_recycled_pid_are_swept(tmp_path: Path) -> None:
    base = Path(tempfile.gettempdir())
    me, init = os.getpid(), 1
    # Hosts that are dead, though a live process has their pid now: this very
    # process (a container's host is the same pid at every restart), and init.
    dead = [base / f"xcsh-run-w{me}-t{_start_time(me) - 1}_ctn{me}", base / f"xcsh-run-w{init}-t1_ctn{me}"]
    alive = base / f"xcsh-run-w{init}-t{_start_time(init)}_ctn{me}"
    for path in (*dead, alive):
        (path / "tmp").mkdir(parents=True)
        (path / "tmp" / "file").write_text("x")
    try:
        with trio.fail_after(30):
            async with runner_for(CONTAINED, cache=False):
                pass
        assert [path.exists() for path in dead] == [False, False]
        assert alive.is_dir()
    finally:
        for path in (*dead, alive):
            with contextlib.suppress(FileNotFoundError):
                (path / "tmp" / "file").unlink()
                (path / "tmp").rmdir()
                path.rmdir()


STRICT = SandboxPolicy(level="strict", file_size_mb=16)
TMPFS_MAGIC = "0x1021994"


@needs_root
@pytest.mark.skipif(MACHINE.landlock_abi < 6 or not MACHINE.seccomp, reason="strict needs Landlock ABI 6 and seccomp")
@pytest.mark.parametrize("policy", [STRICT, CONTAINED], ids=["strict", "contained"])
async def test_strict_workdir_is_a_capped_noexec_tmpfs(policy: SandboxPolicy, attack_tool: Path) -> None:
    with trio.fail_after(30):
        async with runner_for(policy.replace(file_size_mb=16), attack_tool) as runner:
            tmp_type = await attack(runner, "fs_type", var="TMPDIR")
            home_type = await attack(runner, "fs_type", var="HOME")
            mapped = await attack(runner, "map_exec")
            env = (await attack(runner, "env"))["value"]
            first = await attack(runner, "fill", path=env["TMPDIR"] + "/a", mib=12)
            second = await attack(runner, "fill", path=env["HOME"] + "/b", mib=12)
    assert first["ok"], first
    if policy is STRICT:
        assert tmp_type["value"] == home_type["value"] == TMPFS_MAGIC, (tmp_type, home_type)
        # noexec: a file there cannot be mapped executable (nor run through ld.so).
        assert mapped["errno"] == errno.EPERM, mapped
        # One tmpfs for HOME and TMPDIR together, capped at file_size_mb.
        assert second["errno"] == errno.ENOSPC, second
    else:
        assert tmp_type["value"] != TMPFS_MAGIC or tempfile.gettempdir().startswith("/dev/shm")
        assert mapped["ok"] and second["ok"], (mapped, second)


# --- finding 13: CPU time of the whole tree ----------------------------------------------------


async def test_cpu_budget_covers_the_whole_tree(attack_tool: Path) -> None:
    with trio.fail_after(60):
        async with runner_for(SandboxPolicy(cpu_seconds=2), attack_tool) as runner:
            start = time.monotonic()
            result = await runner.call_tool("attack", {"name": "busy_children", "count": 2}, timeout=30)
            elapsed = time.monotonic() - start
    # Per process, each child could burn its own 2 s (then SIGXCPU) while the
    # worker waits: the call would succeed after 4 s of CPU.
    assert result.kind == "limit_exceeded", result
    assert result.error is not None and result.error.limit == "cpu"
    assert elapsed < 30
