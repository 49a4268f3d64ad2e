"""WorkerProcess: the protocol spoken over one worker process's pipes, under trio.

The process itself (spawn, pidfd, boundary, kill, output tails, and the rules
that keep them safe) is :class:`runner._process.SupervisedProcess`. This module
reads the protocol pipe, writes frames under one lock, and maps what arrives
to whoever waits for it: an answer to the :class:`InFlight` request it ends,
a request from the worker to a handler task of its own, an ``update`` to the
call it belongs to.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import trio

from worker import _protocol as p

from ._boundary import Boundary
from ._errors import RemoteError, RemoteProtocolError, RemoteRequestRefused, WorkerDied, WorkerStartupError
from ._faults import fault_point
from ._output import READ_CHUNK, OutputTail
from ._process import SupervisedProcess, TeardownStats

__all__ = [
    "InFlight",
    "NotificationHandler",
    "RemoteError",
    "RemoteRequestRefused",
    "RequestHandler",
    "TeardownStats",
    "WorkerProcess",
    "WorkerState",
    "_Pending",
]

_ids = itertools.count(1)

RequestHandler = Callable[["WorkerProcess", p.Request], Awaitable[Any]]
NotificationHandler = Callable[["WorkerProcess", p.Notification], None]


def _describe(msg: object) -> str:
    method = getattr(msg, "method", None)
    return f"{method!r} message" if method else "response"


class WorkerState(enum.Enum):
    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    DEAD = "dead"


class InFlight:
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


_Pending = InFlight  # the former private name, still imported by the runner


class WorkerProcess:
    """One live worker: its process and the protocol connection over its pipes.

    Created only by :meth:`start`. ``repr`` shows pid, module and state.
    """

    def __init__(self, process: SupervisedProcess, *, max_frame_bytes: int) -> None:
        self.id = next(_ids)
        self.process = process
        self.max_frame_bytes = max_frame_bytes
        self.unenforced: list[str] = []
        self.has_ui = False
        self.idle_since = 0.0
        self._state = WorkerState.STARTING
        self.calls_served = 0
        self.protocol_error: RemoteProtocolError | None = None
        self._send_lock = trio.Lock()
        self._pending: dict[int, InFlight] = {}
        self._update_handlers: dict[str, Callable[[p.CallResult], None]] = {}
        self._next_id = itertools.count(1)
        self._last_id = 0
        self.on_request: RequestHandler | None = None
        self.on_notification: NotificationHandler | None = None

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
        process = SupervisedProcess(
            module=module, boundary=boundary, workdir=workdir, output_limit=output_limit, teardown=teardown
        )
        self = cls(process, max_frame_bytes=max_frame_bytes)
        # Before the worker can say anything: a factory may already use the UI or the logger.
        self.on_request = on_request
        self.on_notification = on_notification
        self.has_ui = has_ui  # what the worker was last told
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

    # --- the process, as the pool sees it -------------------------------------

    @property
    def state(self) -> WorkerState:
        return WorkerState.DEAD if self.process.dead else self._state

    @state.setter
    def state(self, value: WorkerState) -> None:
        self._state = value

    @property
    def module(self) -> str:
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
    def stdout_tail(self) -> OutputTail:
        return self.process.output.stdout

    @property
    def stderr_tail(self) -> OutputTail:
        return self.process.output.stderr

    @property
    def output_exceeded(self) -> bool:
        return self.process.output.exceeded

    @property
    def alive(self) -> bool:
        return not self.process.exited and self.protocol_error is None

    def cpu_seconds(self) -> float:
        """CPU time the worker process has used (user + system), 0 if unknown."""
        return self.process.cpu_seconds()

    def rss_bytes(self) -> int:
        """The worker process's resident memory, 0 if unknown."""
        return self.process.rss_bytes()

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
                with contextlib.suppress(RemoteError, WorkerDied, RemoteProtocolError):
                    await self.request(p.M_SHUTDOWN, {})
                await self.process.wait_exited()
        await self.kill()

    # --- reading ---------------------------------------------------------------

    async def _read_protocol(self, stream: trio.lowlevel.FdStream) -> None:
        decoder = p.FrameDecoder(self.max_frame_bytes)
        try:
            while True:
                try:
                    data = await stream.receive_some(READ_CHUNK)
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
                await self.process.kill_tree()

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
            self.process.start_soon(self._answer, msg)
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

    def _process_ended(self) -> None:
        self._fail_pending(WorkerDied(self.returncode or 0, self.stderr_tail.text()))

    def _fail_pending(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for item in pending.values():
            item.error = exc
            item.event.set()

    # --- requests ------------------------------------------------------------

    async def _send_frame(self, frame: bytes) -> None:
        out = self.process.protocol_out
        assert out is not None
        async with self._send_lock:
            await out.send_all(frame)

    async def send_request(
        self, method: str, params: Any, *, on_update: tuple[str, Callable[[p.CallResult], None]] | None = None
    ) -> InFlight:
        """Send a request; the returned handle's ``event`` fires on its answer or the worker's end.

        Pair every call with :meth:`forget` (in a ``finally``).
        """
        if self.protocol_error is not None:
            raise self.protocol_error
        if self.process.exited:
            raise WorkerDied(self.returncode or 0, self.stderr_tail.text())
        req_id = next(self._next_id)
        body = params if isinstance(params, msgspec.Raw) else p.encode_value(params)
        # Encoded before anything is registered: a message over the frame
        # limit (LocalProtocolError) leaves no pending entry behind.
        frame = p.encode_message(p.Request(id=req_id, method=method, params=body), max_frame_bytes=self.max_frame_bytes)
        self._last_id = req_id
        pending = InFlight(req_id)
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

    def forget(self, pending: InFlight) -> None:
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
