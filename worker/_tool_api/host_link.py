"""Worker-to-host requests and notifications: :class:`HostLink`.

Everything that reaches the host from tool code (UI, logging, ctx.abort,
pending actions) goes through it: it sends on the protocol pipe and waits for
the answers that the worker's reader thread routes back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

from xcsh_run.worker.protocol import Connection, ErrorReceived, Method, Notice, ResultReceived

P = TypeVar("P")
R = TypeVar("R")
T = TypeVar("T")


class Pipe(Protocol):
    """What the link needs of the worker's protocol pipe (the runtime's ``Channel`` is the one there is)."""

    def locked(self, use: Callable[[Connection], T]) -> T:
        """Run ``use`` on the connection, under the pipe's lock."""
        ...

    def send(self, make: Callable[[Connection], bytes]) -> None:
        """Write what ``make`` produces from the connection, under the pipe's lock."""
        ...


class _Waiter:
    """One request of ours to the host, and the thread blocked on it."""

    __slots__ = ("event", "answer")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.answer: ResultReceived | ErrorReceived | None = None


class HostLink:
    """Worker-to-host requests and notifications. Thread-safe.

    The Connection owns the request ids and the outstanding table; this only
    maps an id to the thread waiting for its answer.
    """

    def __init__(self, channel: Pipe, current_call: Callable[[], str | None]) -> None:
        self._channel = channel
        self._current_call = current_call
        self._lock = threading.Lock()
        self._waiting: dict[int, _Waiter] = {}

    @property
    def call_id(self) -> str | None:
        return self._current_call()

    def notify(self, notice: Notice[P], params: P) -> None:
        self._channel.send(lambda conn: conn.send_notification(notice, params))

    def request(self, method: Method[P, R], params: P) -> R:
        """Send a request and block until the host answers; returns its decoded result."""
        waiter = _Waiter()
        req_id = 0

        def make(conn: Connection) -> bytes:
            nonlocal req_id
            req_id, data = conn.send_request(method, params)
            # Registered before the bytes are written: the answer cannot come earlier.
            with self._lock:
                self._waiting[req_id] = waiter
            return data

        try:
            self._channel.send(make)
            waiter.event.wait()
        finally:
            with self._lock:
                self._waiting.pop(req_id, None)
            if waiter.answer is None and req_id:
                # Interrupted (a cancelled call): the host's answer, if it comes, is dropped.
                self._channel.locked(lambda conn: conn.abandon(req_id))
        answer = waiter.answer
        if isinstance(answer, ErrorReceived):
            raise RuntimeError(f"the host refused {method.name}: {answer.error.message}")
        assert answer is not None
        result: R = answer.result
        return result

    async def request_async(self, method: Method[P, R], params: P) -> R:
        import asyncio

        # A thread waits for the answer so that the event loop stays free.
        return await asyncio.get_running_loop().run_in_executor(None, self.request, method, params)

    def answer(self, event: ResultReceived | ErrorReceived) -> None:
        """Route the host's answer to the waiting thread (called by the reader thread)."""
        with self._lock:
            waiter = self._waiting.pop(event.id, None)
        if waiter is not None:
            waiter.answer = event
            waiter.event.set()
