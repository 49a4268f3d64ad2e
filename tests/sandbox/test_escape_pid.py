"""Syscalls that name another process, aimed at the host and at a bystander (docs/sandbox.md, "Syscalls
that name another process").

A tool keeps the host's uid at ``contained`` (and at ``strict`` when no other uid can run the
interpreter), and Linux lets a process change the limits, priority, affinity, scheduling policy and I/O
priority of any process of its uid: ``prlimit64(host, RLIMIT_CPU, 1 s)`` would SIGKILL the host. Each
attack below is one raw syscall by number, made from a Python tool (ctypes ``syscall``) and from a
TypeScript tool (``bun:ffi``), with workers started by Popen and by the fork server, at ``contained``
and ``strict``. One call per run makes every attack against both targets and returns a table; the
tests read it row by row (a run is made once, by the first test that needs it, and is fully closed
before that test ends). What each row asserts:

- refused with the errno of the layer that stops it (EPERM from seccomp and Landlock's signal scope;
  EPERM or EACCES from a ptrace-mode check; the kernel's own answer where no level can do it);
- the host and the bystander alive, not stopped, their limits, nice value, affinity, policy and I/O
  priority what they were, and the worker answering the next call;
- positive controls: at ``none`` the same calls against the bystander (never against this process)
  work, so a refusal is the sandbox's; at ``contained`` and ``strict`` the same calls on the caller
  itself (pid 0, its own pid, a forked child, a thread) still work.

The attack values are mild (one more nice level, one fewer file, one CPU fewer, SIGCONT, a read of an
unmapped address): a sandbox that failed would fail the test without taking the test run down.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests._support.js import BUN, JS_TOOLS
from tests.conftest import MACHINE, make_runner, needs_strict
from xcsh_run import SandboxPolicy
from xcsh_run.worker._sandbox import apply as _sandbox
from xcsh_run.worker._sandbox import pidscope as _pidscope

LEVELS = {"contained": SandboxPolicy(), "strict": SandboxPolicy(level="strict"), "none": SandboxPolicy(level="none")}
needs_scopes = pytest.mark.skipif(
    MACHINE.landlock_abi < 6, reason=f"needs Landlock ABI 6 (signal scoping); this kernel has {MACHINE.landlock_abi}"
)
needs_bun = pytest.mark.skipif(BUN is None and os.environ.get("CI") != "true", reason="no Bun for the TypeScript tool")

PY_TOOL = r'''
import ctypes, os, sys

from xcsh_run.pi import CustomTool

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def run(attack):
    keep, fds = [], []
    try:
        args = []
        for a in attack["args"]:
            if isinstance(a, int):
                args.append(a)
            elif "buf" in a:
                raw = bytes.fromhex(a["buf"])
                buf = ctypes.create_string_buffer(raw, max(len(raw), 8))
                keep.append(buf)
                args.append(ctypes.addressof(buf))
            elif "iov" in a:
                data = ctypes.create_string_buffer(a["iov"])
                iov = (ctypes.c_uint64 * 2)(ctypes.addressof(data), a["iov"])
                keep += [data, iov]
                args.append(ctypes.addressof(iov))
            elif "pidfd" in a:
                fd = os.pidfd_open(a["pidfd"])
                fds.append(fd)
                args.append(fd)
        ret = libc.syscall(ctypes.c_long(attack["nr"]), *[ctypes.c_long(x) for x in args])
        err = ctypes.get_errno() if ret < 0 else 0
        if ret >= 0 and attack.get("returns_fd"):
            os.close(ret)
        return {"ret": ret, "errno": err}
    except OSError as exc:
        return {"ret": -1, "errno": exc.errno}
    finally:
        for fd in fds:
            os.close(fd)


def own_process(params):
    """What tools do to themselves, all of which must keep working."""
    import asyncio, resource, subprocess, threading

    out = {}

    def check(name, fn):
        try:
            value = fn()
            out[name] = {"ok": True, "value": value}
        except OSError as exc:
            out[name] = {"ok": False, "errno": exc.errno}

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    check("setrlimit", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard)))
    check("prlimit_own_pid", lambda: resource.prlimit(os.getpid(), resource.RLIMIT_NOFILE, (soft - 2, hard)))
    check("nice", lambda: os.nice(1))
    check("setpriority_pgrp_0", lambda: os.setpriority(os.PRIO_PGRP, 0, os.getpriority(os.PRIO_PROCESS, 0)))
    check("sched_setaffinity_0", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
    check("sched_setscheduler_0", lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)))
    check("sched_setparam_own_pid", lambda: os.sched_setparam(os.getpid(), os.sched_param(0)))

    def ioprio():
        if libc.syscall(ctypes.c_long(251), ctypes.c_long(1), ctypes.c_long(0), ctypes.c_long((2 << 13) | 7)) < 0:
            raise OSError(ctypes.get_errno(), "ioprio_set")
    check("ioprio_set_0", ioprio)

    def child():
        pid = os.fork()
        if pid == 0:
            try:
                os.nice(1)
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 3, hard))
                os.sched_setaffinity(0, os.sched_getaffinity(0))
                os._exit(0)
            except BaseException:
                os._exit(1)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    check("forked_child", child)

    def in_thread():
        got = {}
        def body():
            try:
                os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + 1)
                os.sched_setaffinity(0, os.sched_getaffinity(0))
                got["own"] = "ok"
            except OSError as exc:
                got["own"] = exc.errno
            got["tid"] = threading.get_native_id()
        t = threading.Thread(target=body)
        t.start()
        t.join()
        return got
    check("thread", in_thread)
    check("asyncio", lambda: asyncio.run(asyncio.sleep(0, "ran")))
    check("subprocess", lambda: subprocess.run([sys.executable, "-c", "print('sub')"], capture_output=True,
                                               text=True).stdout.strip())
    if params.get("psutil"):
        def ps():
            import psutil
            me = psutil.Process()
            me.nice(me.nice() + 1)
            me.cpu_affinity(me.cpu_affinity())
            me.rlimit(psutil.RLIMIT_NOFILE, (soft - 4, hard))
            me.ionice(psutil.IOPRIO_CLASS_BE, 7)
            return [me.nice(), me.rlimit(psutil.RLIMIT_NOFILE)[0]]
        check("psutil", ps)
    return out


def int80(call):
    """One syscall through the 32-bit entry point (int 0x80), in a child: a kernel without ia32
    emulation answers it with SIGSEGV. Returns the raw result (-errno), or None when unavailable."""
    import mmap, struct
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    # Below 4 GiB (MAP_32BIT): the 32-bit entry point reads 32-bit pointers.
    page = libc.mmap(None, 4096, 7, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40, -1, 0)
    data = page + 2048
    ctypes.memmove(data, struct.pack("=QQ", *call["limit"]), 16)
    regs = [call["nr"], call["pid"], call["resource"], data, 0]
    code = b"\x53"  # push rbx (callee-saved)
    for opcode, value in zip((0xB8, 0xBB, 0xB9, 0xBA, 0xBE), regs):  # mov eax/ebx/ecx/edx/esi, imm32
        code += bytes([opcode]) + struct.pack("=I", value & 0xFFFFFFFF)
    code += b"\xcd\x80\x5b\xc3"  # int 0x80; pop rbx; ret
    ctypes.memmove(page, code, len(code))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        result = ctypes.CFUNCTYPE(ctypes.c_int)(page)()
        os.write(w, struct.pack("=i", result))
        os._exit(0)
    os.close(w)
    got = os.read(r, 4)
    os.close(r)
    os.waitpid(pid, 0)
    return struct.unpack("=i", got)[0] if len(got) == 4 else None


def execute(tool_call_id, params, on_update, ctx, signal_):
    if "open_write" in params:
        # Opened for writing and closed again, nothing written: a sysctl changes only on write().
        opened = {}
        for path in params["open_write"]:
            try:
                os.close(os.open(path, os.O_WRONLY))
                opened[path] = 0
            except OSError as exc:
                opened[path] = exc.errno
        return {"content": [{"type": "text", "text": "done"}], "details": opened}
    if "int80" in params:
        details = {name: int80(call) for name, call in params["int80"].items()}
        return {"content": [{"type": "text", "text": "done"}], "details": details}
    details = {
        "results": {a["id"]: run(a) for a in params.get("attacks", [])},
        "pid": os.getpid(),
        "uid": os.getuid(),
        "seccomp": libc.prctl(21, 0, 0, 0, 0),  # PR_GET_SECCOMP: 2 under a filter
    }
    if params.get("own"):
        details["own"] = own_process(params)
    return {"content": [{"type": "text", "text": "done"}], "details": details}


def factory(api):
    return CustomTool(name="syscalls", description="raw syscalls", parameters={"type": "object"}, execute=execute)
'''

# --- the attacks -------------------------------------------------------------------------------------

SIGCONT = int(signal.SIGCONT)
BE7 = (2 << 13) | 7  # IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7)
NOBODY_HAS = 4242421  # a uid with no process: PRIO_USER / IOPRIO_WHO_USER reach the kernel without effect
PERF_ATTR = struct.pack("=IIQQQQQIIQ", 1, 64, 1, 0, 0, 0, 1 | 1 << 5 | 1 << 6, 0, 0, 0)  # sw task-clock, user only
SIGINFO = struct.pack("=iii", SIGCONT, 0, -1).ljust(128, b"\0")  # si_code SI_QUEUE
CAP_HEADER = 0x20080522

SECCOMP, SCOPE, PTRACE, KERNEL = "seccomp", "Landlock signal scope", "ptrace-mode check", "kernel"


@dataclass(frozen=True)
class State:
    """What an attack could change in a process (its main thread), as the test process reads it."""

    nofile: tuple[int, int]
    nice: int
    affinity: frozenset[int]
    policy: int
    ioprio: int

    @staticmethod
    def of(pid: int) -> State:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        return State(
            nofile=resource.prlimit(pid, resource.RLIMIT_NOFILE),
            nice=os.getpriority(os.PRIO_PROCESS, pid),
            affinity=frozenset(os.sched_getaffinity(pid)),
            policy=os.sched_getscheduler(pid),
            ioprio=int(libc.syscall(ctypes.c_long(252), ctypes.c_long(1), ctypes.c_long(pid))),
        )


def _buf(data: bytes) -> dict[str, str]:
    return {"buf": data.hex()}


def _fewer_cpus(cpus: frozenset[int]) -> int:
    keep = sorted(cpus)[: max(1, len(cpus) - 1)]
    return sum(1 << c for c in keep)


@dataclass(frozen=True)
class Attack:
    name: str
    stop: str  # the layer that refuses it at contained and strict
    refused: frozenset[int]  # the errnos that count as refused
    build: Callable[[int, State], tuple[int, list[Any]]]
    works_at_none: frozenset[int] = frozenset({0})  # errno at none against the bystander (0: success)
    returns_fd: bool = False
    needs_scope: bool = False


EPERM = frozenset({errno.EPERM})
PT = frozenset({errno.EPERM, errno.EACCES})
ATTACKS = [
    Attack(
        "prlimit64",
        SECCOMP,
        EPERM,
        lambda t, s: (302, [t, resource.RLIMIT_NOFILE, _buf(struct.pack("=QQ", s.nofile[0] - 1, s.nofile[1])), 0]),
    ),
    Attack(
        "prlimit64_high_word",
        SECCOMP,
        EPERM,
        lambda t, s: (
            302,
            [t | 1 << 32, resource.RLIMIT_NOFILE, _buf(struct.pack("=QQ", s.nofile[0] - 1, s.nofile[1])), 0],
        ),
    ),
    Attack("setpriority_process", SECCOMP, EPERM, lambda t, s: (141, [os.PRIO_PROCESS, t, s.nice + 1])),
    Attack("setpriority_pgrp", SECCOMP, EPERM, lambda t, s: (141, [os.PRIO_PGRP, os.getpgid(t), s.nice + 1])),
    Attack(
        "setpriority_user",
        SECCOMP,
        EPERM,
        lambda t, s: (141, [os.PRIO_USER, NOBODY_HAS, 19]),
        works_at_none=frozenset({errno.ESRCH}),
    ),
    Attack(
        "sched_setaffinity",
        SECCOMP,
        EPERM,
        lambda t, s: (203, [t, 8, _buf(struct.pack("=Q", _fewer_cpus(s.affinity)))]),
    ),
    Attack("sched_setscheduler", SECCOMP, EPERM, lambda t, s: (144, [t, os.SCHED_BATCH, _buf(bytes(8))])),
    Attack("sched_setparam", SECCOMP, EPERM, lambda t, s: (142, [t, _buf(bytes(8))])),
    Attack(
        "sched_setattr",
        SECCOMP,
        EPERM,
        lambda t, s: (314, [t, _buf(struct.pack("=IIQiIQQQ", 48, 0, 0, s.nice + 2, 0, 0, 0, 0)), 0]),
    ),
    Attack("ioprio_set_process", SECCOMP, EPERM, lambda t, s: (251, [1, t, BE7])),
    Attack("ioprio_set_pgrp", SECCOMP, EPERM, lambda t, s: (251, [2, os.getpgid(t), BE7])),
    Attack(
        "ioprio_set_user",
        SECCOMP,
        EPERM,
        lambda t, s: (251, [3, NOBODY_HAS, BE7]),
        works_at_none=frozenset({errno.ESRCH}),
    ),
    Attack("kill", SCOPE, EPERM, lambda t, s: (62, [t, SIGCONT]), needs_scope=True),
    Attack("tkill", SCOPE, EPERM, lambda t, s: (200, [t, SIGCONT]), needs_scope=True),
    Attack("tgkill", SCOPE, EPERM, lambda t, s: (234, [t, t, SIGCONT]), needs_scope=True),
    Attack("rt_sigqueueinfo", SCOPE, EPERM, lambda t, s: (129, [t, SIGCONT, _buf(SIGINFO)]), needs_scope=True),
    Attack("rt_tgsigqueueinfo", SCOPE, EPERM, lambda t, s: (297, [t, t, SIGCONT, _buf(SIGINFO)]), needs_scope=True),
    Attack("pidfd_send_signal", SCOPE, EPERM, lambda t, s: (424, [{"pidfd": t}, SIGCONT, 0, 0]), needs_scope=True),
    Attack("ptrace_seize", PTRACE, PT, lambda t, s: (101, [0x4206, t, 0, 0])),
    Attack(
        "process_vm_readv",
        PTRACE,
        PT,
        lambda t, s: (310, [t, {"iov": 8}, 1, _buf(struct.pack("=QQ", 0x10000, 8)), 1, 0]),
        works_at_none=frozenset({errno.EFAULT}),
    ),
    Attack(
        "process_vm_writev",
        PTRACE,
        PT,
        lambda t, s: (311, [t, {"iov": 8}, 1, _buf(struct.pack("=QQ", 0x10000, 8)), 1, 0]),
        works_at_none=frozenset({errno.EFAULT}),
    ),
    Attack("kcmp", PTRACE, PT, lambda t, s: (312, [t, t, 1, 0, 0])),  # KCMP_VM
    Attack("get_robust_list", PTRACE, PT, lambda t, s: (274, [t, _buf(bytes(8)), _buf(bytes(8))])),
    Attack("pidfd_getfd", PTRACE, PT, lambda t, s: (438, [{"pidfd": t}, 0, 0]), returns_fd=True),
    Attack(
        "process_madvise",
        PTRACE,
        PT,
        lambda t, s: (440, [{"pidfd": t}, _buf(struct.pack("=QQ", 0x10000, 4096)), 1, 20, 0]),
        works_at_none=frozenset({0, errno.ENOMEM, errno.EINVAL}),
    ),  # MADV_COLD
    Attack(
        "migrate_pages",
        PTRACE,
        PT,
        lambda t, s: (256, [t, 64, _buf(struct.pack("=Q", 1)), _buf(struct.pack("=Q", 1))]),
        works_at_none=frozenset({0, errno.ENOSYS}),
    ),
    Attack(
        "move_pages", PTRACE, PT, lambda t, s: (279, [t, 0, 0, 0, 0, 0]), works_at_none=frozenset({0, errno.ENOSYS})
    ),
    Attack(
        "perf_event_open",
        PTRACE,
        PT,
        lambda t, s: (298, [_buf(PERF_ATTR), t, -1, -1, 0]),
        returns_fd=True,
        works_at_none=frozenset({0, errno.ENOENT, errno.ENODEV}),
    ),
    # No level lets these reach another process: the kernel's own rules.
    Attack(
        "capset",
        KERNEL,
        EPERM,
        lambda t, s: (126, [_buf(struct.pack("=Ii", CAP_HEADER, t)), _buf(bytes(24))]),
        works_at_none=EPERM,
    ),
    Attack(
        "setpgid",
        KERNEL,
        frozenset({errno.ESRCH, errno.EPERM}),
        lambda t, s: (109, [t, t]),
        works_at_none=frozenset({errno.ESRCH}),
    ),
    # P_PID, WEXITED | WNOHANG. At none the worker has just seized the bystander, and a tracer may wait for it.
    Attack(
        "waitid",
        KERNEL,
        frozenset({errno.ECHILD}),
        lambda t, s: (247, [1, t, 0, 5, 0]),
        works_at_none=frozenset({errno.ECHILD, 0}),
    ),
    Attack(
        "process_mrelease",
        KERNEL,
        frozenset({errno.EINVAL}),
        lambda t, s: (448, [{"pidfd": t}, 0]),
        works_at_none=frozenset({errno.EINVAL}),
    ),  # only a process already being killed
]
BY_NAME = {a.name: a for a in ATTACKS}
# Reads are open at every level (Bun reads its threads' affinity by tid, psutil limits by pid).
READS = {
    "prlimit64_read": lambda t: (302, [t, resource.RLIMIT_NOFILE, 0, _buf(bytes(16))]),
    "getpriority": lambda t: (140, [os.PRIO_PROCESS, t]),
    "sched_getaffinity": lambda t: (204, [t, 8, _buf(bytes(8))]),
    "sched_getscheduler": lambda t: (145, [t]),
    "ioprio_get": lambda t: (252, [1, t]),
}


@dataclass
class Run:
    results: dict[str, dict[str, int]]
    details: dict[str, Any]
    before: dict[str, State]
    after: dict[str, State]
    alive: dict[str, bool]
    answered: bool
    targets: dict[str, int] = field(default_factory=dict)


_RUNS: dict[tuple[str, str, bool, bool], Run] = {}


def _tool(folder: Path, lang: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if lang == "ts":
        path = folder / "pid_attack.ts"
        path.write_text((JS_TOOLS / "pid_attack.ts").read_text())
    else:
        path = folder / "pid_attack.py"
        path.write_text(PY_TOOL)
    return path


# A bystander without capabilities, as every process of a host that is not root is: commoncap
# refuses nice, scheduler and I/O-priority changes to a target whose capabilities the caller lacks
# (the root host, a root bystander), so against this one only the seccomp rules stand.
CAPLESS = r"""
import ctypes, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
for cap in range(64):
    libc.prctl(24, cap, 0, 0, 0)
header = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0), 8)
if libc.syscall(126, header, ctypes.create_string_buffer(24)) != 0:
    sys.exit("capset failed")
print("ready", flush=True)
time.sleep(60)
"""


def _spawn_bystanders() -> dict[str, subprocess.Popen[bytes]]:
    procs = {"bystander": subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL, start_new_session=True)}
    capless = subprocess.Popen([sys.executable, "-c", CAPLESS], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               start_new_session=True)  # fmt: skip
    procs["capless"] = capless
    assert capless.stdout is not None and capless.stdout.readline() == b"ready\n"
    return procs


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


def run_attacks(level: str, lang: str, forkserver: bool, tmp: Path, *, own: bool = False) -> Run:
    """Every attack against the host and a bystander in one call (cached per level, language and spawn)."""
    key = (level, lang, forkserver, own)
    if key in _RUNS:
        return _RUNS[key]
    if lang == "ts" and BUN is None:
        pytest.fail("CI=true: no Bun for the TypeScript tool") if os.environ.get("CI") == "true" else pytest.skip(
            "no Bun"
        )
    bystanders = _spawn_bystanders()
    try:
        # Never this process at none: only the bystanders there.
        targets = {name: proc.pid for name, proc in bystanders.items()}
        if level != "none":
            targets["host"] = os.getpid()
        before = {name: State.of(pid) for name, pid in targets.items()}
        attacks: list[dict[str, Any]] = []
        for name, pid in targets.items():
            for a in ATTACKS:
                nr, args = a.build(pid, before[name])
                attacks.append({"id": f"{a.name}@{name}", "nr": nr, "args": args, "returns_fd": a.returns_fd})
            for read, make in READS.items():
                nr, args = make(pid)
                attacks.append({"id": f"{read}@{name}", "nr": nr, "args": args})
        if level != "none":
            attacks.append({"id": "kill_all@-1", "nr": 62, "args": [-1, 0]})
            attacks.append({"id": "kill_all_high_word@-1", "nr": 62, "args": [0xFFFFFFFF, 0]})
        if own:
            attacks += _self_attacks()
        tool = _tool(tmp / f"{level}-{lang}-{forkserver}-{own}", lang)
        params: dict[str, Any] = {"attacks": attacks, "own": own, "psutil": level == "contained"}

        async def call() -> tuple[dict[str, Any], bool]:
            with trio.fail_after(60):
                async with make_runner(tool, sandbox=LEVELS[level], forkserver=forkserver) as runner:
                    assert runner.errors == [], runner.errors
                    result = await runner.call_tool("syscalls", params)
                    assert not result.is_error, result
                    again = await runner.call_tool("syscalls", {"attacks": []})
                    return result.details, not again.is_error

        details, answered = trio.run(call)
        after = {name: State.of(pid) for name, pid in targets.items()}
        alive = {name: _alive(pid) for name, pid in targets.items()}
    finally:
        for proc in bystanders.values():
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    run = Run(details["results"], details, before, after, alive, answered, targets)
    _RUNS[key] = run
    return run


COMBOS = [
    pytest.param(level, lang, fs, id=f"{level}-{lang}-{'forkserver' if fs else 'popen'}",
                 marks=[needs_strict] if level == "strict" else [])
    for level in ("contained", "strict") for lang in ("py", "ts") for fs in (False, True)
]  # fmt: skip


@pytest.fixture
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "pid_attack_tools"


@pytest.mark.parametrize("target", ["host", "bystander", "capless"])
@pytest.mark.parametrize("attack", [a.name for a in ATTACKS])
@pytest.mark.parametrize(("level", "lang", "forkserver"), COMBOS)
def test_attack_is_refused(level: str, lang: str, forkserver: bool, attack: str, target: str, tmp: Path) -> None:
    a = BY_NAME[attack]
    if a.needs_scope and MACHINE.landlock_abi < 6:
        pytest.skip(f"signals are scoped from Landlock ABI 6; this kernel has {MACHINE.landlock_abi}")
    run = run_attacks(level, lang, forkserver, tmp)
    got = run.results[f"{attack}@{target}"]
    assert got["ret"] < 0 and got["errno"] in a.refused, (
        f"{attack} against the {target} at {level} ({a.stop}): {got}, errno {errno.errorcode.get(got['errno'])}"
    )


@pytest.mark.parametrize(("level", "lang", "forkserver"), COMBOS)
def test_targets_unchanged_and_alive(level: str, lang: str, forkserver: bool, tmp: Path) -> None:
    run = run_attacks(level, lang, forkserver, tmp)
    assert run.before == run.after, (run.before, run.after)
    assert run.alive == {"host": True, "bystander": True, "capless": True}
    assert run.answered, "the worker did not answer the call after the attacks"
    assert run.details["seccomp"] == 2, "no seccomp filter in the worker"
    # Reads are open: the same numbers are in /proc/<pid>/stat, status and limits.
    for read in READS:
        for target in run.targets:
            assert run.results[f"{read}@{target}"]["ret"] >= 0, (read, target, run.results[f"{read}@{target}"])
    for name in ("kill_all@-1", "kill_all_high_word@-1"):
        assert run.results[name] == {"ret": -1, "errno": errno.EPERM}, (name, run.results[name])


@pytest.mark.parametrize(("level", "lang", "forkserver"), COMBOS)
def test_worker_uid(level: str, lang: str, forkserver: bool, tmp: Path) -> None:
    # contained keeps the host's uid (it writes the user's project); strict drops to nobody only where
    # nobody can run the interpreter and read the tool (not here: a tool under pytest's 0700 basetemp).
    run = run_attacks(level, lang, forkserver, tmp)
    if level == "contained":
        assert run.details["uid"] == os.getuid()
    else:
        assert run.details["uid"] in ({os.getuid(), 65534} if os.getuid() == 0 else {os.getuid()})


@pytest.mark.parametrize("forkserver", [False, True], ids=["popen", "forkserver"])
@pytest.mark.parametrize("lang", ["py", "ts"])
def test_none_positive_control(lang: str, forkserver: bool, tmp: Path) -> None:
    """At none the same calls against the bystander work: the refusals above are the sandbox's."""
    run = run_attacks("none", lang, forkserver, tmp)
    failed = {}
    for target in ("bystander", "capless"):
        for a in ATTACKS:
            if a.needs_scope and MACHINE.landlock_abi < 6:
                continue
            got = run.results[f"{a.name}@{target}"]
            outcome = 0 if got["ret"] >= 0 else got["errno"]
            if outcome not in a.works_at_none:
                failed[f"{a.name}@{target}"] = errno.errorcode.get(outcome, outcome)
    assert not failed, failed
    for target in ("bystander", "capless"):
        before, after = run.before[target], run.after[target]
        assert after.nofile == (before.nofile[0] - 1, before.nofile[1])
        assert after.nice == before.nice + 2  # setpriority set before + 1, sched_setattr (later) before + 2
        assert after.policy == os.SCHED_OTHER  # sched_setattr came after sched_setscheduler(SCHED_BATCH)
        assert after.ioprio == BE7
        if len(before.affinity) > 1:
            assert after.affinity < before.affinity


