"""Debugging a tool from the CLI: `-v` on stderr, the host's records in --log-file, call ids, a segfault's line.

Everything runs through the real `xcsh-run` console script, with real workers.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.conftest import TOOLS, XCSH_RUN
from xcsh_run._process.output import TAP_LINE_BYTES, TAP_LINES

CHATTY = """
import subprocess
import sys


def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        print("hello from print")
        print("a word on stderr", file=sys.stderr)
        api.logger.info("an info record")
        api.logger.debug("a debug record")
        # A process the tool starts writes to the same captured fds.
        subprocess.run([sys.executable, "-c", "print('from a child process')"], check=True)
        return "done"

    return {"name": "chatty", "label": "Chatty", "description": "Prints and logs.",
            "parameters": {"type": "object"}, "execute": execute}
"""

FLOOD = """
def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        print("x" * 50000)
        for i in range(5000):
            print(f"line {i}")
        return "done"

    return {"name": "flood", "label": "Flood", "description": "Prints a lot.",
            "parameters": {"type": "object"}, "execute": execute}
"""

SLOW = """
import signal as signals
import time


def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        signals.signal(signals.SIGTERM, signals.SIG_IGN)
        while True:
            time.sleep(0.05)

    return {"name": "slow", "label": "Slow", "description": "Never ends, ignores SIGTERM.",
            "parameters": {"type": "object"}, "execute": execute}
