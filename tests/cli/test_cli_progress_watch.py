"""The CLI's one progress style, its colour (``NO_COLOR``, ``FORCE_COLOR``) and ``xcsh-run watch``.

Through the real ``xcsh-run`` in a subprocess: on a pty the test made
(tests/_support/ptys.py) where a terminal is the point, on pipes otherwise.

1. A single call's status line and the batch's bar are one family: the same
   spinner, in the same colour, and the elapsed time in the same format;
   a tool's hostile text in the status line is shown, never obeyed.
2. rich is imported only when a progress line is drawn: never for a call on
   pipes, nor on a terminal when the tool sends no partial result.
3. Colour: on a terminal by default; none at all with ``NO_COLOR`` (the
   progress line, error labels, help); forced on pipes with ``FORCE_COLOR``,
   where the progress line is still not drawn; ``NO_COLOR`` wins over both.
4. ``watch``: the first result, an edit, the second result showing it,
   Ctrl-C: exit 130, and the workers of both runs are gone.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from tests._support.leftovers import cgroup_dirs
from tests._support.ptys import Terminal, run_on_terminal
from tests.conftest import XCSH_RUN

DEADLINE = 60.0
# Each a thing a terminal obeys (as in tests/sandbox/test_escape_terminal.py): the clipboard, the title,
# a clear-screen (ESC and C1 CSI), a cursor move, a hyperlink, a bell, a bidi override.
CONTROLS = "\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2J\x9b2J\x1b[5A\x1b]8;;http://x\x07link\x1b]8;;\x07\u202e"
RAW = [b"\x1b]52", b"\x1b]0;", b"\x1b[2J", "\x9b".encode(), b"\x1b[5A", b"\x1b]8;", "\u202e".encode(), b"\x07"]
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"  # rich's "dots"
SGR = re.compile(rb"\x1b\[[0-9;]*m")
ELAPSED = r"\d+:\d\d:\d\d"

TOOLS = r"""
import os
import time

CONTROLS = "\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2J\x9b2J\x1b[5A\x1b]8;;http://x\x07link\x1b]8;;\x07\u202e"


def factory(api):
    def busy(tool_call_id, params, on_update, ctx, signal):
        for step in range(params.get("steps", 2)):
            on_update({"content": [{"type": "text", "text": f"<step {step}> [bold]markup[/bold] :x: " + CONTROLS}]})
            time.sleep(0.05)
        return "busy done"

    def quiet(tool_call_id, params, on_update, ctx, signal):
        return "quiet done"

    obj = {"type": "object", "properties": {"steps": {"type": "integer"}}}
    return [
        {"name": "busy", "label": "Busy", "description": "Sends partial results.", "parameters": obj,
         "execute": busy},
        {"name": "quiet", "label": "Quiet", "description": "Sends none.", "parameters": obj, "execute": quiet},
    ]
"""


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "tools.py"
    path.write_text(TOOLS)
    return path


def drawn(seen: bytes) -> list[str]:
    """The progress lines drawn on the terminal, colour removed: each starts with a spinner frame."""
    text = SGR.sub(b"", seen).decode(errors="replace")
    return [part for part in re.split(r"[\r\n]|\x1b\[2K|\x1b\[1A|\x1b\[\?25[lh]", text) if part[:1] in SPINNER]


def spinner_colours(seen: bytes) -> set[bytes]:
    """The SGR sequence each spinner frame is drawn in (empty when it is drawn without)."""
    frames = "|".join(SPINNER).encode()
    return {m[1] for m in re.finditer(rb"(\x1b\[[0-9;]*m)?(?:" + frames + rb")", seen)}


# 1. One family ---------------------------------------------------------------------------------------------------


def test_the_status_line_and_the_batch_bar_are_one_style_and_a_tools_text_is_not_obeyed(
    tools: Path, tmp_path: Path
) -> None:
    code, single = run_on_terminal(tmp_path, "busy", "--tools", str(tools), "--log-file", str(tmp_path / "log"))
    assert code == 0, single
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"steps": 1}\n' * 3)
    out = tmp_path / "out.jsonl"
    code, batch = run_on_terminal(
        tmp_path, "batch", "busy", "--tools", str(tools), "--input", str(inputs), "--output", str(out),
        "--log-file", str(tmp_path / "log"),
    )  # fmt: skip
    assert code == 0, batch
    status_lines, bar_lines = drawn(single), drawn(batch)
    assert status_lines and bar_lines, (single, batch)
    # The single call: spinner, the tool's last text, the time elapsed.
    assert any(re.fullmatch(rf"[{SPINNER}] <step \d>.* {ELAPSED}\s*", line) for line in status_lines), status_lines
    # The batch: spinner, what runs, the bar and counts, the time left, the time elapsed (last in both).
    assert any(re.fullmatch(rf"[{SPINNER}] batch .*\d/3.* \S+ {ELAPSED}\s*", line) for line in bar_lines), bar_lines
    # The same spinner in the same colour in both.
    assert spinner_colours(single) == spinner_colours(batch) != {b""}, (single, batch)
    # The tool's text: its markup and emoji codes as written, its controls shown, none reaching the pty raw.
    assert "[bold]markup[/bold] :x: \\x1b]52;c;" in single.decode(), single
    for raw in RAW:
        assert raw not in single, (raw, single)
    assert b"busy done" in single


# 2. rich only when a line is drawn -------------------------------------------------------------------------------

LAUNCHER = r"""
import atexit, os, sys
def report():
    with open(os.environ["XCSH_RUN_MODULES_LOG"], "w") as f:
        f.write("\n".join(sorted(m for m in sys.modules if m == "rich" or m.startswith("rich."))))
