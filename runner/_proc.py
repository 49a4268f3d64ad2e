"""WorkerProcess: the only module that touches worker pids, fds and signals.

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
   tails, drained continuously so that a flood never blocks the worker.
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
import enum
import errno
import fcntl
import functools
import itertools
import logging
import os
import resource
import select
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec
import trio

from worker import _protocol as p

from ._boundary import Boundary
from ._errors import RemoteProtocolError, WorkerDied, WorkerStartupError
from ._faults import fault_point
from ._sandbox import remove_workdir

DRAIN_SECONDS: Final = 0.5
# How long a kill may take to be seen (reaped) before it is reported as an
# overrun instead of waited on forever: SIGKILL is not instant for a process
# in uninterruptible sleep (a hung NFS read, a frozen cgroup).
KILL_WAIT_SECONDS: Final = 5.0
# A worker's private HOME/TMPDIR gets this long to be removed, however the
# tool built it; what is left is retried when the runner closes.
WORKDIR_REMOVAL_SECONDS: Final = 10.0
TEARDOWN_SECONDS: Final = DRAIN_SECONDS + WORKDIR_REMOVAL_SECONDS + KILL_WAIT_SECONDS
TAIL_BYTES: Final = 64 * 1024
_F_SETPIPE_SZ: Final = 1031
_PIPE_BYTES: Final = 1 << 20
_READ_CHUNK: Final = 1 << 20
_ids = itertools.count(1)
log: Final = logging.getLogger("xcsh_run")

_Streams = tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream, trio.lowlevel.FdStream]


class TeardownStats:
    """Bounded teardown waits that expired: each one logged, and counted here.

    A runner shares one with all its workers; ``RunnerStatistics.teardown_overruns``
    reports the count. Anything above 0 means a kill or a cleanup did not
    finish in its bound and was given up on rather than waited on forever.
    """

    def __init__(self) -> None:
        self.overruns = 0
        # Workdirs whose removal ran out of time, retried when the runner
        # closes (a live host's own workdirs are never swept by others).
        self.leftover_workdirs: list[Path] = []

    def overrun(self, what: str) -> None:
        self.overruns += 1
        log.error("teardown bound expired: %s", what)


_NO_STATS = TeardownStats()


def _exited_now(pidfd: int) -> bool:
    """True if the process behind ``pidfd`` has exited (a pidfd is readable then)."""
    if pidfd < 0:
        return False
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _describe(msg: object) -> str:
    method = getattr(msg, "method", None)
    return f"{method!r} message" if method else "response"


class WorkerState(enum.Enum):
    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    DEAD = "dead"


class OutputTail:
    """The last ``limit`` bytes written to one of the worker's output fds."""

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self.limit = limit
        self.total = 0
        self._chunks: deque[bytes] = deque()
        self._size = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if len(data) >= self.limit:
            self._chunks.clear()
            data = data[-self.limit :]
            self._size = 0
        self._chunks.append(data)
        self._size += len(data)
        while self._size - len(self._chunks[0]) >= self.limit:
            self._size -= len(self._chunks.popleft())

    def text(self, max_chars: int = 4000) -> str:
        raw = b"".join(self._chunks).decode("utf-8", errors="replace")
        return raw[-max_chars:]


class RemoteError(Exception):
    """The worker answered a request with a JSON-RPC error object."""

    def __init__(self, error: p.ErrorObject) -> None:
        self.error = error
        super().__init__(error.message)

    @property
    def data(self) -> dict[str, Any]:
        return self.error.data if isinstance(self.error.data, dict) else {}


class RemoteRequestRefused(Exception):
    """Raised by a host handler to answer a worker's request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


RequestHandler = Callable[["WorkerProcess", p.Request], Awaitable[Any]]
NotificationHandler = Callable[["WorkerProcess", p.Notification], None]


class _Pending:
    """One request in flight: its answer, or the reason there will be none."""

    __slots__ = ("req_id", "call_id", "event", "result", "error")

    def __init__(self, req_id: int) -> None:
        self.req_id = req_id
        self.call_id: str | None = None
        self.event = trio.Event()
        self.result: msgspec.Raw | None = None
        self.error: BaseException | None = None

    def outcome(self) -> msgspec.Raw:
        """The result, or raise what ended the request (only after ``event`` fired)."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def _bigger_pipe(fd: int) -> None:
    # A 1 MiB pipe cuts large-result time by about a fifth; refusal is harmless.
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_BYTES)


