"""The MCP stdio transport: newline-delimited JSON-RPC 2.0 on a pair of trio streams.

UTF-8 JSON, one message per line, nothing but protocol on the output. This
module knows lines, not MCP: it splits the input into lines, has each one
classified (``wire.classify``: a request, a notification, a batch or
malformed input) and hands the result to its owner, which answers; it writes
the bytes it is given, in order.

Rules:

1. One task writes to the output stream (:meth:`LineTransport.run_writer`):
   a message is never interleaved with another, and a cancelled sender cannot
   leave half a line behind (it only ever cancels its enqueueing, which is
   atomic).
2. Senders wait when the output queue is full (backpressure from a client
   that reads slowly) instead of letting it grow; a broken output is drained
   silently so that senders never block on a dead client.
3. A line is bounded by ``max_message_bytes`` while it is read: the rest of an
   oversized line is discarded, never buffered (only its first and last KiB
   are kept), and the line becomes ``Malformed`` input (-32600) with the id
   recovered from those bytes when it can be (``wire`` rules 1 and 2),
   so the client fails that request instead of waiting forever.
4. Malformed input is not answered here: the owner answers it, because only
   it knows which ids are in flight (an id in flight is never answered a
   second time). Responses (answers to the server's prompts) go to the owner
   as well, which hands on only those a prompt waits for; a malformed one is
   dropped (``wire`` rule 5), since answering an answer is never right.
5. The read loop never blocks on a message: classification is synchronous,
   and the owner answers from tasks of its own.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Final

import trio

from xcsh_run._config import DEFAULT_MAX_MESSAGE_BYTES
from xcsh_run._mcp.wire import Incoming, Malformed, RequestId, classify, error_line, recover_id, valid_id
from xcsh_run.worker.protocol import ErrorCode

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "FLUSH_TIMEOUT", "LineTransport", "RequestId", "error_line", "valid_id"]

logger = logging.getLogger("xcsh_run.mcp")

_READ_CHUNK: Final = 65536
# Outgoing messages wait here for the writer task (rule 2).
_OUT_QUEUE: Final = 64
# How long queued messages may take to drain at shutdown before we give up
# on a client that stopped reading.
FLUSH_TIMEOUT: Final = 2.0
# What is kept of an oversized line to recover its id from (rule 3).
_KEPT: Final = 1024


class LineTransport:
    """Reads and writes newline-delimited JSON-RPC; classifies what it reads.

    ``on_message`` receives what every line holds (``wire.Incoming``:
    a request, a notification, a batch, or malformed input to answer); it
    runs in the read loop and must not block. ``on_broken`` is told once the
    output fails.
    """

    def __init__(
        self,
        *,
        max_message_bytes: int,
        on_message: Callable[[Incoming], None],
        on_broken: Callable[[str], None],
    ) -> None:
        self._max_message = max_message_bytes
        self._on_message = on_message
        self._on_broken = on_broken
        self._out_send, self._out_receive = trio.open_memory_channel[bytes](_OUT_QUEUE)

    # --- output ----------------------------------------------------------------

    async def run_writer(self, stream: trio.abc.SendStream) -> None:
        """The only task that writes to ``stream`` (rule 1); ends after :meth:`close`, once the queue is empty."""
        broken = False
        async for data in self._out_receive:
            if broken:
                continue  # rule 2: keep draining
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                broken = True
                self._on_broken(f"stdout is closed ({exc!r})")

    async def send(self, data: bytes) -> None:
        """Queue one encoded line for the writer; waits while the queue is full (rule 2)."""
        try:
            await self._out_send.send(data)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # shutting down: nobody is listening any more

    def close(self) -> None:
        """No more messages: the writer ends once what is queued is written."""
        self._out_send.close()

    # --- input -----------------------------------------------------------------

    async def read(self, stream: trio.abc.ReceiveStream) -> None:
        """Read ``stream`` to its end, splitting it into lines bounded by ``max_message_bytes`` (rule 3)."""
        buffer = bytearray()
        oversized: int | None = None  # bytes of the current too-long line, once it is too long
        head = tail = b""  # its first and last bytes, for the id
        while True:
            try:
                chunk = await stream.receive_some(_READ_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                logger.warning("reading stdin failed (%r); treating it as the end of input", exc)
                chunk = b""
            if not chunk:
                break
            start = 0
            while start <= len(chunk):
                newline = chunk.find(b"\n", start)
                end = len(chunk) if newline < 0 else newline
                if oversized is not None:
                    oversized += end - start  # discarded, never buffered
                    tail = (tail + chunk[max(start, end - _KEPT) : end])[-_KEPT:]
                else:
                    buffer += chunk[start:end]
                    if len(buffer) > self._max_message:
                        oversized, head, tail = len(buffer), bytes(buffer[:_KEPT]), bytes(buffer[-_KEPT:])
                        buffer.clear()
                if newline < 0:
                    break
                start = newline + 1
                if oversized is not None:
                    self._oversized(head, tail, oversized)
                    oversized, head, tail = None, b"", b""
                else:
                    self._line(bytes(buffer))
                    buffer.clear()
        # A last line without its newline still counts (lenient at EOF).
        if oversized is not None:
            self._oversized(head, tail, oversized)
        elif buffer.strip():
            self._line(bytes(buffer))

    def _line(self, line: bytes) -> None:
        if (item := classify(line)) is not None:
            self._on_message(item)

    def _oversized(self, head: bytes, tail: bytes, size: int) -> None:
        logger.warning("rejected a message of %d bytes (limit %d bytes)", size, self._max_message)
        limit = f"the limit is {self._max_message} bytes (--max-message-bytes)"
        why = f"message too large: {size} bytes; {limit}"
        self._on_message(Malformed(recover_id(head, tail=tail), ErrorCode.INVALID_REQUEST, why))


def take_over_stdio() -> tuple[int, int]:
    """Private copies of fds 0 and 1 for the protocol; fd 0 becomes the null device, fd 1 stderr.

    Anything in this process (or a child) that reads stdin or prints then
    cannot touch the protocol: print() lands on stderr.
    """
    sys.stdout.flush()
    protocol_in, protocol_out = os.dup(0), os.dup(1)  # non-inheritable: no worker gets them
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, 0)
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr at all
            os.dup2(null, 1)
    finally:
        os.close(null)
    return protocol_in, protocol_out
