"""The ``xcsh-run`` command: a thin layer over the public API.

``xcsh-run TOOL --args JSON`` is shorthand for ``xcsh-run run TOOL --args JSON``:
a first argument that is not a command name or an option is taken as a tool
name. A tool that shares a command's name is reached through ``run``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import shutil
import signal
import sys
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from enum import IntEnum
from typing import Annotated, Any, NoReturn, TypeVar

import trio
import typer

from ._errors import RunnerError
from ._host import DEFAULT_GRACE, DEFAULT_LOAD_TIMEOUT, DEFAULT_TIMEOUT, Runner, open_runner
from ._results import ToolResult
from ._sandbox import LEVELS, SandboxPolicy
from ._terminal import TerminalUI, configure_log_file

# The MCP server's default, repeated here so that `xcsh-run TOOL` does not import it.
DEFAULT_MAX_MESSAGE_BYTES = 16 * 2**20


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

COMMANDS = ("run", "list", "describe", "serve", "fuzz")

HELP = """Run LLM-agent custom tools in isolated, killable worker processes.

\b
  xcsh-run TOOL --args '{"key": "value"}'   run one tool (same as: xcsh-run run TOOL ...)
  xcsh-run list                             tools found, and modules that failed to load
  xcsh-run describe TOOL                    a tool's JSON Schema and flags
  xcsh-run fuzz TOOL                        fuzz a tool with arguments generated from its schema

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
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout", help=f"Seconds before a call is stopped [default: the tool's, else {DEFAULT_TIMEOUT:g}]."
    ),
]
GraceOpt = Annotated[float, typer.Option("--grace", help="Seconds between SIGTERM and the kill when stopping a call.")]
LogFileOpt = Annotated[
    str | None,
    typer.Option("--log-file", help="Where host and tool log records go [~/.local/state/xcsh-run/xcsh-run.log]."),
]
LoadTimeoutOpt = Annotated[
    float, typer.Option("--load-timeout", help="Seconds a module may take to import and run its factory.")
]


_SANDBOX = "Sandbox"


class SandboxOptions:
    """The sandbox flags shared by run, list and serve; see docs/sandbox.md."""

    def __init__(
        self,
        level: Annotated[
            str, typer.Option("--sandbox", help="none, contained or strict.", rich_help_panel=_SANDBOX)
        ] = "contained",
        memory_mb: Annotated[
            int | None, typer.Option("--memory-mb", help="Memory of the tool's whole process tree [1024].")
        ] = None,
        cpu_seconds: Annotated[int | None, typer.Option("--cpu-seconds", help="CPU time of a worker [300].")] = None,
        max_procs: Annotated[int | None, typer.Option("--max-procs", help="Processes in the tree [256].")] = None,
        open_files: Annotated[int | None, typer.Option("--open-files", help="Open files per process [1024].")] = None,
        file_size_mb: Annotated[int | None, typer.Option("--file-size-mb", help="Largest file written [1024].")] = None,
        output_mb: Annotated[
            int | None, typer.Option("--output-mb", help="stdout+stderr a worker may write [no limit].")
        ] = None,
        allow_read: Annotated[
            list[str] | None, typer.Option("--allow-read", help="strict: another readable path (repeatable).")
        ] = None,
        allow_write: Annotated[
            list[str] | None, typer.Option("--allow-write", help="strict: another writable path (repeatable).")
        ] = None,
        allow_exec: Annotated[
            list[str] | None, typer.Option("--allow-exec", help="strict: a program tools may run (repeatable).")
        ] = None,
        allow_env: Annotated[
            list[str] | None, typer.Option("--allow-env", help="Another environment variable to pass (repeatable).")
        ] = None,
        network: Annotated[str, typer.Option("--network", help="strict: off, or netns (also no interfaces).")] = "off",
        best_effort: Annotated[
            bool, typer.Option("--sandbox-best-effort", help="Run even where the machine lacks a mechanism.")
        ] = False,
    ) -> None:
        if level not in LEVELS:
            _fail(f"--sandbox must be one of {', '.join(LEVELS)}, got {level!r}")
        if network not in ("off", "netns"):
            _fail(f"--network must be off or netns, got {network!r}")
        base = SandboxPolicy(level=level)  # type: ignore[arg-type]
        limits = {
            "memory_mb": memory_mb, "cpu_seconds": cpu_seconds, "max_procs": max_procs, "open_files": open_files,
            "file_size_mb": file_size_mb, "output_mb": output_mb,
        }  # fmt: skip
        for name, value in limits.items():
            if value is not None and value <= 0:
                _fail(f"--{name.replace('_', '-')} must be a positive number, got {value}")
        self.policy = base.replace(
            **{k: v for k, v in limits.items() if v is not None},
            extra_read_paths=tuple(os.path.abspath(p) for p in allow_read or ()),
            extra_write_paths=tuple(os.path.abspath(p) for p in allow_write or ()),
            allow_exec=tuple(allow_exec or ()),
            env_allow=tuple(allow_env or ()),
            network=network,
            best_effort=best_effort,
        )


