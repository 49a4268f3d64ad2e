"""What ``contained`` (and ``strict``) take from a tool that no normal tool needs.

Applied by ``_sandbox.apply`` in the worker, single-threaded, before tool code:

1. :func:`private_mounts` (needs ``CAP_SYS_ADMIN``, so first): an IPC
   namespace (SysV and POSIX IPC objects die with the tree) and a mount
   namespace of the worker's own, private so that nothing mounted in it
   propagates to the host, in which every cgroup filesystem is read-only (a
   process cannot write its pid into another cgroup's ``cgroup.procs`` and
   leave its kill boundary), so are ``/sys`` and all of ``/proc`` (root's
   files, guarded by their mode alone: a root tool without capabilities
   could set ``kernel.core_pattern``, or the host's ``oom_score_adj``), and
   ``/dev/shm`` is a fresh size-capped tmpfs.
   ``strict`` also mounts a size-capped ``noexec`` tmpfs over the private
   workdir (``HOME`` and ``TMPDIR``). Every terminal is out of reach
   (:func:`hide_terminals`). All of it dies with the namespace, that
   is with the last process of the worker's tree. Skipped without
   ``CAP_SYS_ADMIN`` (a host that is not root): docs/sandbox.md says what that
   leaves open.
2. the caller drops every capability and sets ``no_new_privs``;
3. :func:`isolate`: the worker becomes non-dumpable, and enters a Landlock
   domain that governs no file access but scopes signals and abstract UNIX
   sockets (ABI 6+). Being in any Landlock domain also denies ptrace-class
   access (``/proc/<pid>/environ``, ``mem``, ``fd/*``) to every process
   outside it: the host, sibling workers, the fork server's zygote.

Why each matters, as root without capabilities: the kernel lets a process
of the same uid read another's ``/proc/<pid>/environ`` and open its fds
through ``/proc/<pid>/fd/N`` (a pipe opened there is a write end of that
pipe) when the target is dumpable and has no capability the caller lacks;
``kill()`` needs only the same uid; ``TIOCSTI`` into a terminal that is not
one's own, ``chattr +i``, ``mount`` need the capabilities dropped in step 2.
"""

from __future__ import annotations

import ctypes
import os
import re
import stat
from typing import Final

from xcsh_run.worker import protocol as p

# Kernel ABI numbers (x86_64), as in _sandbox, which this module must not import (it imports this one).
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_RESTRICT_SELF = 444, 446
LANDLOCK_CREATE_RULESET_VERSION: Final = 1
FS_MAKE_BLOCK: Final = 1 << 11
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1
PR_SET_DUMPABLE: Final = 4
CLONE_NEWNS: Final = 0x00020000
CLONE_NEWIPC: Final = 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_NOATIME, MS_NODIRATIME, MS_REMOUNT, MS_BIND = 1 << 10, 1 << 11, 1 << 5, 1 << 12
MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 1 << 14, 1 << 18, 1 << 21, 1 << 24
CAP_SYS_ADMIN: Final = 21
_OPTION_FLAGS: Final = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                        "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}  # fmt: skip
_WORKDIR_PREFIX: Final = "xcsh-run-w"
# Character-device majors of terminals when /proc/tty/drivers cannot be read:
# virtual consoles and serial ports (4), /dev/tty, console and ptmx (5), BSD
# pty masters and slaves (2, 3, 128-135), Unix98 pty slaves (136-143), USB
# serial (188), low-density serial (204), hypervisor consoles (229).
_TTY_MAJORS: Final = frozenset({2, 3, 4, 5, 188, 204, 229, *range(128, 144)})
VCS_MAJOR: Final = 7  # /dev/vcs*: a virtual console's screen, readable and writable; no tty driver lists it
TTY_DEVICE, PTMX_DEVICE = os.makedev(5, 0), os.makedev(5, 2)
_OCTAL: Final = re.compile(r"\\([0-7]{3})")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]  # fmt: skip


_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return _libc


def _check(result: int, what: str) -> int:
    """``result`` if not negative; else an OSError with the errno, saying which call failed."""
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what} failed: {os.strerror(err)}")
    return result


