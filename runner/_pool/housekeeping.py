"""Housekeeping: the one nursery of a runner's background work.

Spare refills, the idle reaper and fire-and-forget UI notifications run here,
never in the runner's own nursery: the runner's close cancels this one and
waits for its end, bounded, before it tears anything down, so no background
task can start a worker while (or after) the workers are being stopped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio


class Housekeeping:
    """The nursery of background work: :meth:`stop` cancels it and waits for its end, bounded."""

    def __init__(self, fallback: trio.Nursery) -> None:
        self._fallback = fallback
        self._nursery: trio.Nursery | None = None
        self.ready = trio.Event()
        self.done = trio.Event()
        self.stopping = False

    def start_soon(self, fn: Callable[..., Awaitable[object]], *args: Any) -> bool:
        """Run ``fn(*args)`` in the background; False if it will not run (the runner is closing)."""
        if self.stopping or self.done.is_set():
            return False  # closing, or the runner's nursery is being cancelled: nothing more to keep
        try:
            (self._nursery or self._fallback).start_soon(fn, *args)
        except RuntimeError:
            # The nursery closes to new tasks as soon as an outer cancellation
            # reaches it, before its task ends: then there is nothing more to keep either.
            return False
        return True

    async def run(self) -> None:
        try:
            if self.stopping:  # stopped before this task got to run
                return
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.ready.set()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self.ready.set()
            self.done.set()

    async def stop(self, bound: float) -> bool:
        """Cancel every task and wait for their end; False if that took longer than ``bound``."""
        self.stopping = True
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        # Also when the task has not run yet: it sees `stopping` and ends.
        with trio.move_on_after(bound):
            await self.done.wait()
            return True
        return False
