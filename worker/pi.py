"""The authoring API for tool modules, also injected into factories as ``api.pi``.

A tool module defines ``factory(api)`` and returns :class:`CustomTool` objects::

    from worker.pi import CustomTool

    def factory(api):
        def execute(tool_call_id, params, on_update, ctx, signal):
            return f"hello {params['name']}"
        return CustomTool(name="hello", label="Hello", description="Greets",
                          parameters={"type": "object", "properties": {"name": {"type": "string"}},
                                      "required": ["name"]},
                          execute=execute)

This module imports only the standard library and msgspec: it runs inside the
worker, never in the host.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

import msgspec

from ._signal import AbortSignal, ToolCancelled

__all__ = [
    "AbortSignal",
    "CustomTool",
    "ImageContent",
    "TextContent",
    "ToolCancelled",
    "ToolResult",
]

Concurrency: TypeAlias = Literal["shared", "exclusive"]


class TextContent(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    """A text content block: ``{"type": "text", "text": ...}``."""

    text: str


class ImageContent(msgspec.Struct, frozen=True, tag="image", tag_field="type", rename={"mime_type": "mimeType"}):
    """An image content block: ``{"type": "image", "data": <base64>, "mimeType": ...}``."""

    data: str
    mime_type: str


class ToolResult(msgspec.Struct, frozen=True):
    """What ``execute`` may return (a ``dict`` of the same shape, or a ``str``, also work)."""

    content: list[TextContent | ImageContent | dict[str, Any]]
    details: Any = None


class CustomTool:
    """A tool: a name, a schema for its arguments, and the code that runs it.

    Args:
        name: unique in the registry; what the model calls.
        label: a short human name for displays.
        description: what the tool does, for the model.
        parameters: a :class:`msgspec.Struct` type (``params`` arrives as an
            instance) or a JSON Schema ``dict`` (``params`` arrives as a dict).
        execute: ``execute(tool_call_id, params, on_update, ctx, signal)``, sync
            or async. Returns a :class:`ToolResult`, a dict of that shape, or a str.
        on_session: optional ``on_session(event, ctx)`` for session events.
        render_call: optional ``render_call(args, theme) -> str``.
        render_result: optional ``render_result(result, options, theme, args) -> str``.
        hidden: not listed to models.
        deferrable: may be deferred by the host (kept for compatibility).
        concurrency: ``"shared"`` (default) or ``"exclusive"``.
        timeout: default timeout of a call, in seconds.
    """

    __slots__ = (
        "name",
        "label",
        "description",
        "parameters",
        "execute",
        "on_session",
        "render_call",
        "render_result",
        "hidden",
        "deferrable",
        "concurrency",
        "timeout",
    )

    def __init__(
        self,
        *,
        name: str,
        description: str,
        parameters: type[msgspec.Struct] | Mapping[str, Any],
        execute: Callable[..., Any],
        label: str | None = None,
        on_session: Callable[..., Any] | None = None,
        render_call: Callable[..., Any] | None = None,
        render_result: Callable[..., Any] | None = None,
        hidden: bool = False,
        deferrable: bool = False,
        concurrency: Concurrency = "shared",
        timeout: float | None = None,
    ) -> None:
        self.name = name
        self.label = label if label is not None else name
        self.description = description
        self.parameters = parameters
        self.execute = execute
        self.on_session = on_session
        self.render_call = render_call
        self.render_result = render_result
        self.hidden = hidden
        self.deferrable = deferrable
        self.concurrency = concurrency
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"<CustomTool {self.name!r}>"