def can_mount() -> bool:
    """True when this process has ``CAP_SYS_ADMIN`` in its effective set (root, before the drop)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    except (OSError, ValueError):
        pass
    return False


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def arg(value: str | None) -> bytes | None:
        return None if value is None else os.fsencode(value)

    result = _c().mount(arg(source), arg(target), arg(fstype), flags, arg(data))
    _check(result, f"mount({fstype or 'remount'} on {target})")


def _cgroup_mounts(types: tuple[str, ...] = ("cgroup", "cgroup2")) -> list[tuple[str, int]]:
    """Every mount point of ``types`` (cgroup v1 or v2 by default) in this namespace, with its per-mount flags."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            # Optional fields end at "-"; the filesystem type follows it.
            fstype = fields[fields.index("-") + 1]
            if fstype not in types:
                continue
            point = fields[4]
            if "\\" in point:  # \040 for a space, and so on
                point = _OCTAL.sub(lambda m: chr(int(m[1], 8)), point)
            flags = 0
            for option in fields[5].split(","):
                flags |= _OPTION_FLAGS.get(option, 0)
            found.append((point, flags))
    return found


def _workdir() -> str | None:
    """The private workdir (``.../xcsh-run-w<pid>-<random>``) whose ``tmp`` is ``TMPDIR``, if it is one."""
    tmp = os.environ.get("TMPDIR", "")
    workdir = os.path.dirname(tmp)
    if os.path.basename(tmp) != "tmp" or not os.path.basename(workdir).startswith(_WORKDIR_PREFIX):
        return None
    return workdir if os.path.isdir(workdir) else None


def private_mounts(cfg: p.SandboxConfig) -> None:
    """The worker's own mount namespace (see the module docstring). Needs ``CAP_SYS_ADMIN``."""
    strict = cfg.level == "strict"
    # An IPC namespace with it: SysV segments, semaphores, message queues and
    # POSIX queues a tool makes die with its tree, instead of holding the
    # machine's memory after the worker is gone (and no tool attaches to the
    # host's or another tool's).
    _check(_c().unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare(CLONE_NEWNS | CLONE_NEWIPC)")
    # Private, recursively, before anything is mounted: a shared mount would
    # carry every mount below to the host's namespace.
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Per mount: MS_REMOUNT|MS_BIND changes only this namespace's copy, and
    # keeps the flags it had (a bind remount replaces them all).
    for point, flags in _cgroup_mounts():
        _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
    _kernel_settings_read_only()
    # tmpfs pages are charged to the memory cgroup of the process that
    # touches them, so the memory limit bounds these too; the size caps the
    # space when there is no memory limit, and says ENOSPC instead of OOM.
    size = f",size={cfg.file_size_bytes}" if cfg.file_size_bytes is not None else ""
    noexec = MS_NOEXEC if strict else 0
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | noexec, "mode=1777" + size)
    hide_terminals()
    workdir = _workdir() if strict else None
    if workdir is not None:
        # noexec also fails an mmap(PROT_EXEC) of a file there, so a binary
        # copied in cannot be run through the dynamic loader either.
        owner = f",uid={cfg.drop_uid},gid={cfg.drop_gid}" if cfg.drop_uid is not None else ""
        _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700" + size + owner)
        for name in ("home", "tmp"):
            path = os.path.join(workdir, name)
            os.mkdir(path, 0o700)
            if cfg.drop_uid is not None:
                os.chown(path, cfg.drop_uid, cfg.drop_gid if cfg.drop_gid is not None else -1)


def _terminal_ranges() -> list[tuple[int, int, int]]:
    """``(major, first minor, last minor)`` of every terminal driver, from the kernel's own list."""
    ranges = [(major, 0, 2**20 - 1) for major in _TTY_MAJORS]
    try:
        with open("/proc/tty/drivers") as f:
            for line in f:
                # "serial  /dev/ttyS  4  64-111  serial": the name may hold no space, the path neither
                fields = line.split()
                if len(fields) >= 5 and fields[-3].isdigit():
                    low, _, high = fields[-2].partition("-")
                    ranges.append((int(fields[-3]), int(low), int(high or low)))
    except (OSError, ValueError):
        pass  # the fixed majors above stand
    return ranges


def _is_terminal(rdev: int, ranges: list[tuple[int, int, int]]) -> bool:
    major, minor = os.major(rdev), os.minor(rdev)
    return major == VCS_MAJOR or any(m == major and low <= minor <= high for m, low, high in ranges)


def terminal_nodes(root: str = "/dev") -> list[str]:
    """Every terminal character device under ``root``, by device number, whatever its name.

    Not ``/dev/tty`` (it is always the opener's own controlling terminal, and
    the worker's session has none: ENXIO), not ``ptmx`` (it makes a new pty;
    :func:`hide_terminals` points it at the worker's own instance), nothing
    below a ``pts`` directory (replaced whole) and no symlink (it resolves to
    a node found here).
    """
    ranges = _terminal_ranges()
    found: list[str] = []
    pending = [root]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue  # a directory the scan may not read holds nothing it could hide
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and entry.name != "pts":
                pending.append(entry.path)
            elif (
                stat.S_ISCHR(st.st_mode)
                and st.st_rdev not in (TTY_DEVICE, PTMX_DEVICE)
                and _is_terminal(st.st_rdev, ranges)
            ):
                found.append(entry.path)
    return sorted(found)