"""

CALL_ID = re.compile(r"call=(cli-[0-9a-f]+) ")


def run(*args: str, cwd: Path | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def _tool(tmp_path: Path, name: str, source: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return str(path)


def test_verbose_streams_the_tools_output_and_records_to_stderr(tmp_path: Path) -> None:
    tool = _tool(tmp_path, "chatty", CHATTY)
    proc = run("chatty", "--tools", tool, "-v", "--log-file", str(tmp_path / "log"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done\n"  # stdout stays the result's
    prefix = re.compile(r"^\[chatty (\d+) (cli-[0-9a-f]+)\] ", re.M)
    assert re.search(prefix.pattern + r"stdout: hello from print$", proc.stderr, re.M), proc.stderr
    assert re.search(prefix.pattern + r"stderr: a word on stderr$", proc.stderr, re.M), proc.stderr
    assert re.search(prefix.pattern + r"stdout: from a child process$", proc.stderr, re.M), proc.stderr
    assert re.search(prefix.pattern + r"info: an info record$", proc.stderr, re.M), proc.stderr
    assert "a debug record" not in proc.stderr  # -vv only
    assert re.search(r"^xcsh-run: info: worker \d+ started", proc.stderr, re.M), proc.stderr
    # Every line of the call names the same worker and call.
    assert len({m.groups() for m in prefix.finditer(proc.stderr)}) == 1

    quiet = run("chatty", "--tools", tool, "--log-file", str(tmp_path / "log"))
    assert quiet.returncode == 0
    assert quiet.stderr == ""

    debug = run("chatty", "--tools", tool, "-vv", "--log-file", str(tmp_path / "log"))
    assert re.search(prefix.pattern + r"debug: a debug record$", debug.stderr, re.M), debug.stderr


def test_verbose_output_is_bounded_per_line_and_per_call(tmp_path: Path) -> None:
    proc = run("flood", "--tools", _tool(tmp_path, "flood", FLOOD), "-v", "--log-file", str(tmp_path / "log"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = [line for line in proc.stderr.splitlines() if line.startswith("[flood ")]
    assert len(shown) == TAP_LINES + 1, len(shown)
    long_line = shown[0]
    assert long_line.endswith(f"... (line cut at {TAP_LINE_BYTES} bytes)")
    assert long_line.count("x") == TAP_LINE_BYTES
    assert "more output not shown" in shown[-1]


def test_the_log_file_gets_the_hosts_records_of_a_timeout(tmp_path: Path) -> None:
    log = tmp_path / "xcsh.log"
    tool = _tool(tmp_path, "slow", SLOW)
    proc = run("slow", "--tools", tool, "--timeout", "0.5", "--grace", "0.3", "--log-file", str(log), "--json")
    assert proc.returncode == 124, proc.stderr
    assert proc.stderr == ""  # without -v the host's records go to the file only
    assert json.loads(proc.stdout)["error"]["rung"] == "killed"
    text = log.read_text()
    call_id = CALL_ID.findall(text)[0]
    ladder = [line for line in text.splitlines() if f"call={call_id} " in line and line.split()[3] == "xcsh_run"]
    # Each rung of the ladder, then the end, each with the tool, the call and the worker's pid.
    assert "stopping 'slow' (timeout): $/cancel and SIGTERM sent, killing in 0.3 s" in ladder[0], ladder
    assert "WARNING xcsh_run [tool=slow call=" in ladder[1] and "killing 'slow' and every process" in ladder[1]
    assert "still running after the 0.3 s grace" in ladder[1]
    assert "'slow' stopped (killed)" in ladder[2]
    assert "'slow' ended timeout: 'slow' timed out after 0.5 s" in ladder[3]
    assert re.search(r"pid=\d+\]", ladder[3])


def test_every_cli_run_has_its_own_call_id(tmp_path: Path) -> None:
    log = tmp_path / "xcsh.log"
    ids: list[str] = []
    for _ in range(2):
        proc = run("log", "--tools", str(TOOLS / "hostapi.py"), "--args", '{"count": 1}', "--log-file", str(log))
        assert proc.returncode == 0, proc.stderr
        records = [line for line in log.read_text().splitlines() if "record 0 from" in line]
        call_id = CALL_ID.findall(records[-1])[0]
        assert records[-1].endswith(f"record 0 from {call_id}")  # the tool sees the same id
        ids.append(call_id)
    assert ids[0] != ids[1], ids


def test_a_segfaults_message_names_the_segfault_and_the_tools_frame() -> None:
    proc = run("segfault", "--tools", str(TOOLS / "hostile.py"), "--json")
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert error["kind"] == "crashed"
    message = error["message"]
    assert "Extension modules" not in message
    assert "last stderr: Fatal Python error: Segmentation fault" in message, message
    assert re.search(
        r'innermost tool frame: File ".*/tests/fixtures/tools/hostile\.py", line \d+ in segfault$', message
    )
    # The whole dump is still there.
    assert "Extension modules" in error["stderr_tail"] and "Current thread" in error["stderr_tail"]


def test_serve_verbose_keeps_stdout_for_the_protocol(tmp_path: Path) -> None:
    """`serve` over stdio: with -v the tool's output and records go to stderr; stdout carries JSON-RPC only."""
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "chatty", "arguments": {}}},
    ]  # fmt: skip
    proc = subprocess.Popen(
        [XCSH_RUN, "serve", "-v", "--tools", _tool(tmp_path, "chatty", CHATTY), "--log-file", str(tmp_path / "log")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(30, proc.kill)  # the reads below block: a hang ends as a failure
    watchdog.start()
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        answers: list[dict[str, Any]] = []
        while not any(a.get("id") == 2 for a in answers):
            line = proc.stdout.readline()
            assert line, "the server closed stdout before answering the call"
            answers.append(json.loads(line))  # every stdout line is a JSON-RPC message
        out, err = proc.communicate(timeout=30)  # closes stdin: the server ends
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in out.splitlines())
    assert answers[-1]["result"]["content"][0]["text"] == "done"
    assert re.search(r"^\[chatty \d+ mcp-\S+\] stdout: hello from print$", err, re.M), err
    assert re.search(r"^\[chatty \d+ mcp-\S+\] info: an info record$", err, re.M), err


def test_fuzz_takes_log_file_and_writes_the_hosts_records_there(tmp_path: Path) -> None:
    # Every command that runs tools takes --log-file (fuzz had none): a hang found by the fuzzer
    # leaves its ladder in the file, as a run's does.
    log = tmp_path / "fuzz.log"
    tool = _tool(tmp_path, "slow", SLOW)
    proc = run(
        "fuzz", "slow", "--tools", tool, "--examples", "1", "--timeout", "0.5", "--log-file", str(log), timeout=90
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    text = log.read_text()
    assert "stopping 'slow' (timeout)" in text, text[-2000:]
