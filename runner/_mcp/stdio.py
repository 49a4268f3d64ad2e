"""``xcsh-run serve`` over stdio: one :class:`McpSession` on this process's stdin and stdout.

The MCP stdio transport: UTF-8 JSON-RPC 2.0, one message per line, nothing but
protocol on stdout (``line_transport`` reads and writes the lines). The
server owns its :class:`ToolServer`; the session is the only one it has.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

import trio

from xcsh_run._config import DEFAULT_MAX_MESSAGE_BYTES
from xcsh_run._errors import ConfigError
from xcsh_run._mcp.line_transport import FLUSH_TIMEOUT, LineTransport, take_over_stdio
from xcsh_run._mcp.server import ToolServer, configure_logging
from xcsh_run._mcp.session import McpSession


class McpServer(McpSession):
    """The stdio server: one session, on a pair of trio streams, with a :class:`ToolServer` of its own.

    Takes the options of :class:`ToolServer`, and ``max_message_bytes``: the
    longest line accepted; longer ones get -32600.
    """

    def __init__(
        self, tool_paths: Sequence[str] = (), *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, **options: Any
    ) -> None:
        if max_message_bytes < 1024:
            raise ConfigError(f"max_message_bytes must be at least 1024, got {max_message_bytes}")
        self._transport = LineTransport(
            max_message_bytes=max_message_bytes, on_message=self._on_message, on_broken=self._on_broken
        )
        super().__init__(ToolServer(tool_paths, **options), _LineOutbox(self._transport))

    @property
    def stopped_by(self) -> signal.Signals | None:
        """The signal that stopped :meth:`serve`, if one did."""
        return self._server.stopped_by

    async def serve(
        self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream, *, handle_signals: bool = False
    ) -> None:
        """Serve until ``receive`` ends (or a signal, or a broken ``send``); then stop every call.

        With ``handle_signals``, SIGTERM and SIGINT stop the server the same
        way (and set :attr:`stopped_by`). Returns only once every worker of
        every runner is gone.
        """
        async with trio.open_nursery() as io:
            writer_scope = trio.CancelScope()
            io.start_soon(self._write, send, writer_scope)

            async def read(_: trio.Nursery) -> None:
                await self._transport.read(receive)

            await self._server.run(read, ended="stdin closed", handle_signals=handle_signals)
            self.close()
            # What is queued still goes out, for a bounded time; then the writer stops.
            self._transport.close()
            writer_scope.deadline = trio.current_time() + FLUSH_TIMEOUT

    async def _write(self, send: trio.abc.SendStream, scope: trio.CancelScope) -> None:
        with scope:
            await self._transport.run_writer(send)

    def _on_broken(self, why: str) -> None:
        self._server.stop(why)


class _LineOutbox:
    """Every message of the stdio session goes to the one output stream, in order."""

    __slots__ = ("_transport",)
    carries_requests = True

    def __init__(self, transport: LineTransport) -> None:
        self._transport = transport

    async def send(self, data: bytes) -> None:
        await self._transport.send(data)

    def end(self) -> None:
        pass  # the stream ends with the server, not with a request


async def serve_stdio(tool_paths: Sequence[str] = (), **options: Any) -> int:
    """Serve MCP on this process's stdin/stdout until stdin ends; returns the exit status.

    ``options`` are :class:`McpServer`'s. Takes fds 0 and 1 over for the rest of the process (see
    :func:`take_over_stdio`); logs go to stderr. Returns 0 after stdin EOF,
    128 + the signal number after SIGTERM or SIGINT; either way only once no
    worker is left.
    """
    server = McpServer(tool_paths, **options)
    configure_logging()
    protocol_in, protocol_out = take_over_stdio()
    async with trio.lowlevel.FdStream(protocol_in) as receive, trio.lowlevel.FdStream(protocol_out) as send:
        await server.serve(receive, send, handle_signals=True)
    return 0 if server.stopped_by is None else 128 + int(server.stopped_by)
