"""The seccomp rules that keep namespaces and keyrings out of a tool's reach (``contained`` and ``strict``).

A tool without capabilities may still make a *user* namespace, and with it
every other kind: in a new cgroup namespace it can mount a fresh cgroup2
whose root is its own kill boundary, and move any process of its uid (the
host, the user's shell) into that boundary by writing its pid to
``cgroup.procs`` (that mount has no ``nsdelegate``: the kernel checks only
write access to the common ancestor's file, which a root tool owns). The
boundary's ``cgroup.kill`` at the end of the call then kills the host. A v1
``pids`` mount there lifts the worker's own process limit. And the kernel's
keyrings are shared with the shell that started the host. So, at both
levels, :func:`rules` refuses with EPERM:

1. ``clone`` and ``unshare`` with any ``CLONE_NEW*`` flag (``unshare`` also
   ``CLONE_NEWTIME``, which ``clone`` reads as part of its exit signal),
   and ``setns``: no namespace of any kind is made or entered;
2. ``clone3`` gets ENOSYS: its flags sit in a struct seccomp cannot read,
   and ENOSYS makes glibc (threads, fork, posix_spawn) fall back to
   ``clone``, whose flags it can;
3. ``add_key``, ``request_key`` and ``keyctl``: the session and user
   keyrings are the user's.

The same rules apply through ``int 0x80`` with the i386 numbers, where
``contained`` lets 32-bit programs run. Anything else falls through with the
syscall number still in A.
"""

from __future__ import annotations

import errno
import struct
from typing import Final

LD_W_ABS, JEQ_K, JSET_K, RET_K = 0x20, 0x15, 0x45, 0x06
EPERM_RET: Final = 0x00050000 | errno.EPERM
ENOSYS_RET: Final = 0x00050000 | errno.ENOSYS

# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET; CLONE_NEWTIME (0x80) for unshare only.
CLONE_NEW_NAMESPACES: Final = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
CLONE_NEWTIME: Final = 0x00000080

X86_64: Final = {"clone": 56, "unshare": 272, "setns": 308, "add_key": 248, "request_key": 249, "keyctl": 250,
                 "clone3": 435}  # fmt: skip
I386: Final = {"clone": 120, "unshare": 310, "setns": 346, "add_key": 286, "request_key": 287, "keyctl": 288,
               "clone3": 435}  # fmt: skip
REFUSED: Final = ("setns", "add_key", "request_key", "keyctl")


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def rules(numbers: dict[str, int] = X86_64) -> bytes:
    """The fragment for one ABI's ``numbers``: expects the syscall number in A, leaves it there."""
    prog = []
    for name in REFUSED:
        prog += [_insn(JEQ_K, 0, 1, numbers[name]), _insn(RET_K, 0, 0, EPERM_RET)]
    prog += [_insn(JEQ_K, 0, 1, numbers["clone3"]), _insn(RET_K, 0, 0, ENOSYS_RET)]
    for name, flags in (("clone", CLONE_NEW_NAMESPACES), ("unshare", CLONE_NEW_NAMESPACES | CLONE_NEWTIME)):
        prog += [
            _insn(JEQ_K, 0, 4, numbers[name]),
            _insn(LD_W_ABS, 0, 0, 16),  # low 32 bits of args[0], the flags, on both ABIs
            _insn(JSET_K, 0, 1, flags),
            _insn(RET_K, 0, 0, EPERM_RET),
            _insn(LD_W_ABS, 0, 0, 0),  # the syscall number again
        ]
    return b"".join(prog)
