"""The fork server: a zygote with the worker imported that forks fresh workers, so a new worker costs a fork.

The zygote is ``worker/_runtime/zygote.py``; this is the host's handle on it. How the
questions a fork server raises are settled:

1. **One zygote per sandbox policy**, started with the runner for its policies
   (lazily for any other). Nothing policy-specific happens before the fork (the
   child applies its own sandbox at ``initialize``), but the zygote's heap keeps
   what earlier requests carried: a ``none`` worker's environment holds the
   host's secrets, and a ``contained`` worker forked after it could read them
   from its own memory. Per policy, a worker only ever inherits what its
   siblings under the same policy were given.
2. **The host still attaches every worker** to its boundary before it sends
   ``initialize`` (rule 5 of ``_process``), exactly as for a Popen worker: the
   child waits for that message and has run no tool code. Its sandbox, rlimits
   included, is applied by the worker itself at ``initialize``, after the fork.
3. **fds** travel by ``SCM_RIGHTS`` over a ``SOCK_SEQPACKET`` socketpair: the
   protocol pipe's two worker ends and the stdout/stderr pipes. The child closes
   the zygote's socket first, then everything but 0-2 and the protocol pipe; it
   starts a new session, takes its cwd and environment from the request, and
   has stdin on the null device: what ``Popen`` gives a worker.
4. **pid, pidfd and exit status.** The zygote opens the pidfd of its own,
   unreaped child (race-free) and passes it back; kills go through it (rule 7).
   The zygote reaps a child only when the host asks (:meth:`ForkServer.reap`),
   which the host does where it would ``wait4`` a child of its own: after attach
   and the boundary kill (rule 8), so no pid in use is ever freed. The status
   and rusage are the real ``wait4`` ones. No ``PR_SET_CHILD_SUBREAPER`` on the
   host: it would make an embedding application the parent of every orphan of
   every child it has.
5. **Zygote death** never hangs a call: every exchange is bounded
   (``EXCHANGE_SECONDS``), a failed one retires the zygote (killed with its
   cgroup, which also takes any child it forked and did not report), and the
   worker is started with ``Popen`` instead. Workers it forked live on (their
   lifeline is their own pipe); init reaps them, and their real exit status is
   read from their pidfd (``PIDFD_INFO_EXIT``, Linux 6.15), which is why the
   fork server is only used on such kernels, and only with a cgroup boundary.
6. **Lifetime.** The zygote exits on EOF of its socket, so it dies with the
   host; the runner kills it (and its cgroup) when it closes, bounded.
7. **Inherited state.** The zygote is single-threaded (a fork copies one
   thread). Workers of one zygote share its hash seed; ``random`` reseeds at
   fork; nothing in the zygote opens OpenSSL or other fork-unsafe state.

The exchanges are synchronous, on the trio thread, like ``Popen`` (rule 1 of
``_process``): spawn and supervision stay one synchronous step (rule 6).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import trio

from xcsh_run._process.boundary import Boundary
from xcsh_run._process.teardown import KILL_WAIT_SECONDS
from xcsh_run._sandbox import HOST_ONLY_ENV

log: Final = logging.getLogger("xcsh_run")

EXCHANGE_SECONDS: Final = 2.0
READY_SECONDS: Final = 10.0
_PIDFD_GET_INFO: Final = 0xC040FF0B  # _IOWR(0xFF, 11, struct pidfd_info), 64 bytes
_PIDFD_INFO_EXIT: Final = 1 << 3
_EXIT_CODE_OFFSET: Final = 16 + 11 * 4
_ZYGOTE_ENV: Final = ("PATH", "LANG", "LANGUAGE")


class ForkServerError(Exception):
    """The zygote did not answer as it should; it is retired."""


def forkserver_supported() -> bool:
    """True on kernels that report a reaped non-child's exit status through its pidfd (6.15+)."""
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (6, 15)


def zygote_env(env: Mapping[str, str]) -> dict[str, str]:
    """What the zygote starts with: what shapes the interpreter's start (locale) and the marks tools see."""
    # Never the host's own secrets: a child forked from the zygote can read
    # the zygote's first environment (/proc/self/environ, its own memory).
    return {
        k: v
        for k, v in env.items()
        if (k in _ZYGOTE_ENV or k.startswith(("LC_", "XCSH_RUN_"))) and k not in HOST_ONLY_ENV
    }


def pidfd_exit_code(pidfd: int) -> int | None:
    """The exit status (as a Popen returncode) of a reaped process, from its pidfd; None if not known yet."""
    buf = bytearray(struct.pack("=Q", _PIDFD_INFO_EXIT) + bytes(56))
    try:
        fcntl.ioctl(pidfd, _PIDFD_GET_INFO, buf)
    except OSError:
        return None
    if not struct.unpack_from("=Q", buf)[0] & _PIDFD_INFO_EXIT:
        return None
    return os.waitstatus_to_exitcode(struct.unpack_from("=i", buf, _EXIT_CODE_OFFSET)[0])


