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

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import msgspec

from ._signal import AbortSignal, ToolCancelled

__all__ = [
    "AbortSignal",
    "AudioContent",
    "CustomTool",
    "EmbeddedResource",
    "Icon",
    "ImageContent",
    "ResourceContents",
    "ResourceLink",
    "TextContent",
    "ToolAnnotations",
    "ToolCancelled",
    "ToolError",
    "ToolResult",
]

Concurrency: TypeAlias = Literal["shared", "exclusive"]


class ToolError(Exception):
    """A deliberate failure: raise it for an expected refusal ("file not found", "no such branch").

    The call ends as a ``tool_error`` whose message is ``str(exc)``, exactly as
    for any other exception; the difference is the evidence: the error is
    marked ``deliberate``, so ``xcsh-run fuzz`` never counts it as a bug (an
    uncaught ``KeyError`` or ``ZeroDivisionError`` on valid input is one).
    Subclass it for errors of your own. To mark exceptions raised by code you
    do not own as deliberate, declare them in ``CustomTool(expected_errors=...)``.
    """


# Content blocks, as in MCP's tool results. Dicts of the same shapes work too
# (keys in MCP's camelCase); either way the worker checks each block and says
# what is wrong. `annotations` is MCP's {"audience": ["user" | "assistant"],
# "priority": 0..1, "lastModified": ISO 8601}; `meta` travels as `_meta`.


class TextContent(
    msgspec.Struct, frozen=True, omit_defaults=True, tag="text", tag_field="type", rename={"meta": "_meta"}
):
    """A text content block: ``{"type": "text", "text": ...}``."""

    text: str
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


class ImageContent(
    msgspec.Struct, frozen=True, omit_defaults=True, tag="image", tag_field="type",
    rename={"mime_type": "mimeType", "meta": "_meta"},
):  # fmt: skip
    """An image content block: ``{"type": "image", "data": <base64>, "mimeType": ...}``."""

    data: str
    mime_type: str
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


class AudioContent(
    msgspec.Struct, frozen=True, omit_defaults=True, tag="audio", tag_field="type",
    rename={"mime_type": "mimeType", "meta": "_meta"},
):  # fmt: skip
    """An audio content block: ``{"type": "audio", "data": <base64>, "mimeType": "audio/wav"}``."""

    data: str
    mime_type: str
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


class ResourceContents(msgspec.Struct, frozen=True, omit_defaults=True, rename={"mime_type": "mimeType"}):
    """What an :class:`EmbeddedResource` holds: a ``uri`` and exactly one of ``text`` or ``blob`` (base64)."""

    uri: str
    text: str | None = None
    blob: str | None = None
    mime_type: str | None = None


class EmbeddedResource(msgspec.Struct, frozen=True, omit_defaults=True, tag="resource", tag_field="type",
                       rename={"meta": "_meta"}):  # fmt: skip
    """A resource in the result: ``{"type": "resource", "resource": {"uri", "text" | "blob", "mimeType"?}}``."""

    resource: ResourceContents
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


class ResourceLink(
    msgspec.Struct, frozen=True, omit_defaults=True, tag="resource_link", tag_field="type",
    rename={"mime_type": "mimeType", "meta": "_meta"},
):  # fmt: skip
    """A link to a resource the client may fetch: ``{"type": "resource_link", "uri", "name", ...}``.

    ``size`` is the raw content's size in bytes, when known.
    """

    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


ContentBlock: TypeAlias = TextContent | ImageContent | AudioContent | EmbeddedResource | ResourceLink


class ToolResult(msgspec.Struct, frozen=True):
    """What ``execute`` may return (a ``dict`` of the same shape, or a ``str``, also work)."""

    content: list[ContentBlock | dict[str, Any]]
    details: Any = None


class ToolAnnotations(
    msgspec.Struct, frozen=True, omit_defaults=True,
    rename={"read_only_hint": "readOnlyHint", "destructive_hint": "destructiveHint",
            "idempotent_hint": "idempotentHint", "open_world_hint": "openWorldHint"},
):  # fmt: skip
    """Hints about a tool's behaviour for clients (MCP's ``ToolAnnotations``); every field is optional.

    Clients use them to decide, for instance, whether to ask before a call. They
    are hints, not guarantees: MCP's defaults for an unset hint are
    ``read_only_hint=False``, ``destructive_hint=True``,
    ``idempotent_hint=False``, ``open_world_hint=True``. A dict with MCP's
    keys (``{"readOnlyHint": True}``) works too.

    Args:
        title: a display name for the tool (clients of MCP 2025-03-26 read it
            from here; newer ones read ``label``, served as the tool's ``title``).
        read_only_hint: the tool does not modify its environment.
        destructive_hint: it may delete or overwrite (meaningful when not read-only).
        idempotent_hint: calling it again with the same arguments has no further effect.
        open_world_hint: it reaches outside entities (the web, other services), not a closed domain.
    """

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None


class Icon(msgspec.Struct, frozen=True, omit_defaults=True, rename={"mime_type": "mimeType"}):
    """An icon clients may show next to the tool (MCP 2025-11-25).

    Args:
        src: an ``https:`` (or ``http:``) URL, or a ``data:`` URI.
        mime_type: e.g. ``"image/png"``, when ``src`` does not say.
        sizes: e.g. ``["48x48"]``, or ``["any"]`` for a scalable image.
        theme: ``"light"`` or ``"dark"``, the background it is drawn for.
    """

    src: str
    mime_type: str | None = None
    sizes: list[str] | None = None
    theme: Literal["light", "dark"] | None = None


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
        output_schema: optional; what ``details`` look like, as a
            :class:`msgspec.Struct` type or a JSON Schema ``dict`` whose root is
            ``"type": "object"``. MCP clients get it as the tool's
            ``outputSchema`` and the details as ``structuredContent``; a result
            whose details do not match is turned into a ``tool_error``.
        annotations: optional :class:`ToolAnnotations` (or a dict with MCP's
            keys): hints such as read-only or destructive, for clients.
        icons: optional list of :class:`Icon` (or dicts with MCP's keys).
        expected_errors: exception classes (a class or a tuple) this tool
            raises on purpose, e.g. ``(FileNotFoundError, PermissionError)``:
            an exception of one of them, or of a subclass, is a deliberate
            ``tool_error``, like :class:`ToolError` (``xcsh-run fuzz`` does not
            count it as a bug).
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
        "output_schema",
        "annotations",
        "icons",
        "expected_errors",
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
        output_schema: type[msgspec.Struct] | Mapping[str, Any] | None = None,
        annotations: ToolAnnotations | Mapping[str, Any] | None = None,
        icons: Sequence[Icon | Mapping[str, Any]] | None = None,
        expected_errors: type[BaseException] | tuple[type[BaseException], ...] = (),
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
        self.output_schema = output_schema
        self.annotations = annotations
        self.icons = icons
        self.expected_errors = _exception_classes(expected_errors, name)

    def __repr__(self) -> str:
        return f"<CustomTool {self.name!r}>"


def _exception_classes(value: object, tool: object) -> tuple[type[BaseException], ...]:
    classes = (value,) if isinstance(value, type) else value
    if isinstance(classes, tuple) and all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
        return classes
    raise TypeError(
        f"tool {tool!r}: expected_errors must be an exception class or a tuple of them, "
        f"e.g. expected_errors=(FileNotFoundError, PermissionError); got {value!r}"
    )