@pytest.mark.parametrize(
    ("level", "lang", "forkserver"),
    [pytest.param("contained", "py", False, id="contained-py-popen"),
     pytest.param("contained", "py", True, id="contained-py-forkserver"),
     pytest.param("strict", "py", False, id="strict-py-popen", marks=needs_strict),
     pytest.param("contained", "ts", False, id="contained-ts-popen"),
     pytest.param("strict", "ts", False, id="strict-ts-popen", marks=needs_strict)],
)  # fmt: skip
def test_own_process_calls_still_work(level: str, lang: str, forkserver: bool, tmp: Path) -> None:
    run = run_attacks(level, lang, forkserver, tmp, own=True)
    own_calls = {k: v for k, v in run.results.items() if k.endswith("@self")}
    assert len(own_calls) == len(_self_attacks()) and all(v["ret"] >= 0 for v in own_calls.values()), own_calls
    if lang == "ts":
        # Bun and JavaScriptCore's threads run under the filter, and a Worker thread answers.
        assert run.details["thread"] == 42
        return
    own = run.details["own"]
    failed = {name: out for name, out in own.items() if not out["ok"]}
    assert not failed, failed
    assert own["forked_child"]["value"] == 0
    assert own["thread"]["value"]["own"] == "ok"
    assert own["subprocess"]["value"] == "sub"
    if level == "contained":
        assert "psutil" in own


