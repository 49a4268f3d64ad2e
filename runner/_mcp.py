"""``xcsh-run serve``: every discovered tool behind the Model Context Protocol, over stdio.

A small MCP server written directly on trio (the official SDK's server is
asyncio/anyio and pydantic based, and would drag both into the host). The wire
is the MCP stdio transport: UTF-8 JSON-RPC 2.0, one message per line, nothing
but protocol on stdout.

What is mapped how:

- ``initialize`` negotiates the newest handshake-era revision
  (:data:`LATEST_PROTOCOL_VERSION`), or echoes an older one the client asks
  for; capabilities are ``{"tools": {"listChanged": true}}``. ``server/discover``
  (the stateless 2026-07-28 era) is answered "method not found", which is what
  makes the SDK's ``mode="auto"`` clients fall back to ``initialize``.
- ``tools/list``: every tool that is not ``hidden``: ``name``, ``title`` (the
  label), ``description``, ``inputSchema`` (the JSON Schema).
- ``tools/call``: one :meth:`Runner.call_tool`. Every failure, whatever its
  kind (not_found included, so a model can read "did you mean ..."), is an
  ``isError: true`` result; the kind and its evidence are in
  ``_meta["xcsh-run/error"]`` and (2025-06-18 and later) in
  ``structuredContent.error``. ``details`` travel in ``_meta["xcsh-run/details"]``.
- ``on_update`` partials become ``notifications/progress`` (a counter, and the
  partial's text as ``message``) when the request carried ``_meta.progressToken``.
- ``notifications/cancelled`` goes through :meth:`Runner.cancel` (the ladder);
  per the spec the cancelled request gets no response at all.
- The candidate tool files are polled for changes; a change loads a new
  runner, swaps it in (calls in flight finish on the old one) and sends
  ``notifications/tools/list_changed`` when the listing changed.
- Malformed lines get JSON-RPC errors (-32700, -32600, -32601, -32602) and the
  server keeps serving. Requests run concurrently, each in its own task.
- stdin EOF (or SIGTERM/SIGINT) stops every call through the ladder, closes
  the runners and returns once no worker is left.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeGuard

import msgspec
import trio

from ._discovery import discover_custom_tool_paths
from ._errors import ConfigError
from ._host import DEFAULT_GRACE, DEFAULT_LOAD_TIMEOUT, Runner, ToolInfo, open_runner
from ._results import ErrorKind, ToolResult, error_result
from ._sandbox import SandboxPolicy

logger = logging.getLogger("xcsh_run.mcp")

# The newest revision reachable through the initialize handshake, as in the
# official SDK (mcp_types.version.LATEST_HANDSHAKE_VERSION). The SDK's overall
# LATEST_PROTOCOL_VERSION, 2026-07-28, is the stateless era: no initialize, a
# per-request `_meta` envelope and server/discover; it is not served here.
LATEST_PROTOCOL_VERSION: Final = "2025-11-25"
# Newest first. A client asking for one of these gets it back; any other
# request is answered with the latest, and the client decides (lifecycle spec).
SUPPORTED_PROTOCOL_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
# Tool `title` and result `structuredContent` appeared in 2025-06-18; older
# clients get neither. Revisions are date strings and sort as such.
_TITLE_SINCE: Final = "2025-06-18"

DEFAULT_MAX_MESSAGE_BYTES: Final = 16 * 2**20
DEFAULT_POLL_INTERVAL: Final = 1.0

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

META_DETAILS: Final = "xcsh-run/details"
META_ERROR: Final = "xcsh-run/error"

_READ_CHUNK: Final = 65536
# Outgoing messages wait here for the writer task; a full queue makes senders
# wait (backpressure from a client that reads slowly) instead of growing.
_OUT_QUEUE: Final = 64
# How long queued messages may take to drain at shutdown before we give up
# on a client that stopped reading.
_FLUSH_TIMEOUT: Final = 2.0
# Progress messages are for a status line: bounded so that one update cannot
# produce a huge notification.
_MAX_PROGRESS_MESSAGE: Final = 16384
# The file poll looks at most at this many files inside package folders.
_MAX_WATCHED_FILES: Final = 2000
# Bulky evidence stays out of structuredContent, which some clients show to
# the model instead of the content blocks; it is all in _meta.
_BULKY_EVIDENCE: Final = frozenset({"stderr_tail", "traceback"})

# The id of an oversized message, read from its first bytes when it leads the
# object (`{"jsonrpc":"2.0","id":..`, the order the SDKs write): answering with
# the id lets the client fail that request instead of waiting forever.
_LEADING_ID: Final = re.compile(
    rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?'  # `{` and perhaps "jsonrpc" first
    rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*[,}]'  # then the id: an integer or a string
)

RequestId = str | int
_encoder = msgspec.json.Encoder()
_call_numbers = itertools.count(1)


class _RpcError(Exception):
    """A JSON-RPC error answer to the request being handled."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