F = TypeVar("F", bound=Callable[..., None])
T = TypeVar("T")


def with_sandbox_options(command: F) -> F:
    """Give ``command`` the sandbox flags; it receives them as one ``sandbox: SandboxPolicy``.

    The flags are declared once, on :class:`SandboxOptions`; typer reads the
    combined signature and annotations set here.
    """
    own = inspect.signature(command)
    hints = typing.get_type_hints(command, include_extras=True)
    option_hints = typing.get_type_hints(SandboxOptions.__init__, include_extras=True)
    options = [p for p in inspect.signature(SandboxOptions.__init__).parameters.values() if p.name != "self"]
    names = [p.name for p in options]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        policy = SandboxOptions(**{name: kwargs.pop(name) for name in names}).policy
        command(sandbox=policy, **kwargs)

    # inspect.signature() returns a __signature__ as it is (no eval_str), so
    # the annotations must already be evaluated for typer to see its Options.
    params = [p.replace(annotation=hints[p.name]) for p in own.parameters.values() if p.name != "sandbox"]
    options = [p.replace(annotation=option_hints[p.name], kind=inspect.Parameter.KEYWORD_ONLY) for p in options]
    wrapper.__signature__ = own.replace(parameters=[*params, *options], return_annotation=None)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{k: v for k, v in hints.items() if k not in ("sandbox", "return")},
        **{name: option_hints[name] for name in names},
    }
    del wrapper.__wrapped__  # typer must see the combined signature, not the original
    return wrapper  # type: ignore[return-value]


def _check_seconds(**durations: float | None) -> None:
    """Usage error (exit 2) for a duration flag that is not a positive number of seconds."""
    for name, value in durations.items():
        if value is not None and not value > 0:
            _fail(f"--{name.replace('_', '-')} must be a positive number of seconds, got {value:g}")


def _fail(message: str, code: int = ExitCode.USAGE) -> NoReturn:
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


class _Signals:
    """What SIGINT and SIGTERM do to a command, from its first step until its last worker is gone.

    Outside a call, a signal cancels the whole command: leaving ``open_runner``
    stops every worker and removes the cgroups and workdirs, wherever it was
    (the probe, discovery, a module that hangs at import). During the call
    named by :meth:`cancelling_call`, it cancels that call instead, through the
    ladder, so that the call's own ``cancelled`` result is still printed.
    """

    def __init__(self, scope: trio.CancelScope) -> None:
        self.received: signal.Signals | None = None
        self._scope = scope
        self._call: tuple[Runner, str] | None = None

    @contextlib.contextmanager
    def cancelling_call(self, runner: Runner, call_id: str) -> Iterator[None]:
        """Within the block, a signal cancels the call ``call_id`` instead of the whole command."""
        self._call = (runner, call_id)
        try:
            yield
        finally:
            self._call = None

    async def _watch(self, receiver: AsyncIterator[int]) -> None:
        async for signum in receiver:
            sig = signal.Signals(signum)
            if self.received is None:
                self.received = sig
            call = self._call
            # cancel() is False when the call is not registered yet or is
            # already over: then there is no ladder to go through, and the
            # whole command stops instead.
            if call is not None and call[0].cancel(call[1], f"interrupted by {sig.name}"):
                continue
            self._scope.cancel()


