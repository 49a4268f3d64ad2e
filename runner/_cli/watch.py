"""The ``watch`` command: run one tool call, then again each time the tool files change, until Ctrl-C.

For a tool under development: edit it, save, read the new result. Rules:

1. Each run loads the tools anew (a runner of its own, closed with its
   workers before the next change is waited for): the edit is what runs.
2. The change detection is the MCP server's reload's
   (``xcsh_run._discovery.changes``): the tool files ``list`` would find, and
   a package folder's sources, polled. Their state is read before each load,
   so an edit saved while a call runs starts the next run as soon as it ends.
3. Every result is printed as ``run`` prints it, after a separator line on
   stdout (none with ``--json``: one JSON result a line). A failing run
   (an error result, a module that fails to load, a tool not found yet) is
   printed and watched on: the next save may fix it.
4. Ctrl-C (or SIGTERM) ends it, exit 130, once every worker is gone: during
   a call, the call is stopped through its ladder first (its ``cancelled``
   result printed; a second Ctrl-C kills it now); while waiting, at once.
5. The arguments are read once, at the start (``--args``, ``--args-file`` or
   the tool's flags). Previews a call leaves are discarded with its runner:
   ``run`` settles them.

Why a command and not ``xcsh-run TOOL --watch``: ``TOOL --flag`` takes the
tool's own flags, generated from its schema, and a tool with a ``watch``
parameter owns ``--watch`` there.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Annotated, Any, Final

import trio
import typer

from xcsh_run._cli.app import app
from xcsh_run._cli.app import run_main as _run
from xcsh_run._cli.complete import complete_tool
from xcsh_run._cli.options import (
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
    parse_arguments,
    with_sandbox_options,
)
from xcsh_run._cli.output import print_text, warn
from xcsh_run._cli.tool_flags import tool_flags
from xcsh_run._config import DEFAULT_GRACE, DEFAULT_LOAD_TIMEOUT
from xcsh_run._discovery import ToolFilesState, read_tool_files_state, wait_for_change
from xcsh_run._host import CallStopper, Signals, open_runner
from xcsh_run._results import ToolResult
from xcsh_run._safe_text import json_text, visible
from xcsh_run._sandbox import SandboxPolicy
from xcsh_run._terminal import StatusLine, TerminalUI, configure_log_file

DEFAULT_INTERVAL: Final = 0.5  # seconds between two looks at the tool files


@app.command("watch", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@with_sandbox_options
def watch_command(
    ctx: typer.Context,
    tool: Annotated[str, typer.Argument(help="The tool's name.", autocompletion=complete_tool)],
    args: Annotated[str | None, typer.Option("--args", help="Arguments as one JSON object; '-' reads stdin.")] = None,
    args_file: Annotated[
        str | None, typer.Option("--args-file", help="Read the JSON arguments from a file; '-' is stdin.")
    ] = None,
    interval: Annotated[
        float, typer.Option("--interval", metavar="SECONDS", help="Seconds between two looks at the tool files.")
    ] = DEFAULT_INTERVAL,
    timeout: TimeoutOpt = None,
    grace: GraceOpt = DEFAULT_GRACE,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    log_file: LogFileOpt = None,
    verbose: VerboseOpt = 0,
    cwd: CwdOpt = None,
    approve: ApproveOpt = False,
    *,
    sandbox: SandboxPolicy,
) -> None:
    """Run a tool call, then again each time a tool file changes (edit, save, read); Ctrl-C ends it.

    \b
    The tool's own flags may stand beside --args, as with run. Each run
    loads the tools anew and prints its result after a separator line
    (with --json, one JSON result a line and no separator). The tool
    files watched are the ones `xcsh-run list` finds, and a package
    folder's sources.

    \b
    Exit codes:
      2  usage error: bad flags, malformed --args
    130  stopped by Ctrl-C or SIGTERM (the only way it ends otherwise)
    """
    if not interval > 0:
        fail(f"--interval must be a number of seconds above 0, got {interval:g}")
    arguments = parse_arguments(args, args_file, as_json)
    configure_log_file(log_file, verbose=verbose)
    if ctx.args:
        _, flagged = tool_flags(
            ctx, list(ctx.args), tool, tools or (), load_timeout, sandbox, as_json=as_json, help=False
        )
        arguments |= flagged
    check_seconds(timeout=timeout, grace=grace, load_timeout=load_timeout)
    interactive = sys.stdin.isatty() and sys.stderr.isatty() and "-" not in (args, args_file)
    paths = list(tools or ())
    folder = os.getcwd()

    async def run_once(signals: Signals) -> tuple[ToolResult, str | None]:
        status = StatusLine() if not as_json else None
        call_id = f"cli-{os.urandom(4).hex()}"
        try:
            async with open_runner(
                paths, grace=grace, load_timeout=load_timeout, sandbox=sandbox, wanted_tool=tool,
                discover_sources=True, approve=approve,
            ) as runner:  # fmt: skip
                warn(runner.warnings)
                clear = status.clear if status is not None else None
                if interactive:
                    runner.set_ui_context(TerminalUI(clear))
                with signals.handled_by(CallStopper(runner.cancel, call_id, tool, grace, clear)):
                    result = await runner.call_tool(
                        tool, arguments, on_update=status.update if status is not None else None,
                        timeout=timeout, tool_call_id=call_id,
                    )  # fmt: skip
                info = runner.get_tool(tool)
                rendered = None
                if status is not None and not result.is_error and info is not None and info.has_render_result:
                    rendered = await runner.render_result(tool, result, {"expanded": True}, args=arguments)
                return result, rendered
        finally:
            if status is not None:
                status.clear()

    async def main(signals: Signals) -> bool:
        number = 0
        while True:
            number += 1
            # Before the load (rule 2): an edit saved during the call is a change.
            state: ToolFilesState = await read_tool_files_state(paths, folder)
            if not as_json:
                typer.echo(f"── xcsh-run watch: run {number} of {visible(tool)}, {time.strftime('%H:%M:%S')} ──")
            result, rendered = await run_once(signals)
            _show(result, rendered, as_json)
            if result.kind == "cancelled" and signals.received is not None:
                return False  # the call was stopped by the signal: so is the watch
            say(f"{_outcome(result)}; watching the tool files for changes (Ctrl-C to stop)")
            waiting = trio.CancelScope()

            def stop_waiting(sig: Any, waiting: trio.CancelScope = waiting) -> bool:
                waiting.cancel()
                return True

            with signals.handled_by(stop_waiting), waiting:
                await wait_for_change(paths, folder, state, interval)
            if waiting.cancelled_caught:
                return False

    _run(main)
    say("stopped")
    raise typer.Exit(int(ExitCode.CANCELLED))


def _show(result: ToolResult, rendered: str | None, as_json: bool) -> None:
    if as_json:
        typer.echo(json_text(result.to_json()))
    elif rendered is not None:
        typer.echo(visible(rendered))
    else:
        print_text(result)
    sys.stdout.flush()  # a pipe is block-buffered: each result is read when it is printed


def _outcome(result: ToolResult) -> str:
    return "ok" if not result.is_error else f"failed ({result.kind or 'error'})"


def say(text: str) -> None:
    typer.echo(f"xcsh-run watch: {text}", err=True)
