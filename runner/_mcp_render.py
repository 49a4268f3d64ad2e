"""How tools, results and partial updates look on the MCP wire, per protocol revision."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import msgspec
import trio

from ._host import ToolInfo
from ._mcp_transport import RequestId
from ._results import ToolResult

logger = logging.getLogger("xcsh_run.mcp")

# Tool `title` and result `structuredContent` appeared in 2025-06-18; older
# clients get neither. Revisions are date strings and sort as such.
TITLE_SINCE: Final = "2025-06-18"

META_DETAILS: Final = "xcsh-run/details"
META_ERROR: Final = "xcsh-run/error"

# Progress messages are for a status line: bounded so that one update cannot
# produce a huge notification.
_MAX_PROGRESS_MESSAGE: Final = 16384
# Bulky evidence stays out of structuredContent, which some clients show to
# the model instead of the content blocks; it is all in _meta.
_BULKY_EVIDENCE: Final = frozenset({"stderr_tail", "traceback"})


def input_schema(parameters: Mapping[str, Any]) -> dict[str, Any] | None:
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


def render_tools(tools: Sequence[ToolInfo], version: str) -> list[dict[str, Any]]:
    rendered = []
    for tool in tools:
        if tool.hidden:
            continue
        schema = input_schema(tool.parameters)
        if schema is None:
            logger.warning("tool %r is not listed: its parameters schema does not describe an object", tool.name)
            continue
        entry: dict[str, Any] = {"name": tool.name}
        if version >= TITLE_SINCE and tool.label:
            entry["title"] = tool.label
        entry["description"] = tool.description
        entry["inputSchema"] = schema
        rendered.append(entry)
    return rendered


def render_result(result: ToolResult, version: str) -> dict[str, Any]:
    out: dict[str, Any] = {"content": result.content, "isError": result.is_error}
    meta: dict[str, Any] = {}
    if result.details is not None:
        meta[META_DETAILS] = result.details
    if result.error is not None:
        error: dict[str, Any] = msgspec.to_builtins(result.error)
        meta[META_ERROR] = error
        if version >= TITLE_SINCE:
            out["structuredContent"] = {"error": {k: v for k, v in error.items() if k not in _BULKY_EVIDENCE}}
    if meta:
        out["_meta"] = meta
    return out


def partial_text(partial: Mapping[str, Any]) -> str:
    content = partial.get("content")
    if not isinstance(content, list):
        return ""
    texts = [
        b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return "\n".join(texts)[:_MAX_PROGRESS_MESSAGE]


class Progress:
    """Turns one call's ``on_update`` partials into ``notifications/progress`` params for ``send``.

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
        self._pending = (self._count, partial_text(partial))
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
                await self._send(params)
            if self._closed and self._pending is None:
                return
