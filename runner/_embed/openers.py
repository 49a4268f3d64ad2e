"""The blocking and asyncio faces of the runner: thin wrappers, no logic of their own.

Both run the trio runner in one dedicated thread that lives as long as the
runner. That thread spawns every worker, which matters: anything tied to the
forking thread (like ``PR_SET_PDEATHSIG``) must not be tied to a short-lived
thread (trio retires idle worker threads after 10 s).

Calls and session events are *submitted* to that thread (``portal``) and
run there as tasks of a nursery that outlives the runner; their outcome comes
back through a :class:`concurrent.futures.Future`. No call occupies a thread of
the caller's while it runs: an asyncio program waits on the future from its
event loop, and a cancel travels the same direct way, so it can never queue
behind the calls it is meant to stop. ``blocking`` and ``asyncio_runner``
hold the two faces, each with every method of :class:`Runner`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, Unpack

import trio

from xcsh_run._calls import UpdateCallback
from xcsh_run._embed.asyncio_runner import AsyncioRunner as AsyncioRunner
from xcsh_run._embed.asyncio_runner import outlast as _outlast
from xcsh_run._embed.blocking import BlockingRunner as BlockingRunner
from xcsh_run._embed.portal import Portal as _Portal
from xcsh_run._host import RunnerOptions, check_options, open_runner
from xcsh_run._results import ToolResult

T = TypeVar("T")


def open_blocking_runner(
    tool_paths: Sequence[str] = (), **options: Unpack[RunnerOptions]
) -> contextlib.AbstractContextManager[BlockingRunner]:
    """[`open_runner`][xcsh_run.open_runner] for plain programs: a context manager owning a runner thread.

    It takes `open_runner`'s options (`RunnerOptions`); one it does not know
    is a ``TypeError`` that names the closest one. Leaving the block stops
    every worker (after ``shutdown`` is delivered) and joins the thread;
    nothing is left running, even after an exception. Calls still running in
    other threads then end with a ``cancelled`` result, and later ones raise
    `RunnerClosedError`.
    """
    check_options("open_blocking_runner", options)
    return _blocking_runner(tool_paths, options, "with open_blocking_runner(...)")


@contextlib.contextmanager
def _blocking_runner(tool_paths: Sequence[str], options: RunnerOptions, block: str) -> Iterator[BlockingRunner]:
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            portal = _Portal(nursery, block)
            try:
                async with open_runner(tool_paths, **options) as runner:
                    portal.runner = runner
                    stop = trio.Event()
                    box["runner"] = BlockingRunner(runner, portal)
                    box["stop"] = stop
                    ready.set()
                    await stop.wait()
            except Exception as exc:
                box["error"] = exc  # raised as it is, not wrapped in the nursery's ExceptionGroup
            finally:
                portal.close()

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
            blocking.portal.token.run_sync_soon(box["stop"].set)
        thread.join()
        if "error" in box:
            raise box["error"]


def _in_thread(fn: Callable[[], T]) -> concurrent.futures.Future[T]:
    """``fn()`` in a new thread, not the loop's executor, which the program may keep busy."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name="xcsh-run-asyncio-bridge", daemon=True).start()
    return future


def open_asyncio_runner(
    tool_paths: Sequence[str] = (), **options: Unpack[RunnerOptions]
) -> contextlib.AbstractAsyncContextManager[AsyncioRunner]:
    """[`open_runner`][xcsh_run.open_runner] for asyncio programs (``async with open_asyncio_runner(...) as runner``).

    It takes `open_runner`'s options (`RunnerOptions`); one it does not know
    is a ``TypeError`` that names the closest one. Opening and closing run in
    a thread of their own, and are seen through even when the task is
    cancelled meanwhile: no runner is ever left running.
    """
    check_options("open_asyncio_runner", options)
    return _asyncio_runner(tool_paths, options)


@contextlib.asynccontextmanager
async def _asyncio_runner(tool_paths: Sequence[str], options: RunnerOptions) -> AsyncIterator[AsyncioRunner]:
    import asyncio

    manager = _blocking_runner(tool_paths, options, "async with open_asyncio_runner(...)")

    async def close() -> None:
        if await _outlast(asyncio.wrap_future(_in_thread(lambda: manager.__exit__(None, None, None)))):
            raise asyncio.CancelledError

    entering = asyncio.wrap_future(_in_thread(manager.__enter__))
    try:
        blocking = await asyncio.shield(entering)
    except asyncio.CancelledError:
        await _outlast(entering)
        if not entering.cancelled() and entering.exception() is None:
            await _outlast(asyncio.wrap_future(_in_thread(lambda: manager.__exit__(None, None, None))))
        raise
    try:
        yield AsyncioRunner(blocking)
    finally:
        await close()


def run_tool_sync(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    tool_paths: Sequence[str] = (),
    on_update: UpdateCallback | None = None,
    timeout: float | None = None,
    **runner_options: Unpack[RunnerOptions],
) -> ToolResult:
    """Load tools, run one call and stop every worker; blocks the calling thread.

    ``runner_options`` are those of [`open_runner`][xcsh_run.open_runner] (`RunnerOptions`;
    ``tool_paths`` alone when given, unless ``discover_sources=True``). The
    result is the call's single terminal result; nothing is left running
    when this returns.
    """
    check_options("run_tool_sync", runner_options)

    async def main() -> ToolResult:
        async with open_runner(tool_paths, **runner_options) as runner:
            return await runner.call_tool(name, arguments, on_update=on_update, timeout=timeout)

    return trio.run(main)
