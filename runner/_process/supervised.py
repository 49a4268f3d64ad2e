"""The worker process: the only module that touches worker pids, fds and signals.

It never parses the protocol: its pipe goes to a reader the owner supplies.

Rules this module keeps (each one is a bug we do not want back):

1. Spawn on the calling thread, which is the trio thread. trio's own
   ``open_process`` forks from a worker thread that trio retires after 10 s
   idle, and anything tied to the forking thread (``PR_SET_PDEATHSIG``) then
   fires on a healthy worker. ``Popen`` here blocks for well under a
   millisecond on the vfork path.
2. A worker's end is its exit, seen through a pidfd. Never pipe EOF: a
   daemonised grandchild can hold the pipes open for as long as it lives.
3. Exit is followed by killing the whole boundary (the worker's cgroup), so
   nothing it started outlives it, and only then by a bounded drain of the
   pipes.
4. The protocol has its own pipe pair. fds 1 and 2 are captured into bounded
   tails, drained continuously so that a flood never blocks the worker
   (``xcsh_run._process.output``).
5. The worker is attached to its boundary before it is sent ``initialize``,
   and it runs no tool code before that message, so it cannot fork outside.
6. Spawn and supervision are one synchronous step: the supervisor task is
   started (``start_soon``, not ``start``) before the first checkpoint, so no
   cancellation can leave a live process without one.
7. Every kill signals the worker itself through its pidfd as well as its
   boundary: until attach completes the cgroup does not hold it.
8. The boundary belongs to the starter until attach is over, and the pid is
   reaped only after that, so attach never meets a removed cgroup or a
   recycled pid.
9. Every teardown wait is bounded; an expired bound is logged and counted
   (:class:`TeardownStats`), and the worker's end is always recorded, so no
   one waits forever on a worker whose cleanup failed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import logging
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import trio

from xcsh_run._discovery import worker_command
from xcsh_run._errors import WorkerDied, WorkerStartupError
from xcsh_run._process.boundary import Boundary
from xcsh_run._process.faults import fault_point
from xcsh_run._process.forkserver import ForkServer
from xcsh_run._process.output import OutputCapture
from xcsh_run._process.teardown import (
    DRAIN_SECONDS,
    KILL_WAIT_SECONDS,
    NO_STATS,
    TEARDOWN_SECONDS,
    WORKDIR_REMOVAL_SECONDS,
    TeardownStats,
    exited_now,
)
from xcsh_run._process.usage import ResourceUse
from xcsh_run._process.workdir import remove_workdir

_F_SETPIPE_SZ: Final = 1031
_DEFAULT_PIPE_BYTES: Final = 1 << 16
_PIPE_BYTES_CAP: Final = 1 << 20
log: Final = logging.getLogger("xcsh_run")

_Streams = tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream, trio.lowlevel.FdStream]
ProtocolReader = Callable[[trio.lowlevel.FdStream], Awaitable[None]]
"""Reads the worker's protocol pipe until EOF; run by the supervisor beside the output drains."""


@functools.cache
def protocol_pipe_bytes() -> int:
    """The size for the protocol pipes: as large as an unprivileged process may ask for, at most 1 MiB.

    A large result then crosses in 1 MiB steps instead of 64 KiB ones (a
    fifth less time for 10 MiB). Not more: every pipe's size counts against
    the user's ``pipe-user-pages-soft`` (64 MiB by default), and past it the
    kernel gives every new pipe of that user two pages.
    """
    try:
        with open("/proc/sys/fs/pipe-max-size", "rb") as f:
            return min(int(f.read()), _PIPE_BYTES_CAP)
    except (OSError, ValueError):
        return _PIPE_BYTES_CAP


