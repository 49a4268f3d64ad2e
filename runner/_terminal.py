"""What the CLI gives tools when a person is at the terminal: a UI on stdin/stderr, and the log file.

Kept apart from ``_cli`` so the command layer stays a thin parser and printer.
What reaches the terminal or the log file from here (records, ``-v`` lines,
prompts, the progress line) went through ``_safe_text.visible``: a tool's text names, messages,
titles and options, and the terminal shows its escape sequences instead of obeying them.

The CLI has one progress style, :class:`ProgressDisplay` (rich's progress, on
stderr, drawn only when stderr is a terminal): a spinner, what is in progress,
the time elapsed. A single call's :class:`StatusLine` shows the tool's last
partial text in it; ``batch`` a bar and counts. rich is imported when a
display is first drawn, never on a call that draws none. Colour follows
``_colour`` (``NO_COLOR``, ``FORCE_COLOR``).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any, Final, TextIO

import trio

from xcsh_run._colour import colour_wanted
from xcsh_run._safe_text import visible

LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s [tool=%(tool)s call=%(call_id)s pid=%(pid)s] %(message)s"
LOG_BYTES: Final = 10 * 2**20
LOG_BACKUPS: Final = 3
SELECT_ATTEMPTS: Final = 3  # answers a `ui.select` prompt takes before an invalid one dismisses it
OUTPUT_LOGGER: Final = "xcsh_run.output"  # xcsh_run._process.output's tap
TOOL_LOGGER: Final = "xcsh_run.tool"  # xcsh_run._host.host_api's tool records


def default_log_file() -> Path:
    """``$XDG_STATE_HOME/xcsh-run/xcsh-run.log`` (default ``~/.local/state/xcsh-run/xcsh-run.log``)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "xcsh-run" / "xcsh-run.log"


class _Defaults(logging.Filter):
    """Host records have no tool fields; give them blanks so one format serves all."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name in ("tool", "call_id", "pid", "stream"):
            if getattr(record, name, None) is None:
                setattr(record, name, "-")
        return True


class SafeFormatter(logging.Formatter):
    """Lines neutralised whole: a tool's name, message and traceback alike (the log file too: ``less -R`` obeys ESC)."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