def _self_attacks() -> list[dict[str, Any]]:
    """The writers aimed at the caller itself (pid 0), for the TypeScript tool's positive control."""
    # Below the policy's open_files (1024): lowering needs no privilege.
    return [
        {
            "id": "prlimit64@self",
            "nr": 302,
            "args": [0, resource.RLIMIT_NOFILE, _buf(struct.pack("=QQ", 512, 1000)), 0],
        },
        {"id": "setpriority@self", "nr": 141, "args": [os.PRIO_PROCESS, 0, 5]},
        {"id": "sched_setaffinity@self", "nr": 203, "args": [0, 8, _buf(struct.pack("=Q", 1))]},
        {"id": "sched_setscheduler@self", "nr": 144, "args": [0, os.SCHED_BATCH, _buf(bytes(8))]},
        {"id": "ioprio_set@self", "nr": 251, "args": [1, 0, BE7]},
    ]


# --- the filter itself, decided by a cBPF interpreter on crafted arguments -----------------------------


def _bpf(program: bytes, nr: int, args: list[int], arch: int = _sandbox.AUDIT_ARCH_X86_64) -> int:
    data = struct.pack("=iIQ6Q", nr, arch, 0, *[a & (1 << 64) - 1 for a in [*args, 0, 0, 0, 0, 0, 0][:6]])
    acc, pc = 0, 0
    insns = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x06:
            return k
        elif code == 0x05:
            pc += k
        elif code in (0x15, 0x35, 0x45):
            hit = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
            pc += jt if hit else jf
        elif code == 0x54:
            acc &= k
        else:
            raise AssertionError(f"unknown cBPF op {code:#x}")


