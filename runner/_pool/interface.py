"""What the pool and the call layer use of a worker: :class:`PoolWorker`, and :class:`InFlight`.

:class:`xcsh_run._pool.link.WorkerLink` is the real thing; tests of the pool and of
a call's lifecycle code fakes against this protocol instead of starting
processes. A fake answers requests by resolving the :class:`InFlight` handles
it hands out (``set_result`` / ``set_error``), exactly as the real adapter does
when the worker's answer arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import trio

from xcsh_run._process import HighWater
from xcsh_run.worker.protocol import CallResult, Method, Notice

P = TypeVar("P")
R = TypeVar("R")

UpdateHandler = Callable[[CallResult], None]
"""Receives each partial result (``update``) of a ``call``, in order."""


class InFlight(Generic[R]):
    """One request in flight: its answer, or the reason there will be none.

    Resolved exactly once (later resolutions are ignored): by the worker's
    answer, or by what ended the worker (``WorkerDied``, ``RemoteProtocolError``).
    Whoever started it calls :meth:`abandon` when it stops waiting (in a
    ``finally``); that is a no-op once it is resolved.
    """

    __slots__ = ("req_id", "call_id", "event", "result", "error", "_on_abandon", "_watcher")

    def __init__(
        self,
        req_id: int = 0,
        *,
        call_id: str | None = None,
        on_abandon: Callable[[InFlight[Any]], None] | None = None,
    ) -> None:
        self.req_id = req_id
        self.call_id = call_id  # whose ``update`` notifications go to this request's handler
        self.event = trio.Event()
        self.result: R | None = None
        self.error: BaseException | None = None
        self._on_abandon = on_abandon
        self._watcher: trio.Event | None = None

    def __repr__(self) -> str:
        state = "pending" if not self.done else ("failed" if self.error is not None else "answered")
        return f"<InFlight {self.req_id} {state}>"

    @property
    def done(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        """Until the request is answered or will never be."""
        await self.event.wait()

    def watch(self, event: trio.Event) -> None:
        """Set ``event`` too once this is resolved (now, if it is already): one wake-up for several causes."""
        if self.done:
            event.set()
        else:
            self._watcher = event

    def set_result(self, result: R) -> None:
        if not self.done:
            self.result = result
            self._resolved()

    def set_error(self, error: BaseException) -> None:
        if not self.done:
            self.error = error
            self._resolved()

    def _resolved(self) -> None:
        self.event.set()
        if self._watcher is not None:
            self._watcher.set()

    def outcome(self) -> R:
        """The result, or raise what ended the request (only once :attr:`done`).

        Raises:
            RemoteError: the worker answered with an error object.
            WorkerDied: the worker exited before answering.
            RemoteProtocolError: the worker broke the protocol.
        """
        if self.error is not None:
            raise self.error
        assert self.done, "outcome() before the request was answered"
        return self.result  # type: ignore[return-value]  # R may itself include None

    def abandon(self) -> None:
        """Stop waiting: a late answer is dropped, and its ``update`` handler is gone."""
        on_abandon, self._on_abandon = self._on_abandon, None
        if on_abandon is not None:
            on_abandon(self)


class BoundaryView(Protocol):
    """What the pool reads of a worker's kill boundary (its cgroup)."""

    # True once the host ended the tree for spending its CPU budget together.
    cpu_exceeded: bool

    @property
    def has_memory_limit(self) -> bool: ...
    def members(self) -> list[int]: ...
    def oom_kills(self) -> int: ...
    def pids_limit_hits(self) -> int: ...


class Tail(Protocol):
    """The last of what the worker wrote to one of its output fds."""

    def text(self, max_chars: int = 4000) -> str: ...


class PoolWorker(Protocol):
    """One started worker, as the pool, the call layer and the bridge use it.

    What it was told about the UI is the pool's record, not the worker's; the
    module it serves is the pool's too, and is copied here only so that the
    worker's own messages (a protocol error, a teardown overrun) name it.

    Every wait is bounded by the worker itself (``kill``, ``shutdown``) or by the
    caller's deadline (``call``, ``InFlight.wait``): a cancelled ``call`` abandons
    its request, and the worker may still be working on it, so the caller must
    then stop the worker.
    """

    module: str
    """The tool module it serves, for its own messages and logs; the pool sets it when a spare loads one."""
    max_frame_bytes: int
    """The largest protocol message it may send."""

    @property
    def pid(self) -> int: ...
    @property
    def alive(self) -> bool:
        """Not exited, and it has not broken the protocol: it may be given work."""
        ...

    @property
    def returncode(self) -> int | None: ...
    @property
    def unenforced(self) -> list[str]:
        """Sandbox measures the worker could not apply to itself (from ``initialize``)."""
        ...

    @property
    def supervisor_pid(self) -> int:
        """Its supervisor's pid, 0 without one: a member of its boundary, not a leftover."""
        ...

    @property
    def boundary(self) -> BoundaryView: ...
    @property
    def stderr_tail(self) -> Tail: ...
    @property
    def output_exceeded(self) -> bool:
        """It wrote more than its output budget (and was killed for it)."""
        ...

    def cpu_seconds(self) -> float:
        """CPU time the worker process has used (user + system), 0 if unknown."""
        ...

    def rss_bytes(self) -> int:
        """The worker process's resident memory, 0 if unknown."""
        ...

    def high_water(self) -> HighWater:
        """Kernel marks that only grow (fd table size, peak RSS, bytes written): evidence of a limit hit."""
        ...

    def terminate(self) -> None:
        """SIGTERM to the worker itself: the first rung of the cancellation ladder."""
        ...

    async def kill(self) -> None:
        """Kill the worker and its tree; returns (bounded) when all of it is gone."""
        ...

    async def shutdown(self, grace: float) -> None:
        """Ask it to exit (``shutdown``), give it ``grace`` seconds, then :meth:`kill`."""
        ...

    async def wait_exited(self) -> None: ...
    async def call(self, method: Method[P, R], params: P) -> R:
        """Send a request and wait for its typed result (raises what :meth:`InFlight.outcome` raises)."""
        ...

    async def start_call(
        self, method: Method[P, R], params: P, *, on_update: UpdateHandler | None = None
    ) -> InFlight[R]:
        """Send a request and return its handle at once; ``on_update`` gets the ``update`` notifications
        whose ``call_id`` is ``params.call_id``. Pair it with ``InFlight.abandon()``."""
        ...

    def start_call_nowait(
        self, method: Method[P, R], params: P, *, on_update: UpdateHandler | None = None
    ) -> InFlight[R]:
        """:meth:`start_call` without waiting; raises trio.WouldBlock (nothing sent) if it would have to."""
        ...

    async def notify(self, notice: Notice[P], params: P) -> None:
        """Send a notification; dropped silently if the worker is gone."""
        ...