@contextlib.asynccontextmanager
async def _handling_signals() -> AsyncIterator[_Signals]:
    # The receiver is installed here, synchronously, before the body takes its
    # first step: no window where SIGTERM would kill the host with its default
    # action and leave workers, cgroups and workdirs behind.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as receiver:
        error: Exception | None = None
        async with trio.open_nursery() as nursery:
            signals = _Signals(nursery.cancel_scope)
            nursery.start_soon(signals._watch, receiver)
            try:
                yield signals
            except Exception as exc:
                # Re-raised below, out of the nursery: inside it, it would come
                # out wrapped in an ExceptionGroup (a traceback instead of a message).
                error = exc
            nursery.cancel_scope.cancel()
        if error is not None:
            raise error


def _exit_cancelled(sig: signal.Signals) -> int:
    return int(ExitCode.CANCELLED)


def _run(body: Callable[[_Signals], Awaitable[T]], exit_code: Callable[[signal.Signals], int] = _exit_cancelled) -> T:
    """``trio.run(body)`` with SIGINT and SIGTERM handled from its first step; the usual errors become exits.

    A signal that stopped ``body`` exits with ``exit_code(signal)`` (130 by
    default) and one line on stderr, once every worker is gone. A
    ``RunnerError`` is a usage error (exit 2).
    """
    done: list[T] = []
    handled: list[_Signals] = []

    async def main() -> None:
        async with _handling_signals() as signals:
            handled.append(signals)
            done.append(await body(signals))

    try:
        trio.run(main)
    except RunnerError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        # Ctrl-C before the receiver was installed or after it was closed: no
        # worker exists at either point, only trio's own SIGINT handling.
        _fail("interrupted by SIGINT", ExitCode.CANCELLED)
    if not done:
        sig = (handled[0].received if handled else None) or signal.SIGINT
        _fail(f"interrupted by {sig.name}", exit_code(sig))
    return done[0]


