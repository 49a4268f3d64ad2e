"""Who reads fd_in: the main thread while it is idle, the reader thread while it serves a request.

The worker must see the host's messages at all times: ``$/cancel`` while a
tool runs, the answers to a tool's UI prompts, and the end of the stream (the
host is gone: the lifeline). A thread that reads every request and hands it
to the main thread costs two thread switches per call, so the reading moves:

1. Idle, the main thread reads fd_in itself (one blocking read) and takes
   every complete event out of the Connection at once. Requests are queued
   (FIFO); every other event is handled before the first queued request is
   served, so a ``$/cancel`` written together with its call, or a UI answer
   for a tool's background thread, is seen before anything else happens.
2. From :meth:`Inbox.lend` to :meth:`Inbox.reclaim` (around every request
   the main thread serves: a tool running, sync or async, a prompt waiting
   for its answer, updates and the response being written), the reader
   thread reads. fd_in is in the reader's epoll set only then, so lending and
   reclaiming cost one ``epoll_ctl`` each and wake nobody: the reader wakes
   only when the host writes during a request (a cancel, an answer, the next
   request pipelined behind this one, or EOF). Between requests fd_in stays
   in the set, disarmed (one-shot, no events): the kernel still reports a
   hang-up there, once, and the reader, finding fd_in not lent, ignores it.
3. Only the owner reads fd_in. The reader reads under the connection lock,
   and only after checking, under that lock, that fd_in is still lent and is
   readable right now, so it never blocks while holding the lock (a wake-up
   may be stale: the main thread may have reclaimed fd_in, read the bytes
   itself and lent it again), and :meth:`Inbox.reclaim`, which takes the
   lock, never overlaps a read. Bytes already fed to the Connection belong to
   no thread: whichever reads next takes their events out, in order.
4. Requests are queued under the connection lock, in the same step that
   decodes them, so when :meth:`Inbox.reclaim` returns every request the
   reader decoded is in the queue: none can sit in a thread's hands while the
   main thread blocks in a read.
5. EOF, a read error or a protocol error, seen by either thread, ends in the
   lifeline (the ``dispatch`` and ``gone`` callbacks).
"""

from __future__ import annotations

import select
import threading
from collections import deque
from collections.abc import Callable
from typing import NoReturn

from xcsh_run.worker._runtime.channel import Channel
from xcsh_run.worker.protocol import Event, RemoteProtocolError, RequestReceived

_DISARMED = select.EPOLLONESHOT  # plus the hang-up the kernel always adds, reported at most once

Dispatch = Callable[[Event | RemoteProtocolError], None]
"""Handles every event but a request, on the thread that read it (the lifeline for the end and errors)."""


class Inbox:
    """The worker's incoming side: the request queue and the reading of fd_in, handed between two threads."""

    def __init__(self, channel: Channel, dispatch: Dispatch, gone: Callable[[], NoReturn]) -> None:
        self.requests: deque[RequestReceived] = deque()
        self._channel = channel
        self._dispatch = dispatch
        self._gone = gone
        self._fd = channel.fd_in
        self._lent = False
        # Non-inheritable, like every fd Python makes: a tool's subprocess never sees it.
        self._epoll = select.epoll()
        # Modified, never added and removed per request: that costs five times as much.
        self._epoll.register(self._fd, _DISARMED)
        self._probe = select.poll()
        self._probe.register(self._fd, select.POLLIN)

    def start(self) -> None:
        """Start the reader thread (after the handshake; it waits until fd_in is lent to it)."""
        threading.Thread(target=self._read_while_lent, name="xcsh-reader", daemon=True).start()

    def next_request(self) -> RequestReceived:
        """The next request, reading fd_in while there is none (main thread, fd_in not lent)."""
        requests = self.requests
        channel = self._channel
        while not requests:
            try:
                data = channel.read()
            except OSError:
                self._gone()
            with channel.lock:
                events = channel.receive(data, requests)
            for event in events:
                self._dispatch(event)
        return requests.popleft()

    def lend(self) -> None:
        """The reader thread reads fd_in until :meth:`reclaim` (main thread)."""
        self._lent = True  # before the fd is armed: a reader woken by it must find it lent
        self._epoll.modify(self._fd, select.EPOLLIN)

    def reclaim(self) -> None:
        """Take fd_in back; returns once no read of the reader's is under way (main thread)."""
        with self._channel.lock:
            self._lent = False
            self._epoll.modify(self._fd, _DISARMED)

    def queued_calls(self, method: object) -> set[str]:
        """The ``call_id`` of every queued request of ``method`` (a call that has not started)."""
        with self._channel.lock:
            return {req.params.call_id for req in self.requests if req.method is method}

    def _read_while_lent(self) -> None:
        channel = self._channel
        wait = self._epoll.poll
        ready = self._probe.poll
        try:
            while True:
                wait()
                with channel.lock:
                    if not self._lent or not ready(0):
                        continue  # stale: the main thread took fd_in back (and maybe read these bytes)
                    events = channel.receive(channel.read(), self.requests)
                for event in events:
                    self._dispatch(event)
        except OSError:
            self._gone()
