"""The ``serve``, ``fuzz`` and ``daemon`` commands (``run``, ``list`` and ``describe`` are in ``_cli``)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer

from xcsh_run._cli.app import app
from xcsh_run._cli.app import run_main as _run
from xcsh_run._cli.complete import complete_choices, complete_tool
from xcsh_run._cli.options import (
    AllowOriginOpt,
    ApproveOpt,
    CwdOpt,
    GraceOpt,
    HttpOpt,
    JsonOpt,
    LoadTimeoutOpt,
    LogFileOpt,
    PortFileOpt,
    TimeoutOpt,
    TokenOpt,
    ToolsOpt,
    VerboseOpt,
    check_seconds,
    fail,
    with_sandbox_options,
)
from xcsh_run._config import DEFAULT_GRACE, DEFAULT_LOAD_TIMEOUT, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_QUEUE_TIMEOUT
from xcsh_run._host import Signals, open_runner
from xcsh_run._safe_text import json_text, visible
from xcsh_run._sandbox import SandboxPolicy
from xcsh_run._terminal import configure_log_file
from xcsh_run.fuzz import FuzzReport


@app.command("serve")
@with_sandbox_options
def serve_command(
    tools: ToolsOpt = None,
    timeout: TimeoutOpt = None,
    grace: GraceOpt = DEFAULT_GRACE,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    approve: ApproveOpt = False,
    max_message_bytes: Annotated[
        int,
        typer.Option("--max-message-bytes", help="The longest MCP message (one line) accepted; longer get an error."),
    ] = DEFAULT_MAX_MESSAGE_BYTES,
    log_file: LogFileOpt = None,
    verbose: VerboseOpt = 0,
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
    include_hidden: Annotated[
        list[str] | None,
        typer.Option(
            "--include-hidden",
            metavar="NAME",
            help="List this hidden tool in tools/list too (repeatable); hidden tools are callable by name anyway.",
        ),
    ] = None,
    cwd: CwdOpt = None,
    *,
    sandbox: SandboxPolicy,
) -> None:
    """Serve every tool over the Model Context Protocol on stdin/stdout (for MCP clients).

    With --http, serve Streamable HTTP instead, at http://HOST:PORT/mcp (see docs/mcp.md).
    """
    from xcsh_run._mcp import serve_stdio  # only this command needs the MCP server

    configure_log_file(log_file, verbose=verbose)
    check_seconds(timeout=timeout, grace=grace, load_timeout=load_timeout, queue_timeout=queue_timeout)
    if max_message_bytes < 1024:
        fail(f"--max-message-bytes must be at least 1024, got {max_message_bytes}")
    if max_workers is not None and max_workers < 1:
        fail(f"--max-workers must be at least 1, got {max_workers}")
    # (--token may come from the environment, where it is harmless for stdio.)
    if http is None and (port_file or allow_origin):
        fail("--port-file and --allow-origin need --http")
    if http is not None:
        # Only --http imports the HTTP transport.
        from xcsh_run._mcp.http import parse_address

        try:
            parse_address(http)
        except ValueError as exc:
            fail(str(exc))
    if include_hidden:
        _check_hidden(include_hidden, tools, load_timeout, sandbox)
    if token is not None and any(arg == "--token" or arg.startswith("--token=") for arg in sys.argv):
        # /proc/<pid>/cmdline is world-readable: the environment variable is not.
        typer.echo(
            "xcsh-run serve: warning: a token given with --token is visible to every local user "
            "(ps, /proc/PID/cmdline); set XCSH_RUN_MCP_TOKEN instead",
            err=True,
        )
    transport: Callable[..., Awaitable[int]] = serve_stdio
    if http is not None:
        from xcsh_run._mcp.http import serve_http

        http_options: dict[str, Any] = {
            "address": http, "port_file": port_file, "token": token, "allowed_origins": allow_origin or (),
        }  # fmt: skip
        transport = functools.partial(serve_http, **http_options)
    serve = functools.partial(
        transport,
        tools or (),
        timeout=timeout,
        grace=grace,
        load_timeout=load_timeout,
        max_message_bytes=max_message_bytes,
        sandbox=sandbox,
        max_workers=max_workers,
        queue_timeout=queue_timeout,
        include_hidden=include_hidden or (),
        approve=approve,
    )

    async def main(_: Signals) -> int:
        # The server handles SIGTERM and SIGINT itself once it runs (it winds
        # its calls down); this covers the moments before and after.
        return await serve()

    # As the server itself does: 128 + the signal's number.
    raise typer.Exit(_run(main, exit_code=lambda sig: 128 + int(sig)))


def _check_hidden(names: list[str], tools: list[str] | None, load_timeout: float, sandbox: SandboxPolicy) -> None:
    """Fail (usage, exit 2) unless every ``--include-hidden`` name is a hidden tool of those found now.

    A load of its own, before the server's: a typo found only by a client that
    never sees the tool would be found by nobody.
    """

    async def hidden_tools(_: Signals) -> list[str]:
        async with open_runner(
            tools or (), load_timeout=load_timeout, sandbox=sandbox, spare_workers=0, discover_sources=True
        ) as runner:
            # The built-in `resolve` is callable (so listable) whatever the tools declare.
            return sorted({t.name for t in runner.tools if t.hidden} | {"resolve"})

    hidden = _run(hidden_tools)
    unknown = [n for n in dict.fromkeys(names) if n not in hidden]
    if unknown:
        there = ", ".join(hidden) if hidden else "none"
        fail(f"--include-hidden: no hidden tool named {', '.join(map(repr, unknown))}; the hidden tools are: {there}")


@app.command("fuzz")
@with_sandbox_options
def fuzz_command(
    tool: Annotated[
        list[str], typer.Argument(help="The tool's name (several may be given).", autocompletion=complete_tool)
    ],
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
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Shard the campaign over a Ray cluster (auto, HOST:PORT, ray://...); needs xcsh-run[ray].",
        ),
    ] = None,
    shards: Annotated[
        int | None, typer.Option("--shards", help="With --ray: shards of the campaign [the cluster's nodes].")
    ] = None,
    tools: ToolsOpt = None,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    log_file: LogFileOpt = None,
    verbose: VerboseOpt = 0,
    cwd: CwdOpt = None,
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
    if shards is not None and (ray is None or shards < 1):
        fail("--shards needs --ray" if ray is None else f"--shards must be at least 1, got {shards}")
    configure_log_file(log_file, verbose=verbose)
    if ray is not None:
        _fuzz_on_ray(
            tool,
            ray,
            shards,
            examples,
            seed,
            timeout,
            max_timeouts,
            tools,
            load_timeout,
            junit,
            sandbox,
            {
                "fail_on_tool_error": fail_on_tool_error,
                "allow_errors": allow_error or (),
                "flag_errors": flag_error or (),
            },
        )
    from xcsh_run.fuzz import fuzz_tool  # only this command needs the fuzzer

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
            discover_sources=True,
        )

    _finish(_run(main), report_text=None, junit=junit)


def _finish(report: FuzzReport, report_text: str | None, junit: str | None) -> None:
    typer.echo(visible(report_text if report_text is not None else report.summary()))
    if junit is not None:
        try:
            report.write_junit(junit)
        except OSError as exc:
            fail(f"cannot write --junit {junit!r}: {exc.strerror}")
    raise typer.Exit(report.exit_code)


def _fuzz_on_ray(
    tool: list[str],
    address: str,
    shards: int | None,
    examples: int,
    seed: int | None,
    timeout: float | None,
    max_timeouts: int,
    tools: list[str] | None,
    load_timeout: float,
    junit: str | None,
    sandbox: SandboxPolicy,
    judge: dict[str, Any],
) -> None:
    """``fuzz --ray``: one tool's campaign sharded over the cluster (``_sharded``); exits."""
    from xcsh_run.fuzz import fuzz_tool_ray

    if len(tool) != 1:
        fail(f"--ray fuzzes one tool at a time, got {len(tool)}: run one campaign per tool")
    if not tools:
        fail("--ray needs the tool's files as --tools PATH: they are shipped to every node")

    async def main(_: Signals) -> Any:
        return await fuzz_tool_ray(
            tool[0],
            tool_paths=tools,
            address=address,
            examples=examples,
            seed=seed,
            shards=shards,
            timeout=timeout,
            max_timeouts=max_timeouts,
            sandbox=sandbox,
            load_timeout=load_timeout,
            **judge,
        )

    campaign = _run(main)
    _finish(campaign.report, campaign.summary(), junit)