@app.command("run")
@with_sandbox_options
def run_command(
    tool: Annotated[str, typer.Argument(help="The tool's name.")],
    args: Annotated[str | None, typer.Option("--args", help="Arguments as one JSON object; '-' reads stdin.")] = None,
    args_file: Annotated[
        str | None, typer.Option("--args-file", help="Read the JSON arguments from a file; '-' is stdin.")
    ] = None,
    timeout: TimeoutOpt = None,
    grace: GraceOpt = DEFAULT_GRACE,
    as_json: JsonOpt = False,
    stream: Annotated[
        bool,
        typer.Option("--stream", help="Print NDJSON on stdout: one line per partial result, then the final result."),
    ] = False,
    tools: ToolsOpt = None,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    log_file: LogFileOpt = None,
    resolve: Annotated[
        str,
        typer.Option(
            "--resolve",
            help="What to do with previews the tool left for `resolve`: apply, discard, or ask "
            "(on a terminal; discard otherwise).",
        ),
    ] = "ask",
    *,
    sandbox: SandboxPolicy,
) -> None:
    """Run one tool call and print its result."""
    if resolve not in ("ask", "apply", "discard"):
        _fail(f"--resolve must be ask, apply or discard, got {resolve!r}")
    arguments = parse_arguments(args, args_file)
    configure_log_file(log_file)
    # A person at the terminal answers the tool's UI prompts (unless stdin carried the arguments).
    interactive = sys.stdin.isatty() and sys.stderr.isatty() and "-" not in (args, args_file)
    _check_seconds(timeout=timeout, grace=grace, load_timeout=load_timeout)
    status = _Status() if not (stream or as_json) else None

    def on_update(partial: dict[str, Any]) -> None:
        if stream:
            _emit_ndjson("update", partial)
        elif status is not None:
            status.update(partial)

    async def main(signals: _Signals) -> tuple[ToolResult, str | None]:
        call_id = "cli-call"
        try:
            # wanted_tool: a module later in precedence than the one defining
            # the tool cannot change which tool runs, so it is not waited for.
            async with open_runner(
                tools or (), grace=grace, load_timeout=load_timeout, sandbox=sandbox, wanted_tool=tool
            ) as runner:
                _warn(runner.warnings)
                if interactive:
                    runner.set_ui_context(TerminalUI(status.clear if status is not None else None))
                with signals.cancelling_call(runner, call_id):
                    # The call goes through the cancellation ladder; this process
                    # exits only once the worker's whole tree is gone.
                    result = await runner.call_tool(
                        tool, arguments, on_update=on_update, timeout=timeout, tool_call_id=call_id
                    )
                # This process ends with the call, and so do the previews' workers:
                # settle them now, newest first, as `resolve` would.
                for preview in reversed(runner.pending_actions()):
                    action = resolve
                    if action == "ask":
                        ok = interactive and await TerminalUI(None).confirm("resolve", f"apply: {preview['label']}?")
                        action = "apply" if ok else "discard"
                    settled = await runner.call_tool("resolve", {"action": action, "reason": "xcsh-run --resolve"})
                    typer.echo(f"xcsh-run: resolve ({action}): {settled.text}", err=True)
                rendered = None
                info = runner.get_tool(tool)
                if status is not None and not result.is_error and info is not None and info.has_render_result:
                    # The tool's own rendering, for people; --json and --stream stay raw.
                    rendered = await runner.render_result(tool, result, {"expanded": True}, args=arguments)
                return result, rendered
        finally:
            # Before anything else is printed, e.g. why the command was interrupted.
            if status is not None:
                status.clear()

    result, rendered = _run(main)
    if stream:
        _emit_ndjson("result", result.to_json())
    elif as_json:
        typer.echo(json.dumps(result.to_json(), ensure_ascii=False))
    elif rendered is not None:
        typer.echo(rendered)
    else:
        _print_text(result)
    raise typer.Exit(int(_EXIT_BY_KIND.get(result.kind, ExitCode.TOOL_ERROR)))


