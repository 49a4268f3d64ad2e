"""The MCP methods this server serves: a method table for the shared sans-io ``Connection``.

The same :class:`~worker._methods.Method` / ``Notice`` / ``MethodTable`` types
as the worker protocol, so that request ids, answering each request exactly
once, duplicate ids, unknown methods, params that are not an object and the
lifecycle are kept by one :class:`~worker._connection.Connection`, not written
again here. Params and results are plain JSON objects (``dict[str, Any]``);
ids from the client are strings or integers.

The client plays ``Role.HOST`` (it sends ``initialize``), the server
``Role.WORKER``; the server's one request is ``elicitation/create`` (a tool's
prompt, whose answer may be any JSON: ``_mcp_elicit`` reads what it can use).
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
"""

from __future__ import annotations

from typing import Any, Final, cast

import msgspec

from worker._connection import Connection
from worker._frames import encode_line
from worker._methods import Method, MethodTable, Notice, Role, State

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

INITIALIZED: Final = Notice("notifications/initialized", _ANY, sender=_CLIENT, allowed=_OPEN, on_receive=State.LOADED)
CANCELLED: Final = Notice("notifications/cancelled", CancelledParams, sender=_CLIENT, allowed=_OPEN, lenient=True)
PROGRESS: Final = Notice("notifications/progress", Params, sender=_SERVER, allowed=_OPEN)
MESSAGE: Final = Notice("notifications/message", Params, sender=_SERVER, allowed=_OPEN)
TOOLS_LIST_CHANGED: Final = Notice(
    "notifications/tools/list_changed", Params, sender=_SERVER, allowed=frozenset({State.LOADED})
)

MCP_PROTOCOL: Final = MethodTable(
    [INITIALIZE, PING, TOOLS_LIST, TOOLS_CALL, SET_LEVEL, ELICIT, SAMPLE],
    [INITIALIZED, CANCELLED, PROGRESS, MESSAGE, TOOLS_LIST_CHANGED],
)


def server_connection() -> Connection:
    """The server's side of one MCP session: newline-delimited, messages decoded by the transport."""
    return Connection(_SERVER, MCP_PROTOCOL, max_send_bytes=None, encode=encode_line)