def _valid_id(value: object) -> TypeGuard[RequestId]:
    # MCP: a request id is a string or an integer, never null; bool is not an
    # integer on the wire even though Python says so.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _error(request_id: RequestId | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def _input_schema(parameters: Mapping[str, Any]) -> dict[str, Any] | None:
    """The tool's schema as an MCP ``inputSchema`` (whose root must be ``type: object``).

    Arguments are always a JSON object, so a schema without a root type gets
    ``"object"``; one whose root can never be an object cannot be called and
    is not listed (None).
    """
    schema = dict(parameters)
    kind = schema.get("type")
    if kind is None or (isinstance(kind, list) and "object" in kind):
        schema["type"] = "object"
    elif kind != "object":
        return None
    return schema


def _render_tools(tools: Sequence[ToolInfo], version: str) -> list[dict[str, Any]]:
    rendered = []
    for tool in tools:
        if tool.hidden:
            continue
        schema = _input_schema(tool.parameters)
        if schema is None:
            logger.warning("tool %r is not listed: its parameters schema does not describe an object", tool.name)
            continue
        entry: dict[str, Any] = {"name": tool.name}
        if version >= _TITLE_SINCE and tool.label:
            entry["title"] = tool.label
        entry["description"] = tool.description
        entry["inputSchema"] = schema
        rendered.append(entry)
    return rendered


def _render_result(result: ToolResult, version: str) -> dict[str, Any]:
    out: dict[str, Any] = {"content": result.content, "isError": result.is_error}
    meta: dict[str, Any] = {}
    if result.details is not None:
        meta[META_DETAILS] = result.details
    if result.error is not None:
        error: dict[str, Any] = msgspec.to_builtins(result.error)
        meta[META_ERROR] = error
        if version >= _TITLE_SINCE:
            out["structuredContent"] = {"error": {k: v for k, v in error.items() if k not in _BULKY_EVIDENCE}}
    if meta:
        out["_meta"] = meta
    return out


