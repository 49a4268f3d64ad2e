"""The blocking and asyncio faces of the runner: thin wrappers, no logic of their own.

Both run the trio runner in one dedicated thread that lives as long as the
runner. That thread spawns every worker, which matters: anything tied to the
forking thread (like ``PR_SET_PDEATHSIG``) must not be tied to a short-lived
thread (trio retires idle worker threads after 10 s).

Calls and session events are *submitted* to that thread (``run_sync_soon``,
thread-safe and immediate) and run there as tasks of a nursery that outlives
the runner; their outcome comes back through a :class:`concurrent.futures.Future`.
No call occupies a thread of the caller's while it runs: an asyncio program
waits on the future from its event loop, and a cancel travels the same direct
way, so it can never queue behind the calls it is meant to stop.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import trio

from ._errors import ConfigError
from ._host import Runner, RunnerStatistics, ToolInfo, UpdateCallback, open_runner
from ._results import ToolResult

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")
_ids = itertools.count(1)
_log = logging.getLogger("xcsh_run")

_CLOSED = "this runner is closed; open a new one"


class _Job(Generic[T]):
    """One coroutine run on the runner's thread for another thread, with a sticky cancel.

    ``future`` and :meth:`cancel` are for any thread; everything else runs on
    the runner's thread, so the state below needs no lock.
    """

    def __init__(self, portal: _Portal, fn: Callable[[], Awaitable[T]], call_id: str | None) -> None:
        self.future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._portal = portal
        self._fn = fn
        self._call_id = call_id
        self._scope = trio.CancelScope()
        self._reason: str | None = None
        self._state = "new"  # -> "running" (fn entered) -> "done" (future settled)

    def cancel(self, reason: str) -> None:
        """Cancel the job from any thread, whether it has started, is running or has ended."""
        # A run that has finished has settled every job (its nursery waited
        # for them, and callbacks accepted before the end still run).
        with contextlib.suppress(trio.RunFinishedError):
            self._portal.token.run_sync_soon(self._cancel, reason)

    def _cancel(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason  # sticky: a job that has not started yet never starts
        if self._state == "done":
            return
        # Once fn is entered, a call registers itself before its first
        # checkpoint, so from here on the runner knows the id: cancelling
        # through it runs the ladder and ends with a `cancelled` result. (Only
        # a running job is asked: before it, the id may be another call's.)
        call_id = self._call_id if self._state == "running" else None
        if call_id is not None and self._portal.runner.cancel(call_id, reason):
            return
        self._scope.cancel()

    async def run(self) -> None:
        try:
            if self._reason is not None:
                return  # cancelled before it started: fn never runs
            self._state = "running"
            with self._scope:
                try:
                    value = await self._fn()
                except Exception as exc:
                    self._settle(self.future.set_exception, exc)
                else:
                    self._settle(self.future.set_result, value)
        finally:
            if self._state != "done":  # cancelled: no outcome
                self._settle(self.future.cancel)

    def fail(self, error: BaseException) -> None:
        self._settle(self.future.set_exception, error)

    def _settle(self, how: Callable[..., object], *args: Any) -> None:
        self._state = "done"
        try:
            how(*args)  # runs the waiters' done-callbacks, here on the runner's thread
        except Exception:  # nothing a waiter does may take the runner's thread down
            _log.exception("settling a submitted call failed")


class _Portal:
    """Where other threads submit jobs: a nursery in the runner's thread that outlives the runner.

    Outliving it gives closing its natural order: the runner's ``aclose``
    cancels every running call through its ladder, a job that starts during
    it gets the runner's ``ConfigError``, and after it the nursery waits for
    the last jobs before the thread ends.
    """

    def __init__(self, nursery: trio.Nursery) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.thread = threading.get_ident()
        self.runner: Runner  # set once open_runner has yielded it
        self._nursery = nursery
        self._closed = False

    def submit(self, job: _Job[Any]) -> None:
        """From any thread; raises ConfigError once the runner's thread has ended."""
        try:
            self.token.run_sync_soon(self._start, job)
        except trio.RunFinishedError:
            raise ConfigError(_CLOSED) from None

    def _start(self, job: _Job[Any]) -> None:
        if self._closed:
            job.fail(ConfigError(_CLOSED))
        else:
            self._nursery.start_soon(job.run)

    def close(self) -> None:
        """No new job starts; ones submitted from now on fail at once."""
        self._closed = True


