"""MCP logging: a tool's ``api.logger`` records as ``notifications/message`` to the client whose call made them.

Every record still goes to the host's log (the ``xcsh_run.tool`` logger: stderr
or ``--log-file``), as before; this is the copy for the MCP client.

Rules:

1. A record reaches only the session whose ``tools/call`` made it, through
   that request's reply outbox (over HTTP: the stream of the ``POST``), and
   before the call's response. Records made outside a call (while a module
   loads, in an ``on_session`` hook) are not sent to any client.
2. A session's level (``logging/setLevel``) is the least severe level sent.
   Until the client sets one it is :data:`DEFAULT_LEVEL`, ``info``: what the
   host's own log on stderr shows; debug records go to clients that ask.
3. Bounded: a call's records wait in a queue of at most :data:`MAX_QUEUED`
   while the client reads; the ones past it are dropped and counted, and the
   count is sent in their place as one ``warning`` (the worker bounds a call's
   records too: 1000 records, 256 KiB of text).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from xcsh_run._mcp.methods import RpcError
from xcsh_run.worker import protocol as p
from xcsh_run.worker.protocol import ErrorCode

# RFC 5424 severities, least severe first, as MCP names them.
LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
DEFAULT_LEVEL: Final = LEVELS.index("info")
MAX_QUEUED: Final = 100
# The logger of ``api.logger``; its records (and its children's) are named after the tool.
TOOL_LOGGER: Final = "xcsh.tool"
OWN_LOGGER: Final = "xcsh-run"


def severity(python_level: int) -> int:
    """The MCP level (an index into :data:`LEVELS`) of a Python logging level.

    Python has no notice, alert or emergency: each level maps to the MCP level
    at or below it (a custom level above CRITICAL stays critical).
    """
    if python_level < logging.INFO:
        return 0
    if python_level < logging.WARNING:
        return 1
    if python_level < logging.ERROR:
        return 3
    if python_level < logging.CRITICAL:
        return 4
    return 5


def parse_level(params: dict[str, Any]) -> int:
    """The level of ``logging/setLevel`` params; -32602 for anything else."""
    level = params.get("level")
    if not isinstance(level, str) or level not in LEVELS:
        raise RpcError(ErrorCode.INVALID_PARAMS, f'invalid params: "level" must be one of {", ".join(LEVELS)}')
    return LEVELS.index(level)


def logger_name(tool: str, logger: str) -> str:
    """``api.logger``'s records are the tool's (``tidy``, ``tidy.db`` for a child); other loggers keep their name."""
    if logger == TOOL_LOGGER:
        return tool
    if logger.startswith(TOOL_LOGGER + "."):
        return tool + logger[len(TOOL_LOGGER) :]
    return logger


class _Dropped:
    """Stands in the queue for the records dropped there (rule 3), so the count is sent where they were."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 1


class LogPump:
    """One call's records on their way to its client: :meth:`put` never blocks, :meth:`pump` sends.

    ``level()`` is the session's level at the time a record arrives; ``send``
    sends one ``notifications/message`` params object.
    """

    def __init__(self, tool: str, level: Callable[[], int], send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self._tool = tool
        self._level = level
        self._send = send
        self._queue: deque[dict[str, Any] | _Dropped] = deque()
        self._wake = trio.Event()
        self._closed = False
        self.sent = 0
        self.dropped = 0

    def put(self, record: p.LogParams) -> None:
        level = severity(record.level)
        if self._closed or level < self._level():
            return
        if len(self._queue) >= MAX_QUEUED:
            self.dropped += 1
            last = self._queue[-1]
            if isinstance(last, _Dropped):
                last.count += 1
            else:
                self._queue.append(_Dropped())  # one over the bound at most: the count itself
            return
        name = logger_name(self._tool, record.logger)
        self._queue.append({"level": LEVELS[level], "logger": name, "data": record.message})
        self._wake.set()

    def close(self) -> None:
        """The call ended: send what is queued, then stop."""
        self._closed = True
        self._wake.set()

    async def pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._queue:
                item = self._queue.popleft()
                if isinstance(item, _Dropped):
                    text = f"{item.count} log records of {self._tool} dropped: the client reads slower than it logs"
                    item_params: dict[str, Any] = {"level": "warning", "logger": OWN_LOGGER, "data": text}
                else:
                    item_params = item
                await self._send(item_params)
                self.sent += 1
            if self._closed:
                return