def _partial_text(partial: Mapping[str, Any]) -> str:
    content = partial.get("content")
    if not isinstance(content, list):
        return ""
    texts = [
        b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return "\n".join(texts)[:_MAX_PROGRESS_MESSAGE]


class _Request:
    """One request in flight: what a ``notifications/cancelled`` needs to stop it."""

    __slots__ = ("id", "method", "params", "cancelled", "scope", "runner", "call_id")

    def __init__(self, request_id: RequestId, method: str, params: dict[str, Any]) -> None:
        self.id = request_id
        self.method = method
        self.params = params
        self.cancelled = False
        self.scope: trio.CancelScope | None = None
        self.runner: Runner | None = None
        self.call_id: str | None = None


class _Generation:
    """One loaded runner. A reload retires it: it closes once its calls end, then a new one loads."""

    __slots__ = ("runner", "calls", "retired", "done", "closed")

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.calls = 0
        self.retired = False
        self.done = trio.Event()  # set once retired with no call left: the runner may close
        self.closed = trio.Event()  # set once the runner is closed and its workers are gone

    def release(self) -> None:
        self.calls -= 1
        if self.retired and self.calls == 0:
            self.done.set()

    def retire(self) -> None:
        self.retired = True
        if self.calls == 0:
            self.done.set()


class _Progress:
    """Turns one call's ``on_update`` partials into ``notifications/progress``.

    ``on_update`` runs synchronously on the host's loop and must not block, so
    it only records the latest partial; a pump task writes it. When the client
    reads slower than a tool updates, intermediate partials are coalesced
    (the counter still increases, and the last one is always sent), so memory
    stays bounded whatever the tool does.
    """

    def __init__(self, token: RequestId, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self._token = token
        self._send = send
        self._count = 0
        self._pending: tuple[int, str] | None = None
        self._wake = trio.Event()
        self._closed = False

    def update(self, partial: dict[str, Any]) -> None:
        self._count += 1
        self._pending = (self._count, _partial_text(partial))
        self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    async def pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            item, self._pending = self._pending, None
            if item is not None:
                count, text = item
                params: dict[str, Any] = {"progressToken": self._token, "progress": count}
                if text:
                    params["message"] = text
                await self._send(_notification("notifications/progress", params))
            if self._closed and self._pending is None:
                return


class McpServer:
    """Serves the tools of ``tool_paths`` (and ``<cwd>/.xcsh/tools``) on a pair of trio streams.

    Args:
        tool_paths: tool files or folders, like the CLI's ``--tools``.
        cwd: the working directory tools see; default: the current one.
        timeout: seconds per call, overriding the tools' own; None keeps them.
        grace: seconds between SIGTERM and the tree kill in the ladder.
        load_timeout: seconds a module may take to load.
        max_message_bytes: the longest line accepted; longer ones get -32600.
        poll_interval: seconds between checks of the tool files for changes.
    """

    def __init__(
        self,
        tool_paths: Sequence[str] = (),
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        grace: float = DEFAULT_GRACE,
        load_timeout: float = DEFAULT_LOAD_TIMEOUT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        sandbox: SandboxPolicy | None = None,
    ) -> None:
        for label, value in (("timeout", timeout), ("poll_interval", poll_interval)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"{label} must be a positive number of seconds, got {value!r}")
        if max_message_bytes < 1024:
            raise ConfigError(f"max_message_bytes must be at least 1024, got {max_message_bytes}")
        self._paths = list(tool_paths)
        self._cwd = os.path.abspath(cwd if cwd is not None else os.getcwd())
        self._timeout = timeout
        self._grace = grace
        self._load_timeout = load_timeout
        self._max_message = max_message_bytes
        self._poll_interval = poll_interval
        self._sandbox = sandbox
        self._version = LATEST_PROTOCOL_VERSION
        self._initialized = False
        self._inflight: dict[RequestId, _Request] = {}
        self._generations: set[_Generation] = set()
        # The runner calls go to; None while (re)loading, or after a failed load.
        self._current: _Generation | None = None
        self._ready = trio.Event()  # set while `_current` is settled (loaded, or failed)
        self._load_failure: str | None = None
        # What tools/list shows: the last tools loaded. A reload does not make
        # it wait, only calls do.
        self._tools: list[ToolInfo] | None = None
        self._first_load = trio.Event()
        self._out: trio.MemorySendChannel[bytes] | None = None
        self._requests: trio.Nursery | None = None
        self._outer: trio.Nursery | None = None
        self._read_scope = trio.CancelScope()
        self._loader_scope = trio.CancelScope()
        self._closing: str | None = None  # why the server is stopping, once it is
        self.stopped_by: signal.Signals | None = None

    # --- lifecycle -------------------------------------------------------------

    async def serve(
        self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream, *, handle_signals: bool = False
    ) -> None:
        """Serve until ``receive`` ends (or a signal, or a broken ``send``); then stop every call.

        Returns only once every worker of every runner is gone.
        """
        out_send, out_receive = trio.open_memory_channel[bytes](_OUT_QUEUE)
        self._out = out_send
        async with trio.open_nursery() as outer:
            self._outer = outer
            writer_scope = trio.CancelScope()
            outer.start_soon(self._writer, send, out_receive, writer_scope)
            loader_scope, signals_scope = self._loader_scope, trio.CancelScope()
            outer.start_soon(self._keep_runner, loader_scope)
            if handle_signals:
                outer.start_soon(self._watch_signals, signals_scope)
            async with trio.open_nursery() as requests:
                self._requests = requests
                with self._read_scope:
                    await self._read_loop(receive)
                    self._closing = "stdin closed"
                self._wind_down(requests)
            loader_scope.cancel()
            signals_scope.cancel()
            for generation in list(self._generations):
                generation.retire()
            # What is queued still goes out, for a bounded time; then the writer stops.
            out_send.close()
            writer_scope.deadline = trio.current_time() + _FLUSH_TIMEOUT

    def _stop(self, why: str) -> None:
        if self._closing is None:
            self._closing = why
            logger.info("stopping: %s", why)
        self._read_scope.cancel()

    def _wind_down(self, requests: trio.Nursery) -> None:
        """Stop taking work: calls in flight go through the ladder, the rest finish.

        A call stopped here is not one the client cancelled, so its
        ``cancelled`` result is still sent (a client that reads stdout to EOF
        learns why). Quick requests (ping, tools/list) are answered. Everything
        is bounded: what is still running after the ladder and a load's time
        is cancelled outright.
        """
        logger.info("stopping: %s; %d request(s) in flight", self._closing, len(self._inflight))
        # No more (re)loads; requests waiting for one are let through, to
        # find `_closing` set.
        self._loader_scope.cancel()
        self._ready.set()
        self._first_load.set()
        why = f"the MCP server is shutting down: {self._closing}"
        for request in list(self._inflight.values()):
            if request.runner is not None and request.call_id is not None:
                request.runner.cancel(request.call_id, why)
        requests.cancel_scope.deadline = trio.current_time() + self._grace + self._load_timeout + 2.0

    async def _watch_signals(self, scope: trio.CancelScope) -> None:
        with scope, trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.stopped_by = signal.Signals(signum)
                self._stop(f"received {self.stopped_by.name}")

    # --- output ----------------------------------------------------------------

    async def _writer(
        self, stream: trio.abc.SendStream, queue: trio.MemoryReceiveChannel[bytes], scope: trio.CancelScope
    ) -> None:
        # The only task that writes to the protocol stream: a message is never
        # interleaved with another, and a cancelled sender cannot leave half a
        # line behind (it only ever cancels its enqueueing, which is atomic).
        with scope:
            broken = False
            async for data in queue:
                if broken:
                    continue  # keep draining so that senders never block on a dead client
                try:
                    await stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    broken = True
                    self._stop(f"stdout is closed ({exc!r})")

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._out is not None
        try:
            data = _encoder.encode(message) + b"\n"
        except (TypeError, msgspec.EncodeError) as exc:  # pragma: no cover - every value came from JSON
            logger.error("cannot encode a message (%s); sending an internal error instead", exc)
            data = _encoder.encode(_error(message.get("id"), INTERNAL_ERROR, f"unencodable message: {exc}")) + b"\n"
        try:
            await self._out.send(data)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # shutting down: nobody is listening any more

    def _send_soon(self, message: dict[str, Any]) -> None:
        assert self._requests is not None
        self._requests.start_soon(self._send, message)

    # --- input -----------------------------------------------------------------

    async def _read_loop(self, stream: trio.abc.ReceiveStream) -> None:
        """Split the input into lines, each bounded by ``max_message_bytes``."""
        buffer = bytearray()
        oversized: int | None = None  # bytes of the current too-long line, once it is too long
        head = b""  # its first bytes, for the id
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
                else:
                    buffer += chunk[start:end]
                    if len(buffer) > self._max_message:
                        oversized, head = len(buffer), bytes(buffer[:1024])
                        buffer.clear()
                if newline < 0:
                    break
                start = newline + 1
                if oversized is not None:
                    self._reject_oversized(head, oversized)
                    oversized, head = None, b""
                else:
                    self._dispatch_line(bytes(buffer))
                    buffer.clear()
        # A last line without its newline still counts (lenient at EOF).
        if oversized is not None:
            self._reject_oversized(head, oversized)
        elif buffer.strip():
            self._dispatch_line(bytes(buffer))

    def _reject_oversized(self, head: bytes, size: int) -> None:
        request_id: RequestId | None = None
        if (match := _LEADING_ID.match(head)) is not None:
            try:
                value = msgspec.json.decode(match.group(1))
            except msgspec.DecodeError:
                value = None
            if _valid_id(value):
                request_id = value
        logger.warning("rejected a message of %d bytes (limit %d bytes)", size, self._max_message)
        self._send_soon(
            _error(
                request_id,
                INVALID_REQUEST,
                f"message too large: {size} bytes; the limit is {self._max_message} bytes (--max-message-bytes)",
            )
        )

    def _dispatch_line(self, line: bytes) -> None:
        """Classify one line and act on it. Runs in the read loop, so it never blocks."""
        line = line.strip()
        if not line:
            return
        try:
            message = msgspec.json.decode(line)
        except (msgspec.DecodeError, RecursionError) as exc:
            # msgspec raises RecursionError (not DecodeError) for deep nesting like `[[[[...`.
            self._send_soon(_error(None, PARSE_ERROR, f"parse error: {exc}"))
            return
        if not isinstance(message, dict):
            what = "batches are not supported" if isinstance(message, list) else f"got a JSON {type(message).__name__}"
            self._send_soon(_error(None, INVALID_REQUEST, f"invalid request: a message is one JSON object; {what}"))
            return
        raw_id = message.get("id")
        request_id = raw_id if _valid_id(raw_id) else None
        method = message.get("method")
        if message.get("jsonrpc") != "2.0":
            # Not a JSON-RPC 2.0 message at all, so not a notification either: answered.
            self._send_soon(_error(request_id, INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"'))
            return
        if method is None:
            if "result" in message or "error" in message:
                # A response; this server sends no requests, so it answers nothing.
                logger.debug("ignored a response (id %r): the server sent no request", raw_id)
                return
            self._send_soon(_error(request_id, INVALID_REQUEST, 'invalid request: no "method"'))
            return
        if not isinstance(method, str):
            self._send_soon(_error(request_id, INVALID_REQUEST, 'invalid request: "method" must be a string'))
            return
        params = message.get("params")
        if "id" not in message:
            self._on_notification(method, params)
            return
        if request_id is None:
            self._send_soon(
                _error(None, INVALID_REQUEST, f'invalid request: "id" must be a string or an integer, got {raw_id!r}')
            )
            return
        if params is None:
            params = {}
        if not isinstance(params, dict):
            self._send_soon(
                _error(request_id, INVALID_PARAMS, f'invalid params: "params" of {method} must be an object')
            )
            return
        if request_id in self._inflight:
            self._send_soon(
                _error(
                    request_id,
                    INVALID_REQUEST,
                    f"invalid request: id {request_id!r} is already in use by a request in flight",
                )
            )
            return
        request = _Request(request_id, method, params)
        # Registered before its task starts, so a cancellation that follows on
        # the next line always finds it.
        self._inflight[request_id] = request
        assert self._requests is not None
        self._requests.start_soon(self._handle, request)

    def _on_notification(self, method: str, params: object) -> None:
        # Notifications are never answered, not even when malformed.
        if method == "notifications/initialized":
            self._initialized = True
        elif method == "notifications/cancelled":
            if isinstance(params, dict):
                self._cancel(params.get("requestId"), params.get("reason"))
        else:
            logger.debug("ignored notification %s", method)

    def _cancel(self, request_id: object, reason: object) -> None:
        if not _valid_id(request_id):
            return
        request = self._inflight.get(request_id)
        # Unknown or finished requests are ignored (the response may already
        # be on its way); initialize MUST NOT be cancelled.
        if request is None or request.method == "initialize":
            return
        why = reason if isinstance(reason, str) and reason else "cancelled by the MCP client"
        request.cancelled = True
        logger.info("request %r (%s) cancelled: %s", request_id, request.method, why)
        if request.runner is not None and request.call_id is not None and request.runner.cancel(request.call_id, why):
            return  # the call ends through the ladder with a `cancelled` result, which is not sent
        if request.scope is not None:
            request.scope.cancel()

    # --- requests ----------------------------------------------------------------

    async def _handle(self, request: _Request) -> None:
        response: dict[str, Any] | None = None
        try:
            with trio.CancelScope() as scope:
                request.scope = scope
                if request.cancelled:
                    scope.cancel()
                try:
                    result = await self._route(request)
                    response = {"jsonrpc": "2.0", "id": request.id, "result": result}
                except _RpcError as exc:
                    response = _error(request.id, exc.code, str(exc))
                except Exception as exc:
                    logger.exception("request %r (%s) failed", request.id, request.method)
                    response = _error(request.id, INTERNAL_ERROR, f"internal error: {exc!r}")
        finally:
            self._inflight.pop(request.id, None)
        if request.cancelled:
            # The spec: the receiver of a cancellation does not answer the request.
            logger.info("request %r (%s) ended after its cancellation; no response sent", request.id, request.method)
            return
        assert response is not None
        await self._send(response)

    async def _route(self, request: _Request) -> dict[str, Any]:
        method = request.method
        if method == "initialize":
            return self._initialize(request.params)
        if method == "ping":
            return {}
        if method == "tools/list":
            return await self._tools_list(request.params)
        if method == "tools/call":
            return await self._tools_call(request)
        # server/discover lands here on purpose: "method not found" is how a
        # 2026-07-28 client learns to fall back to the initialize handshake.
        raise _RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        from ._version import __version__

        asked = params.get("protocolVersion")
        if not isinstance(asked, str):
            raise _RpcError(INVALID_PARAMS, "invalid params: initialize needs params.protocolVersion, a string")
        self._version = asked if asked in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
        client = params.get("clientInfo")
        logger.info(
            "initialize from %s: asked for %s, speaking %s",
            client.get("name", "?") if isinstance(client, dict) else "?",
            asked,
            self._version,
        )
        return {
            "protocolVersion": self._version,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "xcsh-run", "version": __version__},
            "instructions": "Tools run in isolated worker processes; errors come back as isError results "
            f"with their kind in _meta[{META_ERROR!r}].",
        }

    async def _generation(self) -> _Generation | None:
        """The runner to call, once (re)loaded; None if the last load failed or the server is stopping."""
        while self._closing is None:
            await self._ready.wait()
            # Re-checked after the wait: a reload may have begun in between.
            # The caller counts its call without a checkpoint after this.
            if self._ready.is_set() and (self._current is None or not self._current.retired):
                return self._current
        return None

    async def _tools_list(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("cursor") is not None:
            raise _RpcError(INVALID_PARAMS, "invalid params: unknown cursor (tools/list is never paginated here)")
        await self._first_load.wait()  # the first load runs in the background
        return {"tools": _render_tools(self._tools or [], self._version)}

    async def _tools_call(self, request: _Request) -> dict[str, Any]:
        params = request.params
        name = params.get("name")
        if not isinstance(name, str):
            raise _RpcError(INVALID_PARAMS, 'invalid params: tools/call needs "name", a string')
        arguments = params.get("arguments")
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        generation = await self._generation()
        # No checkpoint from here to call_tool's registration of the call id,
        # so a cancellation (or the wind-down) either finds the call in the
        # runner or finds `request.cancelled` / `_closing` already set.
        if self._closing is not None:
            message = f"{name!r} was not started: the MCP server is shutting down ({self._closing})"
            return _render_result(error_result(ErrorKind.CANCELLED, message), self._version)
        if generation is None:
            message = f"{name!r} was not started: the tools could not be loaded ({self._load_failure})"
            return _render_result(error_result(ErrorKind.LOAD_ERROR, message), self._version)
        call_id = f"mcp-{next(_call_numbers)}"
        request.runner, request.call_id = generation.runner, call_id
        generation.calls += 1
        try:
            async with trio.open_nursery() as nursery:
                progress = _Progress(token, self._send) if _valid_id(token) else None
                if progress is not None:
                    nursery.start_soon(progress.pump)
                try:
                    result = await generation.runner.call_tool(
                        name,
                        arguments,
                        on_update=progress.update if progress is not None else None,
                        timeout=self._timeout,
                        tool_call_id=call_id,
                    )
                finally:
                    # The pump flushes the last partial, then the nursery lets
                    # the response go: progress always precedes the result.
                    if progress is not None:
                        progress.close()
        finally:
            generation.release()
        if result.is_error:
            logger.info("tools/call %s (request %r): %s", name, request.id, result.kind)
        return _render_result(result, self._version)

    # --- runners and reloads ------------------------------------------------------

    async def _run_generation(self, *, task_status: trio.TaskStatus[_Generation] = trio.TASK_STATUS_IGNORED) -> None:
        generation: _Generation | None = None
        try:
            async with open_runner(
                self._paths, cwd=self._cwd, grace=self._grace, load_timeout=self._load_timeout, sandbox=self._sandbox
            ) as runner:
                generation = _Generation(runner)
                self._generations.add(generation)
                for error in runner.errors:
                    logger.warning("not loaded: %s: %s", error.path, error.message)
                task_status.started(generation)
                await generation.done.wait()
        finally:
            if generation is not None:
                self._generations.discard(generation)
                generation.closed.set()

    async def _load(self) -> bool:
        """Open a runner as the current generation; on failure, calls get a load_error result."""
        assert self._outer is not None
        try:
            self._current = await self._outer.start(self._run_generation)
            self._load_failure = None
        except Exception as exc:
            logger.error("loading the tools failed: %r", exc, exc_info=True)
            self._current, self._load_failure = None, repr(exc)
        self._ready.set()
        self._tools = self._current.runner.tools if self._current is not None else []
        self._first_load.set()
        return self._current is not None

    async def _keep_runner(self, scope: trio.CancelScope) -> None:
        """Load the tools, then reload them whenever the candidate files change.

        Only one runner exists at a time: runners in one process share its
        per-pid cgroup root (``xcsh-run.<pid>``, see ``_boundary``), so a
        second one would collide on its worker cgroups and closing either would
        kill both's workers. A reload therefore makes new calls wait, lets the
        calls in flight finish (each is bounded by its timeout), closes the
        old runner, and opens the new one. tools/list keeps answering from the
        last tools loaded meanwhile.
        """
        with scope:
            # Taken before loading, so that a change during the load reloads again.
            fingerprint: tuple[object, ...] | None
            fingerprint = await trio.to_thread.run_sync(self._fingerprint, abandon_on_cancel=True)
            if not await self._load():
                fingerprint = None  # retry at the next poll
            while True:
                await trio.sleep(self._poll_interval)
                now = await trio.to_thread.run_sync(self._fingerprint, abandon_on_cancel=True)
                if now == fingerprint:
                    continue
                fingerprint = now
                logger.info("tool files changed; reloading")
                before = _render_tools(self._tools or [], self._version)
                self._ready = trio.Event()  # new calls wait for the new runner
                old = self._current
                if old is not None:
                    old.retire()
                    await old.closed.wait()
                if not await self._load():
                    fingerprint = None
                after = _render_tools(self._tools or [], self._version)
                if before != after and self._initialized:
                    await self._send(_notification("notifications/tools/list_changed"))

    def _fingerprint(self) -> tuple[object, ...]:
        """What the poll compares: the candidate files and their stat, plus packages' .py files."""
        entries: list[object] = []
        try:
            candidates = discover_custom_tool_paths(self._paths, self._cwd)
        except OSError as exc:
            return (("error", str(exc)),)
        watched = 0
        for candidate in candidates:
            entries.append((candidate.resolved, _stat_key(candidate.resolved)))
            if not os.path.isdir(candidate.resolved):
                continue
            for root, dirs, files in os.walk(candidate.resolved):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(".py") and watched < _MAX_WATCHED_FILES:
                        path = os.path.join(root, name)
                        entries.append((path, _stat_key(path)))
                        watched += 1
        return tuple(entries)


def _stat_key(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _take_over_stdio() -> tuple[int, int]:
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


def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="xcsh-run serve: %(message)s")
    logging.getLogger("xcsh_run").setLevel(logging.INFO)


async def serve_stdio(
    tool_paths: Sequence[str] = (),
    *,
    cwd: str | None = None,
    timeout: float | None = None,
    grace: float = DEFAULT_GRACE,
    load_timeout: float = DEFAULT_LOAD_TIMEOUT,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    sandbox: SandboxPolicy | None = None,
) -> int:
    """Serve MCP on this process's stdin/stdout until stdin ends; returns the exit status.

    Takes fds 0 and 1 over for the rest of the process (see
    :func:`_take_over_stdio`); logs go to stderr. Returns 0 after stdin EOF,
    128 + the signal number after SIGTERM or SIGINT; either way only once no
    worker is left.
    """
    server = McpServer(
        tool_paths,
        cwd=cwd,
        timeout=timeout,
        grace=grace,
        load_timeout=load_timeout,
        max_message_bytes=max_message_bytes,
        poll_interval=poll_interval,
        sandbox=sandbox,
    )
    _configure_logging()
    protocol_in, protocol_out = _take_over_stdio()
    async with trio.lowlevel.FdStream(protocol_in) as receive, trio.lowlevel.FdStream(protocol_out) as send:
        await server.serve(receive, send, handle_signals=True)
    return 0 if server.stopped_by is None else 128 + int(server.stopped_by)