class WorkerProcess:
    """One live worker: its process, boundary, protocol connection and output tails.

    Created only by :meth:`start`. ``repr`` shows pid, module and state.
    """

    def __init__(
        self,
        *,
        module: str,
        boundary: Boundary,
        max_frame_bytes: int,
        workdir: Path | None = None,
        output_limit: int | None = None,
    ) -> None:
        self.id = next(_ids)
        self.module = module
        self.boundary = boundary
        self.max_frame_bytes = max_frame_bytes
        self.workdir = workdir
        self.output_limit = output_limit
        self.output_exceeded = False
        self.unenforced: list[str] = []
        self.has_ui = False
        self.idle_since = 0.0
        self._statm_fd = -1
        self._stat_fd = -1
        self.state = WorkerState.STARTING
        self.pid = 0
        self.returncode: int | None = None
        self.rusage: resource.struct_rusage | None = None
        self.calls_served = 0
        self.stdout_tail = OutputTail()
        self.stderr_tail = OutputTail()
        self.protocol_error: RemoteProtocolError | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._pidfd = -1
        self._send: trio.lowlevel.FdStream | None = None
        self._send_lock = trio.Lock()
        self._pending: dict[int, _Pending] = {}
        self._update_handlers: dict[str, Callable[[p.CallResult], None]] = {}
        self._next_id = itertools.count(1)
        self._last_id = 0
        self._exited = trio.Event()
        self._finished = trio.Event()
        # Set once attach is over (done, failed or never tried): until then
        # the boundary is the starter's, and the pid must not be reaped.
        self._attached = trio.Event()
        self._supervision = trio.CancelScope(shield=True)
        self.teardown = _NO_STATS
        self._tasks: trio.Nursery | None = None
        self.on_request: RequestHandler | None = None
        self.on_notification: NotificationHandler | None = None
        self._readers_left = 3
        self._readers_done = trio.Event()

    def __repr__(self) -> str:
        return f"<WorkerProcess pid={self.pid} module={os.path.basename(self.module)!r} {self.state.name}>"

    # --- start -------------------------------------------------------------

    @classmethod
    async def start(
        cls,
        nursery: trio.Nursery,
        *,
        module: str,
        cwd: str,
        env: Mapping[str, str],
        boundary: Boundary,
        max_frame_bytes: int = p.DEFAULT_MAX_FRAME_BYTES,
        sandbox: p.SandboxConfig | None = None,
        workdir: Path | None = None,
        output_limit: int | None = None,
        has_ui: bool = False,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        teardown: TeardownStats | None = None,
    ) -> WorkerProcess:
        """Spawn a worker, attach it to ``boundary`` and run the handshake.

        The worker owns ``boundary`` and ``workdir`` from here on: both are
        removed when it ends, also when this raises or is cancelled. The caller
        must bound this with a deadline. Raises WorkerStartupError (with the
        errno of a host-side failure), WorkerDied or RemoteProtocolError; on
        any failure, and on cancellation, the worker is gone (bounded) before
        this returns.
        """
        self = cls(
            module=module,
            boundary=boundary,
            max_frame_bytes=max_frame_bytes,
            workdir=workdir,
            output_limit=output_limit,
        )
        if teardown is not None:
            self.teardown = teardown
        # Before the worker can say anything: a factory may already use the UI or the logger.
        self.on_request = on_request
        self.on_notification = on_notification
        self.has_ui = has_ui  # what the worker was last told
        # Spawn and supervision are one step with no checkpoint between them:
        # a cancellation cannot land where a live process has no supervisor.
        streams = self._spawn(cwd, env)
        try:
            nursery.start_soon(self._supervise, streams)
        except BaseException:  # the runner's nursery is closed: nobody would supervise it
            self._kill_unsupervised(streams)
            raise
        try:
            await self._attach()
            fault_point("initialize", self.pid)
            init = p.InitializeParams(
                protocol_version=p.PROTOCOL_VERSION,
                host_pid=os.getpid(),
                cwd=cwd,
                max_frame_bytes=max_frame_bytes,
                cgroup_kill_path=boundary.kill_path,
                sandbox=sandbox or p.SandboxConfig(level="none"),
                has_ui=has_ui,
            )
            try:
                raw = await self.request(p.M_INITIALIZE, init)
                result = msgspec.json.decode(raw, type=p.InitializeResult)
            except RemoteError as exc:
                # A refusal to start (version, sandbox) says nothing about the
                # tool module: it must not be mistaken for (or cached as) a load error.
                raise WorkerStartupError(f"the worker refused to start: {exc.error.message}") from None
            except msgspec.DecodeError as exc:
                raise RemoteProtocolError(f"malformed initialize result: {exc}") from None
            self.unenforced = result.unenforced
            if result.protocol_version != p.PROTOCOL_VERSION:
                raise RemoteProtocolError(
                    f"worker speaks protocol version {result.protocol_version}, host speaks {p.PROTOCOL_VERSION}"
                )
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await self.kill()
            if isinstance(exc, OSError):  # host-side, e.g. a write to a pipe the kernel refused
                raise WorkerStartupError(f"could not start a worker for {self.module}: {exc}") from exc
            raise
        self.state = WorkerState.IDLE
        return self

    def _spawn(self, cwd: str, env: Mapping[str, str]) -> _Streams:
        """Pipes, process and pidfd, synchronously. On failure nothing is left and WorkerStartupError is raised."""
        fds: list[int] = []
        try:
            for _ in range(4):
                fault_point("pipes")
                fds.extend(os.pipe())  # appended pipe by pipe: a failure on the third closes the first two
            to_r, to_w, from_r, from_w, out_r, out_w, err_r, err_w = fds
            _bigger_pipe(to_w)
            _bigger_pipe(from_w)
            argv = [sys.executable, "-I", "-m", "worker", "--fd-in", str(to_r), "--fd-out", str(from_w)]
            fault_point("popen")
            # Blocking on purpose, on the trio thread: see Rule 1 above.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                pass_fds=(to_r, from_w),
                close_fds=True,
                start_new_session=True,
                cwd=cwd,
                env=dict(env),
            )
        except Exception as exc:  # OSError mostly; Popen raises ValueError for an env value with a NUL
            for fd in fds:
                os.close(fd)
            self._abandon_resources()
            step = "its pipes" if len(fds) < 8 else "its process"
            raise WorkerStartupError(f"could not start a worker for {self.module} ({step}): {exc}") from exc
        self._proc = proc
        self.pid = proc.pid
        # The child has its copies; ours of the child's ends must go, or EOF
        # would never come and the lifeline would never fire.
        for fd in (to_r, from_w, out_w, err_w):
            os.close(fd)
        try:
            fault_point("pidfd_open", self.pid)
            self._pidfd = os.pidfd_open(self.pid)
        except OSError as exc:
            for fd in (to_w, from_r, out_r, err_r):
                os.close(fd)
            self._kill_unsupervised(())
            raise WorkerStartupError(f"could not start a worker for {self.module} (its pidfd): {exc}") from exc
        self._send = trio.lowlevel.FdStream(to_w)
        return trio.lowlevel.FdStream(from_r), trio.lowlevel.FdStream(out_r), trio.lowlevel.FdStream(err_r)

    def _kill_unsupervised(self, streams: tuple[trio.lowlevel.FdStream, ...]) -> None:
        """Kill and reap a worker that has no supervisor, synchronously; it ran no tool code."""
        assert self._proc is not None
        # Not reaped yet, so its pid cannot have been recycled: a plain kill
        # reaches it. It is in no cgroup yet, so the boundary would miss it.
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        try:
            self.returncode = self._proc.wait(KILL_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.teardown.overrun(f"worker {self.pid} ({self.module}) did not exit after SIGKILL")
        for stream in (*streams, self._send):
            if stream is not None:
                stream.close()
        if self._pidfd >= 0 and self.returncode is not None:
            os.close(self._pidfd)
            self._pidfd = -1
        self._abandon_resources()

    def _abandon_resources(self) -> None:
        """The process never ran: remove what was made for it (an empty cgroup, a fresh workdir)."""
        with contextlib.suppress(Exception):
            self.boundary.kill()
        self.boundary.close()
        self._remove_workdir()
        self._attached.set()
        self.state = WorkerState.DEAD
        self._exited.set()
        self._finished.set()

    async def _attach(self) -> None:
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
                raise WorkerDied(self.returncode, self.stderr_tail.text()) from None
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

    # --- supervision ---------------------------------------------------------

    async def _supervise(self, streams: _Streams) -> None:
        # Shielded: a cancellation of whatever encloses the runner must not
        # SIGKILL workers behind the runner's back, before its close has sent
        # them `$/cancel`, the `shutdown` event and the `shutdown` request. The
        # supervisor ends when its worker exits, which a kill always brings
        # about; `kill()` cancels this scope if even that overruns its bound.
        with self._supervision:
            await self._supervise_shielded(streams)

    async def _supervise_shielded(self, streams: _Streams) -> None:
        protocol, out, err = streams
        try:
            async with trio.open_nursery() as nursery:
                self._tasks = nursery
                nursery.start_soon(self._read_protocol, protocol)
                nursery.start_soon(self._drain, out, self.stdout_tail)
                nursery.start_soon(self._drain, err, self.stderr_tail)
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
                    self.state = WorkerState.DEAD
                    self._fail_pending(WorkerDied(self.returncode or 0, self.stderr_tail.text()))
                    self._exited.set()
                    self._finished.set()

    async def _teardown(self, streams: _Streams) -> None:
        """Every step bounded, each one attempted even when an earlier one failed."""
        if self.returncode is None:
            # Cancelled from outside (the runner's nursery is going): the
            # process must still die and be reaped before we return.
            self._signal(signal.SIGKILL)
            await self._wait_attached()
            await self._kill_boundary()
            with trio.move_on_after(KILL_WAIT_SECONDS):
                await trio.lowlevel.wait_readable(self._pidfd)
            if _exited_now(self._pidfd):
                self._reap()
            else:
                self.teardown.overrun(
                    f"worker {self.pid} ({self.module}) did not exit {KILL_WAIT_SECONDS:g} s after SIGKILL"
                )
        self.boundary.close()
        for fd in (self._statm_fd, self._stat_fd):
            if fd >= 0:
                os.close(fd)
        self._statm_fd = self._stat_fd = -1
        if self.workdir is not None:
            workdir, self.workdir = self.workdir, None
            removed = await trio.to_thread.run_sync(
                functools.partial(remove_workdir, workdir, timeout=WORKDIR_REMOVAL_SECONDS)
            )
            if not removed:
                self.teardown.overrun(f"could not remove all of the workdir {workdir} of worker {self.pid} yet")
                self.teardown.leftover_workdirs.append(workdir)
        if self._pidfd >= 0 and self.returncode is not None:
            # Closed only once reaped: until then it is the one safe handle on the pid.
            os.close(self._pidfd)
            self._pidfd = -1
        for stream in (*streams, self._send):
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

    def _remove_workdir(self) -> None:
        if self.workdir is not None:
            remove_workdir(self.workdir)
            self.workdir = None

    def _reap(self) -> None:
        assert self._proc is not None
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
        self.state = WorkerState.DEAD
        self._exited.set()

    def _reader_finished(self) -> None:
        self._readers_left -= 1
        if self._readers_left == 0:
            self._readers_done.set()

    async def _drain(self, stream: trio.lowlevel.FdStream, tail: OutputTail) -> None:
        try:
            while data := await stream.receive_some(_READ_CHUNK):
                tail.add(data)
                limit = self.output_limit
                if limit is not None and not self.output_exceeded and self.output_bytes > limit:
                    # Over the output budget: the worker and its tree go now.
                    self.output_exceeded = True
                    with trio.CancelScope(shield=True):
                        await self._kill_tree()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        finally:
            self._reader_finished()

    async def _read_protocol(self, stream: trio.lowlevel.FdStream) -> None:
        decoder = p.FrameDecoder(self.max_frame_bytes)
        try:
            while True:
                try:
                    data = await stream.receive_some(_READ_CHUNK)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    data = b""
                decoder.receive_data(data)
                while (msg := decoder.next_message()) is not p.NEED_DATA:
                    try:
                        self._dispatch(msg)  # type: ignore[arg-type]
                    except msgspec.DecodeError as exc:
                        # Well-framed JSON-RPC with the wrong params is still not
                        # the protocol; it must never escape into the host.
                        raise p.RemoteProtocolError(f"malformed {_describe(msg)}: {exc}") from None
                if not data:
                    return
        except p.RemoteProtocolError as exc:
            self.protocol_error = RemoteProtocolError(
                f"worker for {os.path.basename(self.module)} broke the protocol: {exc}"
            )
            self._fail_pending(self.protocol_error)
            # Nothing it says can be trusted any more: end it and its tree.
            with trio.CancelScope(shield=True):
                await self._kill_tree()
        finally:
            self._reader_finished()

    def _dispatch(self, msg: p.Message) -> None:
        if isinstance(msg, p.Notification):
            if msg.method == p.N_UPDATE:
                update = msgspec.json.decode(msg.params, type=p.UpdateParams)
                handler = self._update_handlers.get(update.call_id)
                if handler is not None:
                    handler(update.partial)
            elif self.on_notification is not None:
                self.on_notification(self, msg)
            return
        if isinstance(msg, p.Request):
            # Answered in its own task: a UI prompt may take minutes, and the
            # reader must keep reading meanwhile (updates, cancels, the reply).
            if self._tasks is not None:
                self._tasks.start_soon(self._answer, msg)
            return
        if not isinstance(msg.id, int) or not 0 < msg.id <= self._last_id:
            raise p.RemoteProtocolError(f"response to a request id the host never sent: {msg.id!r}")
        pending = self._pending.pop(msg.id, None)
        if pending is None:
            return  # an answer to a request the caller abandoned (cancelled or timed out)
        if isinstance(msg, p.Response):
            pending.result = msg.result
        else:
            pending.error = RemoteError(msg.error)
        pending.event.set()

    async def _answer(self, request: p.Request) -> None:
        handler = self.on_request
        try:
            if handler is None:
                raise RemoteRequestRefused(int(p.ErrorCode.METHOD_NOT_FOUND), f"unknown method {request.method!r}")
            result = await handler(self, request)
            reply: p.Message = p.Response(id=request.id, result=p.encode_value(result))
        except RemoteRequestRefused as exc:
            reply = p.ErrorResponse(id=request.id, error=p.ErrorObject(code=exc.code, message=str(exc)))
        except msgspec.DecodeError as exc:
            error = p.ErrorObject(code=int(p.ErrorCode.INVALID_PARAMS), message=f"bad {request.method} params: {exc}")
            reply = p.ErrorResponse(id=request.id, error=error)
        try:
            await self._send_frame(p.encode_message(reply, max_frame_bytes=self.max_frame_bytes))
        except (trio.BrokenResourceError, trio.ClosedResourceError, p.LocalProtocolError):
            pass  # the worker is gone, or the answer is too big for it: either way it will not wait forever

    def _fail_pending(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for item in pending.values():
            item.error = exc
            item.event.set()

    # --- requests ------------------------------------------------------------

    @property
    def output_bytes(self) -> int:
        """Bytes the worker (and its children) wrote to stdout and stderr so far."""
        return self.stdout_tail.total + self.stderr_tail.total

    def cpu_seconds(self) -> float:
        """CPU time the worker process has used (user + system), 0 if unknown."""
        if self.rusage is not None:
            return float(self.rusage.ru_utime + self.rusage.ru_stime)
        if self._finished.is_set():
            return 0.0  # gone without a rusage: do not reopen /proc for a pid that is no longer ours
        try:
            # Checked after every call: one fd kept open, re-read from offset 0.
            if self._stat_fd < 0:
                self._stat_fd = os.open(f"/proc/{self.pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
            fields = os.pread(self._stat_fd, 1024, 0).rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0

    def rss_bytes(self) -> int:
        """The worker process's resident memory, 0 if unknown."""
        if self._finished.is_set():
            return 0
        try:
            if self._statm_fd < 0:
                self._statm_fd = os.open(f"/proc/{self.pid}/statm", os.O_RDONLY | os.O_CLOEXEC)
            fields = os.pread(self._statm_fd, 128, 0).split()
            return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            return 0

    @property
    def alive(self) -> bool:
        return not self._exited.is_set() and self.protocol_error is None

    async def _send_frame(self, frame: bytes) -> None:
        assert self._send is not None
        async with self._send_lock:
            await self._send.send_all(frame)

    async def send_request(
        self, method: str, params: Any, *, on_update: tuple[str, Callable[[p.CallResult], None]] | None = None
    ) -> _Pending:
        """Send a request; the returned handle's ``event`` fires on its answer or the worker's end.

        Pair every call with :meth:`forget` (in a ``finally``).
        """
        if self.protocol_error is not None:
            raise self.protocol_error
        if self._exited.is_set():
            raise WorkerDied(self.returncode or 0, self.stderr_tail.text())
        req_id = next(self._next_id)
        body = params if isinstance(params, msgspec.Raw) else p.encode_value(params)
        # Encoded before anything is registered: a message over the frame
        # limit (LocalProtocolError) leaves no pending entry behind.
        frame = p.encode_message(p.Request(id=req_id, method=method, params=body), max_frame_bytes=self.max_frame_bytes)
        self._last_id = req_id
        pending = _Pending(req_id)
        self._pending[req_id] = pending
        if on_update is not None:
            pending.call_id = on_update[0]
            self._update_handlers[on_update[0]] = on_update[1]
        try:
            await self._send_frame(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # The worker is gone or going: its exit will fail the pending item.
            pass
        except BaseException:
            self.forget(pending)
            raise
        return pending

    def forget(self, pending: _Pending) -> None:
        self._pending.pop(pending.req_id, None)
        if pending.call_id is not None:
            self._update_handlers.pop(pending.call_id, None)

    async def request(self, method: str, params: Any) -> msgspec.Raw:
        """Send a request and wait for its answer.

        Raises:
            RemoteError: the worker answered with an error object.
            WorkerDied: the worker exited before answering.
            RemoteProtocolError: the worker broke the protocol.

        Cancellation: the request is abandoned; the worker may still be working
        on it, so the caller must stop the worker.
        """
        pending = await self.send_request(method, params)
        try:
            await pending.event.wait()
        finally:
            self.forget(pending)
        return pending.outcome()

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification; silently dropped if the worker is gone."""
        frame = p.encode_message(
            p.Notification(method=method, params=p.encode_value(params)), max_frame_bytes=self.max_frame_bytes
        )
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._send_frame(frame)

    # --- stopping ---------------------------------------------------------------

    def terminate(self) -> None:
        """Send SIGTERM to the worker (not its children): the first rung of the ladder."""
        if not self._exited.is_set():
            self._signal(signal.SIGTERM)

    async def _kill_tree(self) -> None:
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
        await self._kill_tree()
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
        # Its supervisor is shielded and would wait for that exit forever,
        # holding the runner's nursery open: end it (bounded teardown).
        self._supervision.cancel()

    async def wait_exited(self) -> None:
        await self._exited.wait()

    async def shutdown(self, grace: float) -> None:
        """Ask the worker to exit, then kill whatever is left of its tree."""
        if self.alive:
            with trio.move_on_after(grace):
                with contextlib.suppress(RemoteError, WorkerDied, RemoteProtocolError):
                    await self.request(p.M_SHUTDOWN, {})
                await self._exited.wait()
        await self.kill()
