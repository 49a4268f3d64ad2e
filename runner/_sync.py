"""The blocking and asyncio faces of the runner: thin wrappers, no logic of their own.

Both run the trio runner in one dedicated thread that lives as long as the
runner. That thread spawns every worker, which matters: anything tied to the
forking thread (like ``PR_SET_PDEATHSIG``) must not be tied to a short-lived
thread (trio retires idle worker threads after 10 s).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import trio

from ._host import Runner, RunnerStatistics, ToolInfo, UpdateCallback, open_runner
from ._results import ToolResult

T = TypeVar("T")
_ids = itertools.count(1)


class BlockingRunner:
    """A :class:`Runner` for plain (non-async) programs. Get one from :func:`open_blocking_runner`.

    Every method blocks the calling thread and is safe to call from any
    thread; calls from several threads run in parallel. ``on_update``
    callbacks run on the runner's own thread and must not block.
    """

    def __init__(self, runner: Runner, token: trio.lowlevel.TrioToken) -> None:
        self._runner = runner
        self._token = token

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def _run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    @property
    def tools(self) -> list[ToolInfo]:
        return self._run_sync(lambda: self._runner.tools)

    @property
    def errors(self) -> list[Any]:
        return self._run_sync(lambda: self._runner.errors)

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        on_update: UpdateCallback | None = None,
        timeout: float | None = None,
        tool_call_id: str | None = None,
        **options: Any,
    ) -> ToolResult:
        """Run one call to its terminal result (see :meth:`Runner.call_tool`)."""
        call_id = tool_call_id or f"sync-{next(_ids)}"

        async def call() -> ToolResult:
            return await self._runner.call_tool(
                name, arguments, on_update=on_update, timeout=timeout, tool_call_id=call_id, **options
            )

        result: ToolResult = self._run(call)
        return result

    def cancel(self, tool_call_id: str, reason: str = "cancelled") -> bool:
        return self._run_sync(self._runner.cancel, tool_call_id, reason)

    def emit_session_event(self, event: Mapping[str, Any], *, timeout: float = 5.0) -> list[str]:
        async def emit() -> list[str]:
            return await self._runner.emit_session_event(event, timeout=timeout)

        warnings: list[str] = self._run(emit)
        return warnings

    def set_ui_context(self, ui: Any | None, has_ui: bool = True) -> None:
        self._run_sync(self._runner.set_ui_context, ui, has_ui)

    def set_context(self, state: Mapping[str, Any]) -> None:
        self._run_sync(self._runner.set_context, state)

    def statistics(self) -> RunnerStatistics:
        return self._run_sync(self._runner.statistics)


@contextlib.contextmanager
def open_blocking_runner(tool_paths: Sequence[str] = (), **options: Any) -> Iterator[BlockingRunner]:
    """:func:`open_runner` for plain programs: a context manager owning a runner thread.

    Leaving the block stops every worker (after ``shutdown`` is delivered) and
    joins the thread; nothing is left running, even after an exception.
    """
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        async with open_runner(tool_paths, **options) as runner:
            stop = trio.Event()
            box["runner"] = BlockingRunner(runner, trio.lowlevel.current_trio_token())
            box["stop"] = stop
            ready.set()
            await stop.wait()

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as exc:
            box["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=thread_main, name="xcsh-run-runner", daemon=True)
    thread.start()
    ready.wait()
    if "runner" not in box:
        thread.join()
        raise box["error"]
    blocking: BlockingRunner = box["runner"]
    try:
        yield blocking
    finally:
        with contextlib.suppress(trio.RunFinishedError):
            trio.from_thread.run_sync(box["stop"].set, trio_token=blocking._token)
        thread.join()
        if "error" in box:
            raise box["error"]


class AsyncioRunner:
    """The runner for asyncio programs. Get one from :func:`open_asyncio_runner`.

    Each call waits in a thread, so the event loop stays free. Cancelling the
    awaiting task cancels the call through the ladder and waits until the
    worker's tree is gone before ``CancelledError`` propagates.
    """

    def __init__(self, blocking: BlockingRunner) -> None:
        self.blocking = blocking

    @property
    def tools(self) -> list[ToolInfo]:
        return self.blocking.tools

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, tool_call_id: str | None = None, **options: Any
    ) -> ToolResult:
        import asyncio  # here, not at the top: a trio or CLI host never pays for it

        call_id = tool_call_id or f"aio-{next(_ids)}"
        job = asyncio.ensure_future(
            asyncio.to_thread(self.blocking.call_tool, name, arguments, tool_call_id=call_id, **options)
        )
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            await asyncio.to_thread(self.blocking.cancel, call_id, "cancelled by the asyncio caller")
            with contextlib.suppress(Exception):
                await job  # the ladder has run: the worker's tree is gone
            raise

    async def emit_session_event(self, event: Mapping[str, Any], *, timeout: float = 5.0) -> list[str]:
        import asyncio

        return await asyncio.to_thread(self.blocking.emit_session_event, event, timeout=timeout)

    def set_ui_context(self, ui: Any | None, has_ui: bool = True) -> None:
        self.blocking.set_ui_context(ui, has_ui)

    def statistics(self) -> RunnerStatistics:
        return self.blocking.statistics()


@contextlib.asynccontextmanager
async def open_asyncio_runner(tool_paths: Sequence[str] = (), **options: Any) -> AsyncIterator[AsyncioRunner]:
    """:func:`open_runner` for asyncio programs (``async with open_asyncio_runner(...) as runner``)."""
    import asyncio

    manager = open_blocking_runner(tool_paths, **options)
    blocking = await asyncio.to_thread(manager.__enter__)
    try:
        yield AsyncioRunner(blocking)
    finally:
        await asyncio.to_thread(manager.__exit__, None, None, None)


def run_tool_sync(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    tool_paths: Sequence[str] = (),
    on_update: UpdateCallback | None = None,
    timeout: float | None = None,
    **runner_options: Any,
) -> ToolResult:
    """Discover tools, run one call and stop every worker; blocks the calling thread.

    ``runner_options`` are those of :func:`open_runner`. The result is the
    call's single terminal result; nothing is left running when this returns.
    """

    async def main() -> ToolResult:
        async with open_runner(tool_paths, **runner_options) as runner:
            return await runner.call_tool(name, arguments, on_update=on_update, timeout=timeout)

    return trio.run(main)
