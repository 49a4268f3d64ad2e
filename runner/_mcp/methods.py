"""The MCP methods this server serves: a method table for the shared sans-io ``Connection``.

The same :class:`~xcsh_run.worker.protocol.methods.Method` / ``Notice`` / ``MethodTable`` types
as the worker protocol, so that request ids, answering each request exactly
once, duplicate ids, unknown methods, params that are not an object and the
lifecycle are kept by one :class:`~xcsh_run.worker.protocol.connection.Connection`, not written
again here. Params and results are plain JSON objects (``dict[str, Any]``);
ids from the client are strings or integers.

The client plays ``Role.HOST`` (it sends ``initialize``), the server
``Role.WORKER``; the server's one request is ``elicitation/create`` (a tool's
prompt, whose answer may be any JSON: ``elicit`` reads what it can use).
The lifecycle is lenient, as MCP servers are in practice: every request is
served in every state (a client may list tools before it says
``notifications/initialized``), and the states only record the phase:

- ``AWAITING_INIT`` until ``initialize`` is answered with a result;
- ``READY`` from then on;
- ``LOADED`` once ``notifications/initialized`` arrived: MCP's operation
  phase, the only one in which ``notifications/tools/list_changed`` is sent.

A malformed notification is never answered and never breaks the
connection: ``notifications/cancelled`` is declared with its real shape and
``lenient``, so one the server cannot use comes out as ``NotificationDropped``;
``notifications/initialized`` takes any params (whatever they are, the client
said it is initialized). Nothing bounds what the server writes
(``max_send_bytes=None``): a tool's result is not limited by the limit on
incoming lines (--max-message-bytes), which the transport enforces.

Beside the table, the JSON-RPC rules every transport shares, with no I/O:

- an id in flight is never answered a second time: a request reusing it
  (the connection's ``DUPLICATE_ID`` refusal) and malformed input that names
  it are not answered at all, only logged (:func:`answer_malformed`). An
  answer would carry that id, and the client would take it for the answer
  to its first request, whose real answer it would then drop;
- batches are served only under the revision that has them
  (:data:`BATCH_REVISIONS`: 2025-03-26 added them, 2025-06-18 removed them),
  once that revision is negotiated; otherwise each request of the batch is
  refused by its id (:func:`refuse_batch`), and its answers to prompts are
  dropped. A served batch is answered by one array (:class:`BatchReply`): no
  entry for a notification or an answer to a prompt, nor for a request
  answered with nothing (cancelled, or a duplicate id), and no answer at all
  when no entry is left.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Final, cast

import msgspec

from xcsh_run._mcp.wire import Batch, Malformed, RequestId, batch_line, error_line
from xcsh_run.worker.protocol import (
    Connection,
    ErrorCode,
    Message,
    Method,
    MethodTable,
    Notice,
    RefusalReason,
    Request,
    RequestRefused,
    Role,
    State,
    encode_line,
)

logger = logging.getLogger("xcsh_run.mcp")

Params = dict[str, Any]
_ANY: Final = cast("type[Any]", Any)
_CLIENT, _SERVER = Role.HOST, Role.WORKER
_OPEN: Final = frozenset({State.AWAITING_INIT, State.READY, State.LOADED})


class RpcError(Exception):
    """A JSON-RPC error answer to the request being handled."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


class CancelledParams(msgspec.Struct, frozen=True, rename="camel"):
    """``notifications/cancelled``: which request to stop, and perhaps why (other members are ignored)."""

    request_id: str | int  # an MCP id: never null, never a bool or a float
    # Any JSON: a reason that is not a string does not void the cancellation, it is only not used.
    reason: Any = None


INITIALIZE: Final = Method("initialize", Params, Params, sender=_CLIENT, allowed=_OPEN, on_result=State.READY)
PING: Final = Method("ping", Params, Params, sender=_CLIENT, allowed=_OPEN)
TOOLS_LIST: Final = Method("tools/list", Params, Params, sender=_CLIENT, allowed=_OPEN)
TOOLS_CALL: Final = Method("tools/call", Params, Params, sender=_CLIENT, allowed=_OPEN)
SET_LEVEL: Final = Method("logging/setLevel", Params, Params, sender=_CLIENT, allowed=_OPEN)
# Sent by the server: a tool's prompt. Its result is any JSON, so that no answer
# of the client's can break the connection; the server reads what it can use.
ELICIT: Final = Method("elicitation/create", Params, _ANY, sender=_SERVER, allowed=_OPEN)
# Sent by the server: a tool's ``api.sample``, a completion from the client's model.
SAMPLE: Final = Method("sampling/createMessage", Params, _ANY, sender=_SERVER, allowed=_OPEN)
# Sent by the server: a tool's ``api.roots``, the folders the client works in.
ROOTS: Final = Method("roots/list", Params, _ANY, sender=_SERVER, allowed=_OPEN)

INITIALIZED: Final = Notice("notifications/initialized", _ANY, sender=_CLIENT, allowed=_OPEN, on_receive=State.LOADED)
CANCELLED: Final = Notice("notifications/cancelled", CancelledParams, sender=_CLIENT, allowed=_OPEN, lenient=True)
PROGRESS: Final = Notice("notifications/progress", Params, sender=_SERVER, allowed=_OPEN)
MESSAGE: Final = Notice("notifications/message", Params, sender=_SERVER, allowed=_OPEN)
TOOLS_LIST_CHANGED: Final = Notice(
    "notifications/tools/list_changed", Params, sender=_SERVER, allowed=frozenset({State.LOADED})
)

