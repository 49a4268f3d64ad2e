"""One MCP request in flight, as its handler and a ``notifications/cancelled`` see it."""

from __future__ import annotations

from typing import Any

import trio

from xcsh_run._host import Runner
from xcsh_run._mcp.line_transport import RequestId
from xcsh_run._mcp.methods import BatchReply
from xcsh_run._mcp.server import Outbox


class McpRequest:
    """One request in flight: what a ``notifications/cancelled`` needs to stop it.

    Which requests are in flight, and that each is answered once, is the
    connection's business; this is the task's side: its scope and its call.
    """

    __slots__ = ("id", "method", "params", "reply", "batch", "cancelled", "scope", "runner", "call_id")

    def __init__(
        self, request_id: RequestId, method: str, params: dict[str, Any], reply: Outbox, batch: BatchReply | None
    ) -> None:
        self.id = request_id
        self.method = method
        self.params = params
        self.reply = reply  # where its progress, its log records, its prompts and its response go
        self.batch = batch  # the batch it came in, answered as one array (then `reply` ends)
        self.cancelled = False
        self.scope = trio.CancelScope()  # entered by its task
        self.runner: Runner | None = None
        self.call_id: str | None = None
