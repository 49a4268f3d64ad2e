"""The load deadline: CPU time for a module that loops, wall time for one that blocks.

A load used to be bounded by wall time alone, so a busy machine (forty
``xcsh-run`` processes on two cores) made a module that imports in
milliseconds look like one that loops. The rules:

1. **The load timeout is CPU time.** A module that loops at import burns CPU;
   one waiting for a starved CPU does not. What counts is the CPU time of the
   loading worker's tree (``PoolWorker.cpu_seconds``: its cgroup's
   ``cpu.stat`` ``usage_usec``, or its own ``/proc/<pid>/stat`` where that is
   more or there is no cgroup) from the ``load`` request to its answer: the
   import and the factory, and whatever they start. The interpreter's start
   and the handshake before it are the machine's cost, not the module's (a
   spare may have spent them long before, and a call with a 10 ms timeout
   must not read them as its module looping): the wall bound covers them.
2. **A longer wall bound catches a module that blocks** (stdin, a socket,
   ``time.sleep``), which burns no CPU: ``RunnerConfig.load_wall_bound``, by
   default ``max(6 * load_timeout, 60 s)``. Six, so that a module needing its
   whole CPU budget still loads on a machine six times oversubscribed; sixty
   seconds at least, so that a small load timeout does not turn a starved
   interpreter start into a load error. A call that has to load a module is
   bounded by its own timeout as well, as before.
3. **The CPU is read where it could first be spent**: the budget left, spread
   over every CPU this host may use (a tree cannot use more than that per
   second of wall time), and never more often than every :data:`POLL_FLOOR`.
   A load that answers in milliseconds reads nothing; none busy-waits.
4. **Until the worker is handed to the load** (a spare still starting, a
   zygote still importing, the handshake) only the wall bound runs: no tool
   code runs before ``load``, so nothing there can loop, and the CPU used to
   get there is not counted.
5. **Each bound says what it saw**, and both stay ``load_error``s that are not
   cached: the same module may load on an idle machine.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Final, Literal, TypeVar

import trio

from xcsh_run._pool.interface import PoolWorker
from xcsh_run.worker.protocol import Method

P = TypeVar("P")
R = TypeVar("R")

POLL_FLOOR: Final = 0.05
# Below these shares of the wall bound and of the CPU bound, a load that ran out of wall time was waiting, not working.
_IDLE_OF_WALL: Final = 0.1
_IDLE_OF_CPU: Final = 0.5


class LoadDeadline:
    """Both bounds of one load: :meth:`bounds` around it, :meth:`answer` for its ``load`` request."""

    def __init__(self, cpu_seconds: float, wall_seconds: float) -> None:
        self.cpu_seconds = cpu_seconds
        self.wall_seconds = max(wall_seconds, cpu_seconds)
        self.expired: Literal["cpu", "wall"] | None = None
        self.used = 0.0  # the worker's CPU seconds at the last reading
        self.worker: PoolWorker | None = None
        self._scope: trio.CancelScope | None = None

    @contextlib.contextmanager
    def bounds(self) -> Iterator[None]:
        """The wall bound, and the scope the CPU bound cancels; :attr:`expired` says which ended it."""
        with trio.move_on_after(self.wall_seconds) as scope:
            self._scope = scope
            yield
        if scope.cancelled_caught and self.expired is None:
            self.expired = "wall"
            if self.worker is not None:
                self.used = self.worker.cpu_seconds()

    async def answer(self, worker: PoolWorker, method: Method[P, R], params: P) -> R:
        """``method`` sent to ``worker`` and its result, read against the CPU bound (rule 3).

        Raises what ``PoolWorker.call`` raises. When the bound is spent the
        request is abandoned and :meth:`bounds`' scope cancelled: the caller
        stops the worker as for any cancellation.
        """
        assert self._scope is not None, "answer() outside bounds()"
        self.worker = worker
        cpus = max(1, len(os.sched_getaffinity(0)))
        # From the load request on: the interpreter's start, the handshake (and a
        # spare's wait) are the machine's cost, not the module's (rule 1).
        before = worker.cpu_seconds()
        pending = await worker.start_call(method, params)
        try:
            while not pending.done:
                self.used = worker.cpu_seconds() - before
                left = self.cpu_seconds - self.used
                if left <= 0:
                    self.expired = "cpu"
                    self._scope.cancel()
                    await trio.lowlevel.checkpoint()  # raises Cancelled, caught by bounds()
                with trio.move_on_after(max(left / cpus, POLL_FLOOR)):
                    await pending.wait()
        finally:
            pending.abandon()
        return pending.outcome()

    def message(self, module: str) -> str:
        """What a load that ran out of either bound is told; ``load_error``, and how to fix it."""
        if self.expired == "cpu":
            return (
                f"{module}: the module used {self.used:.1f} s of CPU importing (load timeout {self.cpu_seconds:g} s "
                "of CPU); it may loop at import time (raise --load-timeout if it really needs longer)"
            )
        if self.worker is None:
            return (
                f"{module}: no worker was ready to import the module within {self.wall_seconds:g} s of wall time; "
                "the machine may be overloaded"
            )
        if self.used < min(self.wall_seconds * _IDLE_OF_WALL, self.cpu_seconds * _IDLE_OF_CPU):
            return (
                f"{module}: the module did not finish importing in {self.wall_seconds:g} s of wall time while using "
                f"almost no CPU ({self.used:.2f} s); it may block at import time (stdin, network, sleep)"
            )
        return (
            f"{module}: the module did not finish importing in {self.wall_seconds:g} s of wall time, using "
            f"{self.used:.1f} s of CPU (load timeout {self.cpu_seconds:g} s); the machine may be overloaded, "
            "or the module may loop or block at import time"
        )
