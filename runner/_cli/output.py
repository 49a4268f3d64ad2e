"""What the ``xcsh-run`` commands print: results, warnings, where a tool came from.

Every text here that a tool produced goes through ``_safe_text.visible`` (a
tool's escape sequences are shown, never obeyed by the terminal); JSON goes
through ``_safe_text.json_text`` (exact JSON, no raw control character).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Final

import typer

from xcsh_run._colour import colour_wanted, tinted
from xcsh_run._results import ErrorInfo, ToolResult, describe_block
from xcsh_run._safe_text import json_text, visible


def emit_ndjson(kind: str, payload: dict[str, Any]) -> None:
    """One ``--stream`` line on stdout: ``{"type": kind, ...payload}``."""
    sys.stdout.write(json_text({"type": kind, **payload}) + "\n")
    sys.stdout.flush()


def print_text(result: ToolResult, *, traceback: bool = False) -> None:
    """A result for people: its text on stdout (other blocks as a one-line summary, an embedded text
    resource with its text); an error, and the worker's last stderr lines, on stderr.

    An error raised in the tool's code names the file and line where (:func:`tool_location`);
    with ``traceback``, the tool's traceback comes first (:func:`tool_traceback`), as Python
    prints one: the summary line last.
    """
    for block in result.content:
        if result.is_error:
            continue
        if block.get("type") == "text":
            typer.echo(visible(block["text"]))
        else:
            typer.echo(visible(describe_block(block)))
            resource = block.get("resource")
            if isinstance(resource, dict) and isinstance(resource.get("text"), str):
                typer.echo(visible(resource["text"]))  # an embedded text resource is for reading, too
    if result.error is not None:
        err = result.error
        if traceback and err.traceback:
            typer.echo(visible(tool_traceback(err)).rstrip(), err=True)
        typer.echo(
            f"{tinted('xcsh-run:', 'error')} {err.kind}: {visible(_summary(err, traceback))}",
            err=True,
            color=colour_wanted() or None,
        )
        if err.stderr_tail and err.kind in ("crashed", "load_error", "protocol_error"):
            tail = visible(err.stderr_tail).rstrip().splitlines()[-10:]
            typer.echo("  worker stderr (last lines):\n    " + "\n    ".join(tail), err=True)


def _summary(err: ErrorInfo, traceback_shown: bool) -> str:
    """The error line: for an exception in a call, its type (unless raised on purpose) and where."""
    if err.kind not in ("tool_error", "limit_exceeded"):
        return err.message
    message = err.message
    where = tool_location(err)
    if where is None:  # not raised in the tool's code: the worker's check of what the tool returned, say
        return message
    if err.exception and not err.deliberate and not message.startswith(err.exception):
        message = f"{err.exception}: {message}"
    hint = "" if traceback_shown or not err.traceback else "; --traceback shows the traceback"
    return f"{message} (raised at {_relative(where)}{hint})"


# A frame of a Python traceback (`  File "f.py", line 3, in g`, then its source lines, indented
# deeper) or of a JavaScript stack (`    at g (/f.ts:3:7)`, one line).
_PY_FRAME: Final = re.compile(r'^(?P<indent> *)File "(?P<file>[^"]+)", line (?P<line>\d+)')
_JS_FRAME: Final = re.compile(r"^\s+at (?:.*\()?(?:file://)?(?P<file>/[^()\s]*?):(?P<line>\d+):\d+\)?\s*$")
_THIRD_PARTY: Final = frozenset({"site-packages", "dist-packages", "node_modules"})


def _worker_dir() -> str:
    import xcsh_run.worker as worker  # already imported by every run: the protocol is its subpackage

    return os.path.dirname(os.path.abspath(worker.__file__)) + os.sep


def _frames(text: str) -> list[tuple[int, int, str, int]]:
    """Each frame of ``text``: its first and past-last line index, file and line number, in text order."""
    lines = text.splitlines()
    out: list[tuple[int, int, str, int]] = []
    i = 0
    while i < len(lines):
        if m := _JS_FRAME.match(lines[i]):
            out.append((i, i + 1, m["file"], int(m["line"])))
        elif m := _PY_FRAME.match(lines[i]):
            end, deeper = i + 1, " " * (len(m["indent"]) + 1)
            while end < len(lines) and lines[end].startswith(deeper) and not _PY_FRAME.match(lines[end]):
                end += 1
            out.append((i, end, m["file"], int(m["line"])))
            i = end
            continue
        i += 1
    return out


def _in_tool(file: str, module: str | None) -> bool:
    """A frame of the tool's own code: in its module's folder, neither the worker's nor an installed package's."""
    if module is None or file.startswith(_worker_dir()):
        return False
    if file == module:
        return True
    folder = os.path.dirname(module) + os.sep
    return file.startswith(folder) and not _THIRD_PARTY.intersection(file[len(folder) :].split(os.sep))


def tool_location(err: ErrorInfo) -> str | None:
    """``file:line`` of the innermost frame of the tool's own code, else the innermost frame's (``raised_at``).

    A Python traceback lists the innermost frame last, a JavaScript stack first.
    None when the error was raised in the worker (its check of a result).
    """
    if err.traceback:
        frames = [(file, line) for _, _, file, line in _frames(err.traceback) if _in_tool(file, err.module)]
        python = "Traceback (most recent call last):" in err.traceback
        if frames:
            file, line = frames[-1] if python else frames[0]
            return f"{file}:{line}"
    if err.raised_at is None or err.raised_at.startswith(_worker_dir()):
        return None
    return err.raised_at


def tool_traceback(err: ErrorInfo) -> str:
    """The error's traceback without the worker's own frames (all of it when no other frame is left)."""
    text = err.traceback or ""
    frames = _frames(text)
    worker = [(start, end) for start, end, file, _ in frames if file.startswith(_worker_dir())]
    if not worker or len(worker) == len(frames):
        return text
    lines = text.splitlines()
    for start, end in reversed(worker):
        del lines[start:end]
    return "\n".join(lines)


def _relative(location: str) -> str:
    cwd = os.getcwd() + os.sep
    return location.removeprefix(cwd)


def warn(warnings: list[str]) -> None:
    """Each warning, one line on stderr."""
    for warning in warnings:
        typer.echo(
            f"xcsh-run: {tinted('warning:', 'warning')} {visible(warning)}", err=True, color=colour_wanted() or None
        )


def requires_text(requires: dict[str, Any] | None) -> str | None:
    """A tool's declared needs under ``strict``, for ``list``: the flags that grant them; None if it declares none."""
    if not requires:
        return None
    flags = [f"--allow-exec {name}" for name in requires.get("programs", ())]
    flags += [f"--allow-read {path}" for path in requires.get("read", ())]
    flags += [f"--allow-write {path}" for path in requires.get("write", ())]
    flags += [f"--allow-connect {entry.split(':', 1)[1]}" for entry in requires.get("network", ())]
    return "requires (strict): " + " ".join(flags) if flags else None


def source_label(item: dict[str, Any]) -> str:
    """Where a listed tool or load error came from: ``"<provider>, <level>"``."""
    source = item["source"]
    name = source["provider_name"] if source["provider"] in ("claude-plugins", "plugin") else source["provider"]
    return f"{name}, {source['level']}"


def suggest_command(tool: str) -> None:
    """For a tool not found whose name is close to a command's (``lst``): the command, on stderr."""
    import difflib

    from xcsh_run.fuzz import COMMANDS

    close = difflib.get_close_matches(tool, COMMANDS, n=1, cutoff=0.6)
    if close:
        typer.echo(f"xcsh-run: did you mean the command `{close[0]}`? (xcsh-run {close[0]} --help)", err=True)
