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
   ``admitted``. A head that fails gets its answer (403, 401) and the
   connection closes: it never took a place in the pool.
4. An admitted connection is *busy* from the first byte of a request until
   its response ended (a stream of events is a response that has not ended)
   and *idle* between keep-alive requests. When the pool is full, a passing
   head takes the place of the connection that has been idle longest, once
   that one has been idle ``min_idle`` seconds (the newcomer waits for that,
   at most ``min_idle``); the idle one is closed without a word, which is
   what an idle keep-alive connection is for: its client opens a new one
   when it next has a request. Only when every admitted connection is busy
   (or none is idle long enough) does the newcomer get 503 and its
   connection close. So holding places costs requests in flight, not
   sockets left open: connections that once sent a head and now sit idle
   never lock out a client that sends requests.
5. ``min_idle`` is small but not zero: a connection closed just as its
   client sends the next request loses that request (the client sees the
   connection end without an answer; a ``POST`` is not retried for it), and
   a client that calls in a loop is idle only for the moment between a
   response and its next request. A quarter of a second keeps such a
   client's connection while a newcomer waits no longer than that.
6. Pending connections are never taken for admitted ones, nor the other
   way round: an admitted connection gives its place only to a head that
   passed the checks.
7. Without a token, the checks are the ``Origin`` check alone: any client
   that reaches the port may run tools, but a connection still earns its
   place with a complete head, and keeps it only while it uses it.
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
MIN_IDLE: Final = 0.25  # seconds an admitted connection is idle before a newcomer may take its place (rule 5)
# Out of fds or memory: accepting again at once would spin (as trio.serve_listeners does, wait a little).
_ACCEPT_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


class Ticket:
    """One connection's standing: pending or admitted (busy or idle), and the scope that drops it (rules 1, 4)."""

    __slots__ = ("scope", "admitted", "arrived", "head_deadline", "idle_since")

    def __init__(self, arrived: float, head_deadline: float) -> None:
        self.scope = trio.CancelScope()
        self.admitted = False
        self.arrived = arrived
        self.head_deadline = head_deadline
        self.idle_since: float | None = None  # None: pending, or busy with a request


class Admission:
    """The connections' places: ``admitted`` in the pool, ``pending`` waiting for a first head."""

    def __init__(
        self,
        *,
        admitted: int,
        pending: int = MAX_PENDING,
        head_timeout: float = HEAD_TIMEOUT,
        min_age: float = MIN_AGE,
        min_idle: float = MIN_IDLE,
    ) -> None:
        if admitted < 1 or pending < 1:
            raise ValueError(f"admission needs at least one place of each kind, got {admitted} and {pending}")
        self.limit = admitted
        self._free = admitted
        self._pending_limit = pending
        self._head_timeout = head_timeout
        self._min_age = min_age
        self._min_idle = min_idle
        self._left = trio.Event()  # a pending connection left the quota
        self._pending: dict[Ticket, None] = {}  # insertion order: the oldest first
        self._admitted: set[Ticket] = set()
        self._changed = trio.Event()  # an admitted connection left or became idle
        self.dropped = 0  # pending connections dropped for newer ones, for the log and the tests
        self.evicted = 0  # idle admitted connections closed for newcomers (rule 4)

    @property
    def counts(self) -> tuple[int, int]:
        """(admitted, pending) connections now."""
        return self.limit - self._free, len(self._pending)

    @property
    def busy(self) -> int:
        """How many admitted connections are busy with a request (rule 4)."""
        return sum(t.idle_since is None for t in self._admitted)

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

    async def admit(self, ticket: Ticket) -> bool:
        """Move ``ticket`` into the pool, busy; False when every place is busy (it stays pending, rules 3-5)."""
        if ticket.admitted:
            return True
        give_up = trio.current_time() + self._min_idle
        while not ticket.scope.cancel_called:  # else dropped a moment ago
            if self._free <= 0:
                idle = [t for t in self._admitted if t.idle_since is not None]
                if not idle:
                    return False
                oldest = min(idle, key=lambda t: t.idle_since or 0.0)
                due = (oldest.idle_since or 0.0) + self._min_idle
                if trio.current_time() < due:
                    if trio.current_time() >= give_up:
                        return False  # those idle became so only while this one waited: in use
                    # A place may free, or the oldest idle one come of age, or turn busy.
                    with trio.move_on_at(min(due, give_up)):
                        await self._changed.wait()
                    continue
                self._evict(oldest)
            self._leaves_quota(ticket)
            self._free -= 1
            ticket.admitted = True
            self._admitted.add(ticket)
            return True
        return False

    def _evict(self, ticket: Ticket) -> None:
        """Close an idle admitted connection; its place goes to the caller at once (rule 4)."""
        self._admitted.discard(ticket)
        ticket.admitted = False  # so that its leave() frees nothing: the place is passed on
        ticket.idle_since = None
        ticket.scope.cancel()
        self._free += 1
        self.evicted += 1

    def set_busy(self, ticket: Ticket) -> None:
        """A request started on ``ticket``'s connection: its place is in use (rule 4)."""
        ticket.idle_since = None

    def set_idle(self, ticket: Ticket) -> None:
        """``ticket``'s connection answered its request and waits for another (rule 4)."""
        if ticket.admitted:
            ticket.idle_since = trio.current_time()
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def leave(self, ticket: Ticket) -> None:
        """The connection closed: its place, whichever it held, is free."""
        if ticket.admitted:
            ticket.admitted = False
            self._admitted.discard(ticket)
            self._free += 1
            self._wake()
        else:
            self._leaves_quota(ticket)
