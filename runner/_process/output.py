"""What a worker and its tree write to fds 1 and 2: bounded tails and a budget.

Rule 4 of ``xcsh_run._process.supervised``: the protocol has its own pipe pair, and fds 1
and 2 are captured here into bounded tails, drained continuously so that a
flood never blocks the worker. A worker over its output budget is killed with
its tree as soon as the budget is passed, not when it next finishes a call.

With ``-v`` (the ``xcsh_run.output`` logger enabled for INFO) the same bytes
are also split into lines and logged as they come, each with the tool's
module, the worker's pid, the call(s) it is running and the stream. The tap
is bounded so that a flood cannot flood the terminal or the log file: a line
is cut at ``TAP_LINE_BYTES``, and each call (or the worker's time between
calls) shows at most ``TAP_LINES`` lines, then one line saying that the rest
is not shown (the bounded tails above still hold the end).
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import trio

TAIL_BYTES: Final = 64 * 1024
READ_CHUNK: Final = 1 << 20
TAP_LINE_BYTES: Final = 2000
TAP_LINES: Final = 1000
_TAP_CALLS: Final = 64  # call ids whose counts are kept before the finished ones are forgotten
output_log: Final = logging.getLogger("xcsh_run.output")
# The owner's module and pid, read when a line is logged (the pid is known only once spawned).
Owner = Callable[[], tuple[str, int]]


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

    def __init__(
        self, limit: int | None, on_exceeded: Callable[[], Awaitable[None]], owner: Owner | None = None
    ) -> None:
        self.stdout = OutputTail()
        self.stderr = OutputTail()
        self.limit = limit
        self.exceeded = False
        self._on_exceeded = on_exceeded
        self._owner = owner
        # The calls the worker is running, by id; the protocol layer fills it (xcsh_run._pool.link).
        self.calls: Mapping[str, Any] = {}
        self._partial: dict[str, bytearray] = {}
        self._cut: dict[str, bool] = {}
        self._shown: dict[str, int] = {}

    @property
    def total(self) -> int:
        """Bytes the worker (and its children) wrote to stdout and stderr so far."""
        return self.stdout.total + self.stderr.total

    async def drain(self, stream: trio.lowlevel.FdStream, tail: OutputTail) -> None:
        """Read ``stream`` into ``tail`` until EOF or until the stream is closed under it."""
        try:
            while data := await stream.receive_some(READ_CHUNK):
                tail.add(data)
                if output_log.isEnabledFor(logging.INFO):
                    self._tap(tail, data)
                if self.limit is not None and not self.exceeded and self.total > self.limit:
                    # Over the output budget: the worker and its tree go now.
                    self.exceeded = True
                    with trio.CancelScope(shield=True):
                        await self._on_exceeded()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        if self._partial.get(self._name(tail)):
            self._tap(tail, b"\n")  # a last line without its newline, at EOF

    def _name(self, tail: OutputTail) -> str:
        return "stdout" if tail is self.stdout else "stderr"

    def _tap(self, tail: OutputTail, data: bytes) -> None:
        name = self._name(tail)
        partial = self._partial.setdefault(name, bytearray())
        pieces = data.split(b"\n")
        for i, piece in enumerate(pieces):
            room = TAP_LINE_BYTES - len(partial)
            if len(piece) > room:
                self._cut[name] = True
            partial += piece[: max(room, 0)]
            if i < len(pieces) - 1:  # the last piece is an unfinished line
                self._log_line(name, bytes(partial), self._cut.pop(name, False))
                partial.clear()

    def _log_line(self, name: str, line: bytes, cut: bool) -> None:
        module, pid = self._owner() if self._owner is not None else ("", 0)
        call_id = ",".join(sorted(self.calls)) or None
        key = call_id or "-"
        if key not in self._shown and len(self._shown) >= _TAP_CALLS:
            self._shown = {k: n for k, n in self._shown.items() if k in self.calls}
        shown = self._shown[key] = self._shown.get(key, 0) + 1
        if shown > TAP_LINES + 1:
            return
        text = line.decode("utf-8", errors="replace").rstrip("\r")
        if shown == TAP_LINES + 1:
            text = f"(more output not shown: at most {TAP_LINES} lines a call; the end is in the result's stderr_tail)"
        elif cut:
            text += f" ... (line cut at {TAP_LINE_BYTES} bytes)"
        tool = os.path.splitext(os.path.basename(module))[0]
        extra = {"tool": tool, "pid": pid, "call_id": call_id, "stream": name}
        output_log.info("%s: %s", name, text, extra=extra)