class SupervisedProcess(ResourceUse):
    """One worker process, its boundary, workdir and output tails, from spawn to reap.

    Made by its owner, then brought to life by :meth:`spawn` (which also starts
    its supervisor) and :meth:`attach`. ``on_end`` runs once, when its end is
    recorded, with ``returncode`` known if it could be reaped.
    """

    def __init__(
        self,
        *,
        module: str,
        boundary: Boundary,
        workdir: Path | None = None,
        output_limit: int | None = None,
        teardown: TeardownStats | None = None,
        forkserver: ForkServer | None = None,
        python: str | None = None,
        worker_args: Sequence[str] = (),
    ) -> None:
        self.module = module
        # Forks the worker when it can (``forkserver``); else Popens ours or a tool env's (never zygoted).
        self.forkserver = forkserver
        self.python, self.worker_args = python or sys.executable, tuple(worker_args)  # the args: a JS worker's
        self.boundary = boundary
        self.workdir = workdir
        self.output = OutputCapture(output_limit, self.kill_tree, lambda: (self.module, self.pid))
        self.teardown = teardown if teardown is not None else NO_STATS
        self.pid = 0
        self.returncode: int | None = None
        self.rusage: resource.struct_rusage | None = None
        # The host's end of the protocol pipe to the worker; closed by teardown.
        self.protocol_out: trio.lowlevel.FdStream | None = None
        # True once reaped or given up on: nothing will run in it again.
        self.dead = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._pidfd = -1
        # /proc files read after every call: opened once, re-read from offset 0.
        self._proc_fds: dict[str, int] = {}
        self._exited = trio.Event()
        self._finished = trio.Event()
        # Set once attach is over (done, failed or never tried): until then
        # the boundary is the starter's, and the pid must not be reaped.
        self._attached = trio.Event()
        self._supervision = trio.CancelScope(shield=True)
        self._tasks: trio.Nursery | None = None
        self._on_end: Callable[[], None] | None = None
        self._readers_left = 3
        self._readers_done = trio.Event()

    # --- spawn and attach ------------------------------------------------------

    def spawn(
        self,
        nursery: trio.Nursery,
        cwd: str,
        env: Mapping[str, str],
        *,
        reader: ProtocolReader,
        on_end: Callable[[], None],
    ) -> None:
        """Spawn the worker and start its supervisor in ``nursery``, with no checkpoint between (Rule 6).

        On failure nothing is left running and WorkerStartupError is raised
        (or what ``nursery.start_soon`` raised, for a closed nursery).
        """
        self._on_end = on_end
        streams = self._spawn(cwd, env)
        try:
            nursery.start_soon(self._supervise, streams, reader)
        except BaseException:  # the runner's nursery is closed: nobody would supervise it
            self._kill_unsupervised(streams)
            raise

    def _spawn(self, cwd: str, env: Mapping[str, str]) -> _Streams:
        """Pipes, process and pidfd, synchronously. On failure nothing is left and WorkerStartupError is raised."""
        fds: list[int] = []
        try:
            for _ in range(4):
                fault_point("pipes")
                fds.extend(os.pipe())  # appended pipe by pipe: a failure on the third closes the first two
            to_r, to_w, from_r, from_w, out_r, out_w, err_r, err_w = fds
            pipe_bytes = protocol_pipe_bytes()
            for fd in (to_w, from_w) if pipe_bytes > _DEFAULT_PIPE_BYTES else ():
                with contextlib.suppress(OSError):  # best effort: over the user's pipe pages, say
                    fcntl.fcntl(fd, _F_SETPIPE_SZ, pipe_bytes)
            argv = [*worker_command(self.python), "--fd-in", str(to_r), "--fd-out", str(from_w), *self.worker_args]
            fault_point("popen")
            forked = self.forkserver.try_fork(cwd, env, (to_r, from_w, out_w, err_w)) if self.forkserver else None
            # Blocking on purpose, on the trio thread: see Rule 1 above.
            self._proc = None if forked is not None else subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                pass_fds=(to_r, from_w),
                close_fds=True,
                start_new_session=True,
                cwd=cwd,
                env=dict(env),
            )  # fmt: skip
        except Exception as exc:  # OSError mostly; Popen raises ValueError for an env value with a NUL
            for fd in fds:
                os.close(fd)
            self._abandon_resources()
            step = "its pipes" if len(fds) < 8 else "its process"
            raise WorkerStartupError(f"could not start a worker for {self.module} ({step}): {exc}") from exc
        # Forked by the zygote, which passed its pidfd too (xcsh_run._process.forkserver).
        self.pid, self._pidfd = forked if forked is not None else (self._proc.pid, -1)  # type: ignore[union-attr]
        # The child has its copies; ours of the child's ends must go, or EOF
        # would never come and the lifeline would never fire.
        for fd in (to_r, from_w, out_w, err_w):
            os.close(fd)
        try:
            if self._pidfd < 0:
                fault_point("pidfd_open", self.pid)
                self._pidfd = os.pidfd_open(self.pid)
        except OSError as exc:
            for fd in (to_w, from_r, out_r, err_r):
                os.close(fd)
            self._kill_unsupervised(())
            raise WorkerStartupError(f"could not start a worker for {self.module} (its pidfd): {exc}") from exc
        self.protocol_out = trio.lowlevel.FdStream(to_w)
        return trio.lowlevel.FdStream(from_r), trio.lowlevel.FdStream(out_r), trio.lowlevel.FdStream(err_r)

    def _kill_unsupervised(self, streams: tuple[trio.lowlevel.FdStream, ...]) -> None:
        """Kill and reap a worker that has no supervisor, synchronously; it ran no tool code."""
        # Not reaped yet, so its pid cannot have been recycled: a plain kill
        # reaches it. It is in no cgroup yet, so the boundary would miss it.
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        if self._proc is None:  # forked: its exit seen through the pidfd, reaped by the zygote
            if exited_now(self._pidfd, KILL_WAIT_SECONDS):
                self._reap()
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.returncode = self._proc.wait(KILL_WAIT_SECONDS)
        if self.returncode is None:
            self.teardown.overrun(f"worker {self.pid} ({self.module}) did not exit after SIGKILL")
        for stream in (*streams, self.protocol_out):
            if stream is not None:
                stream.close()
        if self._pidfd >= 0 and (self.returncode is not None or self._proc is None):
            os.close(self._pidfd)
            self._pidfd = -1
        self._abandon_resources()

    def _abandon_resources(self) -> None:
        """The process never ran: remove what was made for it (an empty cgroup, a fresh workdir)."""
        with contextlib.suppress(Exception):
            self.boundary.kill()
        self.boundary.close()
        if self.workdir is not None:
            remove_workdir(self.workdir)
            self.workdir = None
        self._attached.set()
        self.dead = True
        self._exited.set()
        self._finished.set()

    async def attach(self) -> None:
        """Move the worker into its boundary. Until this returns the boundary is ours, not the supervisor's."""
        try:
            await trio.to_thread.run_sync(self._attach_blocking)
        except OSError as exc:
            # Attach is over: the supervisor may reap and tear down from here.
            self._attached.set()
            if exc.errno == errno.ESRCH:
                # It died before it could be attached (it has run no tool code):
                # report how, from its exit status and stderr, not the errno.
                with trio.move_on_after(KILL_WAIT_SECONDS):
                    await self._finished.wait()
                if self.returncode is None:
                    raise WorkerStartupError(
                        f"the worker for {self.module} vanished before it could be attached to its cgroup: {exc}"
                    ) from None
                raise WorkerDied(self.returncode, self.output.stderr.text()) from None
            raise WorkerStartupError(
                f"could not move the worker for {self.module} into its cgroup: {exc}; "
                "the runner may be closing, or the cgroup hierarchy changed"
            ) from None
        except RuntimeError as exc:  # no thread could be started to attach it
            raise WorkerStartupError(f"could not attach the worker for {self.module}: {exc}") from None
        finally:
            # Set even when cancelled before the thread ran: the supervisor's
            # teardown waits for this before it touches the boundary.
            self._attached.set()

    def _attach_blocking(self) -> None:
        fault_point("attach", self.pid)
        self.boundary.attach(self.pid)

    def start_soon(self, fn: Callable[..., Awaitable[object]], *args: Any) -> bool:
        """Run ``fn(*args)`` for as long as the worker is supervised; False if it no longer is."""
        if self._tasks is None:
            return False
        try:
            self._tasks.start_soon(fn, *args)
        except RuntimeError:  # its supervisor is already closing
            return False
        return True

    # --- supervision ---------------------------------------------------------

    async def _supervise(self, streams: _Streams, reader: ProtocolReader) -> None:
        # Shielded: a cancellation of whatever encloses the runner must not
        # SIGKILL workers behind the runner's back, before its close has sent
        # them `$/cancel`, the `shutdown` event and the `shutdown` request. The
        # supervisor ends when its worker exits, which a kill always brings
        # about; `kill()` cancels this scope if even that overruns its bound.
        with self._supervision:
            await self._supervise_shielded(streams, reader)

    async def _supervise_shielded(self, streams: _Streams, reader: ProtocolReader) -> None:
        protocol, out, err = streams
        try:
            async with trio.open_nursery() as nursery:
                self._tasks = nursery
                nursery.start_soon(self._reading, reader, protocol)
                nursery.start_soon(self._reading, self.output.drain, out, self.output.stdout)
                nursery.start_soon(self._reading, self.output.drain, err, self.output.stderr)
                if self.boundary.cpu_budget is not None:  # RLIMIT_CPU is per process: the tree's is ours
                    nursery.start_soon(self.boundary.watch_cpu, self.kill_tree)
                await trio.lowlevel.wait_readable(self._pidfd)
                # It has exited (a zombie until reaped): no new work for it.
                self._exited.set()
                with trio.CancelScope(shield=True):
                    # The pid stays ours until it is reaped, and both attach and
                    # the boundary kill use it (the fallback without cgroups
                    # signals it by number): reap only after both, so neither
                    # can ever reach a recycled pid. Killing everything the
                    # worker left behind also frees the pipes for the readers.
                    await self._wait_attached()
                    await self._kill_boundary()
                    self._reap()
                    # A bounded moment for the readers to reach EOF: a reply
                    # written just before exit is still delivered.
                    with trio.move_on_after(DRAIN_SECONDS):
                        await self._readers_done.wait()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self._teardown(streams)
                except Exception:
                    log.exception("tearing down the worker for %s failed; its resources may be left", self.module)
                finally:
                    # Whatever failed above, the worker's end is recorded: nobody
                    # may wait forever on a worker that no longer has a supervisor.
                    self.dead = True
                    if self._on_end is not None:
                        self._on_end()
                    self._exited.set()
                    self._finished.set()

    async def _teardown(self, streams: _Streams) -> None:
        """Every step bounded, each one attempted even when an earlier one failed."""
        if self.returncode is None:
            # Cancelled from outside (the runner's nursery is going): the
            # process must still die and be reaped before we return.
            await self.kill_tree()
            with trio.move_on_after(KILL_WAIT_SECONDS):
                await trio.lowlevel.wait_readable(self._pidfd)
            if exited_now(self._pidfd):
                self._reap()
            else:
                self.teardown.overrun(
                    f"worker {self.pid} ({self.module}) did not exit {KILL_WAIT_SECONDS:g} s after SIGKILL"
                )
        self.boundary.close()
        fds, self._proc_fds = self._proc_fds, {}
        for fd in fds.values():
            os.close(fd)
        if self.workdir is not None:
            workdir, self.workdir = self.workdir, None
            removed = await trio.to_thread.run_sync(
                functools.partial(remove_workdir, workdir, timeout=WORKDIR_REMOVAL_SECONDS)
            )
            if not removed:
                self.teardown.overrun(f"could not remove all of the workdir {workdir} of worker {self.pid} yet")
                self.teardown.leftover_workdirs.append(workdir)
        if self._pidfd >= 0 and (self.returncode is not None or self._proc is None):
            # Closed only once reaped: until then it is the one safe handle on the
            # pid. A forked worker is not ours to reap: its handle protects nothing now.
            os.close(self._pidfd)
            self._pidfd = -1
        for stream in (*streams, self.protocol_out):
            if stream is not None:
                await stream.aclose()

    async def _kill_boundary(self) -> None:
        if not await trio.to_thread.run_sync(self.boundary.kill) and self.boundary.reliable:
            self.teardown.overrun(f"the cgroup of worker {self.pid} ({self.module}) could not be emptied and removed")

    def _signal(self, signum: int) -> None:
        """Signal the worker itself through its pidfd (never a recycled pid)."""
        if self._pidfd >= 0 and self.returncode is None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signum)

    def _reap(self) -> None:
        if self._proc is None:
            assert self.forkserver is not None  # forked: its zygote reaps it, when asked
            got = self.forkserver.reap(self.pid, self._pidfd)
            if got is None:
                self.teardown.overrun(f"the exit status of worker {self.pid} ({self.module}) is not known")
                return
            self.returncode, self.rusage = got
            self.dead = True
            self._exited.set()
            return
        try:
            # wait4 rather than Popen.wait: the rusage tells a CPU-limit kill apart.
            pid, status, self.rusage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid = 0
        if pid == self.pid:
            self._proc.returncode = os.waitstatus_to_exitcode(status)
        try:
            self.returncode = self._proc.wait(KILL_WAIT_SECONDS)
        except subprocess.TimeoutExpired:  # pragma: no cover - the pidfd said it exited
            self.teardown.overrun(f"worker {self.pid} could not be reaped")
            return
        self.dead = True
        self._exited.set()

    async def _reading(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        try:
            await fn(*args)
        finally:
            self._readers_left -= 1
            if self._readers_left == 0:
                self._readers_done.set()

    # --- stopping ---------------------------------------------------------------

    @property
    def exited(self) -> bool:
        """True once the worker has exited (or never started): no new work for it."""
        return self._exited.is_set()

    def terminate(self) -> None:
        """Send SIGTERM to the worker (not its children): the first rung of the ladder."""
        if not self._exited.is_set():
            self._signal(signal.SIGTERM)

    async def kill_tree(self) -> None:
        """SIGKILL the worker and its boundary, without waiting for the worker's end."""
        # The worker itself first, through its pidfd: before attach completes
        # (or without a cgroup) the boundary does not hold it yet.
        self._signal(signal.SIGKILL)
        # The boundary belongs to whoever is attaching until attach is over.
        await self._wait_attached()
        await self._kill_boundary()

    async def _wait_attached(self) -> None:
        # One write to cgroup.procs, in a thread that cannot be abandoned: it
        # ends. Bounded all the same, and reported if it ever does not.
        with trio.move_on_after(KILL_WAIT_SECONDS) as scope:
            await self._attached.wait()
        if scope.cancelled_caught:
            self.teardown.overrun(f"attaching worker {self.pid} to its cgroup did not finish")

    async def kill(self) -> None:
        """Kill the worker and its whole tree, and wait until all of it is gone.

        Bounded: if the worker has not been reaped ``KILL_WAIT_SECONDS`` after
        its SIGKILL (a process stuck in the kernel), the overrun is logged and
        counted in :class:`TeardownStats` and this returns anyway.
        """
        if self._finished.is_set():
            return
        await self.kill_tree()
        with trio.move_on_after(KILL_WAIT_SECONDS) as scope:
            await self._exited.wait()
        if not scope.cancelled_caught:
            # It exited: what is left is the bounded teardown (the tree kill,
            # the drain, and the workdir, whose removal has a bound of its own).
            with trio.move_on_after(TEARDOWN_SECONDS) as scope:
                await self._finished.wait()
            if scope.cancelled_caught:
                self.teardown.overrun(
                    f"the teardown of worker {self.pid} ({self.module}) took over {TEARDOWN_SECONDS:g} s"
                )
            return
        self.teardown.overrun(f"worker {self.pid} ({self.module}) did not exit {KILL_WAIT_SECONDS:g} s after SIGKILL")
        # Its supervisor is shielded and would wait for that exit forever, holding the runner's nursery open.
        self._supervision.cancel()

    async def wait_exited(self) -> None:
        await self._exited.wait()


def write_some(stream: trio.lowlevel.FdStream | None, data: bytes) -> int:
    """What a non-blocking pipe takes of ``data`` now, without waiting, with the errors ``send_all`` raises."""
    fd = stream.fileno() if stream is not None else -1
    if fd < 0:
        raise trio.ClosedResourceError("the worker's protocol pipe is closed")
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0
    except OSError as exc:  # EPIPE: the worker closed its end
        raise trio.BrokenResourceError(f"the worker's protocol pipe is broken: {exc}") from exc