atexit.register(report)
sys.argv = ["xcsh-run", *sys.argv[1:]]
from xcsh_run._cli.run import main
main()
"""


def test_rich_is_imported_only_when_a_progress_line_is_drawn(tools: Path, tmp_path: Path) -> None:
    log = tmp_path / "modules.log"
    env = {"XCSH_RUN_MODULES_LOG": str(log)}
    common = ["--tools", str(tools), "--log-file", str(tmp_path / "log")]

    def on_pipes(*args: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", LAUNCHER, *args, *common], cwd=tmp_path, env={**os.environ, **env},
            capture_output=True, text=True, timeout=DEADLINE,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return log.read_text().split()

    def on_terminal(*args: str) -> list[str]:
        term = Terminal(tmp_path, *args, *common, env=env, program=sys.executable)
        try:
            assert term.wait() == 0, term.text
        finally:
            term.close()
        return log.read_text().split()

    assert on_pipes("busy") == []  # partial results, but no terminal to draw them on
    assert on_pipes("quiet", "--args", "{}") == []
    assert on_terminal("-c", LAUNCHER, "quiet") == []  # a terminal, but nothing in progress to show
    assert "rich.progress" in on_terminal("-c", LAUNCHER, "busy")


# 3. Colour -------------------------------------------------------------------------------------------------------


def test_colour_on_a_terminal_and_none_at_all_with_no_color(tools: Path, tmp_path: Path) -> None:
    common = ["--tools", str(tools), "--log-file", str(tmp_path / "log")]
    _, coloured = run_on_terminal(tmp_path, "busy", *common)
    _, error = run_on_terminal(tmp_path, "nosuch", *common)
    assert SGR.search(coloured) and spinner_colours(coloured) != {b""}, coloured
    assert re.search(rb"\x1b\[[0-9;]*mxcsh-run:\x1b\[0m not_found: ", error), error
    plain = {"NO_COLOR": "1"}
    for args in (["busy"], ["nosuch"], ["--help"], ["busy", "--help"], ["run", "--bogus"], ["list", "--bogus"]):
        _, seen = run_on_terminal(tmp_path, *args, *common, env=plain)
        assert not SGR.search(seen), (args, seen)
    code, batch = run_on_terminal(
        tmp_path, "batch", "busy", *common, "--input", str(_inputs(tmp_path)), "--output", str(tmp_path / "o"),
        env=plain,
    )  # fmt: skip
    assert code == 0 and drawn(batch) and not SGR.search(batch), batch
    # NO_COLOR wins over FORCE_COLOR.
    _, seen = run_on_terminal(tmp_path, "busy", *common, env={"NO_COLOR": "1", "FORCE_COLOR": "1"})
    assert drawn(seen) and not SGR.search(seen), seen


def test_force_color_colours_pipes_but_draws_no_progress_line_there(tools: Path, tmp_path: Path) -> None:
    common = ["--tools", str(tools), "--log-file", str(tmp_path / "log")]

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [XCSH_RUN, *args, *common], cwd=tmp_path, env={**os.environ, **env}, capture_output=True,
            timeout=DEADLINE,
        )  # fmt: skip

    assert not SGR.search(run("nosuch").stderr)  # a pipe: no colour by default
    forced = run("nosuch", FORCE_COLOR="1")
    assert forced.returncode == 2 and forced.stderr.startswith(b"\x1b[1;31mxcsh-run:\x1b[0m not_found"), forced.stderr
    busy = run("busy", FORCE_COLOR="1")
    assert busy.returncode == 0 and busy.stdout == b"busy done\n", busy
    assert busy.stderr == b"", busy.stderr  # no progress line on a pipe, coloured or not
    assert not SGR.search(run("nosuch", FORCE_COLOR="1", NO_COLOR="1").stderr)


def _inputs(tmp_path: Path) -> Path:
    path = tmp_path / "inputs.jsonl"
    path.write_text('{"steps": 1}\n' * 2)
    return path


# 4. watch --------------------------------------------------------------------------------------------------------

WATCHED = """
import os

