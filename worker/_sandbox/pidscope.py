"""The seccomp rules that keep syscalls naming a process to the caller itself (``contained`` and ``strict``).

Linux lets a process change the resource limits, nice value, CPU affinity,
scheduling policy and I/O priority of any process of the same uid, and a
tool keeps the host's uid (at ``contained`` always; at ``strict`` when no
other uid can run the interpreter). ``prlimit64(host, RLIMIT_CPU, 1 s)``
would SIGKILL the host. :func:`rules` returns the cBPF fragment that both
levels' filters (``_sandbox.build_filter``) put right after their
architecture checks:

1. **Writers with a pid argument act only on the caller**: ``prlimit64``,
   ``sched_setaffinity``, ``sched_setscheduler``, ``sched_setparam`` and
   ``sched_setattr`` with pid 0 or the worker's own pid; ``setpriority`` with
   ``PRIO_PROCESS``/``PRIO_PGRP`` and who 0 or the worker's pid (never
   ``PRIO_USER``: who 0 there means every process of the uid);
   ``ioprio_set`` likewise with ``IOPRIO_WHO_PROCESS``/``IOPRIO_WHO_PGRP``.
   ``prlimit64`` with a NULL new limit only reads, and is allowed for any
   pid, as are the readers (``getpriority``, ``sched_get*``,
   ``ioprio_get``): Bun's threads read their affinity by tid, psutil reads
   limits by pid, and the same numbers are in ``/proc/<pid>/stat``,
   ``status`` and ``limits``.
2. **The worker's own pid counts as self**, so that psutil's
   ``Process().nice(5)`` and ``rlimit()`` (which pass ``os.getpid()``) and
   Bun, which runs in the worker's process after ``exec``, keep working. A
   process the tool forks has another pid: it uses 0 (glibc's ``setrlimit``,
   ``os.nice``, ``os.sched_setaffinity(0, ...)`` all do), or may act on the
   worker, which is inside its own tree. Another thread's tid is refused:
   the filter cannot know which tids are the caller's own.
3. **Pids are compared on their low 32 bits only.** The kernel reads a
   ``pid_t``, an ``int``: it truncates the register, so the low word is
   exactly the pid it acts on, whatever the high word holds (the x86_64 ABI
   leaves it undefined for an ``int``). Checking all 64 bits is the mistake
   of CVE-2019-10063 turned around: ``0x1_00000000 | host`` must not pass a
   test that ``host`` fails, and with this allow-list it cannot. A pointer
   (``prlimit64``'s new limit) is 64 bits: both words must be 0 for NULL.
4. **``kill(-1, sig)`` is refused**: it signals every process the caller
   may signal. Landlock's signal scope (ABI 6) already confines it to the
   worker's domain; below ABI 6 this rule is what stands.
5. **Refusals are EPERM**, never a kill: libraries probe these calls and
   take EPERM as "not allowed here".

Left to the kernel, with what stops them (docs/sandbox.md, "Syscalls that
name another process"): the other signal calls (Landlock's scope),
``ptrace``, ``process_vm_*``, ``kcmp``, ``get_robust_list``, ``pidfd_getfd``,
``process_madvise``, ``migrate_pages``, ``move_pages`` and
``perf_event_open`` with a pid (ptrace-mode checks that every Landlock domain
fails for a process outside it, and the host is non-dumpable),
``capset`` with a pid (always EPERM), ``setpgid`` and ``waitid``/``wait4``
(own children only), ``process_mrelease`` (only a process already dying).
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass
from typing import Final

LD_W_ABS, JA, JEQ_K, RET_K = 0x20, 0x05, 0x15, 0x06
RET_ERRNO: Final = 0x00050000
RET_ALLOW: Final = 0x7FFF0000
EPERM_RET: Final = RET_ERRNO | errno.EPERM

PRIO_PROCESS, PRIO_PGRP = 0, 1
IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP = 1, 2

# The calls the fragment decides, by name: their numbers on x86_64 and on i386
# (``int 0x80``, which ``contained`` lets 32-bit programs use: the same rules
# apply there, or a tool would reach the host through the 32-bit entry point).
X86_64: Final = {"kill": 62, "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144,
                 "sched_setaffinity": 203, "ioprio_set": 251, "prlimit64": 302, "sched_setattr": 314}  # fmt: skip
I386: Final = {"kill": 37, "setpriority": 97, "sched_setparam": 154, "sched_setscheduler": 156,
               "sched_setaffinity": 241, "ioprio_set": 289, "prlimit64": 340, "sched_setattr": 351}  # fmt: skip
# Writers whose first argument is the target pid: allowed for 0 and the worker itself.
PID_FIRST: Final = ("sched_setparam", "sched_setscheduler", "sched_setaffinity", "sched_setattr")
# (which, who) writers: the allowed ``which`` values, each with who 0 or the worker.
WHICH_WHO: Final = {"setpriority": (PRIO_PROCESS, PRIO_PGRP), "ioprio_set": (IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP)}


def _low(arg: int) -> int:
    """Offset in ``struct seccomp_data`` of the low word of ``args[arg]`` (little-endian)."""
    return 16 + 8 * arg


@dataclass
class _Asm:
    """cBPF with forward jumps to labels, resolved by :meth:`assemble` (conditional offsets are 8-bit)."""

    items: list[tuple[int, int, str | None, str | None] | str]

    def op(self, code: int, k: int = 0, jt: str | None = None, jf: str | None = None) -> None:
        self.items.append((code, k, jt, jf))

    def label(self, name: str) -> None:
        self.items.append(name)

    def assemble(self) -> bytes:
        where: dict[str, int] = {}
        pc = 0
        for item in self.items:
            if isinstance(item, str):
                where[item] = pc
            else:
                pc += 1
        out, pc = [], 0
        for item in self.items:
            if isinstance(item, str):
                continue
            code, k, jt, jf = item
            offsets = [0 if label is None else where[label] - pc - 1 for label in (jt, jf)]
            if code == JA:  # unconditional: the offset is k (32 bits), jt names the target
                k, offsets = offsets[0], [0, 0]
            elif not all(0 <= off <= 255 for off in offsets):
                raise ValueError(f"cBPF jump out of range at instruction {pc}: {offsets}")
            out.append(struct.pack("=HBBI", code, offsets[0], offsets[1], k & 0xFFFFFFFF))
            pc += 1
        return b"".join(out)


def rules(self_pid: int, numbers: dict[str, int] = X86_64) -> bytes:
    """The fragment for one ABI's ``numbers``: expects the syscall number in A.

    Returns (ALLOW or EPERM) for the calls it scopes; any other call falls
    through to the instruction after it with A still the syscall number.
    """
    asm = _Asm([])
    for name in PID_FIRST:
        asm.op(JEQ_K, numbers[name], None, f"{name}.next")
        _self_or_refuse(asm, 0, self_pid, "allow")
        asm.label(f"{name}.next")
    for name, whiches in WHICH_WHO.items():
        asm.op(JEQ_K, numbers[name], None, f"{name}.next")
        asm.op(LD_W_ABS, _low(0))
        for which in whiches:
            asm.op(JEQ_K, which, f"{name}.who", None)
        asm.op(RET_K, EPERM_RET)
        asm.label(f"{name}.who")
        _self_or_refuse(asm, 1, self_pid, "allow")
        asm.label(f"{name}.next")
    # prlimit64(pid, resource, new, old): a NULL ``new`` (both words 0) only reads.
    asm.op(JEQ_K, numbers["prlimit64"], None, "prlimit64.next")
    asm.op(LD_W_ABS, _low(2))
    asm.op(JEQ_K, 0, None, "prlimit64.pid")
    asm.op(LD_W_ABS, _low(2) + 4)
    asm.op(JEQ_K, 0, "allow", None)
    asm.label("prlimit64.pid")
    _self_or_refuse(asm, 0, self_pid, "allow")
    asm.label("prlimit64.next")
    # kill(-1, sig): every process the caller may signal.
    asm.op(JEQ_K, numbers["kill"], None, "kill.next")
    asm.op(LD_W_ABS, _low(0))
    asm.op(JEQ_K, 0xFFFFFFFF, None, "allow")
    asm.op(RET_K, EPERM_RET)
    asm.label("kill.next")
    asm.op(JA, 0, "fallthrough")  # past the shared allow, with A still the syscall number
    asm.label("allow")
    asm.op(RET_K, RET_ALLOW)
    asm.label("fallthrough")
    return asm.assemble()


def _self_or_refuse(asm: _Asm, arg: int, self_pid: int, allow: str) -> None:
    """Jump to ``allow`` when ``args[arg]``'s low word is 0 or ``self_pid``; else return EPERM."""
    asm.op(LD_W_ABS, _low(arg))
    asm.op(JEQ_K, 0, allow, None)
    asm.op(JEQ_K, self_pid, allow, None)
    asm.op(RET_K, EPERM_RET)
