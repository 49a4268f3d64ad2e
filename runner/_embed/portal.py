"""Where other threads hand work to the runner's trio thread: :class:`Portal` and its :class:`Job`.

Calls and session events are *submitted* to that thread (``run_sync_soon``,
thread-safe and immediate) and run there as tasks of a nursery that outlives
the runner; their outcome comes back through a :class:`concurrent.futures.Future`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Generic, TypeVar

import trio

from xcsh_run._errors import RunnerClosedError, runner_closed
from xcsh_run._host import Runner
from xcsh_run._results import ToolResult

T = TypeVar("T")
# Call ids for calls submitted without one: unique across the blocking and asyncio faces.
ids: Final = itertools.count(1)
_log = logging.getLogger("xcsh_run")


class Job(Generic[T]):
    """One coroutine run on the runner's thread for another thread, with a sticky cancel.

    ``future`` and :meth:`cancel` are for any thread; everything else runs on
    the runner's thread, so the state below needs no lock.
    """

    def __init__(self, portal: Portal, fn: Callable[[], Awaitable[T]], call_id: str | None) -> None:
        self.future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._portal = portal
        self._fn = fn
        self._call_id = call_id
        self._scope = trio.CancelScope()
        self._reason: str | None = None
        self._state = "new"  # -> "running" (fn entered) -> "done" (future settled)

    @property
    def reason(self) -> str | None:
        """Why the job was cancelled (the first reason given), or None if it was not."""
        return self._reason

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
                except RunnerClosedError:
                    # The Runner's error names its own block; the program opened another face.
                    self._settle(self.future.set_exception, self._portal.closed_error())
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


class Portal:
    """Where other threads submit jobs: a nursery in the runner's thread that outlives the runner.

    Outliving it gives closing its natural order: the runner's ``aclose``
    cancels every running call through its ladder, a job that starts during
    it gets a ``RunnerClosedError``, and after it the nursery waits for the
    last jobs before the thread ends. ``block`` is how the program opened the
    face (``"with open_blocking_runner(...)"``), which that error names.
    """

    def __init__(self, nursery: trio.Nursery, block: str) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.thread = threading.get_ident()
        self.runner: Runner  # set once open_runner has yielded it
        self.block: Final = block
        self._nursery = nursery
        self._closed = False

    def closed_error(self) -> RunnerClosedError:
        """What a call on the closed runner raises, naming the block the program opened it with."""
        return runner_closed(self.block)

    def submit(self, fn: Callable[[], Awaitable[T]], call_id: str | None = None) -> Job[T]:
        """Start ``fn`` on the runner's thread now, from any thread; its outcome arrives in ``job.future``.

        ``call_id``: the id of the runner's call that ``fn`` makes, so that the
        job's cancel goes through the call's ladder. Raises RunnerClosedError
        once the runner's thread has ended.
        """
        job = Job(self, fn, call_id)
        try:
            self.token.run_sync_soon(self._start, job)
        except trio.RunFinishedError:
            raise self.closed_error() from None
        return job

    def submit_call(
        self, name: str, arguments: Mapping[str, Any] | None, call_id: str, **options: Any
    ) -> Job[ToolResult]:
        """``Runner.call_tool`` as a job whose cancel is the call's (``options`` are its keywords)."""
        return self.submit(lambda: self.runner.call_tool(name, arguments, tool_call_id=call_id, **options), call_id)

    def _start(self, job: Job[Any]) -> None:
        if self._closed:
            job.fail(self.closed_error())
        else:
            self._nursery.start_soon(job.run)

    def close(self) -> None:
        """No new job starts; ones submitted from now on fail at once."""
        self._closed = True
