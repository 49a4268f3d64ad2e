"""The worker's end of the protocol pipes: blocking I/O around one :class:`Connection`.

The Connection has no threads, and the worker has three kinds of them that
use it: whichever thread reads fd_in (bytes in, events out; see
``inbox.py``), the main thread (answers) and tool threads (notifications and
requests to the host). So every use of the Connection holds one lock, and
nothing blocks while holding it.

Writes keep the order in which the Connection produced their bytes: a sender
takes the write lock first and only then the connection lock, so whoever
produced bytes first also writes them first (an ``update`` is never
overtaken by its call's response). A reader takes the connection lock alone,
so a write blocked on a full pipe never stops the reading.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from xcsh_run.worker.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    Connection,
    ConnectionClosed,
    Event,
    NeedData,
    RemoteProtocolError,
    RequestReceived,
    Role,
)

T = TypeVar("T")
READ_CHUNK = 64 * 1024
"""One read of fd_in: the default pipe size, under malloc's mmap threshold (a 1 MiB read buffer cost an
mmap, an mremap and a munmap per read)."""


class Channel:
    """Blocking frame I/O on the two protocol fds, driving the worker's Connection. Thread-safe."""

    def __init__(self, fd_in: int, fd_out: int, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.conn = Connection(Role.WORKER, max_frame_bytes=max_frame_bytes)
        self.lock = threading.Lock()  # guards self.conn
        self._write_lock = threading.Lock()  # taken before self.lock, never after it

    def next_event(self) -> Event:
        """The next event, reading as much as it takes (the handshake's, before any thread starts).

        Raises:
            RemoteProtocolError: the host broke the protocol.
            OSError: reading the pipe failed.
        """
        while True:
            with self.lock:
                event = self.conn.next_event()
            if not isinstance(event, NeedData):
                return event
            chunk = os.read(self.fd_in, READ_CHUNK)
            with self.lock:
                self.conn.receive_data(chunk)

    def read(self) -> bytes:
        """One blocking read of fd_in; empty at the end of the stream.

        Only the thread that owns fd_in calls this (``inbox.py``).

        Raises:
            OSError: reading the pipe failed.
        """
        return os.read(self.fd_in, READ_CHUNK)

    def receive(self, data: bytes, requests: deque[RequestReceived]) -> list[Event | RemoteProtocolError]:
        """Feed ``data`` and take out every complete event; the caller holds :attr:`lock`.

        Requests are appended to ``requests`` here, under the lock; the other
        events are returned in order, to be handled after the lock is
        released. A protocol error ends the list.
        """
        conn = self.conn
        events: list[Event | RemoteProtocolError] = []
        try:
            conn.receive_data(data)
            while True:
                event = conn.next_event()
                if type(event) is RequestReceived:
                    requests.append(event)
                elif isinstance(event, NeedData):
                    break
                else:
                    events.append(event)
                    if type(event) is ConnectionClosed:
                        break
        except RemoteProtocolError as exc:
            events.append(exc)
        return events

    def locked(self, use: Callable[[Connection], T]) -> T:
        """Run ``use(conn)`` under the connection lock (for steps that send nothing)."""
        with self.lock:
            return use(self.conn)

    def send(self, make: Callable[[Connection], bytes]) -> None:
        """Produce bytes with ``make(conn)`` and write them, in production order.

        Whatever ``make`` raises (LocalProtocolError) propagates, and nothing is written.
        """
        with self._write_lock:
            with self.lock:
                data = make(self.conn)
            self._write_all(data)

    def write(self, data: bytes) -> None:
        """Write bytes the Connection already produced (a refusal's ready reply)."""
        with self._write_lock:
            self._write_all(data)

    def _write_all(self, data: bytes) -> None:
        n = os.write(self.fd_out, data)
        if n == len(data):
            return
        view = memoryview(data)[n:]
        while view:
            n = os.write(self.fd_out, view)
            view = view[n:]
