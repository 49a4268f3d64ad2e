"""How tools, results and partial updates look on the MCP wire, per protocol revision.

What a model reads of an error is one line that names the tool, what happened and what to change.

An MCP error result is read by a model, which needs to know what went wrong
and what to change, not where the server's files live; clients show it the
``content`` only. So the text of an error result says it all, by these rules:

1. It starts with the tool's name as the client called it, then what
   happened: ``repo_stats failed: `` for an error of the tool's own
   (``tool_error``), ``repo_stats: <kind>: `` for what the host observed,
   with the kind in words (see :data:`LABELS`): ``invalid arguments``,
   ``unknown tool``, ``not loaded``, ``timed out``, ``cancelled``,
   ``crashed``, ``memory limit exceeded``, ``protocol error``, ``busy``.
   Without a name (an error before any tool was looked up) it starts with
   the kind.
2. A ``tool_error`` from an exception names its type: ``repo_stats failed:
   IndexError: list index out of range``; xcsh-run's own types (a
   ``ToolError``, a malformed result) are left out, their message is the
   whole story.
3. ``invalid_arguments`` says where and what the schema wanted, when the
   validator says so: ``repo_stats: invalid arguments: at $.glob: expected a
   string, got 3``. ``expected`` and ``got`` are the tool's schema and the
   client's own arguments, so they are not cleaned of paths.
4. The message names the tool once: a message that starts with it
   (``'repo_stats' timed out after 5 s``) loses it, another mention of it
   becomes "the tool".
5. The message is cleaned of host paths, the worker's stderr tail and
   tracebacks (below); all the evidence stays in ``_meta["xcsh-run/error"]``
   and in the server's log, for the people who run it.

Cleaning a path: one inside the served folder becomes relative to it
(``.xcsh/tools/tidy.py``); one inside the tool module's folder becomes relative
to that folder (``tidy.py``); one under the home directory or this Python's
and xcsh-run's installation becomes its base name. Others (``/etc/hosts``,
``/nonexistent/x``) say nothing about the host and are kept: they may be
exactly what the model needs to correct its arguments.

Served names: MCP's rules for tool names, and the name served for a tool whose own name breaks them.

MCP (2025-11-25) says a tool name SHOULD be 1 to 128 characters of ASCII
letters, digits, ``_``, ``-`` and ``.``, compared case-sensitively. A tool
name here may hold any letter or digit (``résumé``, ``工具``) and be of any
length, and clients (and the model APIs behind them) reject what breaks the
rule, so such a tool is served under another name:

- its letters lose their accents (NFKD, combining marks dropped), every
  other character outside the rule becomes ``_``, the result is cut to fit,
  and ``-`` plus the first 8 hex digits of the SHA-256 of the tool's own
  name (UTF-8) follow: ``résumé`` is served as ``resume-<8 hex>``;
- the name depends only on the tool's own name, so it stays the same across
  reloads and restarts; should it equal a name already served, more digits
  of the hash are used, then a counter, so no two tools share a name;
- ``tools/call`` maps the served name back; any other name is passed on as
  it is (the tool's own name, or a hidden tool's, still works).

A warning names each such tool when it is loaded (once per server).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import unicodedata
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
import trio

from xcsh_run._discovery import LAST_STDERR, ToolInfo
from xcsh_run._mcp.line_transport import RequestId
from xcsh_run._results import ErrorInfo, ErrorKind, ToolResult, describe_block

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
    relative to it (see the rules above). ``tool`` is the name the client
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


# --- what a model reads of an error (the rules above) ------------------------------------------


# An absolute path in free text: a slash not preceded by a word, a dot, a
# colon (URLs) or another slash, up to a space, a quote, a bracket or ':'
# (so that "tool.py:12" keeps its line number).
_PATH: Final = re.compile(r"(?<![\w.:/~-])/[^\s'\"`()<>\[\]{},;:]+")
# What the host observed, in words (rule 1); a tool_error is "<tool> failed".
LABELS: Final[dict[str, str]] = {
    ErrorKind.INVALID_ARGUMENTS: "invalid arguments",
    ErrorKind.NOT_FOUND: "unknown tool",
    ErrorKind.LOAD_ERROR: "not loaded",
    ErrorKind.TIMEOUT: "timed out",
    ErrorKind.CANCELLED: "cancelled",
    ErrorKind.CRASHED: "crashed",
    ErrorKind.LIMIT_EXCEEDED: "limit exceeded",
    ErrorKind.PROTOCOL_ERROR: "protocol error",
    ErrorKind.BUSY: "busy",
}
# Where xcsh-run is installed: the folder holding the package (site-packages, or a checkout).
_INSTALL: Final = str(Path(__file__).resolve().parents[2])


class Sanitizer:
    """Cleans the text of one error result; ``root`` is the served folder, ``module`` the tool's file."""

    def __init__(self, root: str | None, module: str | None) -> None:
        self._root = _norm(root) if root != "/" else None  # served from "/": every path would be "inside" it
        self._module_dir = _norm(os.path.dirname(module)) if module else None
        private = {os.path.expanduser("~"), sys.prefix, sys.base_prefix, sys.exec_prefix, _INSTALL}
        self._private = sorted((p for p in map(_norm, private) if p and p != "/"), key=len, reverse=True)

    def path(self, path: str) -> str:
        for base in (self._root, self._module_dir):
            if base is not None and _inside(path, base):
                return os.path.relpath(path, base)
        if any(_inside(path, base) for base in self._private):
            return os.path.basename(path.rstrip("/")) or path
        return path

    def text(self, text: str) -> str:
        return _PATH.sub(lambda m: self.path(m.group(0)), text)

    def message(self, error: ErrorInfo) -> str:
        """The error's message for the model: no stderr tail appended, no host paths."""
        message = error.message
        if error.stderr_tail is not None:
            message = message.split(LAST_STDERR, 1)[0]
        return self.text(message)

    def structured(self, error: ErrorInfo, message: str) -> dict[str, Any]:
        """``structuredContent.error``: the kind and the small evidence, without the traceback or stderr tail."""
        out: dict[str, Any] = {"kind": error.kind, "message": message}
        for key in ("tool", "exception", "exit_code", "signal", "path", "expected", "got", "rung", "limit"):
            value = getattr(error, key)
            if value is not None:
                out[key] = value
        if error.module is not None:
            out["module"] = self.path(error.module)
        return out


