"""WorkerLink: the worker protocol spoken over one worker process's pipes, under trio.

The process itself (spawn, pidfd, boundary, kill, output tails, and the rules
that keep them safe) is :class:`xcsh_run._process.supervised.SupervisedProcess`; the
protocol's state (request ids, what is outstanding, the lifecycle, typed
decoding) is a sans-io ``xcsh_run.worker.protocol.connection.Connection``. What is left here is
moving bytes and waking waiters:

1. One task reads the protocol pipe into the connection; every frame this side
   writes goes through one lock, in the order the connection produced them.
2. An answer wakes the :class:`InFlight` handle of its request. A request from
   the worker is answered in a task of its own (a UI prompt may take minutes,
   and the reader must keep reading meanwhile). An ``update`` goes to the
   handler of the call it names.
3. When the worker breaks the protocol, every waiter fails with that
   RemoteProtocolError and the worker's tree is killed: nothing it says can be
   trusted any more. When its end is recorded, every waiter still waiting fails
   with WorkerDied (with its exit status, known only then: EOF alone does not end a request).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import trio

from xcsh_run._errors import RemoteError, RemoteProtocolError, RemoteRequestRefused, WorkerDied, WorkerStartupError
from xcsh_run._pool.interface import InFlight, PoolWorker, UpdateHandler
from xcsh_run._process import (
    Boundary,
    ForkServer,
    HighWater,
    OutputTail,
    SupervisedProcess,
    TeardownStats,
    fault_point,
    write_some,
)
from xcsh_run.worker import protocol as p

__all__ = [
    "InFlight",
    "NotificationHandler",
    "OutputTail",
    "RemoteError",
    "RemoteRequestRefused",
    "RequestHandler",
    "TeardownStats",
    "WorkerLink",
]

P = TypeVar("P")
R = TypeVar("R")

_ids = itertools.count(1)
_SCRATCH_BYTES: Final = 1 << 16  # a read of a small message; a larger one is read into its own buffer
_GONE: Final = (p.State.CLOSED, p.State.ERROR)

RequestHandler = Callable[["WorkerLink", p.RequestReceived], Awaitable[Any]]
"""Answers one of the worker's requests (typed params); its return value is the result."""
NotificationHandler = Callable[["WorkerLink", p.NotificationReceived], None]


