"""The ``xcsh-run`` command: a thin layer over the public API.

``xcsh-run TOOL --args JSON`` is shorthand for ``xcsh-run run TOOL --args JSON``:
a first argument that is not a command name or an option is taken as a tool
name. A tool that shares a command's name is reached through ``run``.

The options, exit codes and argument parsing are in ``_cli_options``; what
the commands print, in ``_cli_output``; SIGINT and SIGTERM, in ``_signals``.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any, NoReturn, TypeVar

import trio
import typer

from ._cli_options import (
    EXIT_BY_KIND,
    AllowOriginOpt,
    ExitCode,
    GraceOpt,
    HttpOpt,
    JsonOpt,
    LoadTimeoutOpt,
    LogFileOpt,
    PortFileOpt,
    TimeoutOpt,
    TokenOpt,
    ToolsOpt,
    check_seconds,
    fail,
    parse_arguments,
    with_sandbox_options,
)
from ._cli_output import Status, emit_ndjson, print_text, source_label, warn
from ._config import DEFAULT_GRACE, DEFAULT_LOAD_TIMEOUT, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_QUEUE_TIMEOUT
from ._errors import RunnerError
from ._fuzz_report import COMMANDS, FuzzReport
from ._host import open_runner
from ._results import ToolResult
from ._sandbox import SandboxPolicy
from ._signals import Signals, watching_signals
from ._terminal import TerminalUI, configure_log_file

T = TypeVar("T")

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
   75  busy: the call waited past the queue deadline and never started; retry later
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


def _exit_cancelled(sig: signal.Signals) -> int:
    return int(ExitCode.CANCELLED)


def _run(body: Callable[[Signals], Awaitable[T]], exit_code: Callable[[signal.Signals], int] = _exit_cancelled) -> T:
    """``trio.run(body)`` with SIGINT and SIGTERM handled from its first step; the usual errors become exits.

    A signal that stopped ``body`` exits with ``exit_code(signal)`` (130 by
    default) and one line on stderr, once every worker is gone. A
    ``RunnerError`` is a usage error (exit 2).
    """
    done: list[T] = []
    handled: list[Signals] = []

    async def main() -> None:
        async with watching_signals() as signals:
            handled.append(signals)
            done.append(await body(signals))

    try:
        trio.run(main)
    except RunnerError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        # Ctrl-C before the receiver was installed or after it was closed: no
        # worker exists at either point, only trio's own SIGINT handling.
        fail("interrupted by SIGINT", ExitCode.CANCELLED)
    if not done:
        sig = (handled[0].received if handled else None) or signal.SIGINT
        fail(f"interrupted by {sig.name}", exit_code(sig))
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
        fail(f"--resolve must be ask, apply or discard, got {resolve!r}")
    arguments = parse_arguments(args, args_file)
    configure_log_file(log_file)
    # A person at the terminal answers the tool's UI prompts (unless stdin carried the arguments).
    interactive = sys.stdin.isatty() and sys.stderr.isatty() and "-" not in (args, args_file)
    check_seconds(timeout=timeout, grace=grace, load_timeout=load_timeout)
    status = Status() if not (stream or as_json) else None

    def on_update(partial: dict[str, Any]) -> None:
        if stream:
            emit_ndjson("update", partial)
        elif status is not None:
            status.update(partial)

    async def main(signals: Signals) -> tuple[ToolResult, str | None]:
        call_id = "cli-call"
        try:
            # wanted_tool: a module later in precedence than the one defining
            # the tool cannot change which tool runs, so it is not waited for.
            async with open_runner(
                tools or (), grace=grace, load_timeout=load_timeout, sandbox=sandbox, wanted_tool=tool
            ) as runner:
                warn(runner.warnings)
                if interactive:
                    runner.set_ui_context(TerminalUI(status.clear if status is not None else None))

                def cancel_call(sig: signal.Signals) -> bool:
                    # False when the call is not registered yet or is already
                    # over: there is no ladder to go through, and the whole
                    # command stops instead.
                    return runner.cancel(call_id, f"interrupted by {sig.name}")

                # A signal during the call cancels the call, not the command, so
                # that its own `cancelled` result is still printed.
                with signals.handled_by(cancel_call):
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
        emit_ndjson("result", result.to_json())
    elif as_json:
        typer.echo(json.dumps(result.to_json(), ensure_ascii=False))
    elif rendered is not None:
        typer.echo(rendered)
    else:
        print_text(result)
    raise typer.Exit(int(EXIT_BY_KIND.get(result.kind, ExitCode.TOOL_ERROR)))


def _load(
    tools: list[str] | None, load_timeout: float, sandbox: SandboxPolicy | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    import msgspec

    async def main(_: Signals) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
        # No tool is called: a spare worker would be started only to be stopped.
        async with open_runner(tools or (), load_timeout=load_timeout, sandbox=sandbox, spare_workers=0) as runner:
            unenforced = [f"sandbox {runner.sandbox.level!r} not fully enforced: {u}" for u in runner.unenforced]
            return msgspec.to_builtins(runner.tools), msgspec.to_builtins(runner.errors), runner.warnings + unenforced

    return _run(main)


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
    warn(warnings)
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
            typer.echo(
                f"  {t['name']:<{width}}  {t['label']:<{label_width}}  [{source_label(t)}] {rel(t['module'])}{flag}"
            )
    else:
        typer.echo("No tools found (see `xcsh-run --help` for where tools are looked for).")
    failed = [e for e in errors if not e.get("shadowed_by")]
    shadowed = [e for e in errors if e.get("shadowed_by")]
    if failed:
        typer.echo("\nFailed to load:")
        for e in failed:
            message = e["message"].removeprefix(e["path"] + ": ")
            typer.echo(f"  {rel(e['path'])} [{source_label(e)}]: {message}")
    if shadowed:
        typer.echo("\nShadowed (not loaded):")
        for e in shadowed:
            typer.echo(f"  {rel(e['path'])} [{source_label(e)}]: by {rel(e['shadowed_by'])}")


@app.command("describe")
def describe_command(
    tool: Annotated[str, typer.Argument(help="The tool's name.")],
    tools: ToolsOpt = None,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
) -> None:
    """Print a tool's JSON Schema and flags as JSON."""
    found, _, warnings = _load(tools, load_timeout)
    warn(warnings)
    for t in found:
        if t["name"] == tool:
            typer.echo(json.dumps(t, indent=2, ensure_ascii=False))
            return
    fail(f"no tool named {tool!r}; `xcsh-run list` shows the tools found")


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
    max_workers: Annotated[
        int | None,
        typer.Option("--max-workers", help="Calls running at once; more wait their turn [twice the cores, >= 4]."),
    ] = None,
    queue_timeout: Annotated[
        float,
        typer.Option(
            "--queue-timeout",
            help="Seconds a call may wait for its turn before it ends `busy`; its own timeout starts after.",
        ),
    ] = DEFAULT_QUEUE_TIMEOUT,
    http: HttpOpt = None,
    port_file: PortFileOpt = None,
    token: TokenOpt = None,
    allow_origin: AllowOriginOpt = None,
    *,
    sandbox: SandboxPolicy,
) -> None:
    """Serve every tool over the Model Context Protocol on stdin/stdout (for MCP clients).

    With --http, serve Streamable HTTP instead, at http://HOST:PORT/mcp (see docs/mcp.md).
    """
    from ._mcp_http import parse_address, serve_http
    from ._mcp_stdio import serve_stdio  # only this command needs the MCP server

    configure_log_file(log_file, also_stderr=True)
    check_seconds(timeout=timeout, grace=grace, load_timeout=load_timeout, queue_timeout=queue_timeout)
    if max_message_bytes < 1024:
        fail(f"--max-message-bytes must be at least 1024, got {max_message_bytes}")
    if max_workers is not None and max_workers < 1:
        fail(f"--max-workers must be at least 1, got {max_workers}")
    # (--token may come from the environment, where it is harmless for stdio.)
    if http is None and (port_file or allow_origin):
        fail("--port-file and --allow-origin need --http")
    if http is not None:
        try:
            parse_address(http)
        except ValueError as exc:
            fail(str(exc))
    if token is not None and any(arg == "--token" or arg.startswith("--token=") for arg in sys.argv):
        # /proc/<pid>/cmdline is world-readable: the environment variable is not.
        typer.echo(
            "xcsh-run serve: warning: a token given with --token is visible to every local user "
            "(ps, /proc/PID/cmdline); set XCSH_RUN_MCP_TOKEN instead",
            err=True,
        )
    http_options: dict[str, Any] = {
        "address": http,
        "port_file": port_file,
        "token": token,
        "allowed_origins": allow_origin or (),
    }
    serve = functools.partial(
        serve_stdio if http is None else functools.partial(serve_http, **http_options),
        tools or (),
        timeout=timeout,
        grace=grace,
        load_timeout=load_timeout,
        max_message_bytes=max_message_bytes,
        sandbox=sandbox,
        max_workers=max_workers,
        queue_timeout=queue_timeout,
    )

    async def main(_: Signals) -> int:
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
        typer.Option("--timeout", help="Seconds per call before it counts as a hang [10, or the tool's if shorter]."),
    ] = None,
    junit: Annotated[str | None, typer.Option("--junit", metavar="FILE", help="Also write a JUnit XML report.")] = None,
    fail_on_tool_error: Annotated[
        bool,
        typer.Option("--fail-on-tool-error", help="Count every tool_error on valid arguments, deliberate or not."),
    ] = False,
    allow_error: Annotated[
        list[str] | None,
        typer.Option("--allow-error", metavar="TYPE", help="An exception class whose tool_error passes (repeatable)."),
    ] = None,
    flag_error: Annotated[
        list[str] | None,
        typer.Option("--flag-error", metavar="TYPE", help="An exception class whose tool_error fails (repeatable)."),
    ] = None,
    max_timeouts: Annotated[
        int, typer.Option("--max-timeouts", help="Stop searching a property after this many calls timed out.")
    ] = 20,
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
      2  usage error, unknown tool, the tool could not be fuzzed, or Hypothesis
         is not installed (pip install 'hypothesis>=6.100' beside xcsh-run)
    130  interrupted
    """
    if examples < 1:
        fail(f"--examples must be at least 1, got {examples}")
    if max_timeouts < 1:
        fail(f"--max-timeouts must be at least 1, got {max_timeouts}")
    check_seconds(timeout=timeout, load_timeout=load_timeout)
    from ._fuzz import fuzz_tool  # only this command needs the fuzzer

    async def main(_: Signals) -> FuzzReport:
        # A signal cancels the run; the call in flight stops through the ladder.
        return await fuzz_tool(
            tool,
            tool_paths=tools or (),
            examples=examples,
            seed=seed,
            timeout=timeout,
            fail_on_tool_error=fail_on_tool_error,
            allow_errors=allow_error or (),
            flag_errors=flag_error or (),
            max_timeouts=max_timeouts,
            sandbox=sandbox,
            load_timeout=load_timeout,
        )

    report = _run(main)
    typer.echo(report.summary())
    if junit is not None:
        try:
            report.write_junit(junit)
        except OSError as exc:
            fail(f"cannot write --junit {junit!r}: {exc.strerror}")
    raise typer.Exit(report.exit_code)


def _with_default_command(argv: list[str]) -> Iterator[str]:
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        yield "run"
    yield from argv


def main(argv: list[str] | None = None) -> None:
    """Console entry point; with ``argv`` None (the ``xcsh-run`` script), the process ends here."""
    if argv is not None:
        _main(argv)
        return
    try:
        _main(sys.argv[1:])
    except SystemExit as exc:
        _exit_now(exc.code)
    _exit_now(0)


def _main(argv: list[str]) -> None:
    try:
        app(args=list(_with_default_command(argv)), prog_name="xcsh-run")
    except KeyboardInterrupt:
        # A Ctrl-C before any command started (typer turns one inside a
        # command into a silent exit 130): no worker exists yet.
        typer.echo("xcsh-run: interrupted by SIGINT", err=True)
        raise SystemExit(int(ExitCode.CANCELLED))


def _exit_now(code: object) -> NoReturn:
    """Exit as ``sys.exit(code)`` would, without tearing the interpreter down.

    Every worker is gone and the output is written by now: what is left of a
    normal exit is freeing every object and module one by one, a tenth of a
    second of a cold command. The atexit handlers still run (they close the
    log file), and the streams are flushed, a failure of which exits 120 as
    Python's own exit does.
    """
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`xcsh-run list | head -1`), a closed stream
            status = status or 120
    os._exit(status)
