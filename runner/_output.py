"""What a worker and its tree write to fds 1 and 2: bounded tails and a budget.

Rule 4 of ``runner._process``: the protocol has its own pipe pair, and fds 1
and 2 are captured here into bounded tails, drained continuously so that a
flood never blocks the worker. A worker over its output budget is killed with
its tree as soon as the budget is passed, not when it next finishes a call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

import trio

TAIL_BYTES: Final = 64 * 1024
READ_CHUNK: Final = 1 << 20


class OutputTail:
    """The last ``limit`` bytes written to one of the worker's output fds."""

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self.limit = limit
        self.total = 0
        self._chunks: deque[bytes] = deque()
        self._size = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if len(data) >= self.limit:
            self._chunks.clear()
            data = data[-self.limit :]
            self._size = 0
        self._chunks.append(data)
        self._size += len(data)
        while self._size - len(self._chunks[0]) >= self.limit:
            self._size -= len(self._chunks.popleft())

    def text(self, max_chars: int = 4000) -> str:
        raw = b"".join(self._chunks).decode("utf-8", errors="replace")
        return raw[-max_chars:]


class OutputCapture:
    """The worker's stdout and stderr tails, and its budget on both together.

    ``on_exceeded`` runs (shielded) once, when the total first passes ``limit``.
    """

    def __init__(self, limit: int | None, on_exceeded: Callable[[], Awaitable[None]]) -> None:
        self.stdout = OutputTail()
        self.stderr = OutputTail()
        self.limit = limit
        self.exceeded = False
        self._on_exceeded = on_exceeded

    @property
    def total(self) -> int:
        """Bytes the worker (and its children) wrote to stdout and stderr so far."""
        return self.stdout.total + self.stderr.total

    async def drain(self, stream: trio.lowlevel.FdStream, tail: OutputTail) -> None:
        """Read ``stream`` into ``tail`` until EOF or until the stream is closed under it."""
        try:
            while data := await stream.receive_some(READ_CHUNK):
                tail.add(data)
                if self.limit is not None and not self.exceeded and self.total > self.limit:
                    # Over the output budget: the worker and its tree go now.
                    self.exceeded = True
                    with trio.CancelScope(shield=True):
                        await self._on_exceeded()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
