"""A tool file as the TOOL argument: ``xcsh-run path/to/tool.py``, loaded alone, as ``uv run script.py`` runs a script.

Rules:

1. The TOOL argument is a tool file when it ends in a tool module's suffix
   (``.py``, ``.ts``, ``.js``, ``.mjs``) or holds a path separator. No tool
   name can (a name is letters, digits, ``_`` and ``-``), so nothing else
   changes meaning; such an argument that is not an existing file is a usage
   error naming it.
2. The file is loaded alone: no project, user or plugin tools (``--tools``
   paths still load beside it). The current directory stays the caller's.
3. The file's only tool runs. A file with several names the one to run as
   the next argument (``xcsh-run tool.py NAME``); without it, the usage error
   lists them with that command line. A file that failed to load is the run's
   ``load_error``, with why.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from xcsh_run._cli.options import fail

TOOL_SUFFIXES: Final = (".py", ".ts", ".js", ".mjs")


def tool_file(argument: str) -> str | None:
    """The absolute path ``argument`` names as a tool file (rule 1), or None for a tool name."""
    separators = {os.sep, os.altsep or os.sep}
    if not (argument.endswith(TOOL_SUFFIXES) or separators.intersection(argument)):
        return None
    if os.path.isdir(argument):
        fail(f"{argument!r} is a folder; give the tool's file, or add the folder with --tools {argument}")
    if not os.path.isfile(argument):
        where = os.path.abspath(argument)
        fail(
            f"no such file: {argument!r} ({where}); a TOOL argument that ends in "
            f"{', '.join(TOOL_SUFFIXES)} or holds a '/' is a tool file to run"
        )
    return os.path.abspath(argument)


def name_argument(extra: Sequence[str]) -> tuple[str | None, list[str]]:
    """The tool's name, when the first word after the file is one (``xcsh-run tool.py NAME``), and the rest."""
    if extra and not extra[0].startswith("-"):
        return extra[0], list(extra[1:])
    return None, list(extra)


def pick_tool(
    tools: Sequence[Any], errors: Sequence[Any], path: str, shown: str, name: str | None
) -> tuple[Any | None, str | None]:
    """The file's tool named ``name``, else its only one (rule 3), or why there is none to run.

    ``tools`` and ``errors`` are the runner's (``ToolInfo``, ``LoadError``);
    ``shown`` is the file as the command line gave it. The answer is
    ``(tool, None)``; ``(None, problem)`` for several tools and no name, a name
    the file does not define, or no tool at all (a usage error); ``(None,
    None)`` when the file failed to load (a call then says why).
    It is called inside a runner's block, which must end before the command
    fails, so the problem is returned rather than raised.
    """
    real = os.path.realpath(path)
    own = [t for t in tools if os.path.realpath(t.module) == real]
    candidates = [t for t in own if t.name == name] if name is not None else [t for t in own if not t.hidden] or own
    if len(candidates) == 1:
        return candidates[0], None
    names = [t.name for t in own if not t.hidden] or [t.name for t in own]
    if name is not None and own:
        return None, f"{shown} defines no tool named {name!r}; its tools: {', '.join(names)}"
    if len(candidates) > 1:
        return None, (
            f"{shown} defines {len(names)} tools: {', '.join(names)}; name the one to run: "
            f"xcsh-run {shown} {names[0]} [OPTIONS]"
        )
    if any(os.path.realpath(e.path) == real for e in errors):
        return None, None
    return None, f"{shown} defines no tool (its factory returned none)"
