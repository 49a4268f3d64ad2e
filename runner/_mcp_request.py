"""One MCP request in flight, and the error its handler raises to answer it with a JSON-RPC error."""

from __future__ import annotations

from typing import Any

import trio

from ._host import Runner
from ._mcp_server import Outbox
from ._mcp_transport import RequestId


class RpcError(Exception):
    """A JSON-RPC error answer to the request being handled."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


class McpRequest:
    """One request in flight: what a ``notifications/cancelled`` needs to stop it.

    Which requests are in flight, and that each is answered once, is the
    connection's business; this is the task's side: its scope and its call.
    """

    __slots__ = ("id", "method", "params", "reply", "cancelled", "scope", "runner", "call_id")

    def __init__(self, request_id: RequestId, method: str, params: dict[str, Any], reply: Outbox) -> None:
        self.id = request_id
        self.method = method
        self.params = params
        self.reply = reply  # where its progress and its response go
        self.cancelled = False
        self.scope = trio.CancelScope()  # entered by its task
        self.runner: Runner | None = None
        self.call_id: str | None = None