@app.command("daemon")
def daemon_command(
    action: Annotated[
        str,
        typer.Argument(
            metavar="start|stop|status",
            help="start: start it (if none runs); stop: stop it, letting running calls end; status: what it runs.",
            autocompletion=complete_choices("start", "stop", "status"),
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """The warm host that answers `xcsh-run --daemon TOOL ...` (or XCSH_RUN_DAEMON=1) without a cold start.

    \b
    Exit codes:
      0  done (status: a daemon runs)
      1  status: no daemon runs
     70  the daemon could not be started, reached or trusted (the line says why)
    """
    from xcsh_run import _daemon

    if action not in ("start", "stop", "status"):
        fail(f"daemon: the action is start, stop or status, got {action!r}")
    try:
        if action == "stop":
            pid = _daemon.stop()
            _say(as_json, {"stopped": pid}, f"daemon {pid} stopped" if pid else "no daemon was running")
            return
        if action == "start":
            sock = _daemon.connect()
            if sock is not None:
                sock.close()
        state = _daemon.status()
    except (_daemon.DaemonError, _daemon.DaemonDirUnsafe, OSError) as exc:
        fail(f"daemon: {exc}", _daemon.DAEMON_FAILED)
    if state is None:
        _say(as_json, {"running": False}, "no daemon running (`xcsh-run daemon start`, or `--daemon` on a call)")
        raise typer.Exit(1)
    _say(as_json, {"running": True, **state}, _status_text(state))


def _say(as_json: bool, data: dict[str, Any], text: str) -> None:
    typer.echo(json_text(data, indent=2) if as_json else text)


def _status_text(state: dict[str, Any]) -> str:
    hosts = state.get("hosts") or []
    mib = sum(int(h.get("rss") or 0) for h in hosts) + int(state.get("rss") or 0)
    busy = sum(1 for h in hosts if h.get("busy"))
    runners = sum(int(h.get("runners") or 0) for h in hosts)
    lines = [
        f"daemon {state.get('pid')}: xcsh-run {state.get('version')} on {state.get('python')}",
        f"  folder: {state.get('folder')} (its socket and log)",
        f"  hosts: {len(hosts)} ({busy} busy, {state.get('waiting', 0)} calls waiting), runners kept: {runners}",
        f"  memory: {mib / (1 << 20):.0f} MiB (the daemon, its hosts and their workers)",
    ]
    idle = state.get("idle_seconds")
    lines.append(f"  ends after {float(idle):.0f} s without a call" if idle is not None else "  never ends on its own")
    if not state.get("current"):
        lines.append("  another install or version than this xcsh-run's: the next call replaces it")
    return "\n".join(lines)
