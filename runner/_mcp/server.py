"""What every MCP session shares: the runners and their reloads, a call's options, the server's lifecycle.

One :class:`ToolServer` serves any number of client sessions (one over
stdio; one per ``Mcp-Session-Id`` over Streamable HTTP). A session keeps its
own protocol books (a sans-io ``Connection``, the negotiated revision, its
requests in flight) and its own ways of sending (:class:`Outbox`); the tools,
the workers and the calls' settings are the server's.

Rules:

1. The transport's main loop (reading stdin, accepting HTTP connections) runs
   inside :meth:`ToolServer.run`, under a scope that :meth:`ToolServer.stop`
   cancels: a signal, a broken output or the end of input stop the server the
   same way.
2. Every session's requests run in the server's one request nursery, which
   outlives the main loop: once it ends, every session winds down (its calls
   go through the runner's ladder, quick requests are still answered) and
   the nursery is given a bounded time (the ladder, a load, 2 s) before what
   is left is cancelled outright.
3. The runners outlive the requests (they live in the outer nursery), and
   :meth:`ToolServer.run` returns only once every worker of every runner is
   gone.
4. A session that ends on its own (an HTTP ``DELETE``) winds down the same
   way, alone: the server and the other sessions keep serving.
5. What every session is shown changes in one place: a reload, or the
   pending actions of the serving runner going from none to some or back,
   which shows or hides ``resolve`` (checked after every call, since only a
   call adds or resolves one); every initialized session is told
   ``tools/list_changed`` when its listing changed.
6. ``include_hidden`` (``serve --include-hidden NAME``) names hidden tools that
   ``tools/list`` shows all the same, for clients that call only what they are
   listed; ``resolve`` among them is listed always, pending actions or not.
7. A ``tools/call`` reaches a tool the same way whichever revision carried it
   (:meth:`ToolServer.call_tool`); the handshake sessions and the stateless era
   differ only in the call's owner (where its progress, log records and
   prompts go: ``call_link``) and in how a client stops it. The call runs on
   the generation current when it arrives; one arriving while the server winds
   down, or while no generation could be loaded, is not started and gets an
   error result naming the tool.
8. No checkpoint lies between a call's ``started`` hook and
   :meth:`Runner.call_tool`'s registration of the call id, so a cancellation
   either finds the call in the runner or finds the caller's flag set first.
   Progress always precedes the result: the pump flushes the last partial
   before the call's nursery lets the response go.
9. A session's call history (``ctx.sessionManager``, :class:`CallHistory`)
   follows it across reloads. ``_meta.traceparent`` (W3C Trace Context), when
   well formed, is kept with the call; a malformed one is ignored, as the W3C
   rules say, and the call runs all the same.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Protocol

import msgspec
import trio

from xcsh_run._calls import parse_traceparent
from xcsh_run._config import DEFAULT_GRACE, DEFAULT_LOAD_TIMEOUT, DEFAULT_QUEUE_TIMEOUT, check_seconds
from xcsh_run._discovery import BUILTIN_MODULE, RESOLVE_TOOL, ToolInfo
from xcsh_run._host import Runner, watching_signals
from xcsh_run._mcp.call_link import CallLinks, CallOwner
from xcsh_run._mcp.line_transport import valid_id
from xcsh_run._mcp.reload import Runners
from xcsh_run._mcp.render import Progress, render_result
from xcsh_run._results import ErrorKind, error_result
from xcsh_run._sandbox import SandboxPolicy
from xcsh_run._terminal import SafeFormatter

logger = logging.getLogger("xcsh_run.mcp")

DEFAULT_POLL_INTERVAL: Final = 1.0
# Beyond the ladder and a load's time, what a winding-down request may take.
_WIND_DOWN_SLACK: Final = 2.0

_call_numbers = itertools.count(1)


class Outbox(Protocol):
    """Where encoded messages to one client go, in order.

    A session has one for what the server says on its own (notifications
    such as ``tools/list_changed``); each request has one for what belongs to
    it (its progress, then its response). Over stdio both are the output
    stream; over HTTP a request's is the SSE stream (or JSON body) of the
    ``POST`` that carried it, and the session's is its ``GET`` stream.
    """

    @property
    def carries_requests(self) -> bool:
        """Whether a request of the server's (a prompt, a sample) can reach the client this way."""
        ...

    async def send(self, data: bytes) -> None:
        """Queue one encoded JSON-RPC message; may wait (backpressure), never raises for a gone client."""
        ...

    def end(self) -> None:
        """Nothing more will be sent (the request was answered, or will not be)."""
        ...


