"""The worker's half of the sandbox: what a process can only do to itself.

Applied by :func:`apply` right after the ``initialize`` message, while the
worker is still single-threaded and before any tool code is imported. Order
matters and follows the measured design (sandbox.md, "Worker-side sequence"):

1. resource limits (CORE, CPU, NOFILE, FSIZE, optional DATA);
2. ``strict`` only: a network namespace if asked (``unshare`` is denied by
   seccomp later, so namespaces come first);
3. the mount namespace while ``CAP_SYS_ADMIN`` is still held, then the
   privilege drop: all capabilities (bounding set, ambient, then ``capset``
   to zero); ``strict`` switches to a dedicated uid instead when one can run
   the interpreter (else uid 0 without capabilities, completed by seccomp);
4. ``PR_SET_NO_NEW_PRIVS``, non-dumpable, Landlock (``contained``: the
   scopes-only domain of ``_contain.isolate``), then seccomp *last*, at both
   levels: ``contained`` gets the rules of ``_pidscope`` (syscalls that name
   a process act only on the caller), ``strict`` the same rules ahead of
   its deny list, namespace and socket checks (:func:`build_filter`).

Landlock and seccomp apply to the calling thread and threads created after
it, which is why no thread may exist yet; both survive the ``exec`` of Bun.
Everything here is ctypes and syscall numbers for x86_64; the host checks
the architecture before asking.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import struct
from collections.abc import Iterable
from typing import Final

from xcsh_run.worker import protocol as p
from xcsh_run.worker._sandbox import contain as _contain
from xcsh_run.worker._sandbox import nsrules as _nsrules
from xcsh_run.worker._sandbox import pidscope as _pidscope

# --- syscalls and constants (x86_64; see sandbox.md, Appendix) --------------------
SYS_LANDLOCK_CREATE_RULESET: Final = 444
SYS_LANDLOCK_ADD_RULE: Final = 445
SYS_LANDLOCK_RESTRICT_SELF: Final = 446
SYS_CAPSET: Final = 126
PR_SET_NO_NEW_PRIVS: Final = 38
PR_CAPBSET_DROP: Final = 24
PR_CAP_AMBIENT: Final = 47
PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
PR_SET_SECCOMP: Final = 22
SECCOMP_MODE_FILTER: Final = 2
CLONE_NEWNET: Final = 0x40000000

LL_RULE_PATH_BENEATH: Final = 1
LL_RULE_NET_PORT: Final = 2
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
FS_MAKE_SYM, FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1

# Reading never implies running: EXECUTE is granted only on the single files
# in ``exec_paths`` (the interpreter, its ELF loader, ``allow_exec``).
READ_ACCESS: Final = FS_READ_FILE | FS_READ_DIR
EXEC_ACCESS: Final = FS_EXECUTE | FS_READ_FILE
_FILE_ONLY: Final = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

# seccomp
AUDIT_ARCH_X86_64: Final = 0xC000003E
AUDIT_ARCH_I386: Final = 0x40000003
X32_BIT: Final = 0x40000000
RET_KILL_PROCESS: Final = 0x80000000
RET_ERRNO: Final = 0x00050000
RET_ALLOW: Final = 0x7FFF0000
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K, ALU_AND_K = 0x20, 0x15, 0x35, 0x45, 0x06, 0x54
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
SOCK_STREAM: Final = 1
SOCK_FLAGS: Final = 0x800 | 0x80000  # SOCK_NONBLOCK | SOCK_CLOEXEC
IPPROTO_TCP: Final = 6
MSG_FASTOPEN: Final = 0x20000000

# Denied outright with EPERM in strict mode.
DENIED_SYSCALLS: Final = {
    # No sendto/sendmsg: without socket() they only reach socketpairs, and
    # asyncio wakes its loop across threads with send() on one.
    "connect": 42, "accept": 43, "bind": 49, "listen": 50,
    "ptrace": 101, "pivot_root": 155, "chroot": 161, "mount": 165, "umount2": 166,
    "init_module": 175, "delete_module": 176, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "unshare": 272, "accept4": 288, "perf_event_open": 298, "open_by_handle_at": 304,
    "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442,
    # A program in an anonymous file runs without any path Landlock could check.
    "memfd_create": 319,
    # Only in a new UTS namespace, which clone cannot make here: defence in depth.
    "sethostname": 170, "setdomainname": 171,
}  # fmt: skip
# As root without a uid drop, Landlock does not stop metadata writes: fake
# success (ERRNO|0) so the mode is unchanged yet shutil.copy keeps working.
METADATA_SYSCALLS: Final = {
    "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94, "utime": 132,
    "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198,
    "fremovexattr": 199, "utimes": 235, "fchownat": 260, "futimesat": 261, "fchmodat": 268,
    "utimensat": 280, "fchmodat2": 452,
}  # fmt: skip
SYS_SOCKET: Final = 41
SYS_SENDTO, SYS_SENDMSG, SYS_SENDMMSG = 44, 46, 307
SYS_SOCKETPAIR: Final = 53


class SandboxError(Exception):
    """A sandbox step the policy requires could not be applied."""


_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return _libc


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise SandboxError(f"{what} failed: {os.strerror(err)} (errno {errno.errorcode.get(err, err)})")
    return result


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return int(_c().prctl(option, arg2, arg3, 0, 0))


# --- 1. resource limits ----------------------------------------------------------------


def set_limits(cfg: p.SandboxConfig) -> None:
    def setl(which: int, soft: int, hard: int | None = None) -> None:
        hard = soft if hard is None else hard
        _, cur_hard = resource.getrlimit(which)
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        resource.setrlimit(which, (soft, hard))

    setl(resource.RLIMIT_CORE, 0)
    if cfg.cpu_seconds is not None:
        # SIGXCPU at the soft limit; SIGKILL at the hard one if it is ignored.
        setl(resource.RLIMIT_CPU, cfg.cpu_seconds, cfg.cpu_seconds + 5)
    if cfg.open_files is not None:
        setl(resource.RLIMIT_NOFILE, cfg.open_files)
    if cfg.file_size_bytes is not None:
        setl(resource.RLIMIT_FSIZE, cfg.file_size_bytes)
    if cfg.data_bytes is not None:
        setl(resource.RLIMIT_DATA, cfg.data_bytes)


# --- 2. namespaces ---------------------------------------------------------------------


def unshare_network() -> None:
    _check(_c().unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")


# --- 3. privileges ---------------------------------------------------------------------


def drop_capabilities() -> None:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except OSError:
        last = 63
    for cap in range(last + 1):
        _prctl(PR_CAPBSET_DROP, cap)  # EINVAL for caps this kernel lacks: harmless
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # two {effective, permitted, inheritable} sets, all zero
    hbuf = ctypes.create_string_buffer(header, len(header))
    dbuf = ctypes.create_string_buffer(data, len(data))
    _check(_c().syscall(SYS_CAPSET, hbuf, dbuf), "capset")


def drop_uid(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


# --- 4a. Landlock ----------------------------------------------------------------------


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]  # fmt: skip


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel struct is packed: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is unavailable."""
    result = _c().syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, int(result))


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: EXECUTE..MAKE_SYM
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def apply_landlock(
    read: Iterable[str], write: Iterable[str], execute: Iterable[str], connect_ports: Iterable[int] = ()
) -> int:
    """Deny every filesystem access outside the allow-lists, all TCP, and cross-domain signals.

    Returns the ABI used. ``execute`` lists single programs that may be run;
    ``connect_ports`` the TCP ports it may connect to (bind stays denied: it is
    handled, with no rule).
    """
    abi = landlock_abi()
    if abi < 1:
        raise SandboxError("Landlock is not available (needs Linux 5.13+ with Landlock enabled in the LSM list)")
    handled = _fs_rights(abi)
    attr = _RulesetAttr(handled_access_fs=handled, handled_access_net=0, scoped=0)
    size = 8
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP  # with no rules: no TCP at all
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL
        size = 24
    ruleset = _check(
        _c().syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
        "landlock_create_ruleset",
    )
    try:
        # Writable is not executable: a program the tool writes must not run
        # (the dynamic loader can still map one: a noexec mount closes that).
        write_rights = handled & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK | FS_EXECUTE)
        for paths, rights in ((read, READ_ACCESS), (write, write_rights), (execute, EXEC_ACCESS)):
            for path in paths:
                _add_path_rule(ruleset, path, rights & handled)
        if abi >= 4:
            for port in connect_ports:
                rule = _NetPortAttr(allowed_access=NET_CONNECT_TCP, port=port)
                _check(
                    _c().syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(LL_RULE_NET_PORT),
                                 ctypes.byref(rule), ctypes.c_uint32(0)),
                    f"landlock_add_rule(tcp connect {port})",
                )  # fmt: skip
        _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(
            _c().syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)
    return abi


