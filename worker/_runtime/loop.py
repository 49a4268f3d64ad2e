"""The worker process: one tool module, one call at a time, on private pipes.

Lifecycle (each step is the only thing happening at that point):

1. Started by the host as ``python -I -m xcsh_run.worker --fd-in R --fd-out W``, with
   stdin on the null device and fds 1/2 on capture pipes. The protocol uses
   only R and W, so nothing a tool prints can corrupt a frame.
2. The main thread reads ``initialize`` (blocking, single-threaded: the host
   attaches the worker to its kill boundary before sending it), forks its
   supervisor at ``contained`` and ``strict`` (``supervisor.py``: the same
   lifeline, where the tool cannot disarm it), applies its sandbox and answers.
3. A reader thread starts. From now on fd R is read by the main thread while
   it is idle and by the reader thread while the main thread serves a request
   (``inbox.py``): requests are queued and served in order, ``$/cancel``
   marks the running call's signal (or is kept for a call still queued), and
   EOF means the host is gone, so the worker kills its own tree (the lifeline;
   the supervisor does the same whatever the tool did to this process).
4. The main thread serves ``load`` once, then ``call`` requests one at a time,
   until ``shutdown``.

A JavaScript worker (``--bun``/``--js-main``) runs step 2 up to the sandbox
here, then ``exec``s Bun, which answers and serves (``_handoff``).

Cancellation: the host sends ``$/cancel`` and then SIGTERM. The handler raises
:class:`ToolCancelled` in a synchronous tool and cancels an async tool's task.
A tool that ignores both is killed by the host after the grace period.
"""

from __future__ import annotations

import faulthandler
import io
import os
import signal
import sys
import traceback
from types import FrameType
from typing import NoReturn

import msgspec

from xcsh_run.worker import pi
from xcsh_run.worker._runtime import approval as _approval
from xcsh_run.worker._runtime import handoff as _handoff
from xcsh_run.worker._runtime import sigterm as _sigterm
from xcsh_run.worker._runtime.channel import Channel
from xcsh_run.worker._runtime.inbox import Inbox
from xcsh_run.worker._runtime.tool_call import AsyncBridge, Call, Outcome, decode_arguments, execute
from xcsh_run.worker._runtime.tool_module import (
    LoadedTool,
    LoadFailure,
    describe_tool,
    find_factory,
    import_by_name,
    import_module,
    normalize_result,
)
from xcsh_run.worker._sandbox import explain as _explain
from xcsh_run.worker._sandbox import withheld_env as _env
from xcsh_run.worker._tool_api import Ctx, HostLink, ToolAPI, ToolCancelled, abort, log_handler, session_of
from xcsh_run.worker.protocol import (
    MAX_NESTING,
    ConnectionClosed,
    ErrorCode,
    ErrorObject,
    ErrorReceived,
    Event,
    FrameTooLarge,
    LocalProtocolError,
    NotificationReceived,
    NotSerialisable,
    RemoteProtocolError,
    RequestReceived,
    RequestRefused,
    ResultReceived,
    encode_value,
    error_object,
)
from xcsh_run.worker.protocol import methods as m

EXIT_PROTOCOL = 3
EXIT_HOST_GONE = 4