class Session(Protocol):
    """What the server asks of a session."""

    async def tools_changed(self, before: list[ToolInfo], after: list[ToolInfo]) -> None: ...

    def wind_down(self, why: str, deadline: float) -> None: ...

    @property
    def can_elicit(self) -> bool | None:
        """Whether its client takes prompts (``elicitation``); None until it is initialized."""
        ...


class CallHistory:
    """One MCP session's record of calls in the runners (``ctx.sessionManager``), carried over reloads (rule 9)."""

    __slots__ = ("session_id", "_runner")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._runner: Runner | None = None

    def follow(self, runner: Runner) -> None:
        """The session's next call runs on ``runner``: hand it what the previous runner kept."""
        if self._runner is not runner:
            if self._runner is not None:
                runner.set_session_history(self.session_id, self._runner.session_history(self.session_id))
            self._runner = runner


class ToolServer:
    """The discovered tools and those of ``tool_paths`` (as ``xcsh-run serve``), for every session.

    Args:
        tool_paths: tool files or folders, like the CLI's ``--tools``.
        cwd: the working directory tools see; default: the current one.
        timeout: seconds per call, a ceiling (a tool's own shorter timeout still applies); None: the default.
        grace: seconds between SIGTERM and the tree kill in the ladder.
        load_timeout: CPU seconds a module's worker may use to load it (``RunnerConfig.load_timeout``).
        poll_interval: seconds between checks of the tool files for changes.
        max_workers: calls running at once; more wait their turn (see ``RunnerConfig``).
        queue_timeout: seconds a call may wait for its turn before it ends
            ``busy``; the call's own timeout starts when it leaves the queue.
        approve: run tools that declare ``approval`` without asking (``serve --approve``);
            otherwise each such call is put to its client by elicitation first.
    """

    def __init__(
        self,
        tool_paths: Sequence[str] = (),
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        grace: float = DEFAULT_GRACE,
        load_timeout: float = DEFAULT_LOAD_TIMEOUT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        sandbox: SandboxPolicy | None = None,
        max_workers: int | None = None,
        queue_timeout: float | None = DEFAULT_QUEUE_TIMEOUT,
        include_hidden: Sequence[str] = (),
        approve: bool = False,
    ) -> None:
        for label, value in (("timeout", timeout), ("poll_interval", poll_interval), ("queue_timeout", queue_timeout)):
            if value is not None:
                check_seconds(label, value)
        self.timeout = timeout
        self.grace = grace
        self.load_timeout = load_timeout
        self.runners = Runners(
            tool_paths,
            cwd=os.path.abspath(cwd if cwd is not None else os.getcwd()),
            grace=grace,
            load_timeout=load_timeout,
            sandbox=sandbox,
            poll_interval=poll_interval,
            on_reloaded=self._on_reloaded,
            options={"max_workers": max_workers, "queue_timeout": queue_timeout, "approve": approve},
            prepare=self._prepare,
        )
        self.links = CallLinks()  # the MCP calls in flight, for their log records and prompts
        self._has_ui = False
        self._resolve_listed = False
        self._include_hidden = frozenset(include_hidden)  # hidden tools listed all the same (rule 6)
        self.sessions: set[Session] = set()
        self.closing: str | None = None  # why the server is stopping, once it is
        self.stopped_by: signal.Signals | None = None
        self._requests: trio.Nursery | None = None
        self._main_scope = trio.CancelScope()

    # --- lifecycle -------------------------------------------------------------

    async def run(
        self, main: Callable[[trio.Nursery], Awaitable[None]], *, ended: str, handle_signals: bool = False
    ) -> None:
        """Run the transport's ``main(requests)`` with the tools up; then wind everything down (rules 1-3).

        ``ended`` is why the server stops when ``main`` returns by itself.
        With ``handle_signals``, SIGTERM and SIGINT stop it too (and set
        :attr:`stopped_by`).
        """
        if not handle_signals:
            await self._run(main, ended)
            return
        async with watching_signals() as signals:
            with signals.handled_by(self._on_signal):
                await self._run(main, ended)

    async def _run(self, main: Callable[[trio.Nursery], Awaitable[None]], ended: str) -> None:
        async with trio.open_nursery() as outer:
            # Runners live in `outer`: they outlast the calls made on them.
            outer.start_soon(self.runners.run, outer)
            async with trio.open_nursery() as requests:
                self._requests = requests
                with self._main_scope:
                    await main(requests)
                    if self.closing is None:
                        self.closing = ended
                self._wind_down(requests)
            self.runners.retire_all()

    def start_request(self, handler: Callable[[], Awaitable[None]]) -> None:
        """Run one request's task in the server's request nursery (rule 2)."""
        assert self._requests is not None, "requests arrive only while the server runs"
        self._requests.start_soon(handler)

    def stop(self, why: str) -> None:
        """Stop serving (rule 1); idempotent."""
        if self.closing is None:
            self.closing = why
            logger.info("stopping: %s", why)
        self._main_scope.cancel()

    def wind_down_deadline(self) -> float:
        return trio.current_time() + self.grace + self.load_timeout + _WIND_DOWN_SLACK

    def _wind_down(self, requests: trio.Nursery) -> None:
        # No more (re)loads; requests waiting for one are let through, to find `closing` set.
        self.runners.stop()
        deadline = self.wind_down_deadline()
        for session in list(self.sessions):
            session.wind_down(f"the MCP server is shutting down: {self.closing}", deadline)
        requests.cancel_scope.deadline = deadline

    def _on_signal(self, sig: signal.Signals) -> bool:
        self.stopped_by = sig
        self.stop(f"received {sig.name}")
        return True  # taken: the server winds its calls down itself

    # --- calls ------------------------------------------------------------------

    async def call_tool(
        self,
        owner: CallOwner,
        request: Any,
        *,
        name: str,
        arguments: Any,
        meta: Any,
        version: str,
        history: CallHistory,
        closing: Callable[[], str | None],
        send_progress: Callable[[dict[str, Any]], Awaitable[None]],
        label: str,
        started: Callable[[Runner, str], None] = lambda runner, call_id: None,
    ) -> dict[str, Any]:
        """Run ``name`` for ``owner``'s ``request``; the ``tools/call`` result, rendered for ``version`` (rules 7-9).

        ``meta`` is the request's ``_meta`` (a progress token, a traceparent);
        ``closing`` says why the caller takes no more calls, if it does not;
        ``started`` is told the runner and call id just before the call starts
        (rule 8); ``send_progress`` sends one ``notifications/progress``'s params;
        ``label`` names the request in the server's log.
        """
        meta = meta if isinstance(meta, dict) else {}
        token = meta.get("progressToken")
        trace = parse_traceparent(meta.get("traceparent"), meta.get("tracestate"))
        generation = await self.runners.current()
        # The names of the generation just handed out: a name served in tools/list maps back to its tool.
        tool = self.runners.names.to_tool(name)
        # Rule 8: no checkpoint from here to call_tool's registration of the call id.
        why = closing()
        if why is not None:
            not_started = error_result(ErrorKind.CANCELLED, f"{name!r} was not started: {why}")
            return render_result(not_started, version, tool=name)
        if generation is None:
            message = f"{name!r} was not started: the tools could not be loaded ({self.runners.failure})"
            return render_result(error_result(ErrorKind.LOAD_ERROR, message), version, tool=name)
        call_id = f"mcp-{next(_call_numbers)}"
        started(generation.runner, call_id)
        history.follow(generation.runner)
        with generation.in_use():
            async with trio.open_nursery() as nursery:
                progress = Progress(token, send_progress) if valid_id(token) else None
                if progress is not None:
                    nursery.start_soon(progress.pump)
                link = self.links.open(call_id, owner, request, name, nursery)
                try:
                    result = await generation.runner.call_tool(
                        tool,
                        arguments,
                        on_update=progress.update if progress is not None else None,
                        timeout=self.timeout,
                        tool_call_id=call_id,
                        session_id=history.session_id,
                        traceparent=trace.traceparent if trace is not None else None,
                    )
                finally:
                    # Rule 8: the pump flushes the last partial, then the nursery lets the response go.
                    if progress is not None:
                        progress.close()
                    link.close()
        await self.pending_changed()  # a call may leave a pending action, or resolve one
        if result.is_error:
            logger.info("tools/call %s (%s): %s", name, label, result.kind)
        return render_result(result, version, root=generation.runner.cwd, tool=name)

    # --- what sessions are shown and asked ----------------------------------------

    def listed_tools(self) -> list[ToolInfo]:
        """The tools as ``tools/list`` shows them: ``resolve`` only while pending actions wait for it."""
        return self._listing(self.runners.tools, self._resolve_listed)

    async def pending_changed(self) -> None:
        """After a call: show or hide ``resolve`` if the serving runner's pending actions came or went (rule 5)."""
        runner = self.runners.serving
        listed = runner is not None and bool(runner.pending_actions())
        if listed != self._resolve_listed:
            tools = self.runners.tools
            self._resolve_listed = listed
            await self._tell_sessions(self._listing(tools, not listed), self._listing(tools, listed))

    def sync_ui(self) -> None:
        """Tools may prompt (``has_ui``) while every initialized session's client takes prompts.

        Called when a session is initialized or closed.
        """
        answers = [s.can_elicit for s in self.sessions if s.can_elicit is not None]
        has_ui = bool(answers) and all(answers)
        if has_ui != self._has_ui:
            self._has_ui = has_ui
            for runner in self.runners.live():
                runner.set_ui_context(self.links.ui, has_ui)

    def _prepare(self, runner: Runner) -> None:
        self.links.attach(runner, self._has_ui)

    async def _on_reloaded(self, before: list[ToolInfo], after: list[ToolInfo]) -> None:
        # A new runner has no pending action (those of the old one are lost with it).
        was_listed, self._resolve_listed = self._resolve_listed, False
        await self._tell_sessions(self._listing(before, was_listed), self._listing(after, False))

    def _listing(self, tools: list[ToolInfo], resolve_listed: bool) -> list[ToolInfo]:
        """``tools`` as sessions see them: the opted-in hidden tools shown (rule 6), and ``resolve`` when listed."""
        if self._include_hidden:
            tools = [
                msgspec.structs.replace(t, hidden=False) if t.hidden and t.name in self._include_hidden else t
                for t in tools
            ]
        return _with_resolve(tools, resolve_listed or RESOLVE_TOOL.name in self._include_hidden)

    async def _tell_sessions(self, before: list[ToolInfo], after: list[ToolInfo]) -> None:
        for session in list(self.sessions):
            await session.tools_changed(before, after)