def _norm(path: str | None) -> str | None:
    return os.path.normpath(path) if path else None


def _inside(path: str, base: str) -> bool:
    return path == base or path.startswith(base + "/")


def error_text(error: ErrorInfo, message: str, tool: str | None) -> str:
    """The one text a model reads of ``error`` (the module's rules); ``message`` is already cleaned."""
    detail = _detail(error, message, tool)
    if error.kind == ErrorKind.TOOL_ERROR and detail.startswith(_APPROVAL_DENIED):
        # Nothing ran, so nothing "failed": the denial says what to do.
        return f"{tool}: {detail}" if tool else detail
    if error.kind == ErrorKind.TOOL_ERROR:
        exception = _shown_exception(error)
        if exception is not None:
            detail = f"{exception}: {detail}" if detail else exception
        return f"{tool or 'the tool'} failed: {detail}"
    label = LABELS.get(error.kind, error.kind)
    if error.kind == ErrorKind.LIMIT_EXCEEDED and error.limit:
        label = f"{error.limit} limit exceeded"
        detail = detail.removeprefix(f"{label}: ")
    if error.kind == ErrorKind.NOT_FOUND and tool is not None and detail.startswith(_NOT_FOUND):
        # "no tool named 'x'; did you mean 'y'?" says nothing the head does not.
        return f"{tool}: {label}{detail.removeprefix(_NOT_FOUND)}"
    if detail.startswith(label):  # "'x' timed out after 5 s": the label, then the rest of the sentence
        return f"{tool}: {detail}" if tool else detail
    return f"{tool}: {label}: {detail}" if tool else f"{label}: {detail}"


_NOT_FOUND: Final = "no tool of that name"
_APPROVAL_DENIED: Final = "approval denied: "  # the host's words for a call it did not run (_host.approval)


def _detail(error: ErrorInfo, message: str, tool: str | None) -> str:
    if error.kind == ErrorKind.INVALID_ARGUMENTS and error.expected is not None:
        got = f", got {error.got}" if error.got is not None else ""
        return f"at {error.path or '$'}: expected {error.expected}{got}"
    if tool is None:
        return message
    quoted = repr(tool)
    for head in (f"{quoted} was ", f"{quoted} ", f"invalid arguments for {quoted}: ", f"tool {quoted} is not loaded: "):
        if message.startswith(head):
            message = message.removeprefix(head)
            break
    message = message.replace(f"no tool named {quoted}", _NOT_FOUND)
    return message.replace(quoted, "the tool")


def _shown_exception(error: ErrorInfo) -> str | None:
    """The exception type a model is shown (rule 2), or None."""
    name = error.exception
    if name is None or name.startswith("xcsh_run.") or (error.deliberate and name == "ToolError"):
        return None
    return name


# --- the names served (above: "Served names") ------------------------------------------------------

MAX_NAME: Final = 128
_VALID: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_OUTSIDE: Final = re.compile(r"[^A-Za-z0-9_.-]")


def valid_tool_name(name: str) -> bool:
    """True when ``name`` keeps MCP's rule for tool names (2025-11-25)."""
    return _VALID.fullmatch(name) is not None


def _base(name: str) -> str:
    decomposed = unicodedata.normalize("NFKD", name)
    kept = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _OUTSIDE.sub("_", kept)


def _candidates(name: str) -> Iterable[str]:
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    base = _base(name)
    for digits in (8, 16, 32, 64):
        yield f"{base[: MAX_NAME - 1 - digits]}-{digest[:digits]}"
    counter = 2
    while True:  # only if every digest-based name is taken
        suffix = f"-{digest[:8]}-{counter}"
        yield base[: MAX_NAME - len(suffix)] + suffix
        counter += 1


class ToolNames:
    """The MCP name of each tool, and back; built for one set of loaded tools."""

    __slots__ = ("_to_mcp", "_to_tool")

    def __init__(self, names: Iterable[str] = (), *, warned: set[str] | None = None) -> None:
        names = sorted(set(names))
        taken = {name for name in names if valid_tool_name(name)}
        self._to_mcp: dict[str, str] = {}
        for name in names:
            if name in taken:
                continue
            served = next(c for c in _candidates(name) if c not in taken)
            taken.add(served)
            self._to_mcp[name] = served
            if warned is None or name not in warned:
                logger.warning(
                    "tool %r breaks MCP's rule for tool names (1-128 characters of A-Z a-z 0-9 _ - .): served as %r",
                    name,
                    served,
                )
                if warned is not None:
                    warned.add(name)
        self._to_tool = {served: name for name, served in self._to_mcp.items()}

    def to_mcp(self, name: str) -> str:
        return self._to_mcp.get(name, name)

    def to_tool(self, served: str) -> str:
        return self._to_tool.get(served, served)


def rename_listed(listing: Sequence[dict[str, Any]], names: ToolNames) -> list[dict[str, Any]]:
    """A ``tools/list`` listing with each tool under its MCP name."""
    return [{**entry, "name": names.to_mcp(entry["name"])} for entry in listing]
