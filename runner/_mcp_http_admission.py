"""Admission of ``serve --http`` connections: a pool for clients that proved themselves, a small quota for the rest.

A connection is counted against ``max_connections`` only once its first
complete request head passes the checks a request must pass before anything
is read of its body: the ``Origin`` check, and the bearer token when one is
set. Until then it is *pending*, in a quota of its own, so connections that
never finish a head, or finish one with a wrong token, cannot take the
places of the clients that hold the token (a contained tool reaches loopback,
so the endpoint's own tools could otherwise lock their client out).

Rules:

1. An accepted connection is pending. At most ``pending`` are pending at
   once. When they are, no connection is accepted (new ones wait in the
   kernel's backlog, in the order they came) until one leaves or the oldest
   has been pending ``min_age`` seconds: that one is then dropped for the
   next (its task cancelled, its socket closed without an answer: it never
   finished a head). So every accepted connection has at least ``min_age``
   to send its head, and a client queued behind a flood is reached in turn,
   with its head already waiting in its socket: stalled connections only
   push out stalled connections.
2. A pending connection has ``head_timeout`` seconds from its acceptance to
   send a whole head (whose size the wire bounds); then it is closed.
3. A head that passes admits its connection to the pool of at most
   ``admitted``; when the pool is full that request gets 503 and the
   connection closes. A head that fails gets its answer (403, 401) and the
   connection closes: it never took a place in the pool.
4. An admitted connection keeps its place until it closes; it is never
   dropped for a pending one.
5. Without a token, the checks are the ``Origin`` check alone: any client
   that reaches the port may run tools, but a connection still earns its
   place with a complete head, so stalled connections cannot starve those
   that send requests.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import trio

logger = logging.getLogger("xcsh_run.mcp")

MAX_PENDING: Final = 128
HEAD_TIMEOUT: Final = 10.0  # seconds from acceptance to a pending connection's first complete head
MIN_AGE: Final = 0.5  # seconds a pending connection is kept before a newcomer may take its place
# Out of fds or memory: accepting again at once would spin (as trio.serve_listeners does, wait a little).
_ACCEPT_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


class Ticket:
    """One connection's standing: pending or admitted, and the scope that drops it (rule 1)."""

    __slots__ = ("scope", "admitted", "arrived", "head_deadline")

    def __init__(self, arrived: float, head_deadline: float) -> None:
        self.scope = trio.CancelScope()
        self.admitted = False
        self.arrived = arrived
        self.head_deadline = head_deadline


class Admission:
    """The connections' places: ``admitted`` in the pool, ``pending`` waiting for a first head."""

    def __init__(
        self, *, admitted: int, pending: int = MAX_PENDING, head_timeout: float = HEAD_TIMEOUT, min_age: float = MIN_AGE
    ) -> None:
        if admitted < 1 or pending < 1:
            raise ValueError(f"admission needs at least one place of each kind, got {admitted} and {pending}")
        self.limit = admitted
        self._free = admitted
        self._pending_limit = pending
        self._head_timeout = head_timeout
        self._min_age = min_age
        self._left = trio.Event()  # a pending connection left the quota
        self._pending: dict[Ticket, None] = {}  # insertion order: the oldest first
        self.dropped = 0  # pending connections dropped for newer ones, for the log and the tests

    @property
    def counts(self) -> tuple[int, int]:
        """(admitted, pending) connections now."""
        return self.limit - self._free, len(self._pending)

    async def serve(
        self,
        listeners: Sequence[trio.SocketListener],
        handler: Callable[[trio.SocketStream], Awaitable[None]],
        nursery: trio.Nursery,
    ) -> None:
        """Accept connections on ``listeners`` as the quota lets (rule 1), each handled in ``nursery``."""
        async with trio.open_nursery() as accepting:
            for listener in listeners:
                accepting.start_soon(self._accept, listener, handler, nursery)

    async def _accept(
        self,
        listener: trio.SocketListener,
        handler: Callable[[trio.SocketStream], Awaitable[None]],
        nursery: trio.Nursery,
    ) -> None:
        while True:
            await self._room()
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                logger.error("cannot accept a connection (%s); trying again in 0.1 s", exc)
                await trio.sleep(0.1)
                continue
            nursery.start_soon(handler, stream)

    async def _room(self) -> None:
        """Until a pending place is free, or the oldest pending connection has had ``min_age`` (then dropped)."""
        while len(self._pending) >= self._pending_limit:
            oldest = next(iter(self._pending))
            due = oldest.arrived + self._min_age
            if trio.current_time() >= due:
                self._drop(oldest)
                return
            with trio.move_on_at(due):
                await self._left.wait()

    def _drop(self, ticket: Ticket) -> None:
        del self._pending[ticket]
        ticket.scope.cancel()
        self.dropped += 1

    def arrive(self) -> Ticket:
        """A new connection: pending (in place of the oldest if another listener filled the quota meanwhile)."""
        if len(self._pending) >= self._pending_limit:
            self._drop(next(iter(self._pending)))
        now = trio.current_time()
        ticket = Ticket(now, now + self._head_timeout)
        self._pending[ticket] = None
        return ticket

    def _leaves_quota(self, ticket: Ticket) -> None:
        if self._pending.pop(ticket, False) is None:
            self._left.set()
            self._left = trio.Event()

    def admit(self, ticket: Ticket) -> bool:
        """Move ``ticket`` into the pool; False when the pool is full (it stays pending, rule 3)."""
        if ticket.admitted:
            return True
        if self._free <= 0 or ticket.scope.cancel_called:  # full, or dropped a moment ago
            return False
        self._leaves_quota(ticket)
        self._free -= 1
        ticket.admitted = True
        return True

    def leave(self, ticket: Ticket) -> None:
        """The connection closed: its place, whichever it held, is free."""
        if ticket.admitted:
            ticket.admitted = False
            self._free += 1
        else:
            self._leaves_quota(ticket)