VERSION = {version!r}


def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        return f"{{VERSION}} {{params['text']}} worker={{os.getpid()}}"

    return {{"name": "echo", "label": "Echo", "description": "Says its version.",
             "parameters": {{"type": "object", "properties": {{"text": {{"type": "string"}}}}}}, "execute": execute}}
"""


class Reader:
    """A pipe read as it is written, each wait with a deadline (no sleep: select on the pipe)."""

    def __init__(self, proc: subprocess.Popen[bytes], pipe: IO[bytes] | None = None) -> None:
        pipe = pipe if pipe is not None else proc.stdout
        assert pipe is not None
        self._proc = proc
        self._fd = pipe.fileno()
        self.seen = b""

    def until(self, pattern: str, timeout: float = DEADLINE) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while (match := re.search(pattern, self.seen.decode(errors="replace"))) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"{pattern!r} not seen within {timeout} s; stdout:\n{self.seen.decode(errors='replace')}")
            ready, _, _ = select.select([self._fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._fd, 65536)
                if not chunk:
                    pytest.fail(f"the pipe closed (exit {self._proc.wait(5)}) before {pattern!r}:\n{self.seen!r}")
                self.seen += chunk
        return match


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_watch_runs_again_on_each_edit_and_ctrl_c_ends_it_with_no_worker_left(tmp_path: Path) -> None:
    tool = tmp_path / "echo.py"
    tool.write_text(WATCHED.format(version="first"))
    proc = subprocess.Popen(
        [XCSH_RUN, "watch", "echo", "--tools", str(tool), "--text", "hi", "--interval", "0.1",
         "--log-file", str(tmp_path / "log")],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        out = Reader(proc)
        first = out.until(r"run 1 of echo.*\n(first hi worker=(\d+))\n")
        tool.write_text(WATCHED.format(version="second, edited"))
        second = out.until(r"run 2 of echo.*\n(second, edited hi worker=(\d+))\n")
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read().decode() if proc.stderr is not None else ""
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()
    assert code == 130, stderr
    assert "xcsh-run watch: ok; watching the tool files for changes" in stderr, stderr
    assert stderr.endswith("xcsh-run watch: stopped\n"), stderr
    workers = {int(first[2]), int(second[2])}
    assert len(workers) == 2  # each run loaded the tool anew, in a worker of its own
    assert not [pid for pid in workers if _alive(pid)]
    assert cgroup_dirs([proc.pid]) == []


def test_watch_json_prints_one_result_a_line_and_a_usage_error_is_exit_2(tmp_path: Path) -> None:
    tool = tmp_path / "echo.py"
    tool.write_text(WATCHED.format(version="first"))
    bad = subprocess.run(
        [XCSH_RUN, "watch", "echo", "--tools", str(tool), "--interval", "0"], cwd=tmp_path, capture_output=True,
        text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert bad.returncode == 2 and "--interval must be a number of seconds above 0" in bad.stderr, bad.stderr
    proc = subprocess.Popen(
        [XCSH_RUN, "watch", "echo", "--tools", str(tool), "--args", '{"text": "hi"}', "--json", "--interval", "0.1",
         "--log-file", str(tmp_path / "log")],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        line = Reader(proc).until(r"^(\{.*\})\n")[1]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=DEADLINE) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    result = json.loads(line)
    assert result["content"][0]["text"].startswith("first hi worker=") and result["is_error"] is False


BLOCKING = """
import os
import time


def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        print(f"waiting in worker={os.getpid()}", flush=True)
        while not signal.aborted:
            time.sleep(0.05)
        return "never printed"

    return {"name": "block", "label": "Block", "description": "Waits to be stopped.",
            "parameters": {"type": "object"}, "execute": execute}
"""


def test_ctrl_c_during_a_watched_call_stops_the_call_then_the_watch(tmp_path: Path) -> None:
    tool = tmp_path / "block.py"
    tool.write_text(BLOCKING)
    proc = subprocess.Popen(
        [XCSH_RUN, "watch", "block", "--tools", str(tool), "-v", "--grace", "5", "--log-file", str(tmp_path / "log")],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        err = Reader(proc, proc.stderr)
        worker = int(err.until(r"waiting in worker=(\d+)")[1])
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=DEADLINE)
        err.until(r"xcsh-run watch: stopped\n")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    text = err.seen.decode()
    assert code == 130, text
    assert "xcsh-run: stopping block (SIGTERM sent; killing in 5.0 s" in text, text
    assert "xcsh-run: cancelled: " in text and "watching the tool files" not in text, text
    assert not _alive(worker)
    assert cgroup_dirs([proc.pid]) == []
