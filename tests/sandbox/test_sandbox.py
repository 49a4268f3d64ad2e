"""Sandbox tests: escape probes and resource limits through real workers (sandbox.md, "Tests that prove it").

Every negative probe asserts the errno *and* that the effect did not happen on the host
(file not written, listener got no connection, nothing survived), and runs again with
``none`` to prove the probe can detect a leak. Positive controls must pass under ``strict``.
Probes that need a kernel feature this machine lacks skip with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests.conftest import MACHINE, TOOLS, make_runner, needs_strict
from xcsh_run import Runner, SandboxPolicy, SandboxUnavailable
from xcsh_run._process import forkserver_supported

ESCAPE = TOOLS / "escape.py"
LIMITS = TOOLS / "limits.py"
STRICT = SandboxPolicy(level="strict", allow_exec=("true",))
NONE = SandboxPolicy(level="none")


needs_limits = pytest.mark.skipif(
    not (MACHINE.cgroup_v2 and MACHINE.memory_cgroup and MACHINE.pids_cgroup),
    reason="needs writable cgroup v2 plus memory and pids controllers (run as root)",
)


# Every test here runs twice: with workers started by Popen, and forked by the
# fork server's zygote (each child still enters its own cgroup and applies its
# own sandbox, strict's Landlock rules for its module's folder included).
_SPAWN = {"forkserver": False}


@pytest.fixture(autouse=True, params=[False, True], ids=["popen", "forkserver"])
def spawn_mode(request: pytest.FixtureRequest) -> Iterator[None]:
    _SPAWN["forkserver"] = request.param
    yield
    _SPAWN["forkserver"] = False


@asynccontextmanager
async def sandboxed(policy: SandboxPolicy, path: Path = ESCAPE, **options: Any) -> AsyncIterator[Runner]:
    options.setdefault("forkserver", _SPAWN["forkserver"])
    async with make_runner(path, sandbox=policy, **options) as runner:
        yield runner
        if options["forkserver"] and MACHINE.cgroup_v2 and forkserver_supported():
            # Not a silent fallback to Popen: the workers that ran were forked by a zygote.
            stats = runner.statistics()
            assert stats.workers_forked == stats.workers_started > 0, stats


async def run_probe(policy: SandboxPolicy, name: str, **args: Any) -> dict[str, Any]:
    with trio.fail_after(30):
        async with sandboxed(policy) as runner:
            result = await runner.call_tool("probe", {"name": name, **args})
    assert not result.is_error, result
    details: dict[str, Any] = result.details
    return details


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every allow-list, with a file in it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("secret")
    (folder / "secret.txt").chmod(0o644)
    return folder


# --- filesystem ----------------------------------------------------------------------------


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_write_outside(policy: SandboxPolicy, outside: Path) -> None:
    target = outside / "new.txt"
    out = await run_probe(policy, "write_outside", path=str(target))
    if policy is NONE:
        assert out["ok"] and target.read_text() == "escaped"
    else:
        assert out["errno"] == errno.EACCES
        assert not target.exists()


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
@pytest.mark.parametrize("what", ["/etc/passwd", "secret"])
async def test_read_outside(policy: SandboxPolicy, what: str, outside: Path) -> None:
    path = str(outside / "secret.txt") if what == "secret" else what
    out = await run_probe(policy, "read_file", path=path)
    assert out["ok"] if policy is NONE else out["errno"] == errno.EACCES


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_listdir_outside(policy: SandboxPolicy, outside: Path) -> None:
    out = await run_probe(policy, "listdir", path=str(outside))
    assert out["ok"] if policy is NONE else out["errno"] == errno.EACCES


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_symlink_escape(policy: SandboxPolicy, outside: Path) -> None:
    target = outside / "via-link.txt"
    out = await run_probe(policy, "symlink_write", target=str(target))
    if policy is NONE:
        assert out["ok"] and target.exists()
    else:
        assert out["errno"] == errno.EACCES
        assert not target.exists()


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_hardlink_into_workdir(policy: SandboxPolicy, outside: Path) -> None:
    out = await run_probe(policy, "hardlink_in", path=str(outside / "secret.txt"))
    if policy is NONE:
        assert out["ok"]
    else:
        assert out["errno"] == errno.EXDEV
        assert (outside / "secret.txt").stat().st_nlink == 1


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_rename_out_of_workdir(policy: SandboxPolicy, outside: Path) -> None:
    target = outside / "moved.txt"
    out = await run_probe(policy, "rename_out", path=str(target))
    if policy is NONE:
        assert out["ok"] and target.exists()
    else:
        assert out["errno"] in (errno.EACCES, errno.EXDEV)
        assert not target.exists()


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
@pytest.mark.parametrize("probe", ["truncate", "mkdir", "unlink"])
async def test_modify_outside(policy: SandboxPolicy, probe: str, outside: Path) -> None:
    path = outside / ("newdir" if probe == "mkdir" else "secret.txt")
    out = await run_probe(policy, probe, path=str(path))
    if policy is NONE:
        assert out["ok"]
        return
    assert out["errno"] == errno.EACCES
    assert not (outside / "newdir").exists()
    assert (outside / "secret.txt").read_text() == "secret"


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_chmod_outside(policy: SandboxPolicy, outside: Path) -> None:
    path = outside / "secret.txt"
    out = await run_probe(policy, "chmod", path=str(path))
    mode = stat.S_IMODE(path.stat().st_mode)
    if policy is NONE:
        assert mode == 0o777
    else:
        # uid drop: EPERM; root fallback: seccomp fakes success and nothing changes.
        assert out["errno"] in (errno.EPERM, errno.EACCES) or out["ok"]
        assert mode == 0o644


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_exec_outside_the_allow_list(policy: SandboxPolicy) -> None:
    out = await run_probe(policy, "exec", program="/bin/sh", args=["-c", "true"])
    assert out["ok"] if policy is NONE else out["errno"] == errno.EACCES


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_proc_is_closed(policy: SandboxPolicy) -> None:
    status = await run_probe(policy, "proc_self_status")
    environ = await run_probe(policy, "proc_environ", pid=os.getpid())
    if policy is NONE:
        assert status["ok"] and environ["ok"]
    else:
        assert status["errno"] == errno.EACCES and environ["errno"] == errno.EACCES


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_cannot_leave_its_cgroup(policy: SandboxPolicy) -> None:
    root_procs = "/sys/fs/cgroup/unified/cgroup.procs"
    with trio.fail_after(30):
        async with sandboxed(policy) as runner:
            result = await runner.call_tool("probe", {"name": "cgroup_escape", "path": root_procs})
            pid = (await runner.call_tool("probe", {"name": "pid"})).details["value"]
            cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    if policy is NONE:
        assert result.details["ok"]
    else:
        # EROFS from the worker's read-only cgroup mounts (as root), else EACCES from Landlock.
        assert result.details["errno"] in (errno.EROFS, errno.EACCES)
        assert "xcsh-run." in cgroup  # still inside its boundary


# --- network -------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[dict[str, Any]]:
    """Host-side TCP (v4 and v6), UDP, abstract and pathname UNIX listeners, all non-blocking."""
    tcp4 = socket.create_server(("127.0.0.1", 0))
    tcp6 = socket.create_server(("::1", 0), family=socket.AF_INET6)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    abstract = socket.socket(socket.AF_UNIX)
    name = f"\0xcsh-test-{os.getpid()}"
    abstract.bind(name)
    abstract.listen()
    path_sock = socket.socket(socket.AF_UNIX)
    path = f"/tmp/xcsh-test-{os.getpid()}.sock"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    path_sock.bind(path)
    path_sock.listen()
    socks = [tcp4, tcp6, udp, abstract, path_sock]
    for s in socks:
        s.setblocking(False)
    yield {"tcp4": tcp4, "tcp6": tcp6, "udp": udp, "abstract": (abstract, name[1:]), "path": (path_sock, path)}
    for s in socks:
        s.close()
    os.unlink(path)


def _got_connection(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def _got_datagram(sock: socket.socket) -> bool:
    try:
        sock.recv(16)
    except BlockingIOError:
        return False
    return True


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_network_is_closed(policy: SandboxPolicy, listener: dict[str, Any]) -> None:
    abstract_sock, abstract_name = listener["abstract"]
    path_sock, path = listener["path"]
    outcomes = {
        "tcp4": await run_probe(policy, "tcp4", port=listener["tcp4"].getsockname()[1]),
        "tcp6": await run_probe(policy, "tcp6", port=listener["tcp6"].getsockname()[1]),
        "udp": await run_probe(policy, "udp", port=listener["udp"].getsockname()[1]),
        "unix_abstract": await run_probe(policy, "unix_abstract", address="\0" + abstract_name),
        "unix_path": await run_probe(policy, "unix_path", path=path),
        "tcp_bind": await run_probe(policy, "tcp_bind"),
        "netlink": await run_probe(policy, "netlink"),
    }
    effects = {
        "tcp4": _got_connection(listener["tcp4"]),
        "tcp6": _got_connection(listener["tcp6"]),
        "udp": _got_datagram(listener["udp"]),
        "unix_abstract": _got_connection(abstract_sock),
        "unix_path": _got_connection(path_sock),
    }
    if policy is NONE:
        assert all(o["ok"] for o in outcomes.values()), outcomes
        assert all(effects.values()), effects
    else:
        assert {k: o["errno"] for k, o in outcomes.items()} == dict.fromkeys(outcomes, errno.EPERM)
        assert not any(effects.values()), effects


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_io_uring_and_x32(policy: SandboxPolicy) -> None:
    uring = await run_probe(policy, "io_uring")
    x32 = await run_probe(policy, "x32_socket")
    if policy is NONE:
        assert uring["ok"]
        assert x32["errno"] == errno.ENOSYS or x32["ok"]  # x32 is usually off in the kernel
    else:
        assert uring["errno"] == errno.EPERM
        assert x32["errno"] == errno.EPERM


@needs_strict
async def test_int80_socketcall_kills_the_worker() -> None:
    with trio.fail_after(30):
        async with sandboxed(STRICT) as runner:
            strict = await runner.call_tool("probe", {"name": "int80_socketcall"})
        async with sandboxed(NONE) as runner:
            loose = await runner.call_tool("probe", {"name": "int80_socketcall"})
    assert strict.kind == "crashed" and strict.error is not None and strict.error.signal == "SIGSYS"
    assert loose.details["ok"]  # unfiltered, the 32-bit entry point works (and made a socket)


@needs_strict
async def test_network_namespace_on_request() -> None:
    with trio.fail_after(30):
        async with sandboxed(STRICT.replace(network="netns")) as runner:
            pid = (await runner.call_tool("probe", {"name": "pid"})).details["value"]
            theirs = os.readlink(f"/proc/{pid}/ns/net")
        async with sandboxed(STRICT) as runner:
            pid = (await runner.call_tool("probe", {"name": "pid"})).details["value"]
            shared = os.readlink(f"/proc/{pid}/ns/net")
    assert theirs != os.readlink("/proc/self/ns/net")
    assert shared == os.readlink("/proc/self/ns/net")


# --- processes and privileges ---------------------------------------------------------------


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_cannot_touch_other_processes(policy: SandboxPolicy) -> None:
    sibling = psutil.Popen(["sleep", "30"])
    try:
        kill_host = await run_probe(policy, "kill", pid=os.getpid())
        kill_sibling = await run_probe(policy, "kill", pid=sibling.pid)
        ptrace = await run_probe(policy, "ptrace", pid=sibling.pid)
        status = sibling.status()
    finally:
        sibling.kill()
        sibling.wait()
    if policy is NONE:
        assert kill_host["ok"] and kill_sibling["ok"] and ptrace["ok"]
    else:
        assert kill_host["errno"] == errno.EPERM and kill_sibling["errno"] == errno.EPERM
        assert ptrace["errno"] == errno.EPERM
        assert status != psutil.STATUS_TRACING_STOP


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_no_mount_no_namespaces_no_privileges(policy: SandboxPolicy) -> None:
    mount = await run_probe(policy, "mount")
    unshare = await run_probe(policy, "unshare")
    nnp = await run_probe(policy, "no_new_privs")
    cap = await run_probe(policy, "cap_sys_admin")
    if policy is NONE:
        assert mount["ok"] and unshare["ok"] and nnp["value"] == 0 and cap["value"] == 1
    else:
        assert mount["errno"] == errno.EPERM and unshare["errno"] == errno.EPERM
        assert nnp["value"] == 1
        assert cap["value"] == 0  # the bounding set is empty


@needs_strict
@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        ("inside_workdir", "inside"),
        ("dev_null", None),
        ("socketpair", "pair"),
        ("asyncio", "ran"),
        ("imports", ["json", "sqlite3", "decimal", "msgspec", "ssl"]),
        ("getaddrinfo", "127.0.0.1"),
        ("exec", 0),
    ],
)
async def test_positive_controls_under_strict(probe: str, expected: Any) -> None:
    out = await run_probe(STRICT, probe, program="true")
    assert out["ok"], out
    assert out["value"] == expected


@needs_strict
async def test_loosening_one_tools_policy() -> None:
    """multiprocessing's semaphores live in /dev/shm, outside strict's allow-list; one path fixes it."""
    denied = await run_probe(STRICT, "fork_pool")
    allowed = await run_probe(STRICT.replace(extra_write_paths=("/dev/shm",)), "fork_pool")
    assert denied["errno"] == errno.EACCES
    assert allowed["ok"] and allowed["value"] == [1, 2, 3]


async def test_unenforceable_level_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without Landlock refuses strict, naming the feature; best effort runs and says so."""
    from xcsh_run._host import runner as _host
    from xcsh_run._sandbox import policy as _sandbox

    real = _sandbox.probe

    def no_landlock(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **kwargs).__class__(**{**_probe_fields(real(*args, **kwargs)), "landlock_abi": 0})

    monkeypatch.setattr(_host, "probe", no_landlock)  # a fake machine, at the probe seam
    with trio.fail_after(30):
        with pytest.raises(SandboxUnavailable, match=r"Landlock \(Linux 5\.13\+"):
            async with sandboxed(SandboxPolicy(level="strict")):
                pass
        async with sandboxed(SandboxPolicy(level="strict", best_effort=True), TOOLS / "basic.py") as runner:
            result = await runner.call_tool("add", {"a": 1})
        # The same for a per-call policy, next to calls under the runner's fully enforced one.
        async with sandboxed(SandboxPolicy(), TOOLS / "basic.py") as runner:
            per_call = await runner.call_tool("add", {"a": 2}, sandbox=SandboxPolicy(level="strict", best_effort=True))
            plain = await runner.call_tool("add", {"a": 3})
    assert result.text == "1"
    assert any("Landlock" in item for item in result.unenforced)
    assert "unenforced" in result.to_json()
    assert per_call.text == "2" and any("Landlock" in item for item in per_call.unenforced)
    # contained runs without Landlock, and says what that costs it.
    assert plain.text == "3" and any("can signal the host" in item for item in plain.unenforced), plain


