"""The ``xcsh-run`` typer application and how every command runs its trio body.

The commands register themselves on :data:`app`: ``_cli`` has ``run``,
``list``, ``describe`` and the entry point; ``batch`` the batch command; ``commands`` serve, fuzz
and daemon; ``new``, ``doctor`` and ``install_bun`` one each. ``--version`` is the app's own.

A command runs its trio body through :func:`run_main` and opens its runner
with :func:`open_cli_runner`. Both are where a warm host takes over
(:class:`Hosting`, the daemon's): the body then runs in the host's trio loop,
with the signals its client forwards, and the runner is one the host keeps
open between calls. Without a host, they are ``trio.run`` with this
process's signals, and :func:`~xcsh_run.open_runner`.
"""

from __future__ import annotations

import contextvars
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar

import trio
import typer

from xcsh_run._cli.complete import CompletingGroup
from xcsh_run._cli.options import ExitCode, fail
from xcsh_run._errors import RunnerError
from xcsh_run._host import Signals, open_runner, watching_signals
from xcsh_run._version import __version__

if TYPE_CHECKING:
    from xcsh_run._host import Runner

T = TypeVar("T")


class Hosting(Protocol):
    """A warm host running the current command for a client: its loop, its client's signals, its runners."""

    def run(self, main: Callable[[], Awaitable[None]]) -> None:
        """Run ``main`` to its end in the host's trio loop (called from the command's own thread)."""
        ...

    def signal_source(self) -> AsyncIterator[int]:
        """The signals the client forwards, as their numbers."""
        ...

    def open_runner(self, tool_paths: Sequence[str], **options: Any) -> AbstractAsyncContextManager[Runner]:
        """A runner for these options, kept open after the block for the next call that asks the same."""
        ...


HOSTING: contextvars.ContextVar[Hosting | None] = contextvars.ContextVar("xcsh_run_hosting", default=None)
"""The host running the current command, if one does (set by the daemon's host, in the command's thread)."""


def open_cli_runner(tool_paths: Sequence[str], **options: Any) -> AbstractAsyncContextManager[Runner]:
    """:func:`~xcsh_run.open_runner` for a command, or the warm host's runner for the same options."""
    hosting = HOSTING.get()
    if hosting is not None:
        return hosting.open_runner(tool_paths, **options)
    return open_runner(tool_paths, **options)


HELP = """Run LLM-agent custom tools in isolated, killable worker processes.

\b
  xcsh-run TOOL --args '{"key": "value"}'   run one tool (same as: xcsh-run run TOOL ...)
  xcsh-run TOOL --key value                 the same, with the tool's own flags
  xcsh-run TOOL --help                      the tool's description and flags
  xcsh-run path/to/tool.py [NAME] ...       a tool file alone, without a project
  xcsh-run list [--check]                   tools found, and modules that failed to load (if any: exit 1)
  xcsh-run describe TOOL                    a tool's JSON Schema and flags
  xcsh-run batch TOOL --input args.jsonl    one call per line, several at once; JSON result lines
  xcsh-run watch TOOL --args '{...}'        run again each time the tool files change (Ctrl-C ends)
  xcsh-run fuzz TOOL                        fuzz a tool with arguments generated from its schema
  xcsh-run new NAME                         a new tool, with a test, in .xcsh/tools
  xcsh-run doctor                           what this machine's sandbox can enforce
  xcsh-run install-bun                      Bun, for .ts/.js/.mjs tools (or bun on PATH)
  xcsh-run daemon start|stop|status         a warm host: `--daemon` (or XCSH_RUN_DAEMON=1) on a call uses it
Every command takes --cwd DIR (as if started in DIR).

\b
Tools are found, in this order of precedence, in:
  <root>/.xcsh/tools, ~/.xcsh/agent/tools     (native: project, then user)
  ~/.claude/tools, <root>/.claude/tools       (Claude: user, then project)
  <installPath>/tools of Claude marketplace plugins (installed_plugins.json registries)
  ~/.codex/tools, <root>/.codex/tools         (Codex: user, then project)
  installed packages with `xcsh.tools` entry points (here, and in ~/.xcsh/plugins)
  <root>/.omp/tools, ~/.omp/agent/tools       (oh-my-pi: project, then user)
  <root>/.pi/tools, ~/.pi/agent/tools         (pi-mono: project, then user)
  every --tools PATH
<root> is the nearest folder up from here with .xcsh/, else with .git, else here (`xcsh-run list` shows it).
What each module defines is cached in ~/.cache/xcsh-run, so unchanged modules are not imported again.

\b
Exit codes of a run:
    0  success
    1  the result is an error (tool_error, crashed, load_error, ...)
    2  usage error: bad flags, malformed --args, invalid arguments, unknown tool
   75  busy: the call waited past the queue deadline and never started; retry later
  124  timeout
    3  a preview the tool left was not settled: --resolve ask without a terminal,
       or applying it failed (the change is not applied; the message says why)
  130  cancelled (Ctrl-C or SIGTERM; the worker's whole tree is stopped first)
   69  not Linux, the only system xcsh-run runs on (every command; the line says what to do)
   70  --daemon: the daemon could not be started or trusted, or ended during the call
"""

app = typer.Typer(
    help=HELP,
    cls=CompletingGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"xcsh-run {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", help="Print the version and exit.", is_eager=True, callback=_print_version),
    ] = False,
) -> None:
    pass


def _exit_cancelled(sig: signal.Signals) -> int:
    return int(ExitCode.CANCELLED)


def run_main(
    body: Callable[[Signals], Awaitable[T]], exit_code: Callable[[signal.Signals], int] = _exit_cancelled
) -> T:
    """``trio.run(body)`` with SIGINT and SIGTERM handled from its first step; the usual errors become exits.

    A signal that stopped ``body`` exits with ``exit_code(signal)`` (130 by
    default) and one line on stderr, once every worker is gone. A
    ``RunnerError`` is a usage error (exit 2).
    """
    done: list[T] = []
    handled: list[Signals] = []
    hosting = HOSTING.get()

    async def main() -> None:
        async with watching_signals(None if hosting is None else hosting.signal_source()) as signals:
            handled.append(signals)
            done.append(await body(signals))

    try:
        if hosting is None:
            trio.run(main)
        else:
            hosting.run(main)
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