SELF = 4242


@pytest.mark.parametrize("build", ["contained", "strict"])
def test_filter_decides_on_the_low_word_and_the_pointer(build: str) -> None:
    program = (
        _sandbox.build_contained_filter(SELF) if build == "contained" else
        _sandbox.build_filter(fake_metadata=True, self_pid=SELF)
    )  # fmt: skip
    allow, eperm = _pidscope.RET_ALLOW, _pidscope.EPERM_RET
    host = 1234
    cases = [
        (302, [host, 7, 0x7FFF0000, 0], eperm),
        (302, [host | 1 << 32, 7, 0x7FFF0000, 0], eperm),  # the kernel sees pid 1234
        (302, [1 << 32, 7, 0x7FFF0000, 0], allow),  # the kernel sees pid 0
        (302, [SELF | 0xFFFF << 48, 7, 0x7FFF0000, 0], allow),
        (302, [host, 7, 0, 0x7FFF0000], allow),  # NULL new: a read
        (302, [host, 7, 1 << 32, 0], eperm),  # not NULL: only the high word set
        (141, [2, 0, 19], eperm),  # PRIO_USER who 0: every process of the uid
        (141, [2 | 1 << 32, 0, 19], eperm),
        (141, [0 | 1 << 32, 0, 1], allow),  # the kernel sees PRIO_PROCESS
        (141, [1, 0, 1], allow),
        (141, [1, host, 1], eperm),
        (251, [3, 0, BE7], eperm),
        (251, [1, SELF, BE7], allow),
        (203, [0, 8, 0x1000], allow),
        (203, [host, 8, 0x1000], eperm),
        (314, [SELF, 0x1000, 0], allow),
        (62, [-1, 9], eperm),
        (62, [0xFFFFFFFF, 9], eperm),
        (62, [host, 9], allow),  # Landlock's scope decides
        (140, [2, 0], allow),  # reads
        (0, [0, 0, 0], allow),
    ]
    for nr, args, want in cases:
        assert _bpf(program, nr, args) == want, (nr, [hex(a) for a in args], hex(_bpf(program, nr, args)))
    # x32: EPERM at both levels; i386: the same rules with its own numbers at contained, killed at strict.
    assert _bpf(program, 302 | _sandbox.X32_BIT, [0, 7, 0, 0]) == eperm
    i386 = [(340, [host, 7, 0x1000, 0], eperm), (340, [0, 7, 0x1000, 0], allow), (97, [2, 0, 19], eperm),
            (37, [0xFFFFFFFF, 9], eperm), (3, [0, 0, 0], allow)]  # fmt: skip
    for nr, args, want in i386:
        got = _bpf(program, nr, args, arch=_sandbox.AUDIT_ARCH_I386)
        assert got == (want if build == "contained" else _sandbox.RET_KILL_PROCESS), (nr, args, hex(got))
    assert _bpf(program, 0, [], arch=0xDEAD) in (eperm, _sandbox.RET_KILL_PROCESS)