class BlockingRunner:
    """A :class:`Runner` for plain (non-async) programs. Get one from :func:`open_blocking_runner`.

    Every method blocks the calling thread and is safe to call from any
    thread; calls from several threads run in parallel. ``on_update``
    callbacks run on the runner's own thread and must not block. Once the
    runner is closed, every method raises :class:`ConfigError`.
    """

    def __init__(self, runner: Runner, portal: _Portal) -> None:
        self._runner = runner
        self._portal = portal

    def _run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return trio.from_thread.run_sync(fn, *args, trio_token=self._portal.token)
        except trio.RunFinishedError:
            raise ConfigError(_CLOSED) from None

    def _submit(self, fn: Callable[[], Awaitable[T]], call_id: str | None = None) -> _Job[T]:
        """Start ``fn`` on the runner's thread now; its outcome arrives in ``job.future``."""
        job = _Job(self._portal, fn, call_id)
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
        return self._wait(
            self._call(name, arguments, call_id, on_update=on_update, timeout=timeout, **options), call_id
        )

    def _call(
        self, name: str, arguments: Mapping[str, Any] | None, call_id: str, **options: Any
    ) -> Callable[[], Awaitable[ToolResult]]:
        return lambda: self._runner.call_tool(name, arguments, tool_call_id=call_id, **options)

    def cancel(self, tool_call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool:
        return self._run_sync(lambda: self._runner.cancel(tool_call_id, reason, force=force))

    def emit_session_event(self, event: Mapping[str, Any], *, timeout: float = 5.0) -> list[str]:
        return self._wait(lambda: self._runner.emit_session_event(event, timeout=timeout))

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
    joins the thread; nothing is left running, even after an exception. Calls
    still running in other threads then end with a ``cancelled`` result, and
    later ones raise :class:`ConfigError`.
    """
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            portal = _Portal(nursery)
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
            blocking._portal.token.run_sync_soon(box["stop"].set)
        thread.join()
        if "error" in box:
            raise box["error"]


class AsyncioRunner:
    """The runner for asyncio programs. Get one from :func:`open_asyncio_runner`.

    A call occupies no thread of the program's (its executor stays free) and
    the event loop stays free. Cancelling the awaiting task cancels the call
    through the ladder and waits until the worker's tree is gone before
    ``CancelledError`` propagates; a cancel that arrives before the call has
    even started is not lost: the call then never starts.
    """

    def __init__(self, blocking: BlockingRunner) -> None:
        self.blocking = blocking

    @property
    def tools(self) -> list[ToolInfo]:
        return self.blocking.tools

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, tool_call_id: str | None = None, **options: Any
    ) -> ToolResult:
        call_id = tool_call_id or f"aio-{next(_ids)}"
        return await self._await(self.blocking._call(name, arguments, call_id, **options), call_id)

    async def emit_session_event(self, event: Mapping[str, Any], *, timeout: float = 5.0) -> list[str]:
        return await self._await(lambda: self.blocking._runner.emit_session_event(event, timeout=timeout))

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
            await _outlast(future)  # the ladder has run: the worker's tree is gone
            raise

    def set_ui_context(self, ui: Any | None, has_ui: bool = True) -> None:
        self.blocking.set_ui_context(ui, has_ui)

    def statistics(self) -> RunnerStatistics:
        return self.blocking.statistics()


async def _outlast(future: asyncio.Future[Any]) -> bool:
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


@contextlib.asynccontextmanager
async def open_asyncio_runner(tool_paths: Sequence[str] = (), **options: Any) -> AsyncIterator[AsyncioRunner]:
    """:func:`open_runner` for asyncio programs (``async with open_asyncio_runner(...) as runner``).

    Opening and closing run in a thread of their own, and are seen through even
    when the task is cancelled meanwhile: no runner is ever left running.
    """
    import asyncio

    manager = open_blocking_runner(tool_paths, **options)

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