def _add_path_rule(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path that does not exist grants nothing
    try:
        if not os.path.isdir(path):
            rights &= _FILE_ONLY  # anything else on a file is EINVAL
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        _check(
            _c().syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(LL_RULE_PATH_BENEATH),
                         ctypes.byref(rule), ctypes.c_uint32(0)),
            f"landlock_add_rule({path})",
        )  # fmt: skip
    finally:
        os.close(fd)


# --- 4b. seccomp -----------------------------------------------------------------------


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _prologue(self_pid: int, *, foreign_abi: int) -> list[bytes]:
    """Arch and x32 checks, the pid rules of ``_pidscope``, the namespace and keyring rules of ``_nsrules``.

    Leaves the syscall number in A.

    ``foreign_abi``: what a call through ``int 0x80`` (i386) gets: ``strict``
    kills, ``contained`` (which must keep running a 32-bit program a tool
    starts) applies the same pid rules with the i386 numbers and allows the
    rest. x32 calls are EPERM at both levels.
    """
    eperm = RET_ERRNO | errno.EPERM
    prog = [_insn(LD_W_ABS, 0, 0, 4)]  # arch
    if foreign_abi == RET_ALLOW:
        i386 = _pidscope.rules(self_pid, _pidscope.I386) + _nsrules.rules(_nsrules.I386) + _insn(RET_K, 0, 0, RET_ALLOW)
        size = len(i386) // 8  # under 255 instructions: the jumps over it are 8-bit
        prog += [
            _insn(JEQ_K, size + 3, 0, AUDIT_ARCH_X86_64),  # to the x86_64 path below
            _insn(JEQ_K, 0, size + 1, AUDIT_ARCH_I386),  # any other ABI: EPERM, after the i386 rules
            _insn(LD_W_ABS, 0, 0, 0),
            i386,
            _insn(RET_K, 0, 0, eperm),
        ]
    else:
        prog += [_insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64), _insn(RET_K, 0, 0, foreign_abi)]
    return [
        *prog,
        _insn(LD_W_ABS, 0, 0, 0),  # syscall number
        _insn(JGE_K, 0, 1, X32_BIT),
        _insn(RET_K, 0, 0, eperm),
        _pidscope.rules(self_pid),
        _nsrules.rules(),
    ]