class Worker:
    def __init__(self, channel: Channel, init: m.InitializeParams, kill_fd: int = -1) -> None:
        self.session: str | None = None
        self.channel = channel
        self.init = init
        self.kill_fd = kill_fd  # the boundary's cgroup.kill, opened before the sandbox closed the path
        self.link = HostLink(channel, lambda: self.current.call_id if self.current is not None else None)
        self.api = ToolAPI(init.cwd, self.link, init.has_ui, pi=pi)
        self.tools: dict[str, LoadedTool] = {}
        self.loaded = False
        self.current: Call | None = None
        self.inbox = Inbox(channel, self.on_event, self.host_gone)
        self.bridge = AsyncBridge()
        # Cancels for calls not running yet (queued) or any more (answered).
        # A cancel is recorded here before ``current`` is looked at, and a call
        # is made current before its entry is looked at, so whichever order
        # the reader thread and the main thread interleave in, one of them
        # sees the other's write: a cancel read while its call starts is never
        # lost, without a lock on every call.
        self._cancel_reasons: dict[str, str] = {}

    # --- whichever thread reads fd_in ------------------------------------------

    def on_event(self, event: Event | RemoteProtocolError) -> None:
        """Every event but a request (those are queued): on the main thread while idle, else the reader's."""
        if isinstance(event, NotificationReceived):
            if event.method is m.CANCEL:
                self.cancel(event.params.call_id, event.params.reason)
            elif event.method is m.UI_CHANGED:
                self.api.has_ui = event.params.has_ui
        elif isinstance(event, ResultReceived | ErrorReceived):
            self.link.answer(event)  # to a request a tool is blocked on
        elif isinstance(event, RequestRefused):
            self.channel.write(event.reply)  # unknown, out of state, or malformed params
        elif isinstance(event, ConnectionClosed):
            self.host_gone()
        elif isinstance(event, RemoteProtocolError):
            sys.stderr.write(f"xcsh-run worker: the host sent a malformed message: {event}\n")
            self.host_gone()
        # A dropped notification is ignored, as JSON-RPC allows.

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
        self._cancel_reasons[call_id] = reason
        call = self.current
        if call is None or call.call_id != call_id:
            return
        self._cancel_reasons.pop(call_id, None)
        abort(call.signal, reason)
        self.bridge.cancel(call, reason)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        call = self.current
        if call is None:
            # Idle: the host is stopping this worker.
            self.flush_and_exit(0)
        if not call.signal.aborted:
            # The host writes $/cancel (with the reason) before it sends
            # SIGTERM, but the reader thread (fd_in is lent to it while a
            # call runs) may not have read it yet. It is already in the pipe,
            # so a short bounded wait is enough.
            call.signal.wait(0.1)
        abort(call.signal, call.signal.reason or "terminated")
        call.terminated = True
        if call.task is not None:
            self.bridge.cancel(call, call.signal.reason)
        elif call.in_tool:
            raise ToolCancelled(call.signal.reason)

    # --- main thread -------------------------------------------------------

    def serve(self) -> NoReturn:
        inbox = self.inbox
        while True:
            req = inbox.next_request()
            # Lent before the call becomes current: SIGTERM's wait for the
            # $/cancel needs someone reading.
            inbox.lend()
            method = req.method
            if method is m.CALL:
                self.start_session(req.params)
                outcome = self.handle_call(req.params)
            elif method is m.LOAD:
                outcome = self.handle_load(req.params)
            elif method is m.SESSION:
                outcome = self.handle_session(req.params)
            elif method is m.RENDER:
                outcome = self.handle_render(req.params)
            elif method is m.RESOLVE:
                outcome = self.handle_resolve(req.params)
            elif method is m.SHUTDOWN:
                self.send_reply(req.id, None)
                self.flush_and_exit(0)
            else:  # pragma: no cover - the table lets no other request through
                outcome = ErrorObject(code=int(ErrorCode.METHOD_NOT_FOUND), message=f"unknown method {method.name!r}")
            reads = _env.take_reads()
            if reads and isinstance(outcome, ErrorObject):
                # A failure after reading a variable the sandbox left out: most likely why.
                outcome = msgspec.structs.replace(outcome, message=outcome.message + _env.hint(reads))
            # Reclaimed before the answer is written: the host's next request
            # may follow it at once, and the main thread reads it then.
            inbox.reclaim()
            try:
                self.send_reply(req.id, outcome)
            except OSError:  # fd_out broken: the host is gone, and nobody is reading fd_in to see it
                self.host_gone()

    def start_session(self, params: m.CallParams) -> None:
        # A worker that is new, or that served another session last, rebuilds
        # tools' state: ``on_session`` with ``start`` before the call.
        session = session_of(params.ctx)
        if session is None or session == self.session:
            return
        self.session = session
        result = self.handle_session(
            m.SessionParams(event={"reason": "start", "previousSessionFile": None}, ctx=params.ctx)
        )
        for warning in result.warnings if isinstance(result, m.SessionResult) else ():
            print(f"xcsh-run: {warning}", file=sys.stderr, flush=True)

    def handle_session(self, params: m.SessionParams) -> Outcome:
        warnings: list[str] = []
        self.session = session_of(params.ctx) or self.session
        ctx = Ctx(params.ctx, self.link)
        for name, loaded in self.tools.items():
            hook = loaded.tool.on_session
            if hook is None:
                continue
            try:
                self.bridge.run_hook(hook, params.event, ctx)
            except BaseException as exc:  # a broken hook is a warning, nothing more
                warnings.append(f"{name}.on_session({params.event.get('reason')!r}) raised {type(exc).__name__}: {exc}")
        return m.SessionResult(warnings=warnings)

    def handle_render(self, params: m.RenderParams) -> Outcome:
        loaded = self.tools.get(params.tool)
        if params.kind == "approval" and loaded is not None:
            return _approval.decide(loaded.tool, params.args, self.bridge.run_hook)
        hook = (
            None
            if loaded is None
            else (loaded.tool.render_call if params.kind == "call" else loaded.tool.render_result)
        )
        if hook is None:
            return error_object(ErrorCode.NOT_FOUND, f"{params.tool!r} has no render_{params.kind} hook")
        try:
            if params.kind == "call":
                text = self.bridge.run_hook(hook, params.args, params.theme)
            else:
                text = self.bridge.run_hook(hook, params.result, params.options, params.theme, params.args)
        except BaseException as exc:
            return error_object(ErrorCode.TOOL_ERROR, f"render_{params.kind} raised {type(exc).__name__}: {exc}")
        if not isinstance(text, str):
            return error_object(
                ErrorCode.TOOL_ERROR, f"render_{params.kind} returned {type(text).__name__}, not a string"
            )
        return m.RenderResult(text=text)

    def handle_resolve(self, params: m.ResolveParams) -> Outcome:
        action = self.api.pending_actions.pop(params.action_id, None)
        if action is None:
            return error_object(ErrorCode.NOT_FOUND, f"no pending action {params.action_id!r} in this worker")
        try:
            if params.action == "apply":
                value = self.bridge.run_hook(action.apply, params.reason)
            elif action.reject is not None:
                value = self.bridge.run_hook(action.reject, params.reason)
            else:
                value = None
            result = None if value is None else normalize_result(value, f"{params.action}()'s result")
            return encode_value(m.ResolveResult(result=result))
        except BaseException as exc:
            message = str(exc) or type(exc).__name__
            return error_object(ErrorCode.TOOL_ERROR, message, traceback=traceback.format_exc())

    def send_reply(self, req_id: int | str, outcome: Outcome) -> None:
        if isinstance(outcome, ErrorObject):
            self.channel.send(lambda conn: conn.send_error_object(req_id, outcome))
            return
        try:
            self.channel.send(lambda conn: conn.send_result(req_id, outcome))
        except FrameTooLarge as exc:
            message = (
                f"the result is {exc.size / 2**20:.1f} MiB, over the {exc.limit / 2**20:.1f} MiB frame limit; "
                "return less data (or raise the host's max_frame_bytes)"
            )
            self.channel.send(lambda conn: conn.send_error(req_id, ErrorCode.LIMIT_EXCEEDED, message, limit="output"))
        except NotSerialisable as exc:  # only a result's details can be: its content was normalised
            message = (
                f"the result's details are not JSON-serialisable: {exc.reason}; return only dicts, lists, "
                "strings, numbers, booleans and None"
            )
            if isinstance(exc.reason, RecursionError):
                message = (
                    "the result's details are not JSON-serialisable: they contain themselves, or nest arrays and "
                    f"objects too deep to send (a result may nest {MAX_NESTING} levels deep); return flatter details"
                )
            self.channel.send(lambda conn: conn.send_error(req_id, ErrorCode.TOOL_ERROR, message))
        except LocalProtocolError as exc:  # a result its method's type does not allow: a bug here
            message = str(exc)
            self.channel.send(lambda conn: conn.send_error(req_id, ErrorCode.TOOL_ERROR, message))

    def flush_and_exit(self, code: int) -> NoReturn:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)

    def handle_load(self, params: m.LoadParams) -> Outcome:
        if self.loaded:
            return error_object(ErrorCode.LOAD_ERROR, "this worker already loaded a module; start a new worker")
        self.loaded = True
        path = params.path
        try:
            if params.module is not None:
                module = import_by_name(params.module, params.sys_path)
            else:
                module = import_module(path)
        except LoadFailure as exc:
            return error_object(ErrorCode.LOAD_ERROR, str(exc))
        except SystemExit as exc:
            return error_object(
                ErrorCode.LOAD_ERROR,
                f"{path}: the module called sys.exit({exc.code!r}) while being imported; "
                "a tool module must not exit at import time",
            )
        except BaseException as exc:
            denial = _explain.explain(exc)
            return error_object(
                ErrorCode.LOAD_ERROR,
                f"{path}: importing the module raised {type(exc).__name__}: {exc}" + (f" [{denial}]" if denial else ""),
                traceback=traceback.format_exc(),
            )
        factory = find_factory(module, params.factory)
        if not callable(factory):
            return error_object(
                ErrorCode.LOAD_ERROR,
                f"{path}: the module defines no {params.factory}(api) function; add `def {params.factory}(api):` "
                "returning a CustomTool or a list of them",
            )
        try:
            value = factory(self.api)
            if hasattr(value, "__await__"):
                value = self.bridge.run(value, None)
        except BaseException as exc:
            what = (
                f"called sys.exit({exc.code!r})"
                if isinstance(exc, SystemExit)
                else f"raised {type(exc).__name__}: {exc}"
            )
            return error_object(ErrorCode.LOAD_ERROR, f"{path}: factory(api) {what}", traceback=traceback.format_exc())
        entries = list(value) if isinstance(value, list | tuple) else [value]
        tools: list[m.ToolDescription] = []
        errors: list[m.EntryError] = []
        for index, entry in enumerate(entries):
            try:
                loaded = describe_tool(entry)
            except ValueError as exc:
                errors.append(m.EntryError(index=index, message=str(exc)))
                continue
            name = loaded.description.name
            if name in self.tools:
                errors.append(
                    m.EntryError(index=index, message=f"tool name {name!r} is already defined by an earlier entry")
                )
                continue
            self.tools[name] = loaded
            tools.append(loaded.description)
        return m.LoadResult(tools=tools, entry_errors=errors)

    def handle_call(self, params: m.CallParams) -> Outcome:
        loaded = self.tools.get(params.tool)
        if loaded is None:
            return error_object(ErrorCode.NOT_FOUND, f"this worker has no tool named {params.tool!r}")
        args = decode_arguments(loaded, params)
        if isinstance(args, ErrorObject):
            return args
        call = Call(params.call_id)
        self.current = call
        if self._cancel_reasons:
            early = self._cancel_reasons.pop(params.call_id, None)
            if early is not None:
                abort(call.signal, early)
            self._drop_stale_cancels()
        try:
            return execute(loaded, params, args, call, self.channel, self.link, self.bridge)
        finally:
            self.current = None
            if log_handler(self.api).dropped:
                log_handler(self.api).flush_dropped()

    def _drop_stale_cancels(self) -> None:
        # The host writes a call before any cancel of it, and queued requests
        # are in the inbox before the events read with them are handled: a
        # cancel kept before the queue is looked at, whose call is not queued,
        # is for the running call (which has seen it) or one already answered.
        kept = list(self._cancel_reasons)
        queued = self.inbox.queued_calls(m.CALL)
        for call_id in kept:
            if call_id not in queued:
                self._cancel_reasons.pop(call_id, None)


