"""``xcsh-run serve`` over stdio: one :class:`McpSession` on this process's stdin and stdout.

The MCP stdio transport: UTF-8 JSON-RPC 2.0, one message per line, nothing but
protocol on stdout (``line_transport`` reads and writes the lines). The
server owns its :class:`ToolServer`; the session is the only one it has.

Rules:

1. The client's first request decides the connection's era, once, as in the
   official SDK: a request other than ``initialize`` whose ``_meta`` names
   its protocol revision (the 2026-07-28 envelope) makes the connection a
   stateless one; anything else makes it a handshake session, served here.
2. A stateless connection is the SDK's (``stateless``): every message read
   from then on goes to its serving loop through a bounded queue, and what it
   sends goes out through the same line writer. The lines are still read and
   bounded here, and input that holds no message is still answered here, with
   the id recovered when it can be (a batch too: the revision has none).
3. At the end of stdin the SDK's loop ends, which cancels the requests in
   flight: their calls stop through the ladder, as a handshake session's do.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from xcsh_run._config import DEFAULT_MAX_MESSAGE_BYTES
from xcsh_run._errors import ConfigError
from xcsh_run._mcp.line_transport import FLUSH_TIMEOUT, LineTransport, error_line, take_over_stdio
from xcsh_run._mcp.server import Outbox, ToolServer, configure_logging
from xcsh_run._mcp.session import McpSession
from xcsh_run._mcp.wire import Batch, Incoming, Malformed
from xcsh_run.worker.protocol import ErrorCode, Notification, Request

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

logger = logging.getLogger("xcsh_run.mcp")

# The 2026-07-28 envelope's key (mcp_types.PROTOCOL_VERSION_META_KEY), read before the SDK is imported.
_MODERN_KEY: Final = "io.modelcontextprotocol/protocolVersion"
# Messages read and not yet taken by the SDK's loop (rule 2); past it, a request is refused.
_TO_SDK: Final = 256


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
        self._era: str | None = None  # "handshake" or "stateless", from the first request (rule 1)
        self._to_sdk: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self._io: trio.Nursery | None = None
        self._sdk_writer = trio.CancelScope()  # bounded at the end like the line writer

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
            self._io = io
            writer_scope = trio.CancelScope()
            io.start_soon(self._write, send, writer_scope)

            async def read(_: trio.Nursery) -> None:
                try:
                    await self._transport.read(receive)
                finally:
                    if self._to_sdk is not None:
                        self._to_sdk.close()  # rule 3: the SDK's loop ends, and cancels what is in flight

            await self._server.run(read, ended="stdin closed", handle_signals=handle_signals)
            self.close()
            # What is queued still goes out, for a bounded time; then the writer stops.
            self._transport.close()
            writer_scope.deadline = self._sdk_writer.deadline = trio.current_time() + FLUSH_TIMEOUT

    async def _write(self, send: trio.abc.SendStream, scope: trio.CancelScope) -> None:
        with scope:
            await self._transport.run_writer(send)

    def _on_broken(self, why: str) -> None:
        self._server.stop(why)

    # --- the era (rules 1 and 2) -----------------------------------------------------

    def _on_message(self, item: Incoming, reply: Outbox | None = None) -> None:
        if self._era is None and isinstance(item, Request):
            self._era = "stateless" if _opens_stateless(item) else "handshake"
            if self._era == "stateless":
                self._start_stateless()
        if self._era != "stateless":
            super()._on_message(item, reply)
            return
        if isinstance(item, Malformed | Batch):
            why = item.message if isinstance(item, Malformed) else "batches are not part of protocol 2026-07-28"
            code = item.code if isinstance(item, Malformed) else ErrorCode.INVALID_REQUEST
            self._server.start_request(lambda: self._transport.send(error_line(getattr(item, "id", None), code, why)))
            return
        if not isinstance(item, Request | Notification):
            return  # an answer: the stateless era has no requests of the server's to answer
        self._to_stateless(item)

    def _start_stateless(self) -> None:
        # Imported here: only a stateless client makes a stdio server load the SDK.
        import anyio
        from mcp.shared.message import SessionMessage

        from xcsh_run._mcp.stateless import StatelessServer

        stateless = StatelessServer(self._server, self._server.runners.poll_interval)
        self._to_sdk, from_client = anyio.create_memory_object_stream[SessionMessage | Exception](_TO_SDK)
        to_client, from_sdk = anyio.create_memory_object_stream[SessionMessage](0)

        async def serve() -> None:
            sdk = stateless.sdk
            await sdk.run(from_client, to_client, sdk.create_initialization_options())

        async def write() -> None:
            with self._sdk_writer, from_sdk:
                async for message in from_sdk:
                    line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await self._transport.send(line.encode() + b"\n")

        assert self._io is not None
        self._server.start_request(serve)
        self._io.start_soon(write)
        logger.info("a 2026-07-28 client: the stateless era, served by the MCP SDK")

    def _to_stateless(self, item: Request | Notification) -> None:
        import mcp_types
        from mcp.shared.message import SessionMessage

        assert self._to_sdk is not None
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": item.method, "params": msgspec.json.decode(item.params)}
        if isinstance(item, Request):
            body["id"] = item.id
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_python(body, by_name=False)
            self._to_sdk.send_nowait(SessionMessage(message))
        except Exception as exc:
            if isinstance(item, Request):
                why = f"the request could not be taken ({type(exc).__name__}); send it again"
                line = error_line(item.id, ErrorCode.INTERNAL_ERROR, why)
                self._server.start_request(lambda: self._transport.send(line))


def _opens_stateless(request: Request) -> bool:
    """Rule 1: a first request other than ``initialize`` that carries the 2026-07-28 envelope."""
    if request.method == "initialize":
        return False
    try:
        params = msgspec.json.decode(request.params)
    except msgspec.DecodeError:
        return False
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get(_MODERN_KEY), str)


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
