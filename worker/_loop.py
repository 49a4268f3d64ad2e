"""The worker process: one tool module, one call at a time, on private pipes.

Lifecycle (each step is the only thing happening at that point):

1. Started by the host as ``python -I -m worker --fd-in R --fd-out W``, with
   stdin on the null device and fds 1/2 on capture pipes. The protocol uses
   only R and W, so nothing a tool prints can corrupt a frame.
2. The main thread reads ``initialize`` (blocking, single-threaded: the host
   attaches the worker to its kill boundary before sending it) and answers.
3. A reader thread starts. From now on it owns fd R: requests go to the main
   thread's queue, ``$/cancel`` marks the running call's signal, and EOF means
   the host is gone, so the worker kills its own tree (the lifeline).
4. The main thread serves ``load`` once, then ``call`` requests one at a time,
   until ``shutdown``.

Cancellation: the host sends ``$/cancel`` and then SIGTERM. The handler raises
:class:`ToolCancelled` in a synchronous tool and cancels an async tool's task.
A tool that ignores both is killed by the host after the grace period.
"""

from __future__ import annotations

import faulthandler
import os
import queue
import re
import signal
import sys
import threading
import traceback
from types import FrameType
from typing import Any, NoReturn

import msgspec

from . import _protocol as p
from ._api import HostLink, ToolAPI
from ._signal import AbortSignal, ToolCancelled
from ._tools import (
    LoadedTool,
    LoadFailure,
    ResultError,
    describe_tool,
    find_factory,
    import_by_name,
    import_module,
    normalize_result,
)

_PATH_RE = re.compile(r" - at `([^`]*)`$")
EXIT_PROTOCOL = 3
EXIT_HOST_GONE = 4


class _Channel:
    """Blocking frame I/O on the two protocol fds. Writes may come from any thread."""

    def __init__(self, fd_in: int, fd_out: int, max_frame_bytes: int = p.DEFAULT_MAX_FRAME_BYTES) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.max_frame_bytes = max_frame_bytes
        self.decoder = p.FrameDecoder(max_frame_bytes)
        self._write_lock = threading.Lock()

    def read_message(self) -> p.Message | None:
        """The next message, or None at end of stream."""
        while True:
            msg = self.decoder.next_message()
            if msg is not p.NEED_DATA:
                assert not isinstance(msg, p._NeedData)
                return msg
            try:
                chunk = os.read(self.fd_in, 1 << 20)
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue
            if not chunk:
                self.decoder.receive_data(b"")
                if self.decoder.next_message() is p.NEED_DATA:
                    return None
            else:
                self.decoder.receive_data(chunk)

    def send_frame(self, frame: bytes) -> None:
        view = memoryview(frame)
        with self._write_lock:
            while view:
                n = os.write(self.fd_out, view)
                view = view[n:]

    def send(self, message: p.Message) -> None:
        self.send_frame(p.encode_message(message, max_frame_bytes=self.max_frame_bytes))


def _error(req_id: p.JsonRpcId, code: p.ErrorCode, message: str, **data: Any) -> p.ErrorResponse:
    kind = {
        p.ErrorCode.TOOL_ERROR: "tool_error",
        p.ErrorCode.INVALID_ARGUMENTS: "invalid_arguments",
        p.ErrorCode.NOT_FOUND: "not_found",
        p.ErrorCode.LOAD_ERROR: "load_error",
        p.ErrorCode.CANCELLED: "cancelled",
        p.ErrorCode.LIMIT_EXCEEDED: "limit_exceeded",
    }.get(code, "protocol_error")
    return p.ErrorResponse(
        id=req_id, error=p.ErrorObject(code=int(code), message=message, data=p.ErrorData(kind=kind, **data))
    )


class _Call:
    __slots__ = ("call_id", "signal", "in_tool", "task", "terminated")

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.signal = AbortSignal()
        self.in_tool = False  # True only while the main thread runs tool code: SIGTERM may raise there
        self.terminated = False  # SIGTERM arrived
        self.task: Any = None  # the asyncio.Task of an async tool


