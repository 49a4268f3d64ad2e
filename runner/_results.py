"""What a call returns: exactly one :class:`ToolResult`, whatever the tool did; the :class:`PendingAction` it leaves."""

from __future__ import annotations

import enum
from typing import Any

import msgspec


class ErrorKind(enum.StrEnum):
    """Why a call ended with ``is_error=True`` (SPEC §4)."""

    TOOL_ERROR = "tool_error"
    INVALID_ARGUMENTS = "invalid_arguments"
    NOT_FOUND = "not_found"
    LOAD_ERROR = "load_error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    CRASHED = "crashed"
    LIMIT_EXCEEDED = "limit_exceeded"
    PROTOCOL_ERROR = "protocol_error"
    BUSY = "busy"


class ErrorInfo(msgspec.Struct, frozen=True, omit_defaults=True):
    """Structured evidence for an error result.

    Attributes:
        kind: one of [`ErrorKind`][xcsh_run.ErrorKind]'s values.
        message: a sentence for the model and for people.
        exit_code: the worker's exit status, when it exited.
        signal: the signal that killed the worker (``"SIGSEGV"``), when one did.
        stderr_tail: the last lines the worker wrote to stderr.
        traceback: the tool's traceback, for ``tool_error`` and ``load_error``.
        path: the JSON path of the offending argument, for ``invalid_arguments``
            (``$`` for the arguments object itself, as for a missing property).
        expected: for ``invalid_arguments``, what the tool's schema expects at
            ``path``, in words: ``"a string"``, ``"an integer >= 0"``,
            ``'one of "a", "b"'``, ``'the required property "glob"'``.
        got: for ``invalid_arguments``, what was there instead: the value as
            compact JSON (``3``, ``"x"``, cut to 80 characters), or what was
            wrong with the object (``'the unknown property "x"'``).
        tool: the name of the tool called, when the call reached a runner.
        rung: how a timeout or cancellation ended: ``"cooperative"`` (the tool
            stopped within the grace period) or ``"killed"`` (SIGKILL after it).
        limit: which limit was hit, for ``limit_exceeded``.
        module: the tool module involved, when known.
        exception: for a ``tool_error`` from an exception, its type's name
            (``"ZeroDivisionError"``; ``"module.Class"`` outside builtins).
        exception_mro: that type and all its bases, most specific first
            (``["KeyError", "LookupError", "Exception", "BaseException"]``).
        raised_at: ``"file:line"`` of the innermost frame that raised it.
        deliberate: True when the tool raised it on purpose: a
            ``xcsh_run.pi.ToolError`` or one of the tool's ``expected_errors``.
    """

    kind: str
    message: str
    exit_code: int | None = None
    signal: str | None = None
    stderr_tail: str | None = None
    traceback: str | None = None
    path: str | None = None
    expected: str | None = None
    got: str | None = None
    rung: str | None = None
    limit: str | None = None
    module: str | None = None
    exception: str | None = None
    exception_mro: list[str] | None = None
    raised_at: str | None = None
    deliberate: bool | None = None
    tool: str | None = None


class BackgroundProcess(msgspec.Struct, frozen=True):
    """A process a call left running: its pid and command line."""

    pid: int
    command: str