def build_contained_filter(self_pid: int) -> bytes:
    """``contained``'s cBPF program: the pid, namespace and keyring rules (and no x32); everything else is allowed."""
    return b"".join([*_prologue(self_pid, foreign_abi=RET_ALLOW), _insn(RET_K, 0, 0, RET_ALLOW)])


def build_filter(*, fake_metadata: bool, tcp: bool = False, self_pid: int | None = None) -> bytes:
    """``strict``'s cBPF program: arch check, x32 check, pid rules, deny list, socket families.

    ``self_pid``: the pid the pid rules treat as the caller's own (default:
    this process). ``tcp``: the policy grants TCP ports (``allow_connect``). Then ``socket()``
    may make plain TCP sockets (IPv4 and IPv6; no other protocol on a stream,
    so no SCTP or MPTCP that Landlock's TCP rules might not cover) and
    ``connect`` is left to Landlock, which allows only the granted ports.
    ``bind``, ``listen`` and ``accept`` stay denied here as well as by Landlock,
    UDP and every other family too, and so does ``MSG_FASTOPEN`` on the send
    calls: TCP Fast Open connects from ``sendto``/``sendmsg`` without going
    through ``connect``.
    """
    eperm = RET_ERRNO | errno.EPERM
    prog = _prologue(os.getpid() if self_pid is None else self_pid, foreign_abi=RET_KILL_PROCESS)
    denied = dict(DENIED_SYSCALLS)
    if tcp:
        del denied["connect"]
    denials = [(nr, eperm) for nr in denied.values()]
    if fake_metadata:
        denials += [(nr, RET_ERRNO | 0) for nr in METADATA_SYSCALLS.values()]
    for nr, ret in denials:
        prog += [_insn(JEQ_K, 0, 1, nr), _insn(RET_K, 0, 0, ret)]
    if tcp:
        # The flags argument of sendto (args[3]), sendmsg (args[2]), sendmmsg (args[3]).
        for nr, offset in ((SYS_SENDTO, 40), (SYS_SENDMSG, 32), (SYS_SENDMMSG, 40)):
            prog += [
                _insn(JEQ_K, 0, 4, nr),
                _insn(LD_W_ABS, 0, 0, offset),
                _insn(JSET_K, 0, 1, MSG_FASTOPEN),
                _insn(RET_K, 0, 0, eperm),
                _insn(LD_W_ABS, 0, 0, 0),
            ]
        # socket(AF_INET or AF_INET6, SOCK_STREAM [| NONBLOCK | CLOEXEC], 0 or IPPROTO_TCP); all
        # arguments compared on their low 32 bits (CVE-2019-10063).
        prog += [
            _insn(JEQ_K, 0, 11, SYS_SOCKET),
            _insn(LD_W_ABS, 0, 0, 16),  # family
            _insn(JEQ_K, 1, 0, AF_INET),
            _insn(JEQ_K, 0, 6, AF_INET6),  # neither: denied
            _insn(LD_W_ABS, 0, 0, 24),  # type
            _insn(ALU_AND_K, 0, 0, ~SOCK_FLAGS),
            _insn(JEQ_K, 0, 3, SOCK_STREAM),
            _insn(LD_W_ABS, 0, 0, 32),  # protocol
            _insn(JEQ_K, 2, 0, 0),
            _insn(JEQ_K, 1, 0, IPPROTO_TCP),
            _insn(RET_K, 0, 0, eperm),
            _insn(RET_K, 0, 0, RET_ALLOW),
        ]
    else:
        # socket(): nothing at all.
        prog += [_insn(JEQ_K, 0, 1, SYS_SOCKET), _insn(RET_K, 0, 0, eperm)]
    # socketpair(): AF_UNIX only (asyncio needs it).
    prog += [
        _insn(JEQ_K, 0, 4, SYS_SOCKETPAIR),
        _insn(LD_W_ABS, 0, 0, 16),  # low 32 bits of args[0] (CVE-2019-10063)
        _insn(JEQ_K, 0, 1, AF_UNIX),
        _insn(RET_K, 0, 0, RET_ALLOW),
        _insn(RET_K, 0, 0, eperm),
        _insn(RET_K, 0, 0, RET_ALLOW),
    ]
    return b"".join(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def apply_seccomp(program: bytes) -> None:
    """Install ``program`` (after ``no_new_privs``, which a filter needs without CAP_SYS_ADMIN)."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len=len(program) // 8, filter=ctypes.cast(buf, ctypes.c_void_p).value)
    _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(int(_c().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0)), "seccomp")


# --- all together ----------------------------------------------------------------------


def apply(cfg: p.SandboxConfig) -> list[str]:
    """Apply the worker's part of ``cfg``; returns what could not be enforced (best effort only).

    Raises SandboxError for a missing feature unless ``cfg.best_effort``.
    """
    missing: list[str] = []

    def attempt(what: str, step: object) -> None:
        try:
            step()  # type: ignore[operator]
        except (SandboxError, OSError) as exc:
            if not cfg.best_effort:
                raise SandboxError(f"{what}: {exc}") from exc
            missing.append(f"{what}: {exc}")

    if cfg.level == "none":
        return missing
    attempt("resource limits", lambda: set_limits(cfg))
    if cfg.level != "strict":
        # Mounts need CAP_SYS_ADMIN, so they come before the drop; without
        # it (a host that is not root) the mount layer is skipped, as documented.
        if _contain.can_mount():
            attempt("mount namespace", lambda: _contain.private_mounts(cfg))
        attempt("capability drop", drop_capabilities)
        attempt("no_new_privs", lambda: _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "prctl(PR_SET_NO_NEW_PRIVS)"))
        attempt("process isolation", _contain.isolate)
        # Last: the rules that keep prlimit64, setpriority, sched_set* and
        # ioprio_set on the caller (a tool keeps the host's uid here). A kernel
        # without seccomp filters weakens contained, as a Landlock below ABI 6
        # does, rather than refusing it (the host lists it: ``weakened``).
        try:
            apply_seccomp(build_contained_filter(os.getpid()))
        except SandboxError as exc:
            missing.append(f"seccomp: {exc}")
        return missing
    if cfg.network == "netns":
        attempt("network namespace", unshare_network)
    if _contain.can_mount():
        attempt("mount namespace", lambda: _contain.private_mounts(cfg))
    if os.geteuid() == 0:
        if cfg.drop_uid is not None:
            attempt("privilege drop", lambda: drop_uid(cfg.drop_uid or 0, cfg.drop_gid or 0))
        else:
            attempt("capability drop", drop_capabilities)
    # After the uid drop, which resets the flag: non-dumpable, no process of
    # this uid without CAP_SYS_PTRACE reaches our /proc entries (a tool in a
    # sibling worker that Landlock does not cover: ABI < 1, or best effort).
    attempt("non-dumpable", _contain.set_undumpable)
    # TCP ports are opened in seccomp only where Landlock filters them by port:
    # without ABI 4 a grant would open every port, so it opens none.
    tcp = bool(cfg.connect_ports) and landlock_abi() >= 4
    if cfg.connect_ports and not tcp:
        missing.append("allow_connect: Landlock ABI 4 (Linux 6.7+) filters TCP by port; the ports stay closed")
    before = len(missing)
    attempt("Landlock", lambda: apply_landlock(cfg.read_paths, cfg.write_paths, cfg.exec_paths, cfg.connect_ports))
    if tcp and len(missing) > before:
        # Best effort and Landlock failed: nothing filters connect by port, so
        # seccomp must keep TCP closed, or the grant of one port opens them all.
        tcp = False
        missing.append("allow_connect: Landlock did not apply, so nothing filters TCP by port; the ports stay closed")
    # Still uid 0 (no usable uid to drop to): seccomp fakes metadata writes.
    attempt("seccomp", lambda: apply_seccomp(build_filter(fake_metadata=os.geteuid() == 0, tcp=tcp)))
    return missing
