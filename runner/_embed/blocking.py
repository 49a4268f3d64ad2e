"""The blocking face of the runner: :class:`BlockingRunner`, every method of :class:`Runner` as a plain call.

Each method hops onto the runner's trio thread: a quick one with
``trio.from_thread.run_sync``, a call or a session event as a job of the
portal (so that its cancel never queues behind it). Read-only configuration is
read directly: it is frozen when the runner opens.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from xcsh_run._calls import UpdateCallback
from xcsh_run._discovery import LoadError, ToolInfo
from xcsh_run._embed.portal import CLOSED, Job, Portal, ids
from xcsh_run._errors import ConfigError
from xcsh_run._host import Runner, RunnerStatistics
from xcsh_run._results import ToolResult
from xcsh_run._sandbox import SandboxPolicy

if TYPE_CHECKING:
    from xcsh_run._config import RunnerConfig
    from xcsh_run._host import UIContext

T = TypeVar("T")


class BlockingRunner:
    """A `Runner` for plain (non-async) programs. Get one from `open_blocking_runner`.

    It has every public method and property of `Runner`, with the same
    parameters; the ones that are ``async`` there block here. Every method is
    safe to call from any thread, and calls from several threads run in
    parallel. ``on_update`` callbacks run on the runner's own thread and must
    not block (nor call this runner). Once the runner is closed, every method
    but the configuration properties raises `ConfigError`.

    Example:
        ```python
        from xcsh_run import open_blocking_runner

        with open_blocking_runner(["tools/"]) as runner:
            result = runner.call_tool("hello", {"name": "Ada"}, timeout=10)
            print(result.text)
        ```
    """

    def __init__(self, runner: Runner, portal: Portal) -> None:
        self._runner = runner
        self._portal = portal

    def _run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return trio.from_thread.run_sync(fn, *args, trio_token=self._portal.token)
        except trio.RunFinishedError:
            raise ConfigError(CLOSED) from None

    def _submit(self, fn: Callable[[], Awaitable[T]], call_id: str | None = None) -> Job[T]:
        """Start ``fn`` on the runner's thread now; its outcome arrives in ``job.future``."""
        job = Job(self._portal, fn, call_id)
        self._portal.submit(job)
        return job

    def _wait(self, fn: Callable[[], Awaitable[T]], call_id: str | None = None) -> T:
        if threading.get_ident() == self._portal.thread:
            raise RuntimeError("a blocking runner method called from the runner's own thread would wait forever")
        job = self._submit(fn, call_id)
        try:
            return job.future.result()
        except BaseException:
            if not job.future.done():  # the waiting thread was interrupted (KeyboardInterrupt)
                job.cancel("the waiting thread was interrupted")
            raise

    # --- configuration (frozen when the runner opened: read without a hop) ---------------

    @property
    def config(self) -> RunnerConfig:
        """The runner's options (see `RunnerConfig`)."""
        return self._runner.config

    @property
    def unenforced(self) -> list[str]:
        """The parts of the runner's sandbox policy this machine cannot enforce (best effort)."""
        return self._runner.unenforced

    @property
    def cwd(self) -> str:
        """The project directory (absolute), which tools see as ``api.cwd``."""
        return self._runner.cwd

    @property
    def project_root(self) -> str:
        """The project root whose ``.xcsh/tools``, ``.claude/tools`` and ``.codex/tools`` are read."""
        return self._runner.project_root

    @property
    def sandbox(self) -> SandboxPolicy:
        """The runner's default sandbox policy."""
        return self._runner.sandbox

    @property
    def default_timeout(self) -> float:
        """Seconds a call may run when neither the caller, the policy nor the tool gives a timeout."""
        return self._runner.default_timeout

    @property
    def grace(self) -> float:
        """Seconds a cancelled worker gets between ``$/cancel`` and the kill."""
        return self._runner.grace

    @property
    def load_timeout(self) -> float:
        """CPU seconds a module's worker may use to load it (``RunnerConfig.load_timeout``)."""
        return self._runner.load_timeout

    @property
    def max_frame_bytes(self) -> int:
        """The largest protocol frame either side accepts."""
        return self._runner.max_frame_bytes

    @property
    def closed(self) -> bool:
        """True once the runner began closing."""
        return self._runner.closed

    def policy_for(self, name: str) -> SandboxPolicy:
        """The sandbox policy a tool runs under (its own, else the runner's)."""
        return self._runner.policy_for(name)

    # --- the registry ---------------------------------------------------------------------

    @property
    def tools(self) -> list[ToolInfo]:
        """Every loaded tool, in discovery order (hidden ones included)."""
        return self._run_sync(lambda: self._runner.tools)

    @property
    def errors(self) -> list[LoadError]:
        """Every module or factory entry that failed to load (or was shadowed), with the reason."""
        return self._run_sync(lambda: self._runner.errors)

    @property
    def warnings(self) -> list[str]:
        """Problems that changed nothing but deserve a look (a corrupt cache, a bad registry)."""
        return self._run_sync(lambda: list(self._runner.warnings))

    def get_tool(self, name: str) -> ToolInfo | None:
        """The loaded tool called ``name``, or None."""
        return self._run_sync(self._runner.get_tool, name)

    # --- calls ------------------------------------------------------------------------------

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        on_update: UpdateCallback | None = None,
        timeout: float | None = None,
        tool_call_id: str | None = None,
        ctx: Mapping[str, Any] | None = None,
        sandbox: SandboxPolicy | None = None,
        operation_id: str | None = None,
    ) -> ToolResult:
        """Run one call to its single terminal result; the parameters are `Runner.call_tool`'s.

        Raises:
            ConfigError: the runner is closed.
            KeyboardInterrupt: the waiting thread was interrupted; the call is
                cancelled through its ladder as it propagates.
        """
        call_id = tool_call_id or f"sync-{next(ids)}"
        job = self._call(
            name, arguments, call_id, on_update=on_update, timeout=timeout, ctx=ctx, sandbox=sandbox,
            operation_id=operation_id,
        )  # fmt: skip
        return self._wait(job, call_id)

    def _call(
        self, name: str, arguments: Mapping[str, Any] | None, call_id: str, **options: Any
    ) -> Callable[[], Awaitable[ToolResult]]:
        return lambda: self._runner.call_tool(name, arguments, tool_call_id=call_id, **options)

    def cancel(self, tool_call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool:
        """Cancel a running call (from any thread); it ends with a ``cancelled`` result. False if no such call.

        ``force``: kill it now, even in its grace.
        """
        return self._run_sync(lambda: self._runner.cancel(tool_call_id, reason, force=force))

    def cancel_all(self, reason: str = "cancelled") -> None:
        """Cancel every running call."""
        self._run_sync(self._runner.cancel_all, reason)

    # --- the host API -------------------------------------------------------------------------

    @property
    def context(self) -> dict[str, Any]:
        """The state shared with tools as ``ctx`` (see `set_context`)."""
        return self._run_sync(lambda: self._runner.context)

    @context.setter
    def context(self, state: Mapping[str, Any]) -> None:
        self.set_context(state)

    def set_context(self, state: Mapping[str, Any]) -> None:
        """The session/model state shared with tools as ``ctx`` (read-only on their side), for the next calls."""
        self._run_sync(self._runner.set_context, state)

    def set_ui_context(self, ui: UIContext | None, has_ui: bool = True) -> None:
        """Attach a UI, or None for the no-op one (see `Runner.set_ui_context`); it runs on the runner's thread."""
        self._run_sync(self._runner.set_ui_context, ui, has_ui)

    def pending_actions(self) -> list[dict[str, Any]]:
        """Previews waiting for ``resolve``, newest last."""
        return self._run_sync(self._runner.pending_actions)

    def emit_session_event(self, event: Mapping[str, Any], *, timeout: float = 5.0) -> list[str]:
        """Deliver a session event to every live worker with ``on_session`` tools; returns the warnings."""
        return self._wait(lambda: self._runner.emit_session_event(event, timeout=timeout))

    def render_call(self, name: str, args: Any, theme: Any = None, *, timeout: float = 2.0) -> str:
        """The tool's ``render_call(args, theme)``, run in its worker; the default rendering on any trouble."""
        return self._wait(lambda: self._runner.render_call(name, args, theme, timeout=timeout))

    def render_result(
        self,
        name: str,
        result: ToolResult,
        options: Mapping[str, Any] | None = None,
        theme: Any = None,
        args: Any = None,
        *,
        timeout: float = 2.0,
    ) -> str:
        """The tool's ``render_result(result, options, theme, args)`` in its worker, or the default."""
        return self._wait(lambda: self._runner.render_result(name, result, options, theme, args, timeout=timeout))

    def statistics(self) -> RunnerStatistics:
        """A snapshot of the runner's workers and calls."""
        return self._run_sync(self._runner.statistics)
