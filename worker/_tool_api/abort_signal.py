"""The cancellation signal a tool receives as ``execute(..., signal)``.

Threads: the worker's reader thread marks the signal aborted when the host's
``$/cancel`` notification arrives; the SIGTERM that follows interrupts the
tool's own thread. Callbacks therefore run on whichever thread observes the
abort first, exactly once, and must be quick and thread-safe (killing a child
process is the typical use).
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class ToolCancelled(BaseException):
    """Raised inside a synchronous tool when the host cancels its call.

    It derives from `BaseException`, like ``KeyboardInterrupt``, so that
    a tool's ``except Exception:`` cannot swallow it by accident.
    """


class AbortSignal:
    """Tells a tool that its call was cancelled or timed out.

    Attributes:
        aborted: true once the host asked the call to stop.
        reason: ``"cancelled"``, ``"timeout"`` or a free-form reason, or None.
    """

    __slots__ = ("_aborted", "_waiters", "_lock", "_callbacks", "reason")

    def __init__(self) -> None:
        # A signal is made for every call, and most are never aborted nor
        # waited on: each wait brings a lock of its own, held until the abort
        # releases it, instead of a threading.Event made for every call (a
        # tenth of the cost). No waiter ever holds a lock another one needs.
        # _lock is reentrant: the SIGTERM handler aborts on the main thread,
        # which it may have interrupted inside add_callback or _abort.
        self._aborted = False
        self._waiters: list[threading.Lock] = []
        self._lock = threading.RLock()
        self._callbacks: list[Callable[[str], object]] = []
        self.reason: str | None = None

    @property
    def aborted(self) -> bool:
        """True once the host asked the call to stop (a cancel, a timeout, an abort of its operation)."""
        return self._aborted

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the call is aborted or ``timeout`` passes; return ``aborted``."""
        if self._aborted:
            return True
        waiter = threading.Lock()
        waiter.acquire()
        self._waiters.append(waiter)
        try:
            # _abort sets _aborted before it looks at the waiters: it saw this
            # one, or this sees _aborted (read again: the property is not narrowed).
            if self.aborted:
                return True
            return waiter.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)) or self.aborted
        finally:
            self._waiters.remove(waiter)

    async def wait_async(self) -> str:
        """Await the abort from an async tool; returns the reason.

        The host's cancellation also cancels the tool's task directly; this is
        for tools that want to race the signal against their own work.
        """
        import asyncio

        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()

        def settle(reason: str) -> None:
            if not done.done():
                done.set_result(reason)

        def wake(reason: str) -> None:
            # Callbacks may run on the reader thread: hop onto the loop.
            loop.call_soon_threadsafe(settle, reason)

        self.add_callback(wake)
        return await done

    def add_callback(self, callback: Callable[[str], object]) -> None:
        """Call ``callback(reason)`` once when the call is aborted (now, if it already is)."""
        with self._lock:
            if not self._aborted:
                self._callbacks.append(callback)
                if not self.aborted:  # read again (the property is not narrowed)
                    return
                # Aborted in between, by the SIGTERM handler on this very thread:
                # its _abort took the list before this callback was in it.
                self._callbacks.remove(callback)
        callback(self.reason or "cancelled")

    def throw_if_aborted(self) -> None:
        """Raise [`ToolCancelled`][xcsh_run.pi.ToolCancelled] if the call has been aborted."""
        if self._aborted:
            raise ToolCancelled(self.reason or "cancelled")

    def _abort(self, reason: str) -> bool:
        """Mark aborted; return True for the first caller only. Worker-internal."""
        with self._lock:
            if self._aborted:
                return False
            self.reason = reason
            self._aborted = True
            callbacks, self._callbacks = self._callbacks, []
        for waiter in self._waiters[:]:
            waiter.release()
        for cb in callbacks:
            try:
                cb(reason)
            except Exception:  # a cleanup callback must not break cancellation
                import traceback

                traceback.print_exc()
        return True

    def __repr__(self) -> str:
        state = f"aborted reason={self.reason!r}" if self.aborted else "pending"
        return f"<AbortSignal {state}>"


def abort(signal: AbortSignal, reason: str) -> bool:
    """Abort ``signal`` with ``reason``: the worker's side of it (a tool only reads a signal).

    True for the first caller only.
    """
    return signal._abort(reason)