class WorkerLink:
    """One live worker, made by :meth:`start`: its process, and the protocol connection over its pipes."""

    def __init__(self, process: SupervisedProcess, *, max_frame_bytes: int) -> None:
        self.id = next(_ids)
        self.process = process
        self.max_frame_bytes = max_frame_bytes
        self.unenforced: list[str] = []
        self.supervisor_pid = 0
        self.protocol_error: RemoteProtocolError | None = None
        self.on_request: RequestHandler | None = None
        self.on_notification: NotificationHandler | None = None
        self._conn = p.Connection(p.Role.HOST, p.WORKER_PROTOCOL, max_frame_bytes=max_frame_bytes)
        # A semaphore, not a Lock: a frame the pipe could not take at once is
        # finished by a supervisor task, which releases what the sender took.
        self._send_lock = trio.Semaphore(1, max_value=1)
        # Who waits for which of our requests (the ids and their lifecycle are the connection's).
        self._waiting: dict[int, InFlight[Any]] = {}
        self._unsent = itertools.count(1)  # negative keys in _waiting: requests made while it was ending
        self._updates = process.output.calls = dict[str, UpdateHandler]()  # also whose output `-v` shows

    def __repr__(self) -> str:
        state = "dead" if self.process.dead else "alive" if self.alive else "failed"
        return f"<WorkerLink pid={self.pid} module={os.path.basename(self.module)!r} {state}>"

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
        forkserver: ForkServer | None = None,
        python: str | None = None,
        worker_args: Sequence[str] = (),
    ) -> WorkerLink:
        """Spawn a worker, attach it to ``boundary`` and run the handshake.

        The worker owns ``boundary`` and ``workdir`` from here on (removed when
        it ends, also if this fails). The caller must bound this with a deadline.
        Raises WorkerStartupError (with the errno of a host-side failure),
        WorkerDied or RemoteProtocolError; on any failure, and on cancellation,
        the worker is gone (bounded) before this returns.

        ``on_request`` answers the worker's requests (``ui``): its return value
        is the result, RemoteRequestRefused an error answer. ``on_notification``
        gets the other notifications (``update`` aside), as typed events.
        """
        process = SupervisedProcess(
            module=module, boundary=boundary, workdir=workdir, output_limit=output_limit, teardown=teardown,
            forkserver=forkserver, python=python, worker_args=worker_args,
        )  # fmt: skip
        self = cls(process, max_frame_bytes=max_frame_bytes)
        # Before the worker can say anything: a factory may already use the UI or the logger.
        self.on_request = on_request
        self.on_notification = on_notification
        process.spawn(nursery, cwd, env, reader=self._read_protocol, on_end=self._process_ended)
        try:
            await process.attach()
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
                result = await self.call(p.INITIALIZE, init)
            except RemoteError as exc:
                # A refusal to start (version, sandbox) says nothing about the
                # tool module: it must not be mistaken for (or cached as) a load error.
                raise WorkerStartupError(f"the worker refused to start: {exc.error.message}") from None
            self.unenforced = result.unenforced
            self.supervisor_pid = result.supervisor
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
        return self

    # --- the process, as the pool sees it -------------------------------------

    @property
    def module(self) -> str:
        """The tool module it serves, as its messages name it (the project directory for a spare)."""
        return self.process.module

    @module.setter
    def module(self, value: str) -> None:
        self.process.module = value

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def boundary(self) -> Boundary:
        return self.process.boundary

    @property
    def stderr_tail(self) -> OutputTail:
        return self.process.output.stderr

    @property
    def output_exceeded(self) -> bool:
        return self.process.output.exceeded

    @property
    def alive(self) -> bool:
        # A worker that closed its protocol pipe but lives on can answer nothing:
        # not alive, so the pool retires it instead of handing it the next call.
        return not self.process.exited and self.protocol_error is None and self._conn.state not in _GONE

    def cpu_seconds(self) -> float:
        """CPU time the worker and every process it started have used (user + system), 0 if unknown."""
        return max(self.process.cpu_seconds(), self.boundary.cpu_seconds())

    def rss_bytes(self) -> int:
        return self.process.rss_bytes()

    def high_water(self) -> HighWater:
        return self.process.high_water()

    def terminate(self) -> None:
        """Send SIGTERM to the worker (not its children): the first rung of the ladder."""
        self.process.terminate()

    async def kill(self) -> None:
        """Kill the worker and its whole tree, and wait (bounded) until all of it is gone."""
        await self.process.kill()

    async def wait_exited(self) -> None:
        await self.process.wait_exited()

    async def shutdown(self, grace: float) -> None:
        """Ask the worker to exit, then kill whatever is left of its tree."""
        if self.alive:
            with trio.move_on_after(grace):
                with contextlib.suppress(RemoteError, WorkerDied, RemoteProtocolError, p.LocalProtocolError):
                    await self.call(p.SHUTDOWN, p.ShutdownParams())
                await self.process.wait_exited()
        await self.kill()

    # --- reading ---------------------------------------------------------------

    async def _read_protocol(self, stream: trio.lowlevel.FdStream) -> None:
        # The fd itself, not ``stream.receive_some``: that costs a checkpoint and
        # a read that fails with EAGAIN for every message, a tenth of a warm
        # call. Only this task reads the fd, and the supervisor closes it only
        # after this task has ended, so nothing can close it under the wait.
        fd = stream.fileno()
        try:
            while True:
                await trio.lowlevel.wait_readable(fd)
                if (n := _read_some(self._conn, fd)) is None:  # woken for nothing: wait again
                    continue
                self._conn.received(n)
                while not isinstance(event := self._conn.next_event(), p.NeedData):
                    self._dispatch(event)
                    if isinstance(event, p.ConnectionClosed):
                        return
        except p.RemoteProtocolError as exc:
            self.protocol_error = RemoteProtocolError(
                f"worker for {os.path.basename(self.module)} broke the protocol: {exc}"
            )
            self._fail_waiting(self.protocol_error)
            with trio.CancelScope(shield=True):
                await self.process.kill_tree()

    def _dispatch(self, event: p.Event) -> None:
        if isinstance(event, p.ResultReceived | p.ErrorReceived):
            entry = self._waiting.pop(event.id, None)
            if entry is None:  # failed already (the worker's end is being recorded)
                return
            if isinstance(event, p.ErrorReceived):
                entry.set_error(RemoteError(event.error))
            else:
                entry.set_result(event.result)
        elif isinstance(event, p.NotificationReceived):
            if event.method is p.UPDATE:
                update: p.UpdateParams = event.params
                handler = self._updates.get(update.call_id)
                if handler is not None:
                    handler(update.partial)
            elif self.on_notification is not None:
                self.on_notification(self, event)
        elif isinstance(event, p.RequestReceived):
            self.process.start_soon(self._answer, event)
        elif isinstance(event, p.RequestRefused):
            self.process.start_soon(self._write, lambda: event.reply)
        # NotificationDropped: JSON-RPC lets a notification nobody expects be ignored.
        # ConnectionClosed: its outstanding requests fail once the process's end is recorded.

    async def _answer(self, event: p.RequestReceived) -> None:
        handler = self.on_request
        frame: Callable[[], bytes]
        try:
            if handler is None:
                raise RemoteRequestRefused(int(p.ErrorCode.METHOD_NOT_FOUND), f"unknown method {event.method.name!r}")
            result = await handler(self, event)
            frame = functools.partial(self._conn.send_result, event.id, result)
        except RemoteRequestRefused as exc:
            error = p.ErrorObject(code=exc.code, message=str(exc))
            frame = functools.partial(self._conn.send_error_object, event.id, error)
        # The worker gone, or the answer too big for it: either way it does not wait forever.
        with contextlib.suppress(p.LocalProtocolError):
            await self._write(frame)

    def _process_ended(self) -> None:
        self._conn.close()
        self._fail_waiting(WorkerDied(self.returncode, self.stderr_tail.text()))

    def _fail_waiting(self, exc: BaseException) -> None:
        waiting, self._waiting = self._waiting, {}
        for inflight in waiting.values():
            inflight.set_error(exc)

    # --- writing -----------------------------------------------------------------

    async def _write(self, frame: Callable[[], bytes]) -> None:
        # The frame is made under the lock: frames reach the pipe in the order
        # the connection made them, and a cancelled wait for the lock sends nothing.
        lock = self._send_lock
        if lock.value == 0:  # someone is mid-frame: queue behind them
            await lock.acquire()
        else:  # the common case: no checkpoint at all
            lock.acquire_nowait()
        try:
            data = frame()
        except BaseException:
            lock.release()
            raise
        self._send_locked(data)

    def _send_locked(self, data: bytes) -> None:
        """Write ``data`` while holding the send lock, and let the lock go once all of it is written.

        What the pipe cannot take at once is written by a supervisor task that
        keeps the lock until the frame is whole: a sender cancelled half-way
        would leave a partial frame, and the worker would read the next one as
        its rest. Errors of a worker that is gone are not raised: its end fails
        whatever waits on it.
        """
        out = self.process.protocol_out
        sent = len(data)
        try:
            if data:
                sent = write_some(out, data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except BaseException:
            self._send_lock.release()
            raise
        if sent < len(data) and self.process.start_soon(self._write_rest, memoryview(data)[sent:]):
            return  # _write_rest releases the lock
        self._send_lock.release()

    async def _write_rest(self, rest: memoryview) -> None:
        """The end of a frame the pipe could not take at once; the sender's lock is released here."""
        out = self.process.protocol_out
        assert out is not None
        try:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await out.send_all(rest)
        finally:
            self._send_lock.release()

    def _ending(self) -> bool:
        """True if the worker is ending but its end is not recorded yet; raises if it is recorded.

        Between the pipe's end (or the pidfd's) and the reap, the exit status is
        not known: a request made then must not be failed with a made-up one.
        """
        if self.protocol_error is not None:
            raise self.protocol_error
        if self.process.dead:
            raise WorkerDied(self.returncode, self.stderr_tail.text())
        return self.process.exited or self._conn.state in _GONE

    async def _start(
        self,
        method: p.Method[Any, Any],
        params: Any,
        *,
        call_id: str | None,
        on_update: UpdateHandler | None,
    ) -> InFlight[Any]:
        inflight: InFlight[Any] | None = None

        def frame() -> bytes:
            nonlocal inflight
            inflight, data = self._register(method, params, call_id, on_update)
            return data

        try:
            await self._write(frame)  # a worker gone or going: its end will fail the request
        except BaseException:
            if inflight is not None:
                inflight.abandon()
            raise
        assert inflight is not None
        return inflight

    def _register(
        self, method: p.Method[Any, Any], params: Any, call_id: str | None, on_update: UpdateHandler | None
    ) -> tuple[InFlight[Any], bytes]:
        """A request's handle and its frame (empty: not to be sent); under the send lock."""
        if self._ending():
            # Not sent: it fails with the requests still waiting once the
            # worker's end is recorded, with its real exit status (rule 3).
            inflight: InFlight[Any] = InFlight(-next(self._unsent), call_id=call_id, on_abandon=self._abandon)
            self._waiting[inflight.req_id] = inflight
            return inflight, b""
        # Raises LocalProtocolError (too big, out of state) before anything is registered.
        req_id, data = self._conn.send_request(method, params)
        inflight = InFlight(req_id, call_id=call_id, on_abandon=self._abandon)
        self._waiting[req_id] = inflight
        if call_id is not None and on_update is not None:
            self._updates[call_id] = on_update
        return inflight, data

    def _abandon(self, inflight: InFlight[Any]) -> None:
        if self._waiting.pop(inflight.req_id, None) is not None:
            self._conn.abandon(inflight.req_id)
        if inflight.call_id is not None:
            self._updates.pop(inflight.call_id, None)

    # --- requests ------------------------------------------------------------

    async def start_call(
        self, method: p.Method[P, R], params: P, *, on_update: UpdateHandler | None = None
    ) -> InFlight[R]:
        """Send a request; the returned handle is resolved by its answer or by the worker's end.

        ``on_update`` gets the ``update`` notifications naming ``params.call_id``.
        Pair every call with ``InFlight.abandon()`` (in a ``finally``). Raises
        WorkerDied or RemoteProtocolError if the worker can no longer be asked,
        LocalProtocolError if the request cannot be sent (too big, out of state).
        """
        return await self._start(method, params, call_id=_call_id(params, on_update), on_update=on_update)

    def start_call_nowait(
        self, method: p.Method[P, R], params: P, *, on_update: UpdateHandler | None = None
    ) -> InFlight[R]:
        """:meth:`start_call` without a checkpoint; trio.WouldBlock (nothing sent) while another frame is written.

        A frame the pipe cannot take at once is finished as :meth:`_send_locked` says.
        """
        call_id = _call_id(params, on_update)
        self._send_lock.acquire_nowait()
        try:
            inflight, data = self._register(method, params, call_id, on_update)
        except BaseException:
            self._send_lock.release()
            raise
        self._send_locked(data)
        return inflight

    async def call(self, method: p.Method[P, R], params: P) -> R:
        """Send a request and wait for its typed result (raises what :meth:`InFlight.outcome` raises).

        Cancellation: the request is abandoned; the worker may still work on it: stop the worker.
        """
        return await _outcome(await self.start_call(method, params))

    async def notify(self, notice: p.Notice[P], params: P) -> None:
        """Send a notification; silently dropped if the worker is gone."""

        def frame() -> bytes:
            if self.process.exited or self._conn.state in _GONE:
                return b""
            return self._conn.send_notification(notice, params)

        await self._write(frame)


def _read_some(conn: p.Connection, fd: int) -> int | None:
    """One read for ``conn``: bytes read (0 at the end), None if none were there; then ``conn.received(n)``."""
    # Straight into the frame being received when much of it is missing: a
    # large result lands where it is decoded from.
    view = conn.receive_buffer(_SCRATCH_BYTES)
    try:
        return os.readv(fd, [view])
    except BlockingIOError:
        return None
    except OSError:
        return 0
    finally:
        view.release()


def _call_id(params: object, on_update: UpdateHandler | None) -> str | None:
    call_id = getattr(params, "call_id", None) if on_update is not None else None
    if on_update is not None and not isinstance(call_id, str):
        raise TypeError(f"on_update needs params with a call_id, not {type(params).__name__}")
    return call_id


async def _outcome(inflight: InFlight[R]) -> R:
    try:
        await inflight.wait()
    finally:
        inflight.abandon()
    return inflight.outcome()


if TYPE_CHECKING:

    def _is_a_pool_worker(worker: WorkerLink) -> PoolWorker:
        return worker