class _VerboseFormat(logging.Formatter):
    """``-v`` lines: a tool's output and records under its name, pid and call; the host's as ``xcsh-run:``."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.name in (OUTPUT_LOGGER, TOOL_LOGGER):
            who = " ".join(str(getattr(record, name, "-")) for name in ("tool", "pid", "call_id"))
            # An output record's message is already "stdout: ..." or "stderr: ...".
            level = "" if record.name == OUTPUT_LOGGER else f"{record.levelname.lower()}: "
            return visible(f"[{who}] {level}{message}")
        return visible(f"xcsh-run: {record.levelname.lower()}: {message}")


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on whatever ``sys.stderr`` is when a record comes (a test may swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        if _showing:  # above the progress display, which redraws below it (never a line drawn through)
            try:
                _showing[-1].print_above(self.format(record))
            except Exception:
                self.handleError(record)
            return
        self.stream = sys.stderr
        try:
            if self.stream.isatty():
                self.stream.write("\r\x1b[K")  # over the live status line (the next update redraws it)
        except (OSError, ValueError):
            pass  # emit() reports its own failure below
        super().emit(record)


# The progress displays drawn now (one at most, in practice): `-v` records are printed above it.
_showing: list[ProgressDisplay] = []

# Set by configure_log_file: a second call (the CLI run in-process, in tests) replaces them.
_installed: list[logging.Handler] = []


def configure_log_file(path: str | os.PathLike[str] | None, *, verbose: int = 0) -> None:
    """Wire logging for a CLI command: the host's and the tools' records to ``path``, and ``-v`` to stderr.

    The log file (``path``, else :func:`default_log_file`; rotated at 10 MiB,
    3 kept) gets every record of the ``xcsh_run`` loggers: the host's own
    (worker starts, timeouts, the ladder's rungs, crashes, kills) and the
    tools' (``xcsh_run.tool``). A log file that cannot be opened is a warning
    on stderr, never a reason to fail a call.

    ``verbose`` (the count of ``-v``): 1 streams the tools' records, the
    captured stdout and stderr of each worker and its children
    (``xcsh_run.output``, bounded, see ``xcsh_run._process.output``) and the host's
    records at INFO to stderr as they come; 2 adds DEBUG. Without it, nothing
    reaches stderr but what propagates to the root logger's handlers (``serve``
    installs one for warnings): a tool's records never land on a person's
    terminal uninvited. stdout is never written, so ``serve`` (stdio) keeps it for the protocol.
    """
    reset_logging()  # the last command's handlers and log file: the daemon's host runs many commands
    root = logging.getLogger("xcsh_run")
    root.setLevel(logging.DEBUG)
    # The output tap reads and splits the workers' output only when someone listens.
    logging.getLogger(OUTPUT_LOGGER).setLevel(logging.INFO if verbose else logging.WARNING)
    target = Path(path) if path is not None else default_log_file()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.handlers.RotatingFileHandler(
            target, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS
        )
    except OSError as exc:
        sys.stderr.write(f"xcsh-run: warning: cannot write the log file {target}: {exc.strerror}\n")
    else:
        handler.setFormatter(SafeFormatter(LOG_FORMAT))
        handler.addFilter(_Defaults())
        _installed.append(handler)
    if verbose:
        handler = _Stderr()
        handler.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
        handler.setFormatter(_VerboseFormat())
        handler.addFilter(_Defaults())
        _installed.append(handler)
    for handler in _installed:
        root.addHandler(handler)
    # With -v every record reaches stderr here; a root handler would print the warnings twice.
    root.propagate = not verbose


def verbose_on_stderr() -> bool:
    """Whether ``-v`` is on: every ``xcsh_run`` record already reaches stderr (see :func:`configure_log_file`)."""
    return any(isinstance(handler, _Stderr) for handler in _installed)


class TerminalUI:
    """The UI bridge for a person at the terminal: prompts on stderr, answers from stdin.

    ``clear_status`` is called before each prompt so the live status line does
    not garble it. Reading stdin happens in a thread that a cancelled call
    abandons (the prompt is answered with the no-op value by the host).
    """

    def __init__(self, clear_status: Any = None, out: TextIO | None = None) -> None:
        self._clear = clear_status
        self._out = out or sys.stderr
        self._editor_text = ""

    def _say(self, text: str) -> None:
        if self._clear is not None:
            self._clear()
        self._out.write(visible(text))  # titles, options, messages: the tool's text
        self._out.flush()

    async def _line(self, prompt: str) -> str | None:
        self._say(prompt)
        line = await read_terminal_line(sys.stdin)
        return None if line == "" else line.rstrip("\n")

    async def select(self, title: str, options: list[str]) -> str | None:
        """An option, by its number or its text; nothing (or end of input) dismisses: None.

        An answer that is neither is asked again, with the choices listed,
        ``SELECT_ATTEMPTS`` times in all; then the prompt counts as dismissed.
        """
        menu = "".join(f"  {i}) {option}\n" for i, option in enumerate(options, 1))
        prompt = f"{title}\n{menu}choose 1-{len(options)}: "
        for _ in range(SELECT_ATTEMPTS):
            answer = await self._line(prompt)
            if answer is None or not answer.strip():
                return None
            choice = answer.strip()
            if choice.isdigit() and 1 <= int(choice) <= len(options):
                return options[int(choice) - 1]
            if choice in options:
                return choice
            prompt = (
                f"{choice!r} is not one of the choices; enter a number from 1 to {len(options)} "
                f"(or nothing to dismiss)\n{menu}choose 1-{len(options)}: "
            )
        self._say(f"no valid choice after {SELECT_ATTEMPTS} answers; {title!r} dismissed\n")
        return None

    async def confirm(self, title: str, message: str) -> bool:
        answer = await self._line(f"{title}: {message} [y/N] ")
        return answer is not None and answer.strip().lower() in ("y", "yes")

    async def input(self, title: str, placeholder: str | None = None) -> str | None:
        hint = f" ({placeholder})" if placeholder else ""
        return await self._line(f"{title}{hint}: ")

    async def editor(self, title: str, prefill: str | None = None) -> str | None:
        return await self.input(title, prefill)

    def notify(self, message: str, type: str = "info") -> None:
        self._say(f"[{type}] {message}\n")

    def set_status(self, key: str, text: str | None) -> None:
        if text:
            self._say(f"[{key}] {text}\n")

    def get_editor_text(self) -> str:
        return self._editor_text

    def set_editor_text(self, text: str) -> None:
        self._editor_text = text


async def read_terminal_line(stream: TextIO) -> str:
    """One line typed at the terminal ``stream`` reads (its end: ""), read in the trio loop.

    Not ``readline`` on a thread: a cancelled prompt would leave that thread
    blocked in ``read``, and the next line typed there (at the shell, or at the
    next command the daemon's host runs on that fd) would go to it. A terminal
    in canonical mode gives a read one line at most, so nothing typed ahead
    for a later prompt is taken.
    """
    fd = stream.fileno()
    data = b""
    while not data.endswith(b"\n"):
        await trio.lowlevel.wait_readable(fd)
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
        if not chunk:
            break
        data += chunk
    return data.decode(getattr(stream, "encoding", None) or "utf-8", "replace")


def reset_logging() -> None:
    """Undo :func:`configure_log_file`: a process that runs many commands (the daemon's host) starts each clean."""
    root = logging.getLogger("xcsh_run")
    for old in _installed:
        root.removeHandler(old)
        old.close()
    _installed.clear()
    root.setLevel(logging.NOTSET)
    root.propagate = True
    logging.getLogger(OUTPUT_LOGGER).setLevel(logging.NOTSET)


SPINNER: Final = "dots"  # rich's spinner name: the single call's and the batch's alike


def draws_progress(stream: TextIO) -> bool:
    """Whether a progress display is drawn on ``stream``: only on a terminal (``FORCE_COLOR`` does not change it)."""
    try:
        return stream.isatty()
    except (AttributeError, OSError, ValueError):
        return False


class ProgressDisplay:
    """The CLI's one progress style on ``stream``: a spinner, ``columns`` (rich progress columns), the time elapsed.

    Drawn in place on a terminal only (callers check :func:`draws_progress`),
    erased when stopped (it may be started again: a prompt, a message, then
    the line again), coloured as ``_colour`` says. Every text in ``columns``
    is the caller's to neutralise; rich markup and emoji codes are off, so
    ``[bold]`` or ``:x:`` in a tool's text is shown as written.
    """

    def __init__(self, stream: TextIO, *columns: Any) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TimeElapsedColumn

        colour = colour_wanted(stream)
        console = Console(
            file=stream,
            force_terminal=True,  # drawn only on a terminal: rich is not left to guess (TERM, CI variables)
            color_system="auto" if colour else None,  # None: no SGR sequence at all, not even bold
            no_color=not colour,
            markup=False,
            emoji=False,
            highlight=False,
        )
        # stderr is not redirected: the -v records come through `print_above`, on the console's lock.
        self.progress = Progress(
            SpinnerColumn(SPINNER),
            *columns,
            TimeElapsedColumn(),
            console=console,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            _showing.append(self)
            self.progress.start()

    def stop(self) -> None:
        if self._started:
            self._started = False
            _showing.remove(self)
            self.progress.stop()

    def print_above(self, line: str) -> None:
        """A whole line (already neutralised) above the display, which is redrawn below it."""
        from rich.text import Text

        self.progress.console.print(Text(line), soft_wrap=True)  # soft: a long record stays one line


class StatusLine:
    """The live progress line of one tool call on stderr: the tool's last partial text, drawn only on a terminal.

    ``update`` takes each partial result (``on_update``); ``clear`` erases the
    line before anything else is written (a prompt, a message, the result),
    and the next update draws it again, its elapsed time counted from the first.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = sys.stderr if stream is None else stream
        self.enabled = draws_progress(self._stream)
        self._display: ProgressDisplay | None = None
        self._task: Any = None

    def update(self, partial: dict[str, Any]) -> None:
        if not self.enabled:
            return
        texts = [b.get("text", "") for b in partial.get("content", []) if b.get("type") == "text"]
        # Shown before it is split: splitlines() breaks at a CR (and at C1 NEL), which would hide the rest.
        line = (visible(texts[-1]).splitlines() or [""])[-1] if texts else ""
        if self._display is None:
            from rich.progress import TextColumn
            from rich.table import Column

            column = TextColumn("{task.fields[line]}", markup=False, table_column=Column(no_wrap=True, ratio=1))
            self._display = ProgressDisplay(self._stream, column)
            self._task = self._display.progress.add_task("", total=None, line=line)
        self._display.progress.update(self._task, line=line)
        self._display.start()
        self._display.progress.refresh()

    def clear(self) -> None:
        if self._display is not None:
            self._display.stop()
