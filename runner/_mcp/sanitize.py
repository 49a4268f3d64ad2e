"""What a model reads of an error: one line that names the tool, what happened and what to change.

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
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Final

from xcsh_run._discovery import LAST_STDERR
from xcsh_run._results import ErrorInfo, ErrorKind

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