MCP_PROTOCOL: Final = MethodTable(
    [INITIALIZE, PING, TOOLS_LIST, TOOLS_CALL, SET_LEVEL, ELICIT, SAMPLE, ROOTS],
    [INITIALIZED, CANCELLED, PROGRESS, MESSAGE, TOOLS_LIST_CHANGED],
)


def server_connection() -> Connection:
    """The server's side of one MCP session: newline-delimited, messages decoded by the transport."""
    return Connection(_SERVER, MCP_PROTOCOL, max_send_bytes=None, encode=encode_line)


# The revisions whose clients may send JSON-RPC batches.
BATCH_REVISIONS: Final = frozenset({"2025-03-26"})


def answer_malformed(conn: Connection, malformed: Malformed) -> bytes | None:
    """The error line for malformed input; None when its id is in flight (never answered twice)."""
    if malformed.id is not None and malformed.id in conn.unanswered:
        logger.warning(
            "not answering malformed input with id %r: a request with that id is in flight (%s)",
            malformed.id,
            malformed.message,
        )
        return None
    return error_line(malformed.id, malformed.code, malformed.message)


def refusal_message(refused: RequestRefused) -> str:
    """The connection's refusal, in this server's words."""
    reason = refused.reason
    if reason is RefusalReason.UNKNOWN_METHOD:
        # server/discover lands here on purpose: "method not found" is how a
        # 2026-07-28 client learns to fall back to the initialize handshake.
        return f"method not found: {refused.method_name}"
    if reason is RefusalReason.BAD_PARAMS:
        # Every JSON object decodes as the table's params: what failed is
        # not one, or not valid JSON text (the transport keeps params raw).
        if "Expected `object`" in refused.error.message:
            return f'invalid params: "params" of {refused.method_name} must be an object'
        detail = refused.error.message.partition("params: ")[2]
        return f"invalid params: the params of {refused.method_name} are not valid JSON text ({detail})"
    if reason is RefusalReason.DUPLICATE_ID:
        return f"invalid request: id {refused.id!r} is already in use by a request in flight"
    return f"invalid request: {refused.error.message}"


def answer_batch(
    conn: Connection,
    batch: Batch,
    version: str,
    receive: Callable[[Message, BatchReply], bytes | None],
) -> tuple[list[bytes | None], BatchReply | None]:
    """The lines answering ``batch`` now, and its :class:`BatchReply` when it is served (None: refused).

    ``receive`` takes each of its requests, notifications and answers. A
    served batch gives one array line, now (``receive`` started nothing to
    wait for) or later (from :meth:`BatchReply.done`), or none at all.
    """
    why = batch_refusal(conn, version)
    if why is not None:
        logger.info("refused a batch of %d message(s): %s", len(batch.items), why)
        return list(refuse_batch(conn, batch, why)), None
    reply = BatchReply()
    for item in batch.items:
        reply.add(answer_malformed(conn, item) if isinstance(item, Malformed) else receive(item, reply))
    return [reply.seal()], reply


def batch_refusal(conn: Connection, version: str) -> str | None:
    """Why a batch is refused now; None when it is served."""
    if conn.state not in (State.READY, State.LOADED):
        return "invalid request: a batch before initialize (batches exist only in protocol 2025-03-26)"
    if version not in BATCH_REVISIONS:
        return f"invalid request: batches are not part of protocol {version}, only of 2025-03-26"
    return None


def refuse_batch(conn: Connection, batch: Batch, why: str) -> Iterator[bytes]:
    """The lines refusing a batch: one error per request id (each once), or one without an id if none is left."""
    answered: set[RequestId] = set()
    for item in batch.items:
        request_id = item.id if isinstance(item, (Request, Malformed)) else None
        if request_id is None or request_id in answered:
            continue
        answered.add(request_id)
        line = answer_malformed(conn, Malformed(request_id, ErrorCode.INVALID_REQUEST, why))
        if line is not None:
            yield line
    if not answered:
        yield error_line(None, ErrorCode.INVALID_REQUEST, why)


class BatchReply:
    """The answers to one served batch, sent as one array once its last request is answered.

    :meth:`add` takes an answer given at once (a refusal, malformed input;
    None: nothing), :meth:`expect` counts a request that will be answered
    later through :meth:`done` (None: it ends unanswered), and :meth:`seal`
    marks the end of the batch. ``seal`` or the last ``done`` returns the
    array line, exactly once, or None when no entry is left.
    """

    __slots__ = ("_lines", "_waiting", "_sealed")

    def __init__(self) -> None:
        self._lines: list[bytes] = []
        self._waiting = 0
        self._sealed = False

    def add(self, line: bytes | None) -> None:
        if line is not None:
            self._lines.append(line)

    def expect(self) -> None:
        self._waiting += 1

    def seal(self) -> bytes | None:
        self._sealed = True
        return self._complete()

    @property
    def finished(self) -> bool:
        """Sealed, and no request left to answer: nothing more will be sent for the batch."""
        return self._sealed and not self._waiting

    def done(self, line: bytes | None) -> bytes | None:
        self._waiting -= 1
        self.add(line)
        return self._complete()

    def _complete(self) -> bytes | None:
        if not self._sealed or self._waiting or not self._lines:
            return None
        return batch_line(self._lines)