# --- the 32-bit entry point ------------------------------------------------------------------------------


@pytest.mark.parametrize("forkserver", [False, True], ids=["popen", "forkserver"])
@pytest.mark.parametrize("level", ["contained", "none"])
def test_i386_entry_point_has_the_same_rules(level: str, forkserver: bool, tmp: Path) -> None:
    """prlimit64 through int 0x80 (i386 number 340): contained applies the same rules, so a 32-bit
    program keeps working on itself and cannot reach the host; at none it reaches the bystander."""
    bystanders = _spawn_bystanders()
    try:
        target = os.getpid() if level == "contained" else bystanders["capless"].pid
        before = State.of(target)
        lower = [before.nofile[0] - 1, before.nofile[1]]
        calls = {
            "other": {
                "nr": _pidscope.I386["prlimit64"],
                "pid": target,
                "resource": resource.RLIMIT_NOFILE,
                "limit": lower,
            },
            "self": {
                "nr": _pidscope.I386["prlimit64"],
                "pid": 0,
                "resource": resource.RLIMIT_NOFILE,
                "limit": [512, 1000],
            },
        }
        tool = _tool(tmp / f"int80-{level}-{forkserver}", "py")

        async def call() -> dict[str, Any]:
            with trio.fail_after(30):
                async with make_runner(tool, sandbox=LEVELS[level], forkserver=forkserver) as runner:
                    result = await runner.call_tool("syscalls", {"int80": calls})
                    assert not result.is_error, result
                    details: dict[str, Any] = result.details
                    return details

        got = trio.run(call)
        after = State.of(target)
        alive = _alive(target)
    finally:
        for proc in bystanders.values():
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    if got["self"] is None:
        pytest.skip("this kernel runs no 32-bit syscalls (no ia32 emulation)")
    assert got["self"] == 0, got
    assert alive
    if level == "contained":
        assert got["other"] == -errno.EPERM, got
        assert after == before
    else:
        assert got["other"] == 0, got
        assert after.nofile == tuple(lower)


