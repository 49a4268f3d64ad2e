"""The ``xcsh-run`` command: a thin layer over the public API.

``xcsh-run TOOL --args JSON`` is shorthand for ``xcsh-run run TOOL --args JSON``:
a first argument that is not a command name or an option is taken as a tool
name. A tool that shares a command's name is reached through ``run``.

The options, exit codes and argument parsing are in ``options``; what
the commands print, in ``output``; SIGINT and SIGTERM, in ``xcsh_run._host.signals``;
the app and the trio runner of every command, in ``app``; a tool's own
flags and help, in ``tool_flags``; a tool file run alone, in ``tool_file``;
completion, in ``complete``; serve
and fuzz, in ``commands``; new, doctor and install-bun, in a module each.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shlex
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
import typer.main

from xcsh_run import _startup
from xcsh_run._cli.app import app, open_cli_runner
from xcsh_run._cli.app import run_main as _run
from xcsh_run._cli.complete import RunCommand, complete_choices, complete_tool
from xcsh_run._cli.options import (
    EXIT_BY_KIND,
    ApproveOpt,
    CwdOpt,
    ExitCode,
    GraceOpt,
    JsonOpt,
    LoadTimeoutOpt,
    LogFileOpt,
    TimeoutOpt,
    ToolsOpt,
    VerboseOpt,
    check_seconds,
    fail,
    fail_arguments,
    parse_arguments,
    with_sandbox_options,
)
from xcsh_run._cli.output import emit_ndjson, print_text, requires_text, source_label, suggest_command, warn
from xcsh_run._cli.tool_flags import (
    lookup_tool,
    name_argument,
    name_flags,
    pick_tool,
    run_options,
    tool_file,
    tool_flags,
)
from xcsh_run._config import DEFAULT_GRACE, DEFAULT_LOAD_TIMEOUT
from xcsh_run._discovery import BUILTIN_MODULE, show_builds_on_stderr
from xcsh_run._host import CallStopper, Signals
from xcsh_run._project import project_root
from xcsh_run._results import ToolResult
from xcsh_run._safe_text import json_text, visible
from xcsh_run._sandbox import SandboxPolicy
from xcsh_run._terminal import StatusLine, TerminalUI, configure_log_file
from xcsh_run.fuzz import COMMANDS

if TYPE_CHECKING:
    from xcsh_run._discovery import ToolInfo
    from xcsh_run._host import Runner


@app.command("run", cls=RunCommand, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@with_sandbox_options
def run_command(
    ctx: typer.Context,
    tool: Annotated[
        str,
        typer.Argument(
            help="The tool's name, or a tool file to run alone (a path, or a name ending in .py, .ts, .js or .mjs).",
            autocompletion=complete_tool,
        ),
    ],
    args: Annotated[
        str | None, typer.Option("--args", metavar="JSON", help="Arguments as one JSON object; '-' reads stdin.")
    ] = None,
    args_file: Annotated[
        str | None,
        typer.Option("--args-file", metavar="FILE", help="Read the JSON arguments from a file; '-' is stdin."),
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
    verbose: VerboseOpt = 0,
    show_traceback: Annotated[
        bool,
        typer.Option(
            "--traceback",
            help="When the tool raises, print its traceback on stderr (without the worker's frames); -v does too.",
        ),
    ] = False,
    resolve: Annotated[
        str,
        typer.Option(
            "--resolve",
            metavar="[ask|apply|discard]",
            help="What to do with previews the tool left for `resolve`: apply, discard, or ask "
            "(on a terminal; without one, discard and exit 3).",
            autocompletion=complete_choices("ask", "apply", "discard"),
        ),
    ] = "ask",
    cwd: CwdOpt = None,
    approve: ApproveOpt = False,
    show_tool_help: Annotated[bool, typer.Option("--xcsh-run-tool-help", hidden=True)] = False,
    *,
    sandbox: SandboxPolicy,
) -> None:
    """Run one tool call and print its result.

    The tool's own flags (`xcsh-run TOOL --help` lists them) may stand beside
    --args; given both ways, the flag wins. TOOL may be a tool file, loaded
    alone: `xcsh-run path/to/tool.py [NAME] ...` runs its only tool, or NAME.
    """
    if resolve not in ("ask", "apply", "discard"):
        fail(f"--resolve must be ask, apply or discard, got {resolve!r}")
    arguments = parse_arguments(args, args_file, as_json)
    # Before the tool's flags are read: that discovery's records belong in the log too.
    configure_log_file(log_file, verbose=verbose)
    source = tool_file(tool)
    name, extra = name_argument(ctx.args) if source is not None else (tool, list(ctx.args))
    paths = [source, *(tools or ())] if source is not None else list(tools or ())
    flagged: dict[str, Any] = {}
    if extra or show_tool_help:
        name, flagged = tool_flags(
            ctx, extra, name, paths, load_timeout, sandbox, as_json=as_json, help=show_tool_help, source=source,
            shown=tool,
        )  # fmt: skip
        arguments |= flagged
    # A person at the terminal answers the tool's UI prompts (unless stdin carried the arguments).
    interactive = sys.stdin.isatty() and sys.stderr.isatty() and "-" not in (args, args_file)
    check_seconds(timeout=timeout, grace=grace, load_timeout=load_timeout)
    status = StatusLine() if not (stream or as_json) else None

    def on_update(partial: dict[str, Any]) -> None:
        if stream:
            emit_ndjson("update", partial)
        elif status is not None:
            status.update(partial)

    async def main(signals: Signals) -> tuple[ToolResult, str | None, list[str], ToolInfo | None] | str:
        nonlocal name
        call_id = f"cli-{os.urandom(4).hex()}"  # unique per run: tells runs apart in the log file
        try:
            # wanted_tool: a module later in precedence than the one defining
            # the tool cannot change which tool runs, so it is not waited for.
            async with open_cli_runner(
                paths, grace=grace, load_timeout=load_timeout, sandbox=sandbox, wanted_tool=name,
                discover_sources=source is None, approve=approve,
            ) as runner:  # fmt: skip
                warn(runner.warnings)
                if source is not None:
                    picked, problem = pick_tool(runner.tools, runner.errors, source, tool, name)
                    if problem is not None:
                        return problem  # a usage error, once the runner is closed
                    name = picked.name if picked is not None else (name or os.path.basename(source).partition(".")[0])
                called = name or tool
                if interactive:
                    runner.set_ui_context(TerminalUI(status.clear if status is not None else None))

                # A signal during the call cancels the call, not the command, so that its
                # own `cancelled` result is still printed; a second one kills it now.
                stop = CallStopper(runner.cancel, call_id, called, grace, status.clear if status is not None else None)
                with signals.handled_by(stop):
                    # The call goes through the cancellation ladder; this process
                    # exits only once the worker's whole tree is gone.
                    result = await runner.call_tool(
                        called, arguments, on_update=on_update, timeout=timeout, tool_call_id=call_id
                    )
                unsettled = await _settle_previews(runner, resolve, interactive)
                rendered = None
                info = runner.get_tool(called)
                if status is not None and not result.is_error and info is not None and info.has_render_result:
                    # The tool's own rendering, for people; --json and --stream stay raw.
                    rendered = await runner.render_result(called, result, {"expanded": True}, args=arguments)
                return result, rendered, unsettled, info
        finally:
            # Before anything else is printed, e.g. why the command was interrupted.
            if status is not None:
                status.clear()

    outcome = _run(main)
    if isinstance(outcome, str):
        fail_arguments(outcome, as_json)
    result, rendered, unsettled, info = outcome
    if info is not None:
        from_json = args is not None or args_file is not None
        result = name_flags(result, info.parameters, run_options(ctx), arguments, flagged, from_json)
    shown = dict(stream=stream, as_json=as_json, traceback=show_traceback or verbose > 0)
    _finish(result, rendered, unsettled, suggest=tool if source is None else None, **shown)


def _finish(
    result: ToolResult,
    rendered: str | None,
    unsettled: list[str],
    *,
    suggest: str | None,
    stream: bool,
    as_json: bool,
    traceback: bool,
) -> NoReturn:
    """Print the result as asked, with the previews left unsettled, and exit with its code."""
    if stream:
        emit_ndjson("result", result.to_json())
    elif as_json:
        typer.echo(json_text(result.to_json()))
    elif rendered is not None:
        typer.echo(visible(rendered))
    else:
        print_text(result, traceback=traceback)
    if result.kind == "not_found" and suggest is not None:
        suggest_command(suggest)
    code = EXIT_BY_KIND.get(result.kind, ExitCode.TOOL_ERROR)
    for problem in unsettled:
        typer.echo(f"xcsh-run: {problem}", err=True)
    if unsettled and code == ExitCode.OK:
        code = ExitCode.UNSETTLED  # the call worked, but the change it prepared did not happen
    raise typer.Exit(int(code))


async def _settle_previews(runner: Runner, resolve: str, interactive: bool) -> list[str]:
    """Settle the previews the call left, newest first, each by its id; why each unsettled one was not.

    This process ends with the call, and so do the previews' workers: a
    preview left here is a change that never happens, so it is settled now,
    and one that could not be (no terminal to ask, an ``apply`` that failed,
    no built-in ``resolve``) is reported and makes the command fail.
    """
    problems: list[str] = []
    for preview in reversed(runner.pending_actions()):
        label = visible(preview.label)[:200]
        info = runner.get_tool("resolve")
        if info is not None and info.module != BUILTIN_MODULE:
            problems.append(
                f"preview {label!r} not applied: a tool named 'resolve' ({info.module}) takes the built-in's name; "
                "rename it to let previews be settled"
            )
            continue
        action = resolve
        if action == "ask":
            if interactive:
                ok = await TerminalUI(None).confirm("resolve", f"apply: {label}?")
                action = "apply" if ok else "discard"
            else:
                action = "discard"
                problems.append(
                    f"preview {label!r} not applied: --resolve ask needs a terminal to ask on (stdin and "
                    "stderr, without --args -); give --resolve apply or --resolve discard to settle it unasked"
                )
        settled = await runner.call_tool(
            "resolve", {"action": action, "reason": "xcsh-run --resolve", "id": preview.id}
        )
        typer.echo(f"xcsh-run: resolve ({action}): {visible(settled.text)}", err=True)
        if settled.is_error:
            problems.append(f"preview {label!r} not settled: {action} failed: {visible(settled.text)[:500]}")
    return problems


def _load(
    tools: list[str] | None, load_timeout: float, sandbox: SandboxPolicy | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    import msgspec

    async def main(_: Signals) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
        # No tool is called: a spare worker would be started only to be stopped.
        async with open_cli_runner(
            tools or (), load_timeout=load_timeout, sandbox=sandbox, spare_workers=0, discover_sources=True
        ) as runner:
            unenforced = [f"sandbox {runner.sandbox.level!r} not fully enforced: {u}" for u in runner.unenforced]
            return msgspec.to_builtins(runner.tools), msgspec.to_builtins(runner.errors), runner.warnings + unenforced

    return _run(main)


@app.command("list")
@with_sandbox_options
def list_command(
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Print only the modules that failed to load, nothing when none did (for pre-commit and CI).",
        ),
    ] = False,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    log_file: LogFileOpt = None,
    verbose: VerboseOpt = 0,
    cwd: CwdOpt = None,
    *,
    sandbox: SandboxPolicy,
) -> None:
    """Show every tool found (name, label, source, path) and every module that failed to load, with why.

    \b
    Exit codes:
      0  every module found loaded (a shadowed one is not loaded, and is no failure)
      1  a module, or a tool of one, failed to load (--check prints only those)
      2  usage error
    130  interrupted
    """
    if check and as_json:
        fail(
            "give --check or --json, not both: `list --json` has the same failures in `errors`, and the same exit code"
        )
    configure_log_file(log_file, verbose=verbose)
    found, errors, warnings = _load(tools, load_timeout, sandbox)
    failed = [e for e in errors if not e.get("shadowed_by")]
    # The module cache keeps a load error as the worker said it: a cached list fails as the first did.
    code = ExitCode.TOOL_ERROR if failed else ExitCode.OK
    cwd = os.getcwd()

    def rel(path: str) -> str:
        return os.path.relpath(path, cwd) if path.startswith(cwd + os.sep) else path

    def failure(e: dict[str, Any]) -> str:
        return visible(f"{rel(e['path'])} [{source_label(e)}]: {e['message'].removeprefix(e['path'] + ': ')}")

    if check:
        # Nothing but the failures: silent when all is well, as a pre-commit hook should be.
        for e in failed:
            typer.echo(failure(e))
        _say_failed(failed, tools)
        raise typer.Exit(int(code))
    warn(warnings)
    if as_json:
        typer.echo(json_text({"tools": found, "errors": errors, "warnings": warnings}, indent=2))
        raise typer.Exit(int(code))
    typer.echo(f"Project root: {project_root(cwd)}")
    if found:
        typer.echo("Tools:")
        width = max(len(t["name"]) for t in found)
        label_width = max(len(t["label"]) for t in found)
        for t in found:
            flag = " (hidden)" if t["hidden"] else ""
            line = f"  {t['name']:<{width}}  {t['label']:<{label_width}}  [{source_label(t)}] {rel(t['module'])}{flag}"
            typer.echo(visible(line))
            if needs := requires_text(t.get("requires")):
                typer.echo(visible(f"  {'':<{width}}  {needs}"))
    else:
        typer.echo("No tools found (see `xcsh-run --help` for where tools are looked for).")
    shadowed = [e for e in errors if e.get("shadowed_by")]
    if failed:
        typer.echo("\nFailed to load:")
        for e in failed:
            typer.echo(f"  {failure(e)}")
    if shadowed:
        typer.echo("\nShadowed (not loaded):")
        for e in shadowed:
            typer.echo(visible(f"  {rel(e['path'])} [{source_label(e)}]: by {rel(e['shadowed_by'])}"))
    _say_failed(failed, tools)
    raise typer.Exit(int(code))


def _say_failed(failed: list[dict[str, Any]], tools: list[str] | None) -> None:
    """How to go on from what failed to load, on stderr, after the failures (nothing if none).

    The command it suggests names the same ``--tools``: without them it would
    not load the failed file, and would say all is well.
    """
    if failed:
        again = shlex.join(["xcsh-run", "list", "--check", *(a for p in tools or () for a in ("--tools", p))])
        what, it = ("a module", "it") if len(failed) == 1 else (f"{len(failed)} modules or tools", "them")
        typer.echo(
            f"xcsh-run: {what} failed to load; each line above names the file, where it was found, and why. "
            f"Fix {it} and run `{again}` to check again",
            err=True,
        )


@app.command("describe")
def describe_command(
    tool: Annotated[str, typer.Argument(help="The tool's name.", autocompletion=complete_tool)],
    tools: ToolsOpt = None,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    cwd: CwdOpt = None,
) -> None:
    """Print a tool's JSON Schema and flags as JSON."""
    info, warnings = lookup_tool(tool, tools or (), load_timeout, SandboxPolicy(), missing_fails=True)
    warn(warnings)
    typer.echo(json_text(info, indent=2))