class _Ctx:
    """``ctx`` for ``execute`` and ``on_session``: the host's shared state (read-only) and ``abort()``."""

    __slots__ = ("_state", "_link", "_call_id")

    def __init__(self, state: dict[str, Any], link: HostLink | None = None, call_id: str | None = None) -> None:
        self._state = state
        self._link = link
        self._call_id = call_id

    def abort(self, reason: str = "aborted by the tool") -> None:
        """Ask the host to cancel the whole current operation (every call grouped with this one)."""
        if self._link is not None:
            self._link.notify(p.N_ABORT, p.AbortParams(call_id=self._call_id, reason=reason))

    def __getitem__(self, key: str) -> Any:
        return self._state[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._state.get(key, default)

    @property
    def state(self) -> dict[str, Any]:
        return dict(self._state)

    def __repr__(self) -> str:
        return f"<ctx {sorted(self._state)}>"


class Worker:
    def __init__(self, channel: _Channel, init: p.InitializeParams, kill_fd: int = -1) -> None:
        self.channel = channel
        self.init = init
        self.kill_fd = kill_fd  # the boundary's cgroup.kill, opened before the sandbox closed the path
        self.link = HostLink(channel, lambda: self.current.call_id if self.current is not None else None)
        self.api = ToolAPI(init.cwd, self.link, init.has_ui)
        self.tools: dict[str, LoadedTool] = {}
        self.loaded = False
        self.current: _Call | None = None
        self.requests: queue.SimpleQueue[p.Request | None] = queue.SimpleQueue()
        self._loop: Any = None
        self._cancel_reasons: dict[str, str] = {}

    # --- reader thread -----------------------------------------------------

    def reader(self) -> None:
        try:
            while True:
                msg = self.channel.read_message()
                if msg is None:
                    break
                if isinstance(msg, p.Request):
                    self.requests.put(msg)
                elif isinstance(msg, p.Response | p.ErrorResponse):
                    self.link.answer(msg)  # to a request a tool is blocked on
                elif isinstance(msg, p.Notification) and msg.method == p.N_UI_CHANGED:
                    try:
                        self.api.has_ui = msgspec.json.decode(msg.params, type=p.UiChangedParams).has_ui
                    except msgspec.DecodeError as exc:
                        sys.stderr.write(f"xcsh-run worker: ignoring a malformed ui/changed: {exc}\n")
                elif isinstance(msg, p.Notification) and msg.method == p.N_CANCEL:
                    try:
                        cancel = msgspec.json.decode(msg.params, type=p.CancelParams)
                    except msgspec.DecodeError as exc:
                        sys.stderr.write(f"xcsh-run worker: ignoring a malformed $/cancel: {exc}\n")
                        continue
                    self.cancel(cancel.call_id, cancel.reason)
                # Any other notification is ignored, as JSON-RPC allows.
        except (p.RemoteProtocolError, msgspec.DecodeError) as exc:
            sys.stderr.write(f"xcsh-run worker: the host sent a malformed message: {exc}\n")
        except OSError:
            pass
        self.host_gone()

    def host_gone(self) -> NoReturn:
        # The lifeline: only the host holds the write end of fd_in, so EOF
        # means the host exited (or closed us). Take the whole tree down,
        # including setsid() descendants, through the kernel-tracked boundary.
        if self.kill_fd >= 0:
            try:
                os.write(self.kill_fd, b"1")
            except OSError:
                pass
        # Only as the leader of our own group (the host always starts us in a
        # new session): otherwise this would kill whoever started us by hand.
        if os.getpgid(0) == os.getpid():
            try:
                os.killpg(0, signal.SIGKILL)
            except OSError:
                pass
        os._exit(EXIT_HOST_GONE)

    def cancel(self, call_id: str, reason: str) -> None:
        call = self.current
        if call is None or call.call_id != call_id:
            self._cancel_reasons[call_id] = reason
            return
        call.signal._abort(reason)
        loop, task = self._loop, call.task
        if task is not None and loop is not None:
            loop.call_soon_threadsafe(task.cancel, reason)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        call = self.current
        if call is None:
            # Idle: the host is stopping this worker.
            self.flush_and_exit(0)
        if not call.signal.aborted:
            # The host writes $/cancel (with the reason) before it sends
            # SIGTERM, but the reader thread may not have read it yet. It is
            # already in the pipe, so a short bounded wait is enough.
            call.signal.wait(0.1)
        call.signal._abort(call.signal.reason or "terminated")
        call.terminated = True
        if call.task is not None:
            self._loop.call_soon_threadsafe(call.task.cancel, call.signal.reason)
        elif call.in_tool:
            raise ToolCancelled(call.signal.reason)

    # --- main thread -------------------------------------------------------

    def serve(self) -> NoReturn:
        while True:
            req = self.requests.get()
            if req is None:  # pragma: no cover - reader exits the process instead
                self.flush_and_exit(0)
            try:
                if req.method == p.M_CALL:
                    reply = self.handle_call(req)
                elif req.method == p.M_LOAD:
                    reply = self.handle_load(req)
                else:
                    reply = self.handle_other(req)
            except msgspec.DecodeError as exc:
                error = p.ErrorObject(code=int(p.ErrorCode.INVALID_PARAMS), message=f"bad {req.method} params: {exc}")
                reply = p.ErrorResponse(id=req.id, error=error)
            self.send_reply(req.id, reply)

    def handle_other(self, req: p.Request) -> p.Message:
        if req.method == p.M_SESSION:
            return self.handle_session(req)
        if req.method == p.M_RENDER:
            return self.handle_render(req)
        if req.method == p.M_RESOLVE:
            return self.handle_resolve(req)
        if req.method == p.M_SHUTDOWN:
            self.channel.send(p.Response(id=req.id, result=p.encode_value(None)))
            self.flush_and_exit(0)
        error = p.ErrorObject(code=int(p.ErrorCode.METHOD_NOT_FOUND), message=f"unknown method {req.method!r}")
        return p.ErrorResponse(id=req.id, error=error)

    def _run(self, fn: Any, *args: Any) -> Any:
        value = fn(*args)
        if hasattr(value, "__await__"):
            value = self.run_awaitable(value, None)
        return value

    def handle_session(self, req: p.Request) -> p.Message:
        params = msgspec.json.decode(req.params, type=p.SessionParams)
        warnings: list[str] = []
        ctx = _Ctx(params.ctx, self.link)
        for name, loaded in self.tools.items():
            hook = loaded.tool.on_session
            if hook is None:
                continue
            try:
                self._run(hook, params.event, ctx)
            except BaseException as exc:  # a broken hook is a warning, nothing more
                warnings.append(f"{name}.on_session({params.event.get('reason')!r}) raised {type(exc).__name__}: {exc}")
        return p.Response(id=req.id, result=p.encode_value(p.SessionResult(warnings=warnings)))

    def handle_render(self, req: p.Request) -> p.Message:
        params = msgspec.json.decode(req.params, type=p.RenderParams)
        loaded = self.tools.get(params.tool)
        hook = (
            None
            if loaded is None
            else (loaded.tool.render_call if params.kind == "call" else loaded.tool.render_result)
        )
        if hook is None:
            return _error(req.id, p.ErrorCode.NOT_FOUND, f"{params.tool!r} has no render_{params.kind} hook")
        try:
            if params.kind == "call":
                text = self._run(hook, params.args, params.theme)
            else:
                text = self._run(hook, params.result, params.options, params.theme, params.args)
        except BaseException as exc:
            return _error(req.id, p.ErrorCode.TOOL_ERROR, f"render_{params.kind} raised {type(exc).__name__}: {exc}")
        if not isinstance(text, str):
            return _error(
                req.id, p.ErrorCode.TOOL_ERROR, f"render_{params.kind} returned {type(text).__name__}, not a string"
            )
        return p.Response(id=req.id, result=p.encode_value(p.RenderResult(text=text)))

    def handle_resolve(self, req: p.Request) -> p.Message:
        params = msgspec.json.decode(req.params, type=p.ResolveParams)
        action = self.api.pending_actions.pop(params.action_id, None)
        if action is None:
            return _error(req.id, p.ErrorCode.NOT_FOUND, f"no pending action {params.action_id!r} in this worker")
        try:
            if params.action == "apply":
                value = self._run(action.apply, params.reason)
            elif action.reject is not None:
                value = self._run(action.reject, params.reason)
            else:
                value = None
            result = None if value is None else normalize_result(value, f"{params.action}()'s result")
            body = p.encode_value(p.ResolveResult(result=result))
        except BaseException as exc:
            message = str(exc) or type(exc).__name__
            return _error(req.id, p.ErrorCode.TOOL_ERROR, message, traceback=traceback.format_exc())
        return p.Response(id=req.id, result=body)

    def send_reply(self, req_id: p.JsonRpcId, reply: p.Message) -> None:
        try:
            frame = p.encode_message(reply, max_frame_bytes=self.channel.max_frame_bytes)
        except p.LocalProtocolError:
            size = len(p.encode_value(getattr(reply, "result", None)))
            frame = p.encode_message(
                _error(
                    req_id,
                    p.ErrorCode.LIMIT_EXCEEDED,
                    f"the result is {size / 2**20:.1f} MiB, over the "
                    f"{self.channel.max_frame_bytes / 2**20:.1f} MiB frame limit; return less data "
                    "(or raise the host's max_frame_bytes)",
                    limit="output",
                )
            )
        self.channel.send_frame(frame)

    def flush_and_exit(self, code: int) -> NoReturn:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)

    def run_awaitable(self, awaitable: Any, call: _Call | None) -> Any:
        import asyncio

        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)

        async def runner() -> Any:
            return await awaitable

        task = self._loop.create_task(runner())
        if call is not None:
            call.task = task
            if call.signal.aborted:
                task.cancel(call.signal.reason)
        try:
            return self._loop.run_until_complete(task)
        finally:
            if call is not None:
                call.task = None

    def handle_load(self, req: p.Request) -> p.Message:
        if self.loaded:
            return _error(req.id, p.ErrorCode.LOAD_ERROR, "this worker already loaded a module; start a new worker")
        self.loaded = True
        params = msgspec.json.decode(req.params, type=p.LoadParams)
        path = params.path
        try:
            if params.module is not None:
                module = import_by_name(params.module, params.sys_path)
            else:
                module = import_module(path)
        except LoadFailure as exc:
            return _error(req.id, p.ErrorCode.LOAD_ERROR, str(exc))
        except SystemExit as exc:
            return _error(
                req.id,
                p.ErrorCode.LOAD_ERROR,
                f"{path}: the module called sys.exit({exc.code!r}) while being imported; "
                "a tool module must not exit at import time",
            )
        except BaseException as exc:
            return _error(
                req.id,
                p.ErrorCode.LOAD_ERROR,
                f"{path}: importing the module raised {type(exc).__name__}: {exc}",
                traceback=traceback.format_exc(),
            )
        factory = find_factory(module, params.factory)
        if not callable(factory):
            return _error(
                req.id,
                p.ErrorCode.LOAD_ERROR,
                f"{path}: the module defines no {params.factory}(api) function; add `def {params.factory}(api):` "
                "returning a CustomTool or a list of them",
            )
        try:
            value = factory(self.api)
            if hasattr(value, "__await__"):
                value = self.run_awaitable(value, None)
        except BaseException as exc:
            what = (
                f"called sys.exit({exc.code!r})"
                if isinstance(exc, SystemExit)
                else f"raised {type(exc).__name__}: {exc}"
            )
            return _error(
                req.id, p.ErrorCode.LOAD_ERROR, f"{path}: factory(api) {what}", traceback=traceback.format_exc()
            )
        entries = list(value) if isinstance(value, list | tuple) else [value]
        tools: list[p.ToolDescription] = []
        errors: list[p.EntryError] = []
        for index, entry in enumerate(entries):
            try:
                loaded = describe_tool(entry)
            except ValueError as exc:
                errors.append(p.EntryError(index=index, message=str(exc)))
                continue
            name = loaded.description.name
            if name in self.tools:
                errors.append(
                    p.EntryError(index=index, message=f"tool name {name!r} is already defined by an earlier entry")
                )
                continue
            self.tools[name] = loaded
            tools.append(loaded.description)
        return p.Response(id=req.id, result=p.encode_value(p.LoadResult(tools=tools, entry_errors=errors)))

    def handle_call(self, req: p.Request) -> p.Message:
        params = msgspec.json.decode(req.params, type=p.CallParams)
        loaded = self.tools.get(params.tool)
        if loaded is None:
            return _error(req.id, p.ErrorCode.NOT_FOUND, f"this worker has no tool named {params.tool!r}")
        try:
            args = loaded.decoder.decode(params.arguments)
        except msgspec.ValidationError as exc:
            text = str(exc)
            match = _PATH_RE.search(text)
            return _error(
                req.id,
                p.ErrorCode.INVALID_ARGUMENTS,
                f"invalid arguments for {params.tool!r}: {text}",
                path=match.group(1) if match else "$",
            )
        except msgspec.DecodeError as exc:
            return _error(req.id, p.ErrorCode.INVALID_ARGUMENTS, f"arguments are not JSON: {exc}", path="$")
        call = _Call(params.call_id)
        early = self._cancel_reasons.pop(params.call_id, None)
        # Cancels for calls that never came here are stale by now.
        self._cancel_reasons.clear()
        if early is not None:
            call.signal._abort(early)
        tool = loaded.tool
        channel = self.channel

        def on_update(partial: object) -> None:
            update = normalize_result(partial, "on_update()'s partial result")
            try:
                body = p.encode_value(p.UpdateParams(call_id=params.call_id, partial=update))
            except (TypeError, msgspec.EncodeError) as exc:
                raise TypeError(f"on_update()'s details are not JSON-serialisable: {exc}") from None
            message = p.Notification(method=p.N_UPDATE, params=body)
            if not (call.in_tool and threading.current_thread() is threading.main_thread()):
                channel.send(message)
                return
            # SIGTERM must not raise inside our own frame write: hold it off
            # while sending, and deliver it as soon as control returns to the tool.
            call.in_tool = False
            try:
                channel.send(message)
            finally:
                call.in_tool = True
            if call.terminated:
                raise ToolCancelled(call.signal.reason)

        self.current = call
        try:
            try:
                call.in_tool = True
                if call.signal.aborted:
                    raise ToolCancelled(call.signal.reason)
                value = tool.execute(
                    params.call_id, args, on_update, _Ctx(params.ctx, self.link, call.call_id), call.signal
                )
                call.in_tool = False
                if hasattr(value, "__await__"):
                    value = self.run_awaitable(value, call)
            finally:
                call.in_tool = False
            result = normalize_result(value)
            try:
                body = p.encode_value(result)
            except (TypeError, msgspec.EncodeError) as exc:
                return _error(
                    req.id,
                    p.ErrorCode.TOOL_ERROR,
                    f"the result's details are not JSON-serialisable: {exc}; return only dicts, lists, "
                    "strings, numbers, booleans and None",
                )
            return p.Response(id=req.id, result=body)
        except ResultError as exc:
            return _error(req.id, p.ErrorCode.TOOL_ERROR, str(exc))
        except BaseException as exc:
            if call.signal.aborted and _is_cancellation(exc):
                return _error(req.id, p.ErrorCode.CANCELLED, f"cancelled: {call.signal.reason}")
            if isinstance(exc, SystemExit):
                message = f"the tool called sys.exit({exc.code!r})"
            else:
                message = str(exc) or type(exc).__name__
            limit = _limit_hit(exc)
            if limit is not None:
                return _error(
                    req.id,
                    p.ErrorCode.LIMIT_EXCEEDED,
                    f"{limit} limit exceeded: {type(exc).__name__}: {message}",
                    limit=limit,
                    traceback=traceback.format_exc(),
                )
            return _error(req.id, p.ErrorCode.TOOL_ERROR, message, traceback=traceback.format_exc())
        finally:
            self.current = None
            self.api._log_handler.flush_dropped()


