"""The authoring API as the worker defines it; documented, and imported by tools, as :mod:`xcsh_run.pi`.

A factory receives this module as ``api.pi``. It imports only the standard
library and msgspec: it runs inside the worker, never in the host.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import msgspec

from xcsh_run.worker._tool_api import AbortSignal, ToolCancelled
from xcsh_run.worker.protocol import Requires

if TYPE_CHECKING:
    from xcsh_run.worker._tool_api import UI as UI
    from xcsh_run.worker._tool_api import Ctx as ToolContext
    from xcsh_run.worker._tool_api import EventBus as EventBus
    from xcsh_run.worker._tool_api import ExecResult as ExecResult
    from xcsh_run.worker._tool_api import SessionManager as SessionManager
    from xcsh_run.worker._tool_api import ToolAPI as ToolAPI

__all__ = [
    "AbortSignal",
    "AudioContent",
    "CustomTool",
    "EmbeddedResource",
    "EventBus",
    "ExecResult",
    "Icon",
    "ImageContent",
    "Requires",
    "ResourceContents",
    "ResourceLink",
    "SessionManager",
    "TextContent",
    "ToolAPI",
    "ToolAnnotations",
    "ToolCancelled",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "UI",
]

# The types of ``api``, ``api.ui``, ``ctx`` and ``api.exec``'s result live with
# the worker's machinery (the host link, the protocol connection): they are
# loaded on first access, so that importing ``xcsh_run.pi`` alone (a tool's own
# tests) does not load that machinery. Hidden from type checkers, which would
# otherwise accept any misspelt name of this module.
_LAZY: dict[str, tuple[str, str]] = {
    "ToolAPI": ("._tool_api.api", "ToolAPI"),
    "UI": ("._tool_api.ui", "UI"),
    "ToolContext": ("._tool_api.ctx", "Ctx"),
    "ExecResult": ("._tool_api.exec", "ExecResult"),
    "EventBus": ("._tool_api.events", "EventBus"),
    "SessionManager": ("._tool_api.session_manager", "SessionManager"),
}

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        where = _LAZY.get(name)
        if where is None:
            raise AttributeError(f"module 'xcsh_run.pi' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(where[0], __package__), where[1])
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})


Concurrency: TypeAlias = Literal["shared", "exclusive"]
TaskSupport: TypeAlias = Literal["forbidden", "optional", "required"]


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
    """What an [`EmbeddedResource`][xcsh_run.pi.EmbeddedResource] holds.

    A ``uri`` and exactly one of ``text`` or ``blob`` (base64).
    """

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

    Attributes:
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

    Attributes:
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

    Every argument is a keyword, and each is kept as an attribute of the same
    name. A ``dict`` with these keys works wherever a factory returns a tool.

    ``execute(tool_call_id, params, on_update, ctx, signal)`` is called once per
    call, in the worker's main thread (``def``) or on its asyncio loop
    (``async def``), with:

    - ``tool_call_id`` (``str``): the host's id of this call.
    - ``params``: the arguments, validated: an instance of the ``parameters``
      Struct, or a ``dict`` for a JSON Schema.
    - ``on_update`` (``Callable[[dict | ToolResult], None]``): streams a partial
      result (``{"content": [...], "details": ...}``) to the caller, in order,
      before the final one.
    - ``ctx`` (`ToolContext`): the host's shared state (``ctx["model"]``,
      ``ctx.get(key)``), ``ctx.abort(reason)`` and ``ctx.session_manager``
      (`SessionManager`: the session's entries, this tool's earlier results
      among them).
    - ``signal`` (`AbortSignal`): set when the call is cancelled or times out.

    It returns a `ToolResult`, a ``dict`` of that shape, or a ``str`` (one text
    block). Raising makes the result a ``tool_error`` with the exception's text;
    details must be JSON-serialisable.

    Example:
        ```python
        class Params(msgspec.Struct):
            path: str

        def factory(api: ToolAPI) -> list[CustomTool]:
            def read(tool_call_id: str, params: Params, on_update, ctx, signal) -> str:
                with open(os.path.join(api.cwd, params.path)) as f:
                    return f.read()

            return [CustomTool(name="read", description="Reads a file of the project",
                               parameters=Params, execute=read, timeout=5.0,
                               annotations=ToolAnnotations(read_only_hint=True))]
        ```

    Args:
        name: unique in the registry; what the model calls.
        label: a short human name for displays (default: ``name``).
        description: what the tool does, for the model.
        parameters: a `msgspec.Struct` type (``params`` arrives as an
            instance, validated in the worker) or a JSON Schema ``dict`` whose
            root is an object (``params`` arrives as a dict, validated in the host).
        execute: ``execute(tool_call_id, params, on_update, ctx, signal)``, sync
            or async (see above). Returns a [`ToolResult`][xcsh_run.pi.ToolResult], a dict of that shape, or a str.
        on_session: optional ``on_session(event, ctx)``, sync or async, called
            with each session event (``event["reason"]`` is ``"start"``,
            ``"shutdown"``, ...) in every live worker; what it raises is logged.
        render_call: optional ``render_call(args, theme) -> str``: how a call is shown to the user.
        render_result: optional ``render_result(result, options, theme, args) -> str``:
            how a result is shown; ``options`` is ``{expanded, is_partial, spinner_frame}``.
        hidden: not listed to models (``list``, MCP's ``tools/list``); it can
            still be called by name.
        deferrable: may be deferred by the host (kept for compatibility).
        concurrency: ``"shared"`` (default): calls run in parallel, each in its
            own worker; ``"exclusive"``: at most one call of this tool runs at a
            time, the others queue.
        timeout: this tool's own limit for a call, in seconds (default: none).
            It may shorten a call, never lengthen it past what the host allows
            (the caller's ``timeout``, else the runner's ``default_timeout``,
            and the policy's ``wall_seconds``); a call that runs over ends with
            a ``timeout`` result.
        output_schema: optional; what ``details`` look like, as a
            `msgspec.Struct` type or a JSON Schema ``dict`` whose root is
            ``"type": "object"``. MCP clients get it as the tool's
            ``outputSchema`` and the details as ``structuredContent``; a result
            whose details do not match is turned into a ``tool_error``.
        annotations: optional [`ToolAnnotations`][xcsh_run.pi.ToolAnnotations] (or a dict with MCP's
            keys): hints such as read-only or destructive, for clients.
        icons: optional list of [`Icon`][xcsh_run.pi.Icon] (or dicts with MCP's keys).
        requires: optional [`Requires`][xcsh_run.pi.Requires] (or a dict: ``{"programs": ["git"],
            "paths": {"read": [...], "write": [...]}, "network": ["tcp:443"]}``):
            what the tool needs under the ``strict`` sandbox. Shown by
            ``xcsh-run describe`` and ``list``; never granted by itself (the
            user grants with ``--allow-exec`` and the like, or a config file).
        approval: optional; ``"read"``, ``"write"`` or ``"exec"``, or a function of
            the arguments returning one (or ``{"tier", "policy", "reason"}``). A call
            above ``"read"`` (or with ``policy "prompt"``) runs only once approved: the
            host asks its UI's ``confirm`` (MCP: elicitation), and refuses it with no
            UI unless the runner was opened with ``approve=True`` (``--approve``).
        format_approval_details: optional ``format_approval_details(args) -> list[str]``
            (or a str): the lines the approval prompt shows.
        expected_errors: exception classes (a class or a tuple) this tool
            raises on purpose, e.g. ``(FileNotFoundError, PermissionError)``:
            an exception of one of them, or of a subclass, is a deliberate
            ``tool_error``, like [`ToolError`][xcsh_run.pi.ToolError] (``xcsh-run fuzz`` does not
            count it as a bug).
        keeps_processes: what a call starts and leaves running (a dev server,
            a watcher) lives on after the call until the session or the runner
            ends, inside the worker's kill boundary; each result lists it.
            Without it, a call's leftovers are killed at its end, with a warning.
        task_support: whether an MCP client may run a call as a task (the
            ``io.modelcontextprotocol/tasks`` extension of MCP 2026-07-28: the
            call runs on, the client polls for its result): ``"forbidden"``
            (the default: always answered in its request), ``"optional"`` (a
            task when the client declared the extension) or ``"required"``
            (refused, as MCP says, to a client that did not).
        task_after_input: a task-supporting tool that asks first and works
            long after: its calls put their first prompts to the client in the
            request (input requests) and become a task once those are
            answered. Without it, a task-supporting call is a task from the
            start, and its prompts are the task's input requests.
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
        "requires",
        "expected_errors",
        "keeps_processes",
        "task_support",
        "task_after_input",
        "approval",
        "format_approval_details",
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
        requires: Requires | Mapping[str, Any] | None = None,
        expected_errors: type[BaseException] | tuple[type[BaseException], ...] = (),
        keeps_processes: bool = False,
        task_support: TaskSupport = "forbidden",
        task_after_input: bool = False,
        approval: str | Callable[..., Any] | None = None,
        format_approval_details: Callable[..., Any] | None = None,
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
        self.requires = requires
        self.expected_errors = _exception_classes(expected_errors, name)
        self.keeps_processes = keeps_processes
        self.task_support = task_support
        self.task_after_input = task_after_input
        self.approval = approval
        self.format_approval_details = format_approval_details

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


# Public names say where tool authors import them from: tracebacks, reprs and
# the error types a result reports (``xcsh_run.pi.ToolError``) name the public
# module, not this one (rule 4 of ``xcsh_run``, as the host's face does).
# Not the msgspec Structs: msgspec resolves their (postponed) annotations in the
# module their ``__module__`` names, and the aliases those use live here.
for _name in __all__:
    _obj = globals().get(_name)
    if isinstance(_obj, type) and _obj.__module__ == __name__ and not issubclass(_obj, msgspec.Struct):
        _obj.__module__ = "xcsh_run.pi"
del _name, _obj
