"""The CLI on a pseudo-terminal the test made: every byte it sends the terminal, read from the master.

``pty.fork`` gives the child a new session whose controlling terminal is the
pty's slave, on its stdin, stdout and stderr: a person's terminal, as far as
the CLI (and a tool looking for that terminal) can tell. Every read has a
deadline; :meth:`Terminal.close` kills and reaps a CLI still running.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.conftest import XCSH_RUN

DEADLINE = 30.0
COLUMNS = 400  # wide: the status line is cut to the terminal's width, and the tests read it whole


class Terminal:
    """``xcsh-run *args`` with a pty as its terminal: what it wrote (stdout and stderr both), and its exit status."""

    def __init__(self, cwd: Path, *args: str, env: Mapping[str, str] | None = None, program: str = XCSH_RUN) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: exec, or exit without running the parent's code
            try:
                os.chdir(cwd)
                os.execve(program, [program, *args], {**os.environ, **(env or {})})
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        # Before the CLI asks the size (it may race this: COLUMNS in the environment says the same).
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
        self.seen = b""
        self.status: int | None = None

    def _read(self, wait: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], wait)
        if ready:
            try:
                self.seen += os.read(self.fd, 65536)
            except OSError:  # EIO: every process holding the slave is gone
                pass

    def expect(self, pattern: str, timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern.encode(), self.seen):
            if time.monotonic() > deadline or self.poll() is not None:
                self._read(0.2)  # what it wrote before it ended
                if re.search(pattern.encode(), self.seen):
                    return
                pytest.fail(f"{pattern!r} not seen within {timeout} s (exit {self.status}); output:\n{self.text}")
            self._read(0.1)

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def poll(self) -> int | None:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status

    def wait(self, timeout: float = DEADLINE) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                pytest.fail(f"the CLI did not exit within {timeout} s; output:\n{self.text}")
            self._read(0.05)
        # The slave may still be open in a process on its way out: read until EOF or a quiet spell.
        quiet = time.monotonic() + 0.5
        while time.monotonic() < quiet:
            before = len(self.seen)
            self._read(0.05)
            if len(self.seen) == before:
                break
        assert self.status is not None
        return self.status

    @property
    def text(self) -> str:
        return self.seen.decode(errors="replace")

    def close(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


def run_on_terminal(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """Run the CLI to its end on a fresh pty: its exit status and every byte the terminal got."""
    term = Terminal(cwd, *args, env=env)
    try:
        return term.wait(), term.seen
    finally:
        term.close()