def _limit_hit(exc: BaseException) -> str | None:
    """Which sandbox limit an uncaught exception comes from, if any."""
    import errno

    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, OSError):
        return {errno.EFBIG: "file_size", errno.EMFILE: "open_files"}.get(exc.errno or 0)
    return None


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, ToolCancelled):
        return True
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


def _parse_fds(argv: list[str]) -> tuple[int, int]:
    try:
        fd_in = int(argv[argv.index("--fd-in") + 1])
        fd_out = int(argv[argv.index("--fd-out") + 1])
    except (ValueError, IndexError):
        sys.stderr.write("usage: python -m worker --fd-in R --fd-out W (started by the xcsh-run host)\n")
        raise SystemExit(2) from None
    return fd_in, fd_out


def main(argv: list[str] | None = None) -> NoReturn:
    fd_in, fd_out = _parse_fds(sys.argv[1:] if argv is None else argv)
    # The host owns cancellation: a Ctrl-C meant for the host must not kill a
    # tool half-way (workers also live in their own session).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable()  # a segfault leaves a Python traceback in the stderr tail
    # Tools' subprocesses must not inherit the protocol fds: a child holding
    # fd_out could forge frames, and one holding fd_in's peer would keep EOF away.
    os.set_inheritable(fd_in, False)
    os.set_inheritable(fd_out, False)
    channel = _Channel(fd_in, fd_out)
    try:
        first = channel.read_message()
    except p.RemoteProtocolError as exc:
        sys.stderr.write(f"xcsh-run worker: malformed first message: {exc}\n")
        os._exit(EXIT_PROTOCOL)
    if first is None:
        os._exit(EXIT_HOST_GONE)
    if not isinstance(first, p.Request) or first.method != p.M_INITIALIZE:
        sys.stderr.write("xcsh-run worker: the first message must be an initialize request\n")
        os._exit(EXIT_PROTOCOL)
    try:
        init = msgspec.json.decode(first.params, type=p.InitializeParams)
    except msgspec.DecodeError as exc:
        channel.send(_error(first.id, p.ErrorCode.INVALID_PARAMS, f"bad initialize params: {exc}"))
        os._exit(EXIT_PROTOCOL)
    if init.protocol_version != p.PROTOCOL_VERSION:
        channel.send(
            _error(
                first.id,
                p.ErrorCode.VERSION_MISMATCH,
                f"worker speaks protocol version {p.PROTOCOL_VERSION}, host asked for {init.protocol_version}",
            )
        )
        os._exit(EXIT_PROTOCOL)
    channel.max_frame_bytes = init.max_frame_bytes
    channel.decoder.max_frame_bytes = init.max_frame_bytes
    unenforced: list[str] = []
    kill_fd = -1
    if init.cgroup_kill_path:
        # Opened now: Landlock and a uid drop would forbid opening it later,
        # and the lifeline must still be able to kill the whole tree.
        try:
            kill_fd = os.open(init.cgroup_kill_path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            kill_fd = -1
    if init.sandbox.level != "none":
        # Still single-threaded, and no tool code has run: Landlock and seccomp
        # bind this thread and every thread and process started after it.
        from . import _sandbox

        try:
            unenforced = _sandbox.apply(init.sandbox)
        except _sandbox.SandboxError as exc:
            channel.send(_error(first.id, p.ErrorCode.SANDBOX_UNAVAILABLE, f"sandbox not applied: {exc}"))
            os._exit(EXIT_PROTOCOL)
    worker = Worker(channel, init, kill_fd)
    # Before answering: from the answer on, the host may stop us with SIGTERM,
    # and the default action would look like a crash.
    signal.signal(signal.SIGTERM, worker.on_sigterm)
    result = p.InitializeResult(
        protocol_version=p.PROTOCOL_VERSION, pid=os.getpid(), python=sys.version.split()[0], unenforced=unenforced
    )
    channel.send(p.Response(id=first.id, result=p.encode_value(result)))
    threading.Thread(target=worker.reader, name="xcsh-reader", daemon=True).start()
    worker.serve()