def _devpts_mounts() -> list[str]:
    """Every devpts mount point in this namespace: ``/dev/pts``, and any other a container made."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[fields.index("-") + 1] == "devpts":
                points.append(_OCTAL.sub(lambda m: chr(int(m[1], 8)), fields[4]))
    return points


def hide_terminals() -> None:
    """No terminal but the worker's own ptys can be opened (in the private mount namespace).

    1. A fresh devpts instance over every devpts mount: the host's ptys, the
       user's terminal among them, do not exist in it, while a tool's
       ``openpty()`` makes its own there (``ptmxmode=0666``); ``/dev/ptmx``
       is bound to that instance's ``ptmx``, so ``posix_openpt`` agrees.
    2. ``/dev/null`` bound over every other terminal node under ``/dev``
       (consoles, virtual terminals, serial ports, screen devices), found
       by device number: the path stays (a program that logs to
       ``/dev/console`` keeps working), the terminal is gone. Not a fresh
       minimal ``/dev``: ``contained`` is the default level, and the
       devices a tool may need (GPU, ``/dev/kvm``, ``/dev/fuse``, hotplugged
       ones, and the mounts below ``/dev``) stay as they are.
    3. ``/dev/tty`` stays: the worker is a session leader without a
       controlling terminal, so it is ENXIO until a tool makes a pty of its
       own its controlling terminal, and then it is that pty.
    """
    for point in _devpts_mounts():
        _mount("devpts", point, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    if os.path.exists("/dev/pts/ptmx") and not os.path.islink("/dev/ptmx") and os.path.exists("/dev/ptmx"):
        _mount("/dev/pts/ptmx", "/dev/ptmx", None, MS_BIND)
    for path in terminal_nodes():
        _mount("/dev/null", path, None, MS_BIND)


def _kernel_settings_read_only() -> None:
    """``/sys`` and ``/proc`` (``/proc/sys`` and ``/proc/sysrq-trigger`` first) read-only in this namespace.

    They belong to root, and the kernel checks only the file mode for most of
    them: a root tool without any capability could otherwise set
    ``kernel.core_pattern`` to a program of its own (run as root, with every
    capability, at the next crash), ``kernel.pid_max``, or a sysrq key. Read
    access stays. ``/proc/sys`` is not a mount of its own: a bind mount of it
    onto itself is made read-only (its flags are the proc mount's, which a
    read-only bind remount must repeat).
    """
    for point, flags in _cgroup_mounts(("sysfs",)):
        if point == "/sys":
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
    proc = [flags for point, flags in _cgroup_mounts(("proc",)) if point == "/proc"]
    for path in ("/proc/sys", "/proc/sysrq-trigger"):
        if proc and os.path.exists(path):
            _mount(path, path, None, MS_BIND)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | proc[0])
    if proc:
        # The rest of /proc too: every process's oom_score_adj, autogroup (its
        # session's nice value), coredump_filter, timerslack_ns and the like
        # are guarded by their mode alone, and the host's are root's. Reading
        # stays, and so does /proc/self/fd/N (a magic link opens its target,
        # on the target's own mount).
        _mount(None, "/proc", None, MS_REMOUNT | MS_BIND | MS_RDONLY | proc[0])


def set_undumpable() -> None:
    """No core dumps, and no ptrace-class access (``/proc/<pid>/environ``, ``mem``, ``fd``) without CAP_SYS_PTRACE.

    Kept across fork, reset by execve: every process that runs tool code
    after an exec is dumpable again, but the worker and the host are not.
    """
    _check(_c().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE, 0)")


def isolate() -> int:
    """Non-dumpable, then a Landlock domain with no file rules; returns the ABI used (0: none).

    Needs ``no_new_privs`` (or CAP_SYS_ADMIN). With ABI 6+, signals and
    abstract-socket connections to processes outside the domain are denied.
    With ABI 1-5 there are no scopes: the domain handles only the making of
    block devices (which the capability drop denies anyway), for the ptrace
    isolation every domain brings. Without Landlock, only the capability
    drop and the dumpable flag stand.
    """
    set_undumpable()
    libc = _c()
    abi = max(0, int(libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))))  # fmt: skip
    if abi < 1:
        return 0
    if abi >= 6:
        attr, size = _RulesetAttr(scoped=SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX), 24
    else:
        attr, size = _RulesetAttr(handled_access_fs=FS_MAKE_BLOCK), 8
    ruleset = _check(
        libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
        "landlock_create_ruleset",
    )
    try:
        _check(
            libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)
    return abi
