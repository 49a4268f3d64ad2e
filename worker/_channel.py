"""The worker's end of the protocol pipes: blocking I/O around one :class:`Connection`.

The Connection has no threads, and the worker has three kinds of them that
use it: the reader thread (bytes in, events out), the main thread (answers)
and tool threads (notifications and requests to the host). So every use of
the Connection holds one lock, and nothing blocks while holding it.

Writes keep the order in which the Connection produced their bytes: a sender
takes the write lock first and only then the connection lock, so whoever
produced bytes first also writes them first (an ``update`` is never
overtaken by its call's response). The reader thread takes the connection
lock alone, so a write blocked on a full pipe never stops the reader.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

from ._connection import Connection, Event
from ._frames import DEFAULT_MAX_FRAME_BYTES, _NeedData
from ._methods import Role

T = TypeVar("T")
_READ_CHUNK = 1 << 16  # requests are small; a large one is read into its own frame buffer


class Channel:
    """Blocking frame I/O on the two protocol fds, driving the worker's Connection. Thread-safe."""

    def __init__(self, fd_in: int, fd_out: int, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.conn = Connection(Role.WORKER, max_frame_bytes=max_frame_bytes)
        self._lock = threading.Lock()  # guards self.conn
        self._write_lock = threading.Lock()  # taken before self._lock, never after it

    def next_event(self) -> Event:
        """The next event, reading as much as it takes (the reader thread's, and the handshake's).

        Raises:
            RemoteProtocolError: the host broke the protocol.
            OSError: reading the pipe failed.
        """
        while True:
            with self._lock:
                event = self.conn.next_event()
                if not isinstance(event, _NeedData):
                    return event
                view = self.conn.receive_buffer(_READ_CHUNK)
            # Read outside the lock (senders never touch the receiving side),
            # straight into the connection's buffer: a large frame's body
            # lands where it is decoded from.
            try:
                n = os.readv(self.fd_in, [view])
            finally:
                view.release()
            with self._lock:
                self.conn.received(n)

    def locked(self, use: Callable[[Connection], T]) -> T:
        """Run ``use(conn)`` under the connection lock (for steps that send nothing)."""
        with self._lock:
            return use(self.conn)

    def send(self, make: Callable[[Connection], bytes]) -> None:
        """Produce bytes with ``make(conn)`` and write them, in production order.

        Whatever ``make`` raises (LocalProtocolError) propagates, and nothing is written.
        """
        with self._write_lock:
            with self._lock:
                data = make(self.conn)
            self._write_all(data)

    def write(self, data: bytes) -> None:
        """Write bytes the Connection already produced (a refusal's ready reply)."""
        with self._write_lock:
            self._write_all(data)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd_out, view)
            view = view[n:]
