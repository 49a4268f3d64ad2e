"""The ``xcsh-run`` command: a thin layer over the public API.

``xcsh-run TOOL --args JSON`` is shorthand for ``xcsh-run run TOOL --args JSON``:
a first argument that is not a command name or an option is taken as a tool
name. A tool that shares a command's name is reached through ``run``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from enum import IntEnum
from typing import Annotated, Any, NoReturn

import trio
import typer

from ._errors import RunnerError
from ._host import DEFAULT_GRACE, DEFAULT_LOAD_TIMEOUT, DEFAULT_TIMEOUT, Runner, open_runner
from ._mcp import DEFAULT_MAX_MESSAGE_BYTES, serve_stdio
from ._results import ToolResult


class ExitCode(IntEnum):
    """The exit codes of ``xcsh-run TOOL``."""

    OK = 0
    TOOL_ERROR = 1  # the result is an error (tool_error, crashed, load_error, limit_exceeded, protocol_error)
    USAGE = 2  # bad flags, malformed --args, invalid arguments, unknown tool
    TIMEOUT = 124  # like timeout(1)
    CANCELLED = 130  # like a shell's 128 + SIGINT


_EXIT_BY_KIND = {
    None: ExitCode.OK,
    "invalid_arguments": ExitCode.USAGE,
    "not_found": ExitCode.USAGE,
    "timeout": ExitCode.TIMEOUT,
    "cancelled": ExitCode.CANCELLED,
}

COMMANDS = ("run", "list", "describe", "serve")

HELP = """Run LLM-agent custom tools in isolated, killable worker processes.

\b
  xcsh-run TOOL --args '{"key": "value"}'   run one tool (same as: xcsh-run run TOOL ...)
  xcsh-run list                             tools found, and modules that failed to load
  xcsh-run describe TOOL                    a tool's JSON Schema and flags

\b
Tools are found, in this order of precedence, in:
  ./.xcsh/tools, ~/.xcsh/agent/tools          (native: project, then user)
  ~/.claude/tools, ./.claude/tools            (Claude: user, then project)
  <installPath>/tools of Claude marketplace plugins (installed_plugins.json registries)
  ~/.codex/tools, ./.codex/tools              (Codex: user, then project)
  installed packages with `xcsh.tools` entry points (here, and in ~/.xcsh/plugins)
  every --tools PATH
What each module defines is cached in ~/.cache/xcsh-run, so unchanged modules are not imported again.

