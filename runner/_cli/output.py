"""What the ``xcsh-run`` commands print: results, warnings, where a tool came from.

Every text here that a tool produced goes through ``_safe_text.visible`` (a
tool's escape sequences are shown, never obeyed by the terminal); JSON goes
through ``_safe_text.json_text`` (exact JSON, no raw control character).
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from xcsh_run._colour import colour_wanted, tinted
from xcsh_run._results import ToolResult, describe_block
from xcsh_run._safe_text import json_text, visible


def emit_ndjson(kind: str, payload: dict[str, Any]) -> None:
    """One ``--stream`` line on stdout: ``{"type": kind, ...payload}``."""
    sys.stdout.write(json_text({"type": kind, **payload}) + "\n")
    sys.stdout.flush()


def print_text(result: ToolResult) -> None:
    """A result for people: its text on stdout (other blocks as a one-line summary, an embedded text
    resource with its text); an error, and the worker's last stderr lines, on stderr."""
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
        typer.echo(
            f"{tinted('xcsh-run:', 'error')} {err.kind}: {visible(err.message)}",
            err=True,
            color=colour_wanted() or None,
        )
        if err.stderr_tail and err.kind in ("crashed", "load_error", "protocol_error"):
            tail = visible(err.stderr_tail).rstrip().splitlines()[-10:]
            typer.echo("  worker stderr (last lines):\n    " + "\n    ".join(tail), err=True)


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
