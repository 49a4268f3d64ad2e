"""The ``xcsh-run`` command's vocabulary: exit codes, the shared options, the sandbox flags, ``--args``.

Everything here is parsing and checking; a wrong value ends the command with
one line on stderr and exit 2 (:func:`fail`), never a traceback.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import typing
from collections.abc import Callable
from enum import IntEnum
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from xcsh_run._cli.complete import complete_choices
from xcsh_run._colour import colour_wanted, tinted
from xcsh_run._config import DEFAULT_TIMEOUT
from xcsh_run._config import check_seconds as _check_seconds
from xcsh_run._errors import ConfigError
from xcsh_run._safe_text import json_text, visible
from xcsh_run._sandbox import LEVELS, SandboxPolicy


class ExitCode(IntEnum):
    """The exit codes of ``xcsh-run TOOL``."""

    OK = 0
    TOOL_ERROR = 1  # the result is an error (tool_error, crashed, load_error, limit_exceeded, protocol_error)
    USAGE = 2  # bad flags, malformed --args, invalid arguments, unknown tool
    UNSETTLED = 3  # a preview the call left was not settled (--resolve ask without a terminal, apply failed)
    BUSY = 75  # EX_TEMPFAIL: the runner was busy and the call never started; retry later
    TIMEOUT = 124  # like timeout(1)
    CANCELLED = 130  # like a shell's 128 + SIGINT


EXIT_BY_KIND = {
    None: ExitCode.OK,
    "invalid_arguments": ExitCode.USAGE,
    "not_found": ExitCode.USAGE,
    "timeout": ExitCode.TIMEOUT,
    "cancelled": ExitCode.CANCELLED,
    "busy": ExitCode.BUSY,
}


def _change_directory(value: str | None) -> str | None:
    # Eager, so it runs before every other option's check and before the
    # command: --tools, --allow-read and discovery all see DIR as the cwd.
    if value is not None:
        try:
            os.chdir(value)
        except OSError as exc:
            raise typer.BadParameter(f"cannot change to {value!r}: {exc.strerror}") from None
    return value


def _existing_tool_paths(value: list[str] | None) -> list[str] | None:
    from xcsh_run._discovery import expand

    for path in value or ():
        where = expand(path, os.getcwd(), os.path.expanduser("~"))
        if not os.path.exists(where):
            raise typer.BadParameter(f"{path!r} does not exist ({where}); give a tool file or a folder of tools")
    return value


ToolsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tools",
        metavar="PATH",
        help="A tool file or folder to add (repeatable); relative to the current directory.",
        callback=_existing_tool_paths,
    ),
]
CwdOpt = Annotated[
    str | None,
    typer.Option(
        "--cwd",
        metavar="DIR",
        help="Run as if started in DIR: tools are found from there, relative paths start there.",
        is_eager=True,
        callback=_change_directory,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for programs instead of text.")]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help=f"Seconds before a call is stopped [default: the tool's, else {DEFAULT_TIMEOUT:g}].",
    ),
]
GraceOpt = Annotated[
    float,
    typer.Option("--grace", metavar="SECONDS", help="Seconds between SIGTERM and the kill when stopping a call."),
]
LogFileOpt = Annotated[
    str | None,
    typer.Option(
        "--log-file", metavar="FILE", help="Where host and tool log records go [~/.local/state/xcsh-run/xcsh-run.log]."
    ),
]
VerboseOpt = Annotated[
    int,
    typer.Option(
        "--verbose",
        "-v",
        count=True,
        help="Show on stderr, as they come, the tools' log records and what they print (stdout, stderr), "
        "and the host's own records; -vv adds debug records.",
    ),
]
# `serve --http`: docs/mcp.md, "Streamable HTTP".
HttpOpt = Annotated[
    str | None,
    typer.Option(
        "--http",
        metavar="[HOST:]PORT",
        help="Serve MCP Streamable HTTP at http://HOST:PORT/mcp instead of stdio; HOST defaults to 127.0.0.1 "
        "(another interface only when named); port 0 picks a free one.",
    ),
]
PortFileOpt = Annotated[
    str | None, typer.Option("--port-file", help="With --http: write the bound port to this file once listening.")
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="XCSH_RUN_MCP_TOKEN",
        show_envvar=True,
        help="With --http: require `Authorization: Bearer TOKEN` on every request.",
    ),
]
AllowOriginOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-origin",
        help="With --http: also accept browser requests from this Origin (repeatable; * for any). "
        "Requests with no Origin or a localhost one are always accepted.",
    ),
]
ApproveOpt = Annotated[
    bool,
    typer.Option(
        "--approve",
        help="Run tools that declare `approval` without asking; otherwise each such call is asked "
        "(terminal, MCP elicitation) and refused when nobody can answer.",
    ),
]
LoadTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--load-timeout",
        metavar="SECONDS",
        help="CPU seconds a module's worker may use to start, import it and run its factory; one that blocks "
        "instead is stopped after max(6 x this, 60) seconds of wall time.",
    ),
]


_SANDBOX = "Sandbox"


class SandboxOptions:
    """The sandbox flags shared by run, list and serve; see docs/sandbox.md."""

    def __init__(
        self,
        level: Annotated[
            str,
            typer.Option(
                "--sandbox",
                metavar="[" + "|".join(LEVELS) + "]",
                help="How contained a tool is: none, contained or strict (docs/sandbox.md).",
                rich_help_panel=_SANDBOX,
                autocompletion=complete_choices(*LEVELS),
            ),
        ] = "contained",
        memory_mb: Annotated[
            int | None,
            typer.Option("--memory-mb", metavar="MB", help="Memory of the tool's whole process tree [1024]."),
        ] = None,
        cpu_seconds: Annotated[
            int | None, typer.Option("--cpu-seconds", metavar="SECONDS", help="CPU time of a worker [300].")
        ] = None,
        max_procs: Annotated[
            int | None, typer.Option("--max-procs", metavar="N", help="Processes in the tree [256].")
        ] = None,
        open_files: Annotated[
            int | None, typer.Option("--open-files", metavar="N", help="Open files per process [1024].")
        ] = None,
        file_size_mb: Annotated[
            int | None, typer.Option("--file-size-mb", metavar="MB", help="Largest file written [1024].")
        ] = None,
        output_mb: Annotated[
            int | None, typer.Option("--output-mb", metavar="MB", help="stdout+stderr a worker may write [no limit].")
        ] = None,
        allow_read: Annotated[
            list[str] | None,
            typer.Option("--allow-read", metavar="PATH", help="strict: another readable path (repeatable)."),
        ] = None,
        allow_write: Annotated[
            list[str] | None,
            typer.Option("--allow-write", metavar="PATH", help="strict: another writable path (repeatable)."),
        ] = None,
        allow_exec: Annotated[
            list[str] | None,
            typer.Option("--allow-exec", metavar="PROGRAM", help="strict: a program tools may run (repeatable)."),
        ] = None,
        allow_env: Annotated[
            list[str] | None,
            typer.Option(
                "--pass-env",
                "--allow-env",
                metavar="NAME",
                help="An environment variable tools get (repeatable); a secret-looking one too, when named exactly. "
                "Others are not passed.",
            ),
        ] = None,
        env_prefix: Annotated[
            list[str] | None,
            typer.Option(
                "--pass-env-prefix",
                metavar="PREFIX",
                help="Every environment variable whose name starts with PREFIX, secrets included (repeatable).",
            ),
        ] = None,
        network: Annotated[
            str,
            typer.Option(
                "--network",
                metavar="[off|netns]",
                help="strict: off, or netns (also no interfaces).",
                autocompletion=complete_choices("off", "netns"),
            ),
        ] = "off",
        allow_connect: Annotated[
            list[int] | None,
            typer.Option(
                "--allow-connect",
                metavar="PORT",
                help="strict: outbound TCP to this port, any address (repeatable). No bind, no UDP, so no DNS.",
            ),
        ] = None,
        best_effort: Annotated[
            bool, typer.Option("--sandbox-best-effort", help="Run even where the machine lacks a mechanism.")
        ] = False,
    ) -> None:
        if level not in LEVELS:
            fail(f"--sandbox must be one of {', '.join(LEVELS)}, got {level!r}")
        if network not in ("off", "netns"):
            fail(f"--network must be off or netns, got {network!r}")
        for port in allow_connect or ():
            if not 0 < port < 65536:
                fail(f"--allow-connect takes a TCP port from 1 to 65535, got {port}")
        if allow_connect and network != "off":
            fail("--allow-connect needs --network off: an empty network namespace has nothing to connect to")
        if any(not prefix for prefix in env_prefix or ()):
            fail("--pass-env-prefix needs a non-empty prefix (an empty one would pass the whole environment)")
        base = SandboxPolicy(level=level)  # type: ignore[arg-type]
        limits = {
            "memory_mb": memory_mb, "cpu_seconds": cpu_seconds, "max_procs": max_procs, "open_files": open_files,
            "file_size_mb": file_size_mb, "output_mb": output_mb,
        }  # fmt: skip
        for name, value in limits.items():
            if value is not None and value <= 0:
                fail(f"--{name.replace('_', '-')} must be a positive number, got {value}")
        self.policy = base.replace(
            **{k: v for k, v in limits.items() if v is not None},
            extra_read_paths=tuple(os.path.abspath(p) for p in allow_read or ()),
            extra_write_paths=tuple(os.path.abspath(p) for p in allow_write or ()),
            allow_exec=tuple(allow_exec or ()),
            env_allow=tuple(allow_env or ()),
            env_allow_prefixes=tuple(env_prefix or ()),
            network=network,
            allow_connect=tuple(allow_connect or ()),
            best_effort=best_effort,
        )


F = TypeVar("F", bound=Callable[..., None])


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


def check_seconds(**durations: float | None) -> None:
    """Usage error (exit 2) for a duration flag that is not a positive number of seconds."""
    for name, value in durations.items():
        if value is not None:
            try:
                _check_seconds(f"--{name.replace('_', '-')}", value)
            except ConfigError as exc:
                fail(str(exc))


def fail(message: str, code: int = ExitCode.USAGE) -> NoReturn:
    typer.echo(f"{tinted('xcsh-run:', 'error')} {visible(message)}", err=True, color=colour_wanted() or None)
    raise typer.Exit(int(code))


def fail_arguments(message: str, as_json: bool) -> NoReturn:
    """Usage error (exit 2) about the call's arguments; with ``--json``, also the error result on stdout.

    The kind is ``invalid_arguments``, the one a call whose arguments fail the
    tool's schema ends with, so that a program reads one shape for both.
    """
    if as_json:
        error = {"kind": "invalid_arguments", "message": message}
        typer.echo(json_text({"content": [], "details": None, "is_error": True, "error": error}))
    fail(message)


def json_error(label: str, text: str, exc: json.JSONDecodeError, as_json: bool = False) -> NoReturn:
    lines = text.splitlines() or [""]
    line = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else ""
    caret = " " * (exc.colno - 1) + "^"
    fail_arguments(
        f"{label} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}\n"
        f"  {line}\n  {caret}\n"
        'Pass one JSON object, with double-quoted keys and strings, e.g. --args \'{"glob": "*.py"}\'.',
        as_json,
    )


def parse_arguments(args: str | None, args_file: str | None, as_json: bool = False) -> dict[str, Any]:
    """Read the call's arguments from ``--args``/``--args-file`` (``-`` is stdin)."""
    if args is not None and args_file is not None:
        fail_arguments("give either --args or --args-file, not both", as_json)
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
                fail_arguments(f"cannot read --args-file {args_file!r}: {exc.strerror}", as_json)
    elif args == "-":
        label, text = "stdin", sys.stdin.read()
    elif args is None:
        return {}
    else:
        text = args
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        json_error(label, text, exc, as_json)
    if not isinstance(value, dict):
        message = f'{label} must be a JSON object like \'{{"key": "value"}}\', got a JSON {type(value).__name__}'
        fail_arguments(message, as_json)
    return value