def _with_resolve(tools: list[ToolInfo], listed: bool) -> list[ToolInfo]:
    """``tools`` with the built-in ``resolve`` shown (it is ``hidden`` otherwise), when ``listed``."""
    if not listed:
        return tools
    if all(t.name != RESOLVE_TOOL.name for t in tools):
        # Callable whatever the tools declare (Catalog.lookup), so listed whatever they declare.
        return [*tools, msgspec.structs.replace(RESOLVE_TOOL, hidden=False)]
    return [msgspec.structs.replace(t, hidden=False) if t.module == BUILTIN_MODULE else t for t in tools]


def configure_logging() -> None:
    """The server's own log on stderr: what it does, not what tools print (that is the workers' business)."""
    if not logging.getLogger().handlers:
        # A tool's records propagate here: neutralised, as on every terminal the host writes to.
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(SafeFormatter("xcsh-run serve: %(message)s"))
        logging.basicConfig(level=logging.WARNING, handlers=[handler])
    host = logging.getLogger("xcsh_run")
    if host.propagate or not host.level or host.level > logging.INFO:  # `serve -vv` logs DEBUG on its own handler
        host.setLevel(logging.INFO)
    output = logging.getLogger("xcsh_run.output")  # what tools print: only with -v (xcsh_run._process.output)
    if not output.level:
        output.setLevel(logging.WARNING)