class ForkServer:
    """One zygote: :meth:`start`, then :meth:`ready`, then :meth:`fork` and :meth:`reap` until :meth:`aclose`."""

    def __init__(self, env: Mapping[str, str], boundary: Boundary) -> None:
        self._env = zygote_env(env)
        self.boundary = boundary
        self.dead = False
        self.forks = 0  # workers it forked
        self._ready = False
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._pidfd = -1
        self._decoder = msgspec.msgpack.Decoder(list[Any])
        self._starting = trio.Lock()

    def start(self) -> None:
        """Start the zygote (it imports in the background). Raises OSError; nothing is left then."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-m", "xcsh_run.worker", "--zygote", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                cwd="/",
                env=self._env,
            )
        except BaseException:
            ours.close()
            self.dead = True
            raise
        finally:
            theirs.close()
        self._sock = ours
        try:
            self._pidfd = os.pidfd_open(self._proc.pid)
        except OSError:
            self._kill_now()
            raise

    async def ready(self) -> bool:
        """Wait (bounded) until the zygote has imported the worker and sits in its cgroup; False if it never will."""
        async with self._starting:  # workers starting at once: one of them waits on the socket
            if not (self._ready or self.dead):
                await self._wait_ready()
        return self._ready

    async def _wait_ready(self) -> None:
        assert self._sock is not None and self._proc is not None
        try:
            with trio.fail_after(READY_SECONDS):
                await trio.lowlevel.wait_readable(self._sock)
                await trio.to_thread.run_sync(self.boundary.attach, self._proc.pid)
            if self.dead:  # retired while it waited (the runner closing), its socket closed: it said why
                return
            reply = self._decoder.decode(self._sock.recv(4096, socket.MSG_DONTWAIT))
            if reply[:1] != ["ready"]:
                raise ForkServerError(f"the zygote said {reply!r}")
        except (trio.TooSlowError, trio.ClosedResourceError, OSError, ForkServerError, msgspec.DecodeError) as exc:
            self.retire(f"it did not start: {exc!r}")
            return
        self._ready = True

    def fork(self, cwd: str, env: Mapping[str, str], fds: tuple[int, int, int, int]) -> tuple[int, int]:
        """A new worker with these fds: ``(pid, pidfd)``. Bounded; raises ForkServerError (zygote retired)."""
        request = msgspec.msgpack.encode(["fork", cwd, dict(env)])
        reply, got = self._exchange(request, list(fds))
        if reply[:1] != ["forked"] or len(got) != 1:
            for fd in got:
                os.close(fd)
            self.retire(f"it could not fork: {reply!r}")
            raise ForkServerError(f"the fork server could not fork: {reply!r}")
        self.forks += 1
        return int(reply[1]), got[0]

    def try_fork(self, cwd: str, env: Mapping[str, str], fds: tuple[int, int, int, int]) -> tuple[int, int] | None:
        """:meth:`fork`, or None once retired (it said why): the caller starts the worker with Popen."""
        if self.dead:
            return None
        with contextlib.suppress(ForkServerError):
            return self.fork(cwd, env, fds)
        return None

    def reap(self, pid: int, pidfd: int) -> tuple[int, resource.struct_rusage | None] | None:
        """The returncode and rusage of an exited worker it forked; None if it is not known (yet)."""
        if not self.dead:
            try:
                reply, _ = self._exchange(msgspec.msgpack.encode(["reap", pid]), [])
            except ForkServerError:
                reply = []
            if reply[:1] == ["reaped"] and len(reply) == 4:
                return os.waitstatus_to_exitcode(reply[2]), resource.struct_rusage(reply[3])
            if reply[:1] == ["running"]:
                return None
        # The zygote is gone: init reaps its children, and the kernel keeps the status on the pidfd.
        deadline = time.monotonic() + 0.2
        while (code := pidfd_exit_code(pidfd)) is None and time.monotonic() < deadline:
            time.sleep(0.002)
        return None if code is None else (code, None)

    def _exchange(self, request: bytes, fds: list[int]) -> tuple[list[Any], list[int]]:
        if self.dead or not self._ready or self._sock is None:
            raise ForkServerError("the fork server is not running")
        got: list[int] = []
        try:
            self._sock.settimeout(EXCHANGE_SECONDS)
            socket.send_fds(self._sock, [request], fds)
            data, got, _, _ = socket.recv_fds(self._sock, 1 << 16, 1)
            for fd in got:
                # Close-on-exec, as Popen's pidfd is: nothing the embedding application
                # runs may inherit a handle on a worker (recv_fds ignores MSG_CMSG_CLOEXEC on 3.11).
                os.set_inheritable(fd, False)
            if not data:
                raise ForkServerError("the fork server closed its socket")
            return self._decoder.decode(data), got
        except (OSError, msgspec.DecodeError) as exc:
            for fd in got:
                os.close(fd)
            self.retire(f"an exchange failed: {exc!r}")
            raise ForkServerError(f"the fork server failed: {exc!r}") from None

    def retire(self, why: str) -> None:
        """Stop using it: workers start with Popen from now on. Kills the zygote and any child it did not report."""
        if not self.dead:
            log.warning("the fork server is retired (%s); workers start with Popen", why)
        self._kill_now()

    def _kill_now(self) -> None:
        self.dead = True
        if self._sock is not None:
            trio.lowlevel.notify_closing(self._sock)  # a task waiting for it to be ready wakes up
            self._sock.close()  # its lifeline, should a kill miss it
            self._sock = None
        if self._pidfd >= 0:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        if self.boundary.kill_path is not None:
            # Not waited on here (aclose does): a forked child not yet attached is still in this cgroup.
            with contextlib.suppress(OSError), open(self.boundary.kill_path, "w") as f:
                f.write("1")

    async def aclose(self) -> None:
        """Kill the zygote and its cgroup and reap it, bounded. Shield it."""
        if self._proc is None:
            return
        self._kill_now()
        await trio.to_thread.run_sync(self.boundary.kill)
        if self._pidfd >= 0:
            with trio.move_on_after(KILL_WAIT_SECONDS):
                await trio.lowlevel.wait_readable(self._pidfd)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(0)
        if self._proc.returncode is None:
            log.error("the fork server %d did not exit %g s after SIGKILL", self._proc.pid, KILL_WAIT_SECONDS)
        else:
            os.close(self._pidfd)
            self._pidfd = -1
        self.boundary.close()
        self._proc = None