\b
Exit codes of a run:
    0  success
    1  the result is an error (tool_error, crashed, load_error, ...)
    2  usage error: bad flags, malformed --args, invalid arguments, unknown tool
  124  timeout
  130  cancelled (Ctrl-C or SIGTERM; the worker's whole tree is stopped first)
"""

app = typer.Typer(
    help=HELP,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

ToolsOpt = Annotated[
    list[str] | None,
    typer.Option("--tools", help="A tool file or folder to add (repeatable); relative to the current directory."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for programs instead of text.")]
LoadTimeoutOpt = Annotated[
    float, typer.Option("--load-timeout", help="Seconds a module may take to import and run its factory.")
]


def _fail(message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    typer.echo(f"xcsh-run: {message}", err=True)
    raise typer.Exit(int(code))


def _json_error(label: str, text: str, exc: json.JSONDecodeError) -> NoReturn:
    lines = text.splitlines() or [""]
    line = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else ""
    caret = " " * (exc.colno - 1) + "^"
    _fail(
        f"{label} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}\n"
        f"  {line}\n  {caret}\n"
        'Pass one JSON object, with double-quoted keys and strings, e.g. --args \'{"glob": "*.py"}\'.'
    )


def parse_arguments(args: str | None, args_file: str | None) -> dict[str, Any]:
    """Read the call's arguments from ``--args``/``--args-file`` (``-`` is stdin)."""
    if args is not None and args_file is not None:
        _fail("give either --args or --args-file, not both")
    label = "--args"
    if args_file is not None:
        label = "--args-file" if args_file != "-" else "stdin"
        if args_file == "-":
            text = sys.stdin.read()
        else:
            try:
                with open(args_file, encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                _fail(f"cannot read --args-file {args_file!r}: {exc.strerror}")
    elif args == "-":
        label, text = "stdin", sys.stdin.read()
    elif args is None:
        return {}
    else:
        text = args
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        _json_error(label, text, exc)
    if not isinstance(value, dict):
        _fail(f'{label} must be a JSON object like \'{{"key": "value"}}\', got a JSON {type(value).__name__}')
    return value


class _Status:
    """Live partial results on a terminal: one status line on stderr, redrawn in place."""

    FRAMES = "|/-\\"

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self._frame = 0
        self._shown = False

    def update(self, partial: dict[str, Any]) -> None:
        if not self.enabled:
            return
        texts = [b.get("text", "") for b in partial.get("content", []) if b.get("type") == "text"]
        line = (texts[-1].splitlines() or [""])[-1] if texts else ""
        width = shutil.get_terminal_size((80, 20)).columns - 3
        self._frame = (self._frame + 1) % len(self.FRAMES)
        sys.stderr.write(f"\r\x1b[K{self.FRAMES[self._frame]} {line[:width]}")
        sys.stderr.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self._shown = False


def _emit_ndjson(kind: str, payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"type": kind, **payload}, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _print_text(result: ToolResult) -> None:
    for block in result.content:
        if result.is_error:
            continue
        if block.get("type") == "text":
            typer.echo(block["text"])
        elif block.get("type") == "image":
            typer.echo(f"[image {block.get('mimeType')}, {len(block.get('data', ''))} base64 chars]")
    if result.error is not None:
        err = result.error
        typer.echo(f"xcsh-run: {err.kind}: {err.message}", err=True)
        if err.stderr_tail and err.kind in ("crashed", "load_error", "protocol_error"):
            tail = err.stderr_tail.rstrip().splitlines()[-10:]
            typer.echo("  worker stderr (last lines):\n    " + "\n    ".join(tail), err=True)


async def _watch_signals(runner: Runner, call_id: str) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            # The call goes through the cancellation ladder; this process
            # exits only once the worker's whole tree is gone.
            runner.cancel(call_id, f"interrupted by {signal.Signals(signum).name}")


@app.command("run")
def run_command(
    tool: Annotated[str, typer.Argument(help="The tool's name.")],
    args: Annotated[str | None, typer.Option("--args", help="Arguments as one JSON object; '-' reads stdin.")] = None,
    args_file: Annotated[
        str | None, typer.Option("--args-file", help="Read the JSON arguments from a file; '-' is stdin.")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", help=f"Seconds before the call is stopped [default: the tool's, else {DEFAULT_TIMEOUT:g}]."
        ),
    ] = None,
    grace: Annotated[
        float, typer.Option("--grace", help="Seconds between SIGTERM and the kill when stopping a call.")
    ] = DEFAULT_GRACE,
    as_json: JsonOpt = False,
    stream: Annotated[
        bool,
        typer.Option("--stream", help="Print NDJSON on stdout: one line per partial result, then the final result."),
    ] = False,
    tools: ToolsOpt = None,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
) -> None:
    """Run one tool call and print its result."""
    arguments = parse_arguments(args, args_file)
    for label, value in (("--timeout", timeout), ("--grace", grace), ("--load-timeout", load_timeout)):
        if value is not None and not value > 0:
            _fail(f"{label} must be a positive number of seconds, got {value:g}")
    status = _Status() if not (stream or as_json) else None

    def on_update(partial: dict[str, Any]) -> None:
        if stream:
            _emit_ndjson("update", partial)
        elif status is not None:
            status.update(partial)

    async def main() -> ToolResult:
        call_id = "cli-call"
        async with (
            open_runner(tools or (), grace=grace, load_timeout=load_timeout) as runner,
            trio.open_nursery() as nursery,
        ):
            _warn(runner.warnings)
            nursery.start_soon(_watch_signals, runner, call_id)
            result = await runner.call_tool(tool, arguments, on_update=on_update, timeout=timeout, tool_call_id=call_id)
            nursery.cancel_scope.cancel()
            return result

    try:
        result = trio.run(main)
    except RunnerError as exc:
        _fail(str(exc))
    if status is not None:
        status.clear()
    if stream:
        _emit_ndjson("result", result.to_json())
    elif as_json:
        typer.echo(json.dumps(result.to_json(), ensure_ascii=False))
    else:
        _print_text(result)
    raise typer.Exit(int(_EXIT_BY_KIND.get(result.kind, ExitCode.TOOL_ERROR)))


def _load(tools: list[str] | None, load_timeout: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    import msgspec

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
        async with open_runner(tools or (), load_timeout=load_timeout) as runner:
            return msgspec.to_builtins(runner.tools), msgspec.to_builtins(runner.errors), runner.warnings

    try:
        return trio.run(main)
    except RunnerError as exc:
        _fail(str(exc))


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        typer.echo(f"xcsh-run: warning: {warning}", err=True)


def _source(item: dict[str, Any]) -> str:
    source = item["source"]
    name = source["provider_name"] if source["provider"] in ("claude-plugins", "plugin") else source["provider"]
    return f"{name}, {source['level']}"


@app.command("list")
def list_command(
    tools: ToolsOpt = None, as_json: JsonOpt = False, load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT
) -> None:
    """Show every tool found (name, label, source, path) and every module that failed to load, with why."""
    found, errors, warnings = _load(tools, load_timeout)
    _warn(warnings)
    if as_json:
        typer.echo(json.dumps({"tools": found, "errors": errors, "warnings": warnings}, indent=2, ensure_ascii=False))
        return
    cwd = os.getcwd()

    def rel(path: str) -> str:
        return os.path.relpath(path, cwd) if path.startswith(cwd + os.sep) else path

    if found:
        typer.echo("Tools:")
        width = max(len(t["name"]) for t in found)
        label_width = max(len(t["label"]) for t in found)
        for t in found:
            flag = " (hidden)" if t["hidden"] else ""
            typer.echo(f"  {t['name']:<{width}}  {t['label']:<{label_width}}  [{_source(t)}] {rel(t['module'])}{flag}")
    else:
        typer.echo("No tools found (see `xcsh-run --help` for where tools are looked for).")
    failed = [e for e in errors if not e.get("shadowed_by")]
    shadowed = [e for e in errors if e.get("shadowed_by")]
    if failed:
        typer.echo("\nFailed to load:")
        for e in failed:
            message = e["message"].removeprefix(e["path"] + ": ")
            typer.echo(f"  {rel(e['path'])} [{_source(e)}]: {message}")
    if shadowed:
        typer.echo("\nShadowed (not loaded):")
        for e in shadowed:
            typer.echo(f"  {rel(e['path'])} [{_source(e)}]: by {rel(e['shadowed_by'])}")


@app.command("describe")
def describe_command(
    tool: Annotated[str, typer.Argument(help="The tool's name.")],
    tools: ToolsOpt = None,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
) -> None:
    """Print a tool's JSON Schema and flags as JSON."""
    found, _, warnings = _load(tools, load_timeout)
    _warn(warnings)
    for t in found:
        if t["name"] == tool:
            typer.echo(json.dumps(t, indent=2, ensure_ascii=False))
            return
    _fail(f"no tool named {tool!r}; `xcsh-run list` shows the tools found")


@app.command("serve")
def serve_command(
    tools: ToolsOpt = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", help=f"Seconds before a call is stopped [default: the tool's, else {DEFAULT_TIMEOUT:g}]."
        ),
    ] = None,
    grace: Annotated[
        float, typer.Option("--grace", help="Seconds between SIGTERM and the kill when stopping a call.")
    ] = DEFAULT_GRACE,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    max_message_bytes: Annotated[
        int,
        typer.Option("--max-message-bytes", help="The longest MCP message (one line) accepted; longer get an error."),
    ] = DEFAULT_MAX_MESSAGE_BYTES,
) -> None:
    """Serve every tool over the Model Context Protocol on stdin/stdout (for MCP clients)."""
    from functools import partial

    for label, value in (("--timeout", timeout), ("--grace", grace), ("--load-timeout", load_timeout)):
        if value is not None and not value > 0:
            _fail(f"{label} must be a positive number of seconds, got {value:g}")
    if max_message_bytes < 1024:
        _fail(f"--max-message-bytes must be at least 1024, got {max_message_bytes}")
    serve = partial(
        serve_stdio,
        tools or (),
        timeout=timeout,
        grace=grace,
        load_timeout=load_timeout,
        max_message_bytes=max_message_bytes,
    )
    try:
        code = trio.run(serve)
    except RunnerError as exc:
        _fail(str(exc))
    raise typer.Exit(code)


def _with_default_command(argv: list[str]) -> Iterator[str]:
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        yield "run"
    yield from argv


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    args = list(_with_default_command(sys.argv[1:] if argv is None else argv))
    app(args=args, prog_name="xcsh-run")
