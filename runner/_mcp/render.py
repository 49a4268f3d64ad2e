"""How tools, results and partial updates look on the MCP wire, per protocol revision."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import msgspec
import trio

from xcsh_run._discovery import ToolInfo
from xcsh_run._mcp.line_transport import RequestId
from xcsh_run._mcp.sanitize import Sanitizer, error_text
from xcsh_run._results import ErrorInfo, ToolResult, describe_block

logger = logging.getLogger("xcsh_run.mcp")

# What each revision added; older clients get none of it. Revisions are date
# strings and sort as such.
ANNOTATIONS_SINCE: Final = "2025-03-26"  # tool annotations, audio blocks
TITLE_SINCE: Final = "2025-06-18"  # tool title and outputSchema, structuredContent, resource_link blocks
ICONS_SINCE: Final = "2025-11-25"  # tool icons

# What `initialize` tells the model about these tools.
INSTRUCTIONS: Final = (
    "These tools are programs from the user's project, each run in its own isolated process. "
    "A tool that fails returns a result marked as an error whose text says what went wrong, such as "
    "invalid arguments, an unknown tool name, a timeout or a crash; read it, correct the call "
    "(arguments, tool name) and try again, or tell the user when retrying cannot help. "
    "Structured output, when a tool has it, comes with the result."
)
META_DETAILS: Final = "xcsh-run/details"
META_REQUIRES: Final = "xcsh-run/requires"  # a tool's declared needs under the strict sandbox
META_ERROR: Final = "xcsh-run/error"
META_BACKGROUND: Final = "xcsh-run/background"  # processes a keeps_processes tool left running

# Progress messages are for a status line: bounded so that one update cannot
# produce a huge notification.
_MAX_PROGRESS_MESSAGE: Final = 16384


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
        if version >= TITLE_SINCE and tool.output_schema is not None:
            entry["outputSchema"] = tool.output_schema
        if version >= ANNOTATIONS_SINCE:
            annotations = dict(tool.annotations or {})
            if version < TITLE_SINCE and tool.label != tool.name:
                # A 2025-03-26 client has no tool title but the annotation's.
                annotations.setdefault("title", tool.label)
            if annotations:
                entry["annotations"] = annotations
        if version >= ICONS_SINCE and tool.icons:
            entry["icons"] = tool.icons
        if tool.requires is not None:
            entry["_meta"] = {META_REQUIRES: msgspec.json.decode(msgspec.json.encode(tool.requires))}
        rendered.append(entry)
    return rendered


def render_result(
    result: ToolResult, version: str, *, root: str | None = None, tool: str | None = None
) -> dict[str, Any]:
    """A ToolResult as an MCP ``CallToolResult`` for a client speaking ``version``.

    ``root`` is the served folder: an error's paths inside it are shown
    relative to it (see ``sanitize``). ``tool`` is the name the client
    called, for an error's text (a served name may differ from the tool's
    own); the error's ``tool`` when None.
    """
    if result.error is not None:
        return _render_error(result, result.error, version, root, tool or result.error.tool)
    content = _content_for(result.content, version)
    out: dict[str, Any] = {"content": content, "isError": False}
    details = result.details
    if version >= TITLE_SINCE and isinstance(details, dict):
        out["structuredContent"] = details
        if not any(block.get("type") == "text" for block in content):
            # The spec's advice for clients that read only content blocks.
            out["content"] = [*content, {"type": "text", "text": msgspec.json.encode(details).decode()}]
    if details is not None:
        out["_meta"] = {META_DETAILS: details}
    if result.background:
        out.setdefault("_meta", {})[META_BACKGROUND] = msgspec.to_builtins(result.background)
    return out


def _render_error(
    result: ToolResult, error: ErrorInfo, version: str, root: str | None, tool: str | None
) -> dict[str, Any]:
    clean = Sanitizer(root, error.module)
    message = clean.message(error)
    text = error_text(error, message, tool)
    content = [
        {**block, "text": text if block["text"] == error.message else clean.text(block["text"])}
        if block.get("type") == "text"
        else block
        for block in _content_for(result.content, version)
    ]
    if not any(block.get("type") == "text" and block["text"] == text for block in content):
        # The error's own words come first, whatever else the result holds.
        content.insert(0, {"type": "text", "text": text})
    out: dict[str, Any] = {"content": content, "isError": True}
    if version >= TITLE_SINCE:
        out["structuredContent"] = {"error": clean.structured(error, message)}
    meta: dict[str, Any] = {META_ERROR: msgspec.to_builtins(error)}
    if result.details is not None:
        meta[META_DETAILS] = result.details
    out["_meta"] = meta
    if error.traceback or error.stderr_tail:
        # Out of the model's view, so into the server's log for the people who run it.
        evidence = "\n".join(
            f"{label}:\n{text.rstrip()}"
            for label, text in (("traceback", error.traceback), ("worker stderr (last lines)", error.stderr_tail))
            if text
        )
        logger.info("%s (%s): %s\n%s", error.kind, error.module or "no module", error.message, evidence)
    return out


def _content_for(content: list[dict[str, Any]], version: str) -> list[dict[str, Any]]:
    """The blocks, with those ``version`` does not know as a one-line text summary."""
    if version >= TITLE_SINCE:
        return content
    return [
        {"type": "text", "text": describe_block(block)}
        if block.get("type") == "resource_link" or (block.get("type") == "audio" and version < ANNOTATIONS_SINCE)
        else block
        for block in content
    ]


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