# The other commands register themselves on the app, after these three (the order `--help` lists).
from xcsh_run._cli import batch, commands, doctor, install_bun, new, watch  # noqa: E402, F401


def _with_default_command(argv: list[str]) -> list[str]:
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        argv = ["run", *argv]
    if argv[:1] == ["run"] and len(argv) > 1 and not argv[1].startswith("-") and "--help" in argv:
        # `xcsh-run TOOL --help` is the tool's help: its flags need its schema,
        # which only the command itself (after --cwd and --tools) can look up.
        argv = [arg if arg != "--help" else "--xcsh-run-tool-help" for arg in argv]
    return argv


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


def run_argv(argv: list[str]) -> int:
    """The command ``argv`` to its end, in this process and thread; its exit code (the daemon's host runs this).

    What the console script would print is printed, on whatever ``sys.stdout``
    and ``sys.stderr`` are; nothing exits the process.
    """
    try:
        _main(argv)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    return 0


def _main(argv: list[str]) -> None:
    # The CLI is the application: a host warning that none of its handlers takes (no log
    # file could be opened, a command that keeps none) reaches stderr through logging's
    # last resort, which the library's own handler would otherwise silence.
    logging.getLogger("xcsh_run").removeHandler(_startup.QUIET)
    show_builds_on_stderr()  # a tool's first run may build its environment: say so while it happens
    try:
        _command_tree()(args=_with_default_command(argv), prog_name="xcsh-run")
    except KeyboardInterrupt:
        # A Ctrl-C before any command started (typer turns one inside a
        # command into a silent exit 130): no worker exists yet.
        typer.echo("xcsh-run: interrupted by SIGINT", err=True)
        raise SystemExit(int(ExitCode.CANCELLED))


@functools.cache
def _command_tree() -> Callable[..., Any]:
    """The app as click runs it, built once per process: typer builds it from every signature (~35 ms).

    A process that runs many commands (the daemon's host) builds it once.
    """
    return typer.main.get_command(app)


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
