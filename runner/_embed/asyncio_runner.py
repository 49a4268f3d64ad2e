"""The asyncio face of the runner: :class:`AsyncioRunner`, every method of :class:`Runner` for an event loop.

Calls, session events and renders are jobs of the runner's thread awaited
through ``asyncio.wrap_future``: they occupy no thread of the program's. The
quick methods (cancel, context, statistics) are plain calls that hop onto the
runner's thread and back, as the trio runner's are plain calls too. Read-only
configuration is inherited from ``RunnerSettings``; every docstring is the
Runner's (``surface``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from xcsh_run._calls import UpdateCallback
from xcsh_run._config import RunnerSettings
from xcsh_run._discovery import LoadError, ToolInfo
from xcsh_run._embed.blocking import BlockingRunner
from xcsh_run._embed.portal import Job, ids
from xcsh_run._embed.surface import runner_doc
from xcsh_run._host import RunnerStatistics
from xcsh_run._results import PendingAction, ToolResult
from xcsh_run._sandbox import SandboxPolicy

if TYPE_CHECKING:
    import asyncio

    from xcsh_run._host import UIContext

T = TypeVar("T")


class AsyncioRunner(RunnerSettings):
    """The runner for asyncio programs. Get one from `open_asyncio_runner`.

    It has every public method and property of `Runner`, with the same
    parameters and docstrings; the ones that are ``async`` there are
    coroutines here, the others plain calls. A call occupies no thread of the
    program's (its executor stays free) and the event loop stays free.
    Cancelling the awaiting task cancels the call through the ladder and waits
    until the worker's tree is gone before ``CancelledError`` propagates; a
    cancel that arrives before the call has even started is not lost: the
    call then never starts. `cancel` ends a call from anywhere with a
    ``cancelled`` result.

    Example:
        ```python
        import asyncio
        from xcsh_run import open_asyncio_runner

        async def main() -> None:
            async with open_asyncio_runner(["tools/"]) as runner:
                result = await runner.call_tool("hello", {"name": "Ada"})
                print(result.text)

        asyncio.run(main())
        ```
    """

    def __init__(self, blocking: BlockingRunner) -> None:
        self.config = blocking.config
        self.unenforced = blocking.unenforced
        self.blocking = blocking
        """The same runner's blocking face, for code that runs in other threads."""
        self._portal = blocking.portal

    async def _await(self, job: Job[T]) -> T:
        import asyncio  # here, not at the top: a trio or CLI host never pays for it

        future = asyncio.wrap_future(job.future)
        try:
            # Shielded: cancelling the task must not cancel the future (which
            # would drop the outcome) but send the cancel below.
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            job.cancel("cancelled by the asyncio caller")
            await outlast(future)  # the ladder has run: the worker's tree is gone
            raise

    # --- configuration (the rest: RunnerSettings) ------------------------------------------

    @property
    @runner_doc
    def project_root(self) -> str:
        return self.blocking.project_root

    @property
    @runner_doc
    def closed(self) -> bool:
        return self.blocking.closed

    @runner_doc
    def policy_for(self, name: str) -> SandboxPolicy:
        return self.blocking.policy_for(name)

    # --- the registry ---------------------------------------------------------------------

    @property
    @runner_doc
    def tools(self) -> list[ToolInfo]:
        return self.blocking.tools

    @property
    @runner_doc
    def errors(self) -> list[LoadError]:
        return self.blocking.errors

    @property
    @runner_doc
    def warnings(self) -> list[str]:
        return self.blocking.warnings

    @runner_doc
    def get_tool(self, name: str) -> ToolInfo | None:
        return self.blocking.get_tool(name)

    # --- calls ------------------------------------------------------------------------------

    @runner_doc(
        note="""
        ``on_update`` runs on the runner's thread, not the event loop's: hand
        the partial result over with ``loop.call_soon_threadsafe``.

        Raises:
            RunnerClosedError: the runner is closed.
            asyncio.CancelledError: the awaiting task was cancelled; the call's
                worker tree is gone by then.
        """
    )
    async def call_tool(
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
        call_id = tool_call_id or f"aio-{next(ids)}"
        job = self._portal.submit_call(
            name, arguments, call_id, on_update=on_update, timeout=timeout, ctx=ctx, sandbox=sandbox,
            operation_id=operation_id, session_id=session_id, traceparent=traceparent,
        )  # fmt: skip
        return await self._await(job)

    @runner_doc
    def cancel(self, tool_call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool:
        return self.blocking.cancel(tool_call_id, reason, force=force)

    @runner_doc
    def cancel_all(self, reason: str = "cancelled") -> None:
        self.blocking.cancel_all(reason)

    # --- the host API -------------------------------------------------------------------------

    @property
    @runner_doc
    def context(self) -> dict[str, Any]:
        return self.blocking.context

    @context.setter
    def context(self, state: Mapping[str, Any]) -> None:
        self.set_context(state)

    @runner_doc
    def set_context(self, state: Mapping[str, Any]) -> None:
        self.blocking.set_context(state)

    @runner_doc(note="The UI's methods run on the runner's thread, not the event loop's.")
    def set_ui_context(self, ui: UIContext | None, has_ui: bool = True) -> None:
        self.blocking.set_ui_context(ui, has_ui)

    @runner_doc
    def pending_actions(self) -> list[PendingAction]:
        return self.blocking.pending_actions()

    @runner_doc
    async def emit_session_event(
        self, event: Mapping[str, Any], *, timeout: float = 5.0, session_id: str | None = None
    ) -> list[str]:
        run = self._portal.runner.emit_session_event
        return await self._await(self._portal.submit(lambda: run(event, timeout=timeout, session_id=session_id)))

    @runner_doc
    def set_session_history(self, session_id: str | None, entries: Iterable[Mapping[str, Any]]) -> None:
        self.blocking.set_session_history(session_id, entries)

    @runner_doc
    def session_history(self, session_id: str | None = None) -> list[dict[str, Any]]:
        return self.blocking.session_history(session_id)

    @runner_doc
    async def render_call(self, name: str, args: Any, theme: Any = None, *, timeout: float = 2.0) -> str:
        runner = self._portal.runner
        return await self._await(self._portal.submit(lambda: runner.render_call(name, args, theme, timeout=timeout)))

    @runner_doc
    async def render_result(
        self,
        name: str,
        result: ToolResult,
        options: Mapping[str, Any] | None = None,
        theme: Any = None,
        args: Any = None,
        *,
        timeout: float = 2.0,
    ) -> str:
        runner = self._portal.runner
        job = self._portal.submit(lambda: runner.render_result(name, result, options, theme, args, timeout=timeout))
        return await self._await(job)

    @runner_doc
    def statistics(self) -> RunnerStatistics:
        return self.blocking.statistics()


async def outlast(future: asyncio.Future[Any]) -> bool:
    """Wait until ``future`` is done, through any cancellation; True if the task was cancelled meanwhile.

    Only for what is bounded anyway (a call's ladder, a runner's close): giving
    up early would leave processes behind that the caller believes gone.
    """
    import asyncio

    cancelled = False
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            cancelled = True
    if not future.cancelled():
        future.exception()  # retrieved: asyncio would otherwise log it as never retrieved
    return cancelled
