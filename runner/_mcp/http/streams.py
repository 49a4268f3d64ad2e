"""The outboxes of a Streamable HTTP session: SSE streams with event ids and a bounded replay, and JSON replies.

A request ``POST`` ed with ``Accept: text/event-stream`` gets an
:class:`EventStream` of its own (its progress, then its response); the
session has one more for what the server says on its own, served to a
``GET``. Either may be resumed by a ``GET`` carrying ``Last-Event-ID``.

Rules:

1. An event id names its stream and its place in it (``<stream>-<n>``), so a
   ``Last-Event-ID`` resumes exactly the stream it came from, after that
   event, and a message is never replayed on another stream.
2. Memory is bounded per stream: the last :data:`REPLAY` events are kept for
   resumption. A request's stream makes its sender wait while
   :data:`BACKLOG` events are unsent (the progress pump then coalesces
   partials, see ``Progress``); the session's stream never waits (a slow
   client must not hold up a reload for every session): its oldest unsent
   events are dropped instead.
3. A stream is written by at most one connection at a time.
4. A closed stream (its session ended, or its client gone for good) takes
   and drops everything, and lets waiting senders go.
"""

from __future__ import annotations

import collections
from typing import Final

import msgspec
import trio

from xcsh_run._mcp.http.h11_io import ConnectionGone, HttpConnection

REPLAY: Final = 64
BACKLOG: Final = 16
# Sent first on every stream (2025-11-25): a client that loses the connection
# may come back after this many milliseconds with the priming event's id.
RETRY_MS: Final = 500


class StreamBusy(Exception):
    """The stream is already being written to another connection (rule 3)."""


class EventStream:
    """One SSE stream; an ``Outbox`` for the session."""

    carries_requests = True

    def __init__(self, number: int, *, request_ids: tuple[str | int, ...] | None) -> None:
        self.number = number
        self.request_ids = request_ids  # what it answers (a batch: several); None for the session's own stream
        self._waits = request_ids is not None  # rule 2
        self._events: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=REPLAY)
        self._last = 0  # the number of the newest event
        self._sent = 0  # the newest event written to a client
        self._changed = trio.Event()
        self.ended = False
        self.closed = False
        self.attached = False
        self.attachments = 0  # how many connections took it so far
        self._scope: trio.CancelScope | None = None
        self._released = trio.Event()

    def event_id(self, n: int) -> str:
        return f"{self.number}-{n}"

    @property
    def done(self) -> bool:
        """Ended and every event written."""
        return self.ended and self._sent >= self._last

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def send(self, data: bytes) -> None:
        while self._waits and not self.closed and self._last - self._sent >= BACKLOG:
            await self._changed.wait()  # rule 2: the client reads slower than we write
        if self.closed or self.ended:
            return
        self._last += 1
        self._events.append((self._last, data.rstrip(b"\n")))
        self._wake()

    def end(self) -> None:
        self.ended = True
        self._wake()

    def close(self) -> None:
        self.closed = self.ended = True
        self._events.clear()
        self._sent = self._last  # nothing is left to write: done, and prunable by its session
        self._wake()

    def check_free(self) -> None:
        if self.attached:
            raise StreamBusy

    async def release(self) -> None:
        """Take the stream from the connection writing it, if one is (rule 3)."""
        if self.attached and self._scope is not None:
            self._scope.cancel()
            await self._released.wait()

    async def pump(self, conn: HttpConnection, after: int | None, *, prime: bool) -> bool:
        """Write this stream's events after number ``after`` to ``conn`` until it ends; True once all went out.

        ``after`` None: from the first event no client has seen. Returns False
        when the connection is gone (the stream stays, for a resumption). The
        response head must have been sent.
        """
        self.check_free()
        self.attached = True
        self.attachments += 1
        self._released = trio.Event()
        self._scope = trio.CancelScope()
        try:
            with self._scope:
                return await self._write(conn, after, prime)
            return False  # taken over by another connection
        except ConnectionGone:
            return False
        finally:
            self.attached = False
            self._released.set()

    async def _write(self, conn: HttpConnection, after: int | None, prime: bool) -> bool:
        if after is not None:
            self._sent = min(after, self._last)
        if prime:
            await conn.send(f"id: {self.event_id(self._sent)}\nretry: {RETRY_MS}\ndata: \n\n".encode())
        while True:
            pending = [(n, data) for n, data in self._events if n > self._sent]
            for n, data in pending:
                await conn.send(b"id: %s\ndata: %s\n\n" % (self.event_id(n).encode(), data))
                self._sent = n
                self._wake()
            if pending:
                continue
            if self.ended:
                self._sent = self._last  # what was dropped (rule 2) is gone for good
                return True
            await self._changed.wait()


class JsonReply:
    """A request's (or batch's) outbox when its client takes ``application/json`` only: the response alone.

    Progress has no place in a single JSON body and is dropped; the response
    is kept until the connection writes it.
    """

    # A prompt sent here would be dropped and its tool would wait for an
    # answer that never comes: a tool of a JSON-only client gets the no-op at once.
    carries_requests = False

    def __init__(self) -> None:
        self.response: bytes | None = None
        self.ended = trio.Event()

    async def send(self, data: bytes) -> None:
        message = msgspec.json.decode(data)
        # A response, or the array answering a batch; not a notification or a prompt.
        if isinstance(message, list) or (isinstance(message, dict) and "method" not in message):
            self.response = data

    def end(self) -> None:
        self.ended.set()
