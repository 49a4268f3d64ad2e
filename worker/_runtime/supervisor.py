"""The worker's supervisor: the lifeline and the kill, in a process the tool cannot reach.

The worker's own lifeline (EOF on fd_in, then ``cgroup.kill``: ``_loop``) runs
in the tool's process, so a tool can disarm it: close the fds it uses, or
patch the code that acts on EOF. At ``contained`` and ``strict`` the worker
therefore forks this supervisor at ``initialize``, before any sandbox layer
and before any tool code, while it is still single-threaded (a fork copies
only the forking thread). The worker goes on as before; the supervisor keeps
nothing but these fds of its own (and, without a cgroup, the worker's pidfd)
and waits:

- **fd_in's read end**, polled for the hang-up only, never read (the worker
  owns the data). The host holds the pipe's only write end, so the hang-up
  comes when, and only when, the host is gone or has closed the pipe, which
  it does only once the worker's end is recorded and its boundary killed. A
  host already dead when the supervisor starts is no race: the hang-up is
  level-triggered and reported at once. Nothing the tool does to its own copy
  of the fd changes this one.
- **the boundary's ``cgroup.kill``**, opened by the worker before the fork.
  One write kills every process in the worker's cgroup, wherever it was
  reparented and whatever session it made: the worker, the tool's daemons and
  the supervisor itself. Without a cgroup (the documented, unreliable
  fallback) it kills the worker's process group, and it also ends when the
  worker does (the host's kill would miss it once orphaned).

Why the tool cannot reach it: it is a separate process, so no patch of the
worker's code or fds touches it; it is forked before the worker applies
Landlock and seccomp, so it is outside the tool's Landlock domain, which
denies signals (scope, ABI 6) and ptrace to processes outside it; and it makes
itself non-dumpable, so that without ``CAP_SYS_PTRACE`` in its user namespace
no process may ptrace it or open its ``/proc/<pid>/fd`` or ``mem``.

It is forked by the worker (through a middle process that exits at once, so
it is not the worker's child either, and a tool that waits for all its
children never meets it) rather than being the worker's parent, on purpose:
the host's pid, pidfd, signals, ``/proc`` readings, exit status and rusage
all stay the tool's process's own, exactly as without a supervisor, and the
supervisor outlives the worker until the host has killed the boundary (a
worker that exits just before its host is SIGKILLed still has its daemons
killed). It is inside the boundary from birth (the host attaches the worker
before it sends ``initialize``), so every boundary kill takes it too; the
host counts it as the worker's own member, not a leftover
(``InitializeResult.supervisor``). The worker waits until it is set up: a
supervisor that failed is a worker that refuses to start.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import select
import signal
from typing import Final, NoReturn

PR_SET_DUMPABLE: Final = 4
EXIT_SUPERVISOR: Final = 5


def start(fd_in: int, kill_fd: int) -> int:
    """Start the supervisor and return its pid once it is set up (in the worker, which carries on).

    Raises OSError if it could not be started. Call it single-threaded, before
    any sandbox layer or tool code.
    """
    worker = os.getpid()
    # Without a cgroup it watches the worker too: a pidfd opened here, by the
    # worker itself, names the worker whoever reaps it later.
    worker_fd = os.pidfd_open(worker) if kill_fd < 0 else -1
    ready_r, ready_w = os.pipe()
    try:
        # Twice, so that it is not the worker's child: a tool that waits for
        # any child (``waitpid(-1)`` until ECHILD) must not find it there.
        middle = os.fork()
        if middle == 0:
            try:
                _forget_environment()
                os.close(ready_r)
                if os.fork() == 0:
                    _supervise(worker, worker_fd, fd_in, kill_fd, ready_w)
            except BaseException:
                pass
            # The middle process, or a supervisor that failed to set itself up
            # (the worker then reads EOF and says so).
            os._exit(EXIT_SUPERVISOR)
        os.close(ready_w)
        ready_w = -1
        os.waitpid(middle, 0)
        ready = os.read(ready_r, 32)  # its pid, written once it is set up; EOF if it failed
    finally:
        for fd in (worker_fd, ready_r, ready_w):
            if fd >= 0:
                os.close(fd)
    if not ready:
        raise OSError(errno.ECHILD, "it exited while setting itself up (a fork refused by the pids limit, say)")
    return int(ready)


def _forget_environment() -> None:
    """Zero the environment block the kernel shows as ``/proc/<pid>/environ`` (the supervisor needs none).

    Done first thing in the middle process, so the supervisor forked from it
    never has one: it is no copy of the tool's environment anyone could read,
    and no process that a scan for a marker variable (``xcsh-run fuzz``'s
    left-behind check, which knows nothing of supervisors) takes for one the
    tool left. The block is this process's own stack memory, read once by
    Python at start-up; C's ``environ`` then points at empty strings.
    """
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        # Fields 50 and 51 of stat (env_start, env_end), counted after the comm.
        start, end = int(fields[47]), int(fields[48])
    except (OSError, IndexError, ValueError):
        return
    if 0 < start < end:
        ctypes.memset(start, 0, end - start)


def _supervise(worker: int, worker_fd: int, fd_in: int, kill_fd: int, ready: int) -> NoReturn:
    gc.disable()  # nothing to collect; a collection would only dirty pages shared with the worker
    # Before anything else: from here on no process without CAP_SYS_PTRACE may
    # ptrace it or read its fds and memory through /proc.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")
    # Out of the worker's process group: the worker's own lifeline (and any
    # tool) kills that group, and would kill the supervisor before it acts.
    group = worker if os.getpgid(0) == worker else 0  # the host starts the worker in a session of its own
    os.setsid()
    # Only the fds it needs: fds 1 and 2 are the host's capture pipes, fd_out
    # the protocol's; holding them would keep their ends from the host.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    keep = sorted({0, 1, 2, fd_in, ready} | {fd for fd in (kill_fd, worker_fd) if fd >= 0})
    for low, high in zip(keep, [*keep[1:], 1 << 30], strict=True):
        os.closerange(low + 1, high)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the boundary's SIGKILL ends it
    events = select.poll()
    events.register(fd_in, 0)  # no events asked for: POLLHUP and POLLERR are always reported
    if worker_fd >= 0:
        # No cgroup: the host's kill (the worker's group and descendants) does
        # not reach this process, so it ends with the worker, taking the
        # worker's group along.
        events.register(worker_fd, select.POLLIN)
    os.write(ready, str(os.getpid()).encode())
    os.close(ready)
    while not events.poll():
        pass
    # The host is gone (or, without a cgroup, the worker): the tree goes with it.
    _kill(kill_fd, group)


def _kill(kill_fd: int, group: int) -> NoReturn:
    if kill_fd >= 0:
        try:
            os.write(kill_fd, b"1")
        except OSError:
            pass
    if group:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)
