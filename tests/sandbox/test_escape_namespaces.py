"""Namespaces, keyrings and IPC: what a tool without capabilities could still make, and why it must not.

A user namespace needs no capability, and in it every other kind of namespace is the tool's: a new
cgroup namespace and a fresh cgroup2 mount whose root is the worker's own kill boundary let it move
any process of its uid (the host, a user's shell) into that boundary, which the host then kills at
the call's end. Keyrings are shared with the shell that started the host, and SysV and POSIX IPC
objects outlive the process that made them. So at ``contained`` and ``strict``: no namespace is
made or entered (seccomp, worker/_sandbox/nsrules.py), no key is touched, and IPC objects live in the
worker's own IPC namespace (root host), dying with its tree. Each attack runs from a Python and a
TypeScript tool, with the fork server on and off; at ``none`` the same calls reach the kernel (the
positive control), aimed only at what the test made itself.
"""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import make_runner, needs_strict
from tests.sandbox.test_escape_pid import BUN, LEVELS, _tool
from xcsh_run.worker._sandbox import nsrules as _nsrules

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWIPC, CLONE_NEWUSER = 0x20000, 0x02000000, 0x08000000, 0x10000000
CLONE_NEWNET, CLONE_NEWTIME = 0x40000000, 0x80
KEY_SPEC_SESSION_KEYRING = -3
NR = _nsrules.X86_64


def _cstr(text: str) -> dict[str, str]:
    return {"buf": (text.encode() + b"\0").hex()}


# (id, syscall number, arguments): each refused at contained and strict.
ATTACKS: list[tuple[str, int, list[Any]]] = [
    ("unshare_user", NR["unshare"], [CLONE_NEWUSER]),
    ("unshare_user_mount_cgroup", NR["unshare"], [CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP]),
    ("unshare_ipc", NR["unshare"], [CLONE_NEWIPC]),
    ("unshare_net", NR["unshare"], [CLONE_NEWNET]),
    ("unshare_time", NR["unshare"], [CLONE_NEWTIME]),
    # setns(-1): EBADF where the call reaches the kernel, EPERM where the filter stops it.
    ("setns", NR["setns"], [-1, 0]),
    ("keyctl_session", NR["keyctl"], [0, KEY_SPEC_SESSION_KEYRING, 0]),  # KEYCTL_GET_KEYRING_ID
    ("request_key", NR["request_key"], [_cstr("user"), _cstr("xcsh-run-test-no-such-key"), 0, 0]),
    ("clone3", NR["clone3"], [0, 0]),  # ENOSYS here, EFAULT/EINVAL from the kernel
]
WANT = {name: errno.ENOSYS if name == "clone3" else errno.EPERM for name, _, _ in ATTACKS}

COMBOS = [
    pytest.param(level, lang, fs, id=f"{level}-{lang}-{'forkserver' if fs else 'popen'}",
                 marks=[needs_strict] if level == "strict" else [])
    for level in ("contained", "strict", "none") for lang in ("py", "ts") for fs in (False, True)
]  # fmt: skip


@pytest.fixture
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "ns_attack_tools"


def _need_bun(lang: str) -> None:
    if lang == "ts" and BUN is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: no Bun for the TypeScript tool")
        pytest.skip("no Bun")


@pytest.mark.parametrize(("level", "lang", "forkserver"), COMBOS)
def test_no_namespace_and_no_keyring(level: str, lang: str, forkserver: bool, tmp: Path) -> None:
    _need_bun(lang)
    tool = _tool(tmp / f"{level}-{lang}-{forkserver}", lang)
    attacks = [{"id": name, "nr": nr, "args": args} for name, nr, args in ATTACKS]

    async def call() -> dict[str, dict[str, int]]:
        with trio.fail_after(60):
            async with make_runner(tool, sandbox=LEVELS[level], forkserver=forkserver) as runner:
                result = await runner.call_tool("syscalls", {"attacks": attacks})
                assert not result.is_error, result
                again = await runner.call_tool("syscalls", {"attacks": []})
                assert not again.is_error, again  # the worker carries on
                results: dict[str, dict[str, int]] = result.details["results"]
                return results

    got = trio.run(call)
    if level == "none":
        # Positive control: each call reached the kernel (a namespace may still be refused there for
        # its own reasons, e.g. EINVAL in a process with threads, but never by a filter).
        assert got["setns"]["errno"] == errno.EBADF, got
        assert got["keyctl_session"]["ret"] > 0, got
        assert got["request_key"]["errno"] in (errno.ENOKEY, errno.EKEYREVOKED, errno.EKEYEXPIRED), got
        assert got["clone3"]["errno"] != errno.ENOSYS, got
        assert got["unshare_user"]["errno"] != errno.EPERM, got
        return
    assert {name: r["errno"] for name, r in got.items()} == WANT, got
    assert all(r["ret"] == -1 for r in got.values()), got


