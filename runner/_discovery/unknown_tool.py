"""A call to a name no loaded tool has: ``not_found``, or ``load_error`` when a broken module may define it.

A syntax error in the module just edited must not read as a missing tool
(``not_found``, exit 2 on the command line) that only ``xcsh-run list``
explains. The answer is ``load_error``, with every relevant load problem in
the message, when a module that failed to load could define the name:

- one whose file stem or package folder is the name (``repo_stats.py`` for
  ``repo_stats``; ``-`` and ``_`` alike), or whose load problem names the
  tool (``tool 'repo_stats': ...``);
- any failed module, when the name is neither a loaded tool's nor close to
  one: nothing else can explain it.

``not_found``, with the close names, stays the answer when nothing failed,
and when the name looks like a typo of a loaded tool's.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Sequence
from typing import Protocol

from xcsh_run._results import ErrorKind, ToolResult, error_result


class Failure(Protocol):
    """What is read of a module's load problem (``LoadError``)."""

    @property
    def path(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def stderr_tail(self) -> str | None: ...


def module_stem(path: str) -> str:
    """The name a module is known by: its file stem, or its package folder's name."""
    path = path.rstrip(os.sep)
    base = os.path.basename(path)
    if base == "__init__.py":
        base = os.path.basename(os.path.dirname(path))
    return base.removesuffix(".py")


def _same_name(a: str, b: str) -> bool:
    return a.replace("-", "_").casefold() == b.replace("-", "_").casefold()


def _line(failure: Failure) -> str:
    # The message of a module that failed as a whole starts with its path already.
    return f"  {failure.path}: {failure.message.removeprefix(failure.path + ': ')}"


def unknown_tool(name: str, visible: Iterable[str], failures: Sequence[Failure]) -> ToolResult:
    """The result of calling ``name``, which no loaded tool has.

    Args:
        name: the name called.
        visible: the names of the loaded tools a caller may be pointed to (hidden ones left out).
        failures: every module (or factory entry, or schema) that failed to load, in discovery order.
    """
    names = list(visible)
    close = difflib.get_close_matches(name, names, n=3)
    own = [f for f in failures if _same_name(module_stem(f.path), name) or f"tool {name!r}" in f.message]
    if own or (failures and not close):
        if own:
            head = f"tool {name!r} is not loaded: the module that would define it failed to load:"
        else:
            head = (
                f"no tool named {name!r} is loaded, and {len(failures)} module(s) failed to load; "
                "one of them may define it:"
            )
        lines = [head, *(_line(f) for f in own or failures)]
        lines.append("Fix the module and run again (`xcsh-run list` shows every tool and load problem).")
        # The module and its stderr are evidence only when the module is known to be the one.
        first = own[0] if own else None
        return error_result(
            ErrorKind.LOAD_ERROR, "\n".join(lines),
            module=first.path if first else None, stderr_tail=first.stderr_tail if first else None,
        )  # fmt: skip
    message = f"no tool named {name!r}"
    if close:
        message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    elif names:
        message += f"; known tools: {', '.join(sorted(names))}"
    else:
        message += "; no tools are loaded (put modules in .xcsh/tools or pass --tools PATH)"
    if failures:
        message += f" ({len(failures)} module(s) failed to load; `xcsh-run list` shows why)"
    return error_result(ErrorKind.NOT_FOUND, message)