# --- the kernel's settings: root's files, guarded by their mode alone -----------------------------------

SETTINGS = ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/pid_max", "/sys/kernel/mm/transparent_hugepage/enabled"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a tool of a host that is not root does not own these files")
@pytest.mark.parametrize("level", ["contained", "none"])
def test_kernel_settings_are_read_only(level: str, tmp: Path) -> None:
    """A root tool without capabilities still owns /proc/sys and /sys: kernel.core_pattern set to a program
    of its own would run that program as root with every capability. Read-only in the worker's mount namespace."""
    paths = [p for p in SETTINGS if os.path.exists(p)]
    tool = _tool(tmp / f"settings-{level}", "py")

    async def call() -> dict[str, int]:
        with trio.fail_after(30):
            async with make_runner(tool, sandbox=LEVELS[level]) as runner:
                result = await runner.call_tool("syscalls", {"open_write": paths})
                assert not result.is_error, result
                details: dict[str, int] = result.details
                return details

    got = trio.run(call)
    want = 0 if level == "none" else errno.EROFS
    assert got == dict.fromkeys(paths, want), got


# --- every process's own /proc files: root's, guarded by their mode alone ---------------------------------

# Each one changes its process without any ptrace-mode check: a raised oom_score_adj makes the host
# the OOM killer's first choice, autogroup renices the host's whole session, and the others
# change how it dumps core or how its timers fire.
PER_PROCESS = ["oom_score_adj", "oom_adj", "autogroup", "coredump_filter", "timerslack_ns", "comm", "sched"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a tool of a host that is not root does not own the host's files")
@pytest.mark.parametrize("level", ["contained", "strict", "none"])
def test_no_process_file_of_the_host_can_be_opened_for_writing(level: str, tmp: Path) -> None:
    """Opening for writing, writing nothing: EROFS in the worker's mount namespace, while /proc/self/fd/N
    (a magic link to a file on its own mount) still opens, so /dev/stdout keeps working."""
    host = [f"/proc/{os.getpid()}/{name}" for name in PER_PROCESS if os.path.exists(f"/proc/{os.getpid()}/{name}")]
    tool = _tool(tmp / f"procfiles-{level}", "py")

    async def call() -> dict[str, int]:
        with trio.fail_after(30):
            async with make_runner(tool, sandbox=LEVELS[level]) as runner:
                result = await runner.call_tool("syscalls", {"open_write": [*host, "/proc/self/fd/1"]})
                assert not result.is_error, result
                details: dict[str, int] = result.details
                return details

    got = trio.run(call)
    assert got.pop("/proc/self/fd/1") == 0
    # strict: its Landlock rules may refuse first (EACCES), where the read-only mount would say EROFS.
    want = {0} if level == "none" else {errno.EROFS} if level == "contained" else {errno.EROFS, errno.EACCES}
    assert host and all(got[path] in want for path in host), got