# --- the whole attack: pull a bystander into the worker's boundary ------------------------------------

PULL = """
    import ctypes, os
    from xcsh_run.pi import CustomTool

    libc = ctypes.CDLL(None, use_errno=True)

    def factory(api):
        def pull(tcid, params, on_update, ctx, signal):
            # In a child, as a real attack would (a process with threads cannot make a user namespace).
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                out = os.fdopen(w, "w")
                try:
                    if libc.unshare(0x10000000 | 0x20000 | 0x02000000):
                        out.write(f"unshare errno {ctypes.get_errno()}")
                        return
                    libc.mount(None, b"/", None, (1 << 14) | (1 << 18), None)
                    os.makedirs(params["mnt"], exist_ok=True)
                    if libc.mount(b"none", params["mnt"].encode(), b"cgroup2", 0, None):
                        out.write(f"mount errno {ctypes.get_errno()}")
                        return
                    with open(os.path.join(params["mnt"], "cgroup.procs"), "w") as f:
                        f.write(str(params["victim"]))
                    out.write("moved")
                except OSError as exc:
                    out.write(f"failed {exc}")
                finally:
                    out.close()
                    os._exit(0)
            os.close(w)
            with os.fdopen(r) as f:
                said = f.read()
            os.waitpid(pid, 0)
            return said

        return CustomTool(name="pull", description="pull", parameters={"type": "object"}, execute=pull)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the bystander must be a process of the tool's uid: root here")
@pytest.mark.parametrize("level", ["contained", pytest.param("strict", marks=needs_strict)])
@pytest.mark.parametrize("forkserver", [False, True], ids=["popen", "forkserver"])
def test_a_bystander_cannot_be_pulled_into_the_workers_boundary(level: str, forkserver: bool, tmp_path: Path) -> None:
    tool = tmp_path / "pull.py"
    tool.write_text(textwrap.dedent(PULL))
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        before = Path(f"/proc/{victim.pid}/cgroup").read_text()

        async def call() -> str:
            with trio.fail_after(60):
                async with make_runner(tool, sandbox=LEVELS[level], forkserver=forkserver) as runner:
                    result = await runner.call_tool("pull", {"victim": victim.pid, "mnt": str(tmp_path / "mnt")})
                    assert not result.is_error, result
                    return result.text

        said = trio.run(call)
        assert said == f"unshare errno {errno.EPERM}", said
        assert victim.poll() is None, "the bystander was killed with the worker's boundary"
        assert Path(f"/proc/{victim.pid}/cgroup").read_text() == before
    finally:
        victim.kill()
        victim.wait()


# --- IPC objects die with the worker's tree -------------------------------------------------------------

IPC = """
    import ctypes
    from xcsh_run.pi import CustomTool

    libc = ctypes.CDLL(None, use_errno=True)

    def factory(api):
        def make(tcid, params, on_update, ctx, signal):
            shm = libc.shmget(params["key"], 1 << 16, 0o1000 | 0o600)  # IPC_CREAT
            msq = libc.msgget(params["key"], 0o1000 | 0o600)
            if shm < 0 or msq < 0:
                return f"refused errno {ctypes.get_errno()}"
            return "made"

        return CustomTool(name="make", description="make", parameters={"type": "object"}, execute=make)
"""


def _sysv_keys(table: str) -> set[int]:
    lines = Path(f"/proc/sysvipc/{table}").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines if line.strip()}


def _remove_sysv(key: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    shm, msq = libc.shmget(key, 0, 0), libc.msgget(key, 0)
    if shm >= 0:
        libc.shmctl(shm, 0, None)  # IPC_RMID
    if msq >= 0:
        libc.msgctl(msq, 0, None)


@pytest.mark.skipif(os.geteuid() != 0, reason="the IPC namespace comes with the root host's mount namespace")
@pytest.mark.parametrize("level", ["contained", pytest.param("strict", marks=needs_strict), "none"])
def test_sysv_ipc_objects_die_with_the_worker(level: str, tmp_path: Path) -> None:
    tool = tmp_path / "ipc.py"
    tool.write_text(textwrap.dedent(IPC))
    key = 0x5C5E0000 | (os.getpid() & 0xFFFF)
    try:

        async def call() -> str:
            with trio.fail_after(60):
                async with make_runner(tool, sandbox=LEVELS[level]) as runner:
                    result = await runner.call_tool("make", {"key": key})
                    assert not result.is_error, result
                    return result.text

        assert trio.run(call) == "made"
        left = key in _sysv_keys("shm") or key in _sysv_keys("msg")
        # At none the objects are the host's IPC namespace's, and stay: the control that they were made.
        assert left is (level == "none")
    finally:
        _remove_sysv(key)
