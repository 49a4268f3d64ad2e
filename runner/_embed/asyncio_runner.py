"""The asyncio face of the runner: :class:`AsyncioRunner`, every method of :class:`Runner` for an event loop.

Calls, session events and renders are jobs of the runner's thread awaited
through ``asyncio.wrap_future``: they occupy no thread of the program's. The
quick methods (cancel, context, statistics) are plain calls that hop onto the
runner's thread and back, as the trio runner's are plain calls too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from xcsh_run._calls import UpdateCallback
from xcsh_run._discovery import LoadError, ToolInfo
from xcsh_run._embed.blocking import BlockingRunner
from xcsh_run._embed.portal import ids
from xcsh_run._host import RunnerStatistics
from xcsh_run._results import ToolResult
from xcsh_run._sandbox import SandboxPolicy

if TYPE_CHECKING:
    import asyncio

    from xcsh_run._config import RunnerConfig
    from xcsh_run._host import UIContext

T = TypeVar("T")


class AsyncioRunner:
    """The runner for asyncio programs. Get one from `open_asyncio_runner`.

    It has every public method and property of `Runner`, with the same
    parameters; the ones that are ``async`` there are coroutines here, the
    others plain calls. A call occupies no thread of the program's (its
    executor stays free) and the event loop stays free. Cancelling the
    awaiting task cancels the call through the ladder and waits until the
    worker's tree is gone before ``CancelledError`` propagates; a cancel that
    arrives before the call has even started is not lost: the call then never
    starts. `cancel` ends a call from anywhere with a ``cancelled`` result.

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
        self.blocking = blocking
        """The same runner's blocking face, for code that runs in other threads."""

    async def _await(self, fn: Callable[[], Awaitable[T]], call_id: str | None = None) -> T:
        import asyncio  # here, not at the top: a trio or CLI host never pays for it

        job = self.blocking._submit(fn, call_id)
        future = asyncio.wrap_future(job.future)
        try:
            # Shielded: cancelling the task must not cancel the future (which
            # would drop the outcome) but send the cancel below.
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            job.cancel("cancelled by the asyncio caller")
            await outlast(future)  # the ladder has run: the worker's tree is gone
            raise

    # --- configuration ------------------------------------------------------------------

    @property
    def config(self) -> RunnerConfig:
        """The runner's options (see `RunnerConfig`)."""
        return self.blocking.config

    @property
    def unenforced(self) -> list[str]:
        """The parts of the runner's sandbox policy this machine cannot enforce (best effort)."""
        return self.blocking.unenforced

    @property
    def cwd(self) -> str:
        """The project directory (absolute), which tools see as ``api.cwd``."""
        return self.blocking.cwd

    @property
    def project_root(self) -> str:
        """The project root whose ``.xcsh/tools``, ``.claude/tools`` and ``.codex/tools`` are read."""
        return self.blocking.project_root

    @property
    def sandbox(self) -> SandboxPolicy:
        """The runner's default sandbox policy."""
        return self.blocking.sandbox

    @property
    def default_timeout(self) -> float:
        """Seconds a call may run when neither the caller, the policy nor the tool gives a timeout."""
        return self.blocking.default_timeout

    @property
    def grace(self) -> float:
        """Seconds a cancelled worker gets between ``$/cancel`` and the kill."""
        return self.blocking.grace

    @property
    def load_timeout(self) -> float:
        """CPU seconds a module's worker may use to load it (``RunnerConfig.load_timeout``)."""
        return self.blocking.load_timeout

    @property
    def max_frame_bytes(self) -> int:
        """The largest protocol frame either side accepts."""
        return self.blocking.max_frame_bytes

    @property
    def closed(self) -> bool:
        """True once the runner began closing."""
        return self.blocking.closed

    def policy_for(self, name: str) -> SandboxPolicy:
        """The sandbox policy a tool runs under (its own, else the runner's)."""
        return self.blocking.policy_for(name)

    # --- the registry ---------------------------------------------------------------------

    @property
    def tools(self) -> list[ToolInfo]:
        """Every loaded tool, in discovery order (hidden ones included)."""
        return self.blocking.tools

    @property
    def errors(self) -> list[LoadError]:
        """Every module or factory entry that failed to load (or was shadowed), with the reason."""
        return self.blocking.errors

    @property
    def warnings(self) -> list[str]:
        """Problems that changed nothing but deserve a look (a corrupt cache, a bad registry)."""
        return self.blocking.warnings

    def get_tool(self, name: str) -> ToolInfo | None:
        """The loaded tool called ``name``, or None."""
        return self.blocking.get_tool(name)

    # --- calls ------------------------------------------------------------------------------

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
    ) -> ToolResult:
        """Run one call to its single terminal result; the parameters are `Runner.call_tool`'s.

        ``on_update`` runs on the runner's thread, not the event loop's: hand
        the partial result over with ``loop.call_soon_threadsafe``.

        Raises:
            ConfigError: the runner is closed.
            asyncio.CancelledError: the awaiting task was cancelled; the call's
                worker tree is gone by then.
        """
        call_id = tool_call_id or f"aio-{next(ids)}"
        job = self.blocking._call(
            name, arguments, call_id, on_update=on_update, timeout=timeout, ctx=ctx, sandbox=sandbox,
            operation_id=operation_id,
        )  # fmt: skip
        return await self._await(job, call_id)

    def cancel(self, tool_call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool:
        """Cancel a running call; it ends with a ``cancelled`` result. False if no such call.

        ``force``: kill it now, even in its grace.
        """
        return self.blocking.cancel(tool_call_id, reason, force=force)

    def cancel_all(self, reason: str = "cancelled") -> None:
        """Cancel every running call."""
        self.blocking.cancel_all(reason)

    # --- the host API -------------------------------------------------------------------------

    @property
    def context(self) -> dict[str, Any]:
        """The state shared with tools as ``ctx`` (see `set_context`)."""
        return self.blocking.context

    @context.setter
    def context(self, state: Mapping[str, Any]) -> None:
        self.set_context(state)

    def set_context(self, state: Mapping[str, Any]) -> None:
        """The session/model state shared with tools as ``ctx`` (read-only on their side), for the next calls."""
        self.blocking.set_context(state)

    def set_ui_context(self, ui: UIContext | None, has_ui: bool = True) -> None:
        """Attach a UI, or None for the no-op one (see `Runner.set_ui_context`); it runs on the runner's thread."""
        self.blocking.set_ui_context(ui, has_ui)

    def pending_actions(self) -> list[dict[str, Any]]:
        """Previews waiting for ``resolve``, newest last."""
        return self.blocking.pending_actions()

    async def emit_session_event(self, event: Mapping[str, Any], *, timeout: float = 5.0) -> list[str]:
        """Deliver a session event to every live worker with ``on_session`` tools; returns the warnings."""
        return await self._await(lambda: self.blocking._runner.emit_session_event(event, timeout=timeout))

    async def render_call(self, name: str, args: Any, theme: Any = None, *, timeout: float = 2.0) -> str:
        """The tool's ``render_call(args, theme)``, run in its worker; the default rendering on any trouble."""
        return await self._await(lambda: self.blocking._runner.render_call(name, args, theme, timeout=timeout))

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
        """The tool's ``render_result(result, options, theme, args)`` in its worker, or the default."""
        runner = self.blocking._runner
        return await self._await(lambda: runner.render_result(name, result, options, theme, args, timeout=timeout))

    def statistics(self) -> RunnerStatistics:
        """A snapshot of the runner's workers and calls."""
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