@pytest.mark.parametrize(
    ("fake", "expected"),
    [
        ({"landlock_abi": 5}, "Landlock ABI 6 (Linux 6.12+) for signal and abstract-socket scoping"),
        ({"euid": 1000}, "a mount namespace (needs a root host)"),
        ({}, None),
    ],
    ids=["landlock-abi-5", "not-root", "this-machine"],
)
async def test_contained_runs_weakened_and_says_so(
    monkeypatch: pytest.MonkeyPatch, fake: dict[str, Any], expected: str | None
) -> None:
    """The default level does not refuse a kernel without Landlock scopes or a host that is not root:
    each result names what is weaker (the documented weakenings), and on this machine nothing is."""
    from xcsh_run._host import runner as _host
    from xcsh_run._sandbox import policy as _sandbox

    real = _sandbox.probe

    def machine(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        return found.__class__(**{**_probe_fields(found), **fake})

    monkeypatch.setattr(_host, "probe", machine)  # a fake machine, at the probe seam
    with trio.fail_after(30):
        async with sandboxed(SandboxPolicy(), TOOLS / "basic.py") as runner:
            result = await runner.call_tool("add", {"a": 4})
    assert result.text == "4"
    if expected is None:
        assert result.unenforced == [] and "unenforced" not in result.to_json()
    else:
        assert any(item.startswith(expected) for item in result.unenforced), result.unenforced


def _probe_fields(found: Any) -> dict[str, Any]:
    return {f: getattr(found, f) for f in found.__struct_fields__}


# --- contained: environment, fds, workdir ---------------------------------------------------


async def test_environment_is_an_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOO_TOKEN", "x")
    monkeypatch.setenv("MY_API_KEY", "x")
    monkeypatch.setenv("PLAIN_SETTING", "x")
    monkeypatch.setenv("PASSED_TOKEN", "y")
    policy = SandboxPolicy(env_allow=("PLAIN_*", "PASSED_TOKEN"))
    with trio.fail_after(30):
        async with sandboxed(policy) as runner:
            env = (await runner.call_tool("probe", {"name": "env"})).details["value"]
            workdir = Path(env["HOME"]).parent
            assert workdir.is_dir()
        assert not workdir.exists()  # removed with its worker
    assert "FOO_TOKEN" not in env and "MY_API_KEY" not in env
    assert env["PLAIN_SETTING"] == "x" and env["PASSED_TOKEN"] == "y"
    assert env["HOME"] != os.environ["HOME"] and env["TMPDIR"].startswith(str(workdir))
    assert "XCSH_RUN_TEST_MARK" in env


async def test_inherited_host_fds_do_not_reach_the_tool(tmp_path: Path) -> None:
    leaky = os.open(tmp_path / "leak", os.O_WRONLY | os.O_CREAT)
    os.set_inheritable(leaky, True)
    try:
        with trio.fail_after(30):
            async with make_runner(TOOLS / "basic.py", forkserver=_SPAWN["forkserver"]) as runner:
                fds = (await runner.call_tool("environment")).details["fds"]
    finally:
        os.close(leaky)
    assert leaky not in fds or leaky in (0, 1, 2)
    assert len(fds) == 8  # 0-2, two protocol pipes, cgroup.kill, the reader thread's epoll, the listing's own fd


# --- limits ---------------------------------------------------------------------------------


@needs_limits
async def test_memory_hog_is_limit_exceeded_memory() -> None:
    with trio.fail_after(60):
        async with sandboxed(SandboxPolicy(memory_mb=256), LIMITS) as runner:
            result = await runner.call_tool("memory_hog", timeout=30)
            after = await runner.call_tool("heartbeat")
    assert result.kind == "limit_exceeded", result
    assert result.error is not None and result.error.limit == "memory"
    assert after.text == "beat"  # the host is unharmed


@needs_limits
async def test_fork_bomb_is_capped_and_leaves_no_survivor() -> None:
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats
        while True:
            await trio.sleep(0.05)
            beats += 1

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(heartbeat)
            async with sandboxed(SandboxPolicy(max_procs=64), LIMITS, grace=0.3) as runner:
                result = await runner.call_tool("fork_bomb", timeout=2)
            nursery.cancel_scope.cancel()
    assert result.kind == "timeout"
    assert beats >= 20  # the host's event loop kept ticking throughout (about 40 expected)
    # The autouse fixture asserts that no bomb process survived.


@needs_limits
async def test_steady_forker_with_setsid_grandchildren_leaves_no_survivor() -> None:
    with trio.fail_after(60):
        async with sandboxed(SandboxPolicy(), LIMITS, grace=0.3) as runner:
            result = await runner.call_tool("steady_forker", timeout=2)
    assert result.kind == "timeout"


async def test_cpu_limit() -> None:
    with trio.fail_after(60):
        async with sandboxed(SandboxPolicy(cpu_seconds=1), LIMITS) as runner:
            result = await runner.call_tool("burn_cpu", timeout=20)
    assert result.kind == "limit_exceeded", result
    assert result.error is not None and result.error.limit == "cpu" and result.error.signal == "SIGXCPU"


@pytest.mark.parametrize(
    ("tool", "policy", "limit"),
    [
        ("big_file", SandboxPolicy(file_size_mb=8), "file_size"),
        ("many_files", SandboxPolicy(open_files=256), "open_files"),
        ("chatty", SandboxPolicy(output_mb=2), "output"),
    ],
)
async def test_other_limits(tool: str, policy: SandboxPolicy, limit: str) -> None:
    with trio.fail_after(60):
        async with sandboxed(policy, LIMITS) as runner:
            result = await runner.call_tool(tool)
            after = await runner.call_tool("heartbeat")
    assert result.kind == "limit_exceeded", result
    assert result.error is not None and result.error.limit == limit
    assert after.text == "beat"


async def test_none_still_cleans_up_processes() -> None:
    """Even unconfined, a worker's tree lives in a kill boundary: no daemon outlives its call."""
    with trio.fail_after(30):
        async with sandboxed(NONE, TOOLS / "hostile.py") as runner:
            result = await runner.call_tool("daemon")
    (pid,) = result.details["pids"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_no_uid_drop_when_the_standard_library_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A venv can copy its interpreter out of a private home (/root): nobody could run it but not import os."""
    import shutil
    import sys

    from xcsh_run._sandbox import policy as _sandbox

    private = tmp_path / "private"
    (private / "python").mkdir(parents=True)
    private.chmod(0o700)
    runnable = os.path.realpath(shutil.which("sh") or "/bin/sh")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(sys, "executable", runnable)
    monkeypatch.setattr(sys, "prefix", os.path.dirname(runnable))
    monkeypatch.setattr(sys, "base_prefix", str(private / "python"))
    assert not _sandbox._measure(cgroup_v2=False, memory_cgroup=False, pids_cgroup=False).drop_uid_ok
    monkeypatch.setattr(sys, "base_prefix", os.path.dirname(runnable))
    assert _sandbox._measure(cgroup_v2=False, memory_cgroup=False, pids_cgroup=False).drop_uid_ok