class ToolResult(msgspec.Struct, frozen=True):
    """The terminal result of one call.

    ``content`` is a list of MCP content blocks, exactly as the tool gave them
    (the worker checks each): ``{"type": "text", "text"}``, ``{"type": "image" |
    "audio", "data": <base64>, "mimeType"}``, ``{"type": "resource", "resource":
    {"uri", "mimeType"?, "text" | "blob"}}`` and ``{"type": "resource_link",
    "uri", "name", "title"?, "description"?, "mimeType"?, "size"?}``, each with
    optional ``annotations`` and ``_meta``; `describe_block` summarises
    one in a line. ``details`` is any JSON. ``is_error`` is False only for a
    normal return; then ``error`` is None.
    """

    content: list[dict[str, Any]]
    details: Any = None
    is_error: bool = False
    error: ErrorInfo | None = None
    unenforced: list[str] = []
    """Sandbox protections a best-effort policy could not apply to this call (usually empty)."""
    background: list[BackgroundProcess] = []
    """Processes kept running after the call (a ``keeps_processes`` tool's), until the session ends."""

    @property
    def text(self) -> str:
        """All text blocks joined by newlines."""
        return "\n".join(b["text"] for b in self.content if b.get("type") == "text")

    @property
    def kind(self) -> str | None:
        """The error kind, or None for a success."""
        return self.error.kind if self.error is not None else None

    def to_json(self) -> dict[str, Any]:
        """``{"content", "details", "is_error", "error"}`` with plain JSON values (and
        ``"unenforced"`` only when a best-effort sandbox left something out, ``"background"``
        only when processes were kept)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        if not out["unenforced"]:
            del out["unenforced"]
        if not out["background"]:
            del out["background"]
        return out


class PendingAction(msgspec.Struct, frozen=True):
    """A preview a call left (``push_pending_action``), waiting for ``resolve`` to apply or discard it.

    ``Runner.pending_actions()`` lists them, oldest first. ``resolve`` settles
    the newest unless given an ``id``:
    ``call_tool("resolve", {"action": "apply", "reason": "ok", "id": action.id})``.

    Attributes:
        id: this action's id in its runner: the same for as long as it waits,
            never another action's.
        label: what applying it would do, for a person or a model.
        source_tool_name: the name the tool gave it (its ``source_tool_name``;
            ``"custom_tool"`` when it gave none).
        details: the JSON the tool attached (a diff, a summary), or None.
        call_id: the ``tool_call_id`` of the call that pushed it; None when it
            was pushed outside a call (a session hook).
    """

    id: str
    label: str
    source_tool_name: str
    details: Any = None
    call_id: str | None = None


def error_result(kind: ErrorKind, message: str, **evidence: Any) -> ToolResult:
    """A result with ``is_error=True`` whose text is ``message``."""
    return ToolResult(
        content=[{"type": "text", "text": message}],
        details=None,
        is_error=True,
        error=ErrorInfo(kind=kind.value, message=message, **{k: v for k, v in evidence.items() if v is not None}),
    )


def named(result: ToolResult, tool: str) -> ToolResult:
    """``result``, its error (if any) naming ``tool`` as the tool called, unless it names one already."""
    if result.error is None or result.error.tool is not None:
        return result
    return msgspec.structs.replace(result, error=msgspec.structs.replace(result.error, tool=tool))


def describe_block(block: dict[str, Any]) -> str:
    """A one-line summary of a non-text content block, for people and for clients that cannot show it.

    ``[image image/png, 12.1 KiB]``, ``[resource file:///notes.txt, text/plain, 120 chars]``,
    ``[resource link report.pdf: https://example.com/r.pdf, application/pdf, 2.0 MiB]``.
    """
    kind = block.get("type")
    if kind in ("image", "audio"):
        return f"[{kind} {block.get('mimeType')}, {_size(_decoded_size(block.get('data', '')))}]"
    if kind == "resource":
        resource = block.get("resource", {})
        parts = [str(resource.get("uri"))]
        if "text" in resource:
            parts += [resource.get("mimeType", "text"), f"{len(resource['text'])} chars"]
        else:
            parts += [resource.get("mimeType", "binary"), _size(_decoded_size(resource.get("blob", "")))]
        return f"[resource {', '.join(parts)}]"
    if kind == "resource_link":
        parts = [f"{block.get('name')}: {block.get('uri')}"]
        if "mimeType" in block:
            parts.append(block["mimeType"])
        if "size" in block:
            parts.append(_size(block["size"]))
        described = block.get("description") or block.get("title")
        return f"[resource link {', '.join(parts)}]" + (f" {described}" if described else "")
    if kind == "text":
        return str(block.get("text", ""))
    return f"[{kind} block]"


def _decoded_size(data: str) -> int:
    return len(data) * 3 // 4 - data[-2:].count("=")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"
