"""What a model reads of an error: the message without host paths, tracebacks or stderr tails.

An MCP error result is read by a model, which needs to know what went wrong
and what to change, not where the server's files live. So the ``content`` and
``structuredContent`` of an error result are cleaned here; the whole evidence
(absolute paths, the traceback, the worker's stderr tail) stays in
``_meta["xcsh-run/error"]`` and in the server's log, for the people who run it.

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
from xcsh_run._results import ErrorInfo

# An absolute path in free text: a slash not preceded by a word, a dot, a
# colon (URLs) or another slash, up to a space, a quote, a bracket or ':'
# (so that "tool.py:12" keeps its line number).
_PATH: Final = re.compile(r"(?<![\w.:/~-])/[^\s'\"`()<>\[\]{},;:]+")
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
        for key in ("exit_code", "signal", "path", "rung", "limit"):
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