def _parse_fds(argv: list[str]) -> tuple[int, int]:
    try:
        fd_in = int(argv[argv.index("--fd-in") + 1])
        fd_out = int(argv[argv.index("--fd-out") + 1])
    except (ValueError, IndexError):
        sys.stderr.write("usage: python -m xcsh_run.worker --fd-in R --fd-out W (started by the xcsh-run host)\n")
        raise SystemExit(2) from None
    return fd_in, fd_out


def main(argv: list[str] | None = None) -> NoReturn:
    args = sys.argv[1:] if argv is None else argv
    fd_in, fd_out = _parse_fds(args)
    js = _handoff.parse(args)  # a JavaScript worker: Bun takes over after the sandbox (``_handoff``)
    # The host owns cancellation: a Ctrl-C meant for the host must not kill a
    # tool half-way (workers also live in their own session).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable()  # a segfault leaves a Python traceback in the stderr tail
    if isinstance(sys.stdout, io.TextIOWrapper):
        # A tool's print() reaches the host (and `xcsh-run -v`) as it prints,
        # not when a block of it is buffered or the worker exits.
        sys.stdout.reconfigure(line_buffering=True)
    # Tools' subprocesses must not inherit the protocol fds: a child holding
    # fd_out could forge frames, and one holding fd_in's peer would keep EOF away.
    os.set_inheritable(fd_in, False)
    os.set_inheritable(fd_out, False)
    channel = Channel(fd_in, fd_out)
    try:
        first = channel.next_event()
    except RemoteProtocolError as exc:
        sys.stderr.write(f"xcsh-run worker: malformed first message: {exc}\n")
        os._exit(EXIT_PROTOCOL)
    if isinstance(first, ConnectionClosed):
        os._exit(EXIT_HOST_GONE)
    if isinstance(first, RequestRefused) and first.method_name == m.INITIALIZE.name:
        channel.write(first.reply)  # its params do not decode: -32602
        os._exit(EXIT_PROTOCOL)
    if not isinstance(first, RequestReceived) or first.method is not m.INITIALIZE:
        sys.stderr.write("xcsh-run worker: the first message must be an initialize request\n")
        os._exit(EXIT_PROTOCOL)
    init: m.InitializeParams = first.params
    init_id = first.id

    def refuse(code: ErrorCode, message: str) -> NoReturn:
        channel.send(lambda conn: conn.send_error(init_id, code, message))
        os._exit(EXIT_PROTOCOL)

    if init.protocol_version != m.PROTOCOL_VERSION:
        refuse(
            ErrorCode.VERSION_MISMATCH,
            f"worker speaks protocol version {m.PROTOCOL_VERSION}, host asked for {init.protocol_version}",
        )
    try:
        # Still single-threaded: nothing else uses the connection yet.
        channel.conn.max_frame_bytes = init.max_frame_bytes
    except ValueError as exc:
        refuse(ErrorCode.INVALID_PARAMS, f"bad initialize params: {exc}")
    unenforced: list[str] = []
    kill_fd = -1
    if init.cgroup_kill_path:
        # Opened now: Landlock and a uid drop would forbid opening it later,
        # and the lifeline must still be able to kill the whole tree.
        try:
            kill_fd = os.open(init.cgroup_kill_path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            kill_fd = -1
    supervisor = 0
    if init.sandbox.level != "none":
        from xcsh_run.worker._runtime import supervisor as _supervisor
        from xcsh_run.worker._sandbox import apply as _sandbox

        # The supervisor first: outside every sandbox layer applied below
        # (Landlock's signal and ptrace scope among them). ``none`` keeps one
        # process: it makes no promise a tool could break.
        try:
            supervisor = _supervisor.start(fd_in, kill_fd)
        except OSError as exc:
            if not init.sandbox.best_effort:
                refuse(ErrorCode.SANDBOX_UNAVAILABLE, f"the worker's supervisor could not be started: {exc}")
            unenforced.append(f"supervisor: {exc}")
        # Still single-threaded, and no tool code has run: Landlock and seccomp
        # bind this thread and every thread and process started after it (the
        # fork above needs a single thread too: it copies only the caller).
        try:
            unenforced += _sandbox.apply(init.sandbox)
        except _sandbox.SandboxError as exc:
            refuse(ErrorCode.SANDBOX_UNAVAILABLE, f"sandbox not applied: {exc}")
    if js is not None:
        # Still single-threaded, nothing but the initialize frame read: whatever
        # came after it goes to Bun with the rest of the handshake.
        buffered = channel.locked(lambda conn: conn.unread())
        _handoff.exec_bun(
            js, init_id=init_id, params=init, unenforced=unenforced, supervisor=supervisor,
            fds=(fd_in, fd_out, kill_fd), buffered=buffered, refuse=refuse,
        )  # fmt: skip
    _env.watch_dropped()
    _explain.install(init.sandbox)
    worker = Worker(channel, init, kill_fd)
    # Before answering: from the answer on, the host may stop us with SIGTERM,
    # and the default action would look like a crash. In this process only: a
    # process the tool forks keeps the default action (``_sigterm``).
    _sigterm.install(worker.on_sigterm)
    result = m.InitializeResult(
        protocol_version=m.PROTOCOL_VERSION,
        pid=os.getpid(),
        python=sys.version.split()[0],
        unenforced=unenforced,
        supervisor=supervisor,
    )
    channel.send(lambda conn: conn.send_result(init_id, result))
    worker.inbox.start()
    worker.serve()
