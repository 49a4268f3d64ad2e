"""What the CLI gives tools when a person is at the terminal: a UI on stdin/stderr, and the log file.

Kept apart from ``_cli`` so the command layer stays a thin parser and printer.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any, Final, TextIO

import trio

LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s [tool=%(tool)s call=%(call_id)s pid=%(pid)s] %(message)s"
LOG_BYTES: Final = 10 * 2**20
LOG_BACKUPS: Final = 3


def default_log_file() -> Path:
    """``$XDG_STATE_HOME/xcsh-run/xcsh-run.log`` (default ``~/.local/state/xcsh-run/xcsh-run.log``)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "xcsh-run" / "xcsh-run.log"


class _Defaults(logging.Filter):
    """Host records have no tool fields; give them blanks so one format serves all."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name in ("tool", "call_id", "pid"):
            if not hasattr(record, name):
                setattr(record, name, "-")
        return True


def configure_log_file(path: str | os.PathLike[str] | None, *, also_stderr: bool = False) -> Path | None:
    """Send the host's and the tools' log records to ``path`` (rotated at 10 MiB, 3 kept).

    With ``also_stderr`` they still reach the root logger's handlers too (``serve``
    logs to stderr); otherwise they go to the file only, so that a tool's
    warnings never land on a person's terminal.

    Returns the path in use, or None when it cannot be opened (a warning on
    stderr says so; logging is never a reason to fail a call).
    """
    target = Path(path) if path is not None else default_log_file()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(target, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS)
    except OSError as exc:
        sys.stderr.write(f"xcsh-run: warning: cannot write the log file {target}: {exc.strerror}\n")
        return None
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(_Defaults())
    root = logging.getLogger("xcsh_run")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    root.propagate = also_stderr
    return target


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
        self._out.write(text)
        self._out.flush()

    async def _line(self, prompt: str) -> str | None:
        self._say(prompt)
        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        return None if line == "" else line.rstrip("\n")

    async def select(self, title: str, options: list[str]) -> str | None:
        menu = "".join(f"  {i}) {option}\n" for i, option in enumerate(options, 1))
        answer = await self._line(f"{title}\n{menu}choose 1-{len(options)}: ")
        if answer is None or not answer.strip().isdigit():
            return None
        index = int(answer.strip()) - 1
        return options[index] if 0 <= index < len(options) else None

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