def _load(
    tools: list[str] | None, load_timeout: float, sandbox: SandboxPolicy | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    import msgspec

    async def main(_: _Signals) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
        # No tool is called: a spare worker would be started only to be stopped.
        async with open_runner(tools or (), load_timeout=load_timeout, sandbox=sandbox, spare_workers=0) as runner:
            unenforced = [f"sandbox {runner.sandbox.level!r} not fully enforced: {u}" for u in runner.unenforced]
            return msgspec.to_builtins(runner.tools), msgspec.to_builtins(runner.errors), runner.warnings + unenforced

    return _run(main)


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        typer.echo(f"xcsh-run: warning: {warning}", err=True)


def _source(item: dict[str, Any]) -> str:
    source = item["source"]
    name = source["provider_name"] if source["provider"] in ("claude-plugins", "plugin") else source["provider"]
    return f"{name}, {source['level']}"


@app.command("list")
@with_sandbox_options
def list_command(
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    log_file: LogFileOpt = None,
    *,
    sandbox: SandboxPolicy,
) -> None:
    """Show every tool found (name, label, source, path) and every module that failed to load, with why."""
    configure_log_file(log_file)
    found, errors, warnings = _load(tools, load_timeout, sandbox)
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
@with_sandbox_options
def serve_command(
    tools: ToolsOpt = None,
    timeout: TimeoutOpt = None,
    grace: GraceOpt = DEFAULT_GRACE,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    max_message_bytes: Annotated[
        int,
        typer.Option("--max-message-bytes", help="The longest MCP message (one line) accepted; longer get an error."),
    ] = DEFAULT_MAX_MESSAGE_BYTES,
    log_file: LogFileOpt = None,
    *,
    sandbox: SandboxPolicy,
) -> None:
    """Serve every tool over the Model Context Protocol on stdin/stdout (for MCP clients)."""
    from functools import partial

    from ._mcp import serve_stdio

    configure_log_file(log_file, also_stderr=True)

    _check_seconds(timeout=timeout, grace=grace, load_timeout=load_timeout)
    if max_message_bytes < 1024:
        _fail(f"--max-message-bytes must be at least 1024, got {max_message_bytes}")
    serve = partial(
        serve_stdio,
        tools or (),
        timeout=timeout,
        grace=grace,
        load_timeout=load_timeout,
        max_message_bytes=max_message_bytes,
        sandbox=sandbox,
    )

    async def main(_: _Signals) -> int:
        # The server handles SIGTERM and SIGINT itself once it runs (it winds
        # its calls down); this covers the moments before and after.
        return await serve()

    # As the server itself does: 128 + the signal's number.
    raise typer.Exit(_run(main, exit_code=lambda sig: 128 + int(sig)))


@app.command("fuzz")
@with_sandbox_options
def fuzz_command(
    tool: Annotated[list[str], typer.Argument(help="The tool's name (several may be given).")],
    examples: Annotated[int, typer.Option("--examples", help="Examples per property.")] = 100,
    seed: Annotated[
        int | None, typer.Option("--seed", help="The run's seed: the same seed replays the same run [random, printed].")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="Seconds per call before it counts as a hang [the tool's, else 10]."),
    ] = None,
    junit: Annotated[str | None, typer.Option("--junit", metavar="FILE", help="Also write a JUnit XML report.")] = None,
    fail_on_tool_error: Annotated[
        bool, typer.Option("--fail-on-tool-error", help="Count a tool_error on valid arguments as a failure.")
    ] = False,
    tools: ToolsOpt = None,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    *,
    sandbox: SandboxPolicy,
) -> None:
    """Fuzz tools with arguments generated from their own JSON Schema (see docs/fuzzing.md).

    \b
    Exit codes:
      0  no failure found
      1  a failure was found (each is printed with a command that reproduces it)
      2  usage error, unknown tool, or the tool could not be fuzzed
    130  interrupted
    """
    # Imported here: hypothesis is only paid for by `xcsh-run fuzz`.
    from ._fuzz import FuzzReport, fuzz_tool

    if examples < 1:
        _fail(f"--examples must be at least 1, got {examples}")
    _check_seconds(timeout=timeout, load_timeout=load_timeout)

    async def main(_: _Signals) -> FuzzReport:
        # A signal cancels the run; the call in flight stops through the ladder.
        return await fuzz_tool(
            tool,
            tool_paths=tools or (),
            examples=examples,
            seed=seed,
            timeout=timeout,
            fail_on_tool_error=fail_on_tool_error,
            sandbox=sandbox,
            load_timeout=load_timeout,
        )

    report = _run(main)
    typer.echo(report.summary())
    if junit is not None:
        try:
            report.write_junit(junit)
        except OSError as exc:
            _fail(f"cannot write --junit {junit!r}: {exc.strerror}")
    raise typer.Exit(report.exit_code)


def _with_default_command(argv: list[str]) -> Iterator[str]:
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        yield "run"
    yield from argv


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        args = list(_with_default_command(sys.argv[1:] if argv is None else argv))
        app(args=args, prog_name="xcsh-run")
    except KeyboardInterrupt:
        # A Ctrl-C before any command started (typer turns one inside a
        # command into a silent exit 130): no worker exists yet.
        typer.echo("xcsh-run: interrupted by SIGINT", err=True)
        raise SystemExit(int(ExitCode.CANCELLED))
