"""The blocking face of the runner: :class:`BlockingRunner`, every method of :class:`Runner` as a plain call.

Each method hops onto the runner's trio thread: a quick one with
``trio.from_thread.run_sync``, a call or a session event as a job of the
portal (so that its cancel never queues behind it). Read-only configuration is
inherited from ``RunnerSettings``: it is frozen when the runner opens. Every
docstring is the Runner's (``surface``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

import trio

from xcsh_run._calls import UpdateCallback
from xcsh_run._config import RunnerSettings
from xcsh_run._discovery import LoadError, ToolInfo
from xcsh_run._embed.portal import Job, Portal, ids
from xcsh_run._embed.surface import runner_doc
from xcsh_run._host import Runner, RunnerStatistics
from xcsh_run._results import PendingAction, ToolResult
from xcsh_run._sandbox import SandboxPolicy

if TYPE_CHECKING:
    from xcsh_run._host import UIContext

T = TypeVar("T")


class BlockingRunner(RunnerSettings):
    """A `Runner` for plain (non-async) programs. Get one from `open_blocking_runner`.

    It has every public method and property of `Runner`, with the same
    parameters and docstrings; the ones that are ``async`` there block here.
    Every method is safe to call from any thread, and calls from several
    threads run in parallel. ``on_update`` callbacks and a UI's methods run on
    the runner's own thread and must not block (nor call this runner). Once
    the runner is closed, every method but the configuration properties
    raises `RunnerClosedError`.

    Example:
        ```python
        from xcsh_run import open_blocking_runner

        with open_blocking_runner(["tools/"]) as runner:
            result = runner.call_tool("hello", {"name": "Ada"}, timeout=10)
            print(result.text)
        ```
    """

    def __init__(self, runner: Runner, portal: Portal) -> None:
        self.config = runner.config
        self.unenforced = runner.unenforced
        self._runner = runner
        self.portal: Final = portal
        """Where work is handed to the runner's thread. Internal to ``xcsh_run``: the other faces use it."""

    def _run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return trio.from_thread.run_sync(fn, *args, trio_token=self.portal.token)
        except trio.RunFinishedError:
            raise self.portal.closed_error() from None

    def _check_thread(self) -> None:
        if threading.get_ident() == self.portal.thread:
            raise RuntimeError("a blocking runner method called from the runner's own thread would wait forever")

    def _wait(self, job: Job[T]) -> T:
        try:
            return job.future.result()
        except BaseException:
            if not job.future.done():  # the waiting thread was interrupted (KeyboardInterrupt)
                job.cancel("the waiting thread was interrupted")
            raise

    # --- configuration (the rest: RunnerSettings, frozen when the runner opened) ------------

    @property
    @runner_doc
    def project_root(self) -> str:
        return self._runner.project_root

    @property
    @runner_doc
    def closed(self) -> bool:
        return self._runner.closed

    @runner_doc
    def policy_for(self, name: str) -> SandboxPolicy:
        return self._runner.policy_for(name)

    # --- the registry ---------------------------------------------------------------------

    @property
    @runner_doc
    def tools(self) -> list[ToolInfo]:
        return self._run_sync(lambda: self._runner.tools)

    @property
    @runner_doc
    def errors(self) -> list[LoadError]:
        return self._run_sync(lambda: self._runner.errors)

    @property
    @runner_doc
    def warnings(self) -> list[str]:
        return self._run_sync(lambda: list(self._runner.warnings))

    @runner_doc
    def get_tool(self, name: str) -> ToolInfo | None:
        return self._run_sync(self._runner.get_tool, name)

    # --- calls ------------------------------------------------------------------------------

    @runner_doc(
        note="""
        Raises:
            RunnerClosedError: the runner is closed.
            KeyboardInterrupt: the waiting thread was interrupted; the call is
                cancelled through its ladder as it propagates.
        """
    )
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
        session_id: str | None = None,
        traceparent: str | None = None,
    ) -> ToolResult:
        self._check_thread()
        call_id = tool_call_id or f"sync-{next(ids)}"
        return self._wait(
            self.portal.submit_call(
                name, arguments, call_id, on_update=on_update, timeout=timeout, ctx=ctx, sandbox=sandbox,
                operation_id=operation_id, session_id=session_id, traceparent=traceparent,
            )
        )  # fmt: skip

    @runner_doc
    def cancel(self, tool_call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool:
        return self._run_sync(lambda: self._runner.cancel(tool_call_id, reason, force=force))

    @runner_doc
    def cancel_all(self, reason: str = "cancelled") -> None:
        self._run_sync(self._runner.cancel_all, reason)

    # --- the host API -------------------------------------------------------------------------

    @property
    @runner_doc
    def context(self) -> dict[str, Any]:
        return self._run_sync(lambda: self._runner.context)

    @context.setter
    def context(self, state: Mapping[str, Any]) -> None:
        self.set_context(state)

    @runner_doc
    def set_context(self, state: Mapping[str, Any]) -> None:
        self._run_sync(self._runner.set_context, state)

    @runner_doc
    def set_ui_context(self, ui: UIContext | None, has_ui: bool = True) -> None:
        self._run_sync(self._runner.set_ui_context, ui, has_ui)

    @runner_doc
    def pending_actions(self) -> list[PendingAction]:
        return self._run_sync(self._runner.pending_actions)

    @runner_doc
    def emit_session_event(
        self, event: Mapping[str, Any], *, timeout: float = 5.0, session_id: str | None = None
    ) -> list[str]:
        self._check_thread()
        run = self._runner.emit_session_event
        return self._wait(self.portal.submit(lambda: run(event, timeout=timeout, session_id=session_id)))

    @runner_doc
    def set_session_history(self, session_id: str | None, entries: Iterable[Mapping[str, Any]]) -> None:
        self._run_sync(self._runner.set_session_history, session_id, list(entries))

    @runner_doc
    def session_history(self, session_id: str | None = None) -> list[dict[str, Any]]:
        return self._run_sync(self._runner.session_history, session_id)

    @runner_doc
    def render_call(self, name: str, args: Any, theme: Any = None, *, timeout: float = 2.0) -> str:
        self._check_thread()
        return self._wait(self.portal.submit(lambda: self._runner.render_call(name, args, theme, timeout=timeout)))

    @runner_doc
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
        self._check_thread()
        runner = self._runner
        return self._wait(
            self.portal.submit(lambda: runner.render_result(name, result, options, theme, args, timeout=timeout))
        )

    @runner_doc
    def statistics(self) -> RunnerStatistics:
        return self._run_sync(self._runner.statistics)
