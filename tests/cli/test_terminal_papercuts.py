"""A person at a terminal: Ctrl-C during the grace period, a second Ctrl-C, an invalid ``ui.select`` answer.

The CLI runs in a pseudo-terminal of its own (``pty.fork``: a new session with
the pty as its controlling terminal), and Ctrl-C is the byte a keyboard sends
(``\\x03``): the kernel turns it into SIGINT for the foreground process group.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests._support.ptys import DEADLINE, Terminal

STUBBORN = """
import os
import signal as signals
import subprocess
import time


def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        signals.signal(signals.SIGTERM, signals.SIG_IGN)
        # A child that ignores SIGTERM too: the kill rung must take the whole tree.
        child = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
        with open(params["pids"], "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        on_update({"content": [{"type": "text", "text": "tool is running"}]})
        while True:
            time.sleep(0.05)

    return {"name": "stubborn", "label": "Stubborn", "description": "Ignores SIGTERM, with a child.",
            "parameters": {"type": "object"}, "execute": execute}
"""

PICKER = """
def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        return f"picked {api.ui.select('Colour', ['red', 'green', 'blue'])!r}"

    return {"name": "picker", "label": "Picker", "description": "Asks for a colour.",
            "parameters": {"type": "object"}, "execute": execute}
"""


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie left to init to reap counts: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _stubborn(tmp_path: Path, grace: str) -> tuple[Terminal, Path]:
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    pids = tmp_path / "pids"
    args = f'{{"pids": "{pids}"}}'
    term = Terminal(tmp_path, "stubborn", "--tools", str(tmp_path / "stubborn.py"), "--grace", grace, "--args", args)
    term.expect("tool is running")
    return term, pids


def test_first_ctrl_c_says_it_is_stopping_and_the_grace_runs_out(tmp_path: Path) -> None:
    term, pids = _stubborn(tmp_path, "1.5")
    try:
        term.send(b"\x03")
        sent = time.monotonic()
        term.expect(r"xcsh-run: stopping stubborn \(SIGTERM sent; killing in 1\.5 s; press Ctrl-C again to kill now\)")
        assert term.poll() is None  # still in its grace period
        assert term.wait(DEADLINE) == 130, term.text
        elapsed = time.monotonic() - sent
    finally:
        term.close()
    assert elapsed >= 1.4, elapsed  # the tool ignored SIGTERM: it was killed when its grace ran out
    assert "cancelled: 'stubborn' was cancelled (interrupted by SIGINT)" in term.text
    assert "was killed after the grace period" in term.text
    assert all(_gone(int(pid)) for pid in pids.read_text().split())


def test_second_ctrl_c_kills_now(tmp_path: Path) -> None:
    term, pids = _stubborn(tmp_path, "30")
    try:
        term.send(b"\x03")
        term.expect(r"xcsh-run: stopping stubborn \(SIGTERM sent; killing in 30\.0 s")
        term.send(b"\x03")
        forced = time.monotonic()
        assert term.wait(10) == 130, term.text  # well before the 30 s grace
        elapsed = time.monotonic() - forced
    finally:
        term.close()
    assert elapsed < 10, elapsed
    assert "xcsh-run: killing stubborn and every process it started now" in term.text
    assert "was killed after the grace period" in term.text
    worker, child = (int(pid) for pid in pids.read_text().split())
    assert _gone(worker) and _gone(child)


def test_an_invalid_select_answer_is_asked_again(tmp_path: Path) -> None:
    (tmp_path / "picker.py").write_text(PICKER)
    term = Terminal(tmp_path, "picker", "--tools", str(tmp_path / "picker.py"))
    try:
        term.expect(r"choose 1-3: ")
        term.send(b"7\n")
        term.expect(r"'7' is not one of the choices; enter a number from 1 to 3 \(or nothing to dismiss\)")
        term.expect(r"1\) red\s+2\) green\s+3\) blue\s+choose 1-3: $")  # the choices again
        term.send(b"2\n")
        assert term.wait(DEADLINE) == 0, term.text
    finally:
        term.close()
    assert "picked 'green'" in term.text


def test_an_empty_answer_after_an_invalid_one_dismisses(tmp_path: Path) -> None:
    (tmp_path / "picker.py").write_text(PICKER)
    term = Terminal(tmp_path, "picker", "--tools", str(tmp_path / "picker.py"))
    try:
        term.expect(r"choose 1-3: ")
        term.send(b"purple\n")
        term.expect(r"'purple' is not one of the choices")
        term.send(b"\n")
        assert term.wait(DEADLINE) == 0, term.text
    finally:
        term.close()
    assert "picked None" in term.text
