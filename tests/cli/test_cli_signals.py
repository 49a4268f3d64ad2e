"""SIGTERM and SIGINT to `xcsh-run` before the call exists: during discovery, every command stops cleanly.

The tools folder holds a module that blocks at import (the worker runs it
during discovery) next to a normal tool. The module tells the test through a
FIFO that it is being imported, so the signal lands while discovery is really
in progress. Then: exit 130 (serve: 128 + the signal, as documented for it),
one line on stderr and no traceback, and nothing left: no process (the
autouse fixture), no cgroup named after the CLI's pid, no workdir in its
TMPDIR.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
from pathlib import Path

import pytest

from tests._support.leftovers import cgroup_dirs, remove_cgroups, workdirs
from tests.conftest import TOOLS, XCSH_RUN

BLOCKS_AT_IMPORT = """
import time

# Blocks until the test has the FIFO open for reading (it opens it first).
with open({fifo!r}, "w") as fifo:
    fifo.write("importing\\n")
while True:
    time.sleep(3600)


def factory(api):
    return []
"""

DEADLINE = 30.0


def _tools(tmp_path: Path) -> tuple[Path, Path]:
    """A tools folder (a module that blocks at import, and basic.py), and the FIFO the module writes to."""
    tools = tmp_path / "tools"
    tools.mkdir()
    fifo = tmp_path / "importing.fifo"
    os.mkfifo(fifo)
    # First in precedence (folders load in name order): it could define the
    # tool `run` asks for, so `run` must wait for it and cannot skip it.
    (tools / "a_blocks.py").write_text(BLOCKS_AT_IMPORT.format(fifo=str(fifo)))
    (tools / "basic.py").write_text((TOOLS / "basic.py").read_text())
    return tools, fifo


COMMANDS = {
    "run": ["add", "--args", '{"a": 1}'],
    "list": ["list"],
    "describe": ["describe", "add"],
    "fuzz": ["fuzz", "add", "--examples", "1"],
    "serve": ["serve"],
}


@pytest.mark.parametrize(
    ("command", "sig"),
    [
        ("run", signal.SIGTERM),
        ("run", signal.SIGINT),
        ("list", signal.SIGTERM),
        ("list", signal.SIGINT),
        ("describe", signal.SIGTERM),
        ("fuzz", signal.SIGTERM),
        ("serve", signal.SIGTERM),
        ("serve", signal.SIGINT),
    ],
)
def test_signal_during_discovery_stops_cleanly(tmp_path: Path, command: str, sig: signal.Signals) -> None:
    tools, fifo = _tools(tmp_path)
    tmpdir = tmp_path / "tmpdir"  # the CLI's own: its workdirs land here
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    # Opened before the CLI starts, without blocking: the module's open() for
    # writing then succeeds at once, and select() waits for its line.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    proc = subprocess.Popen(
        [XCSH_RUN, *COMMANDS[command], "--tools", str(tools), "--load-timeout", "120"],
        env=env,
        cwd=tmp_path,
        # serve reads MCP from stdin: an open pipe keeps it serving.
        stdin=subprocess.PIPE if command == "serve" else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([reader], [], [], DEADLINE)
        if not ready:
            proc.kill()
            out, err = proc.communicate(timeout=DEADLINE)
            pytest.fail(f"the module was not imported within {DEADLINE} s; exit {proc.returncode}\n{out}\n{err}")
        assert os.read(reader, 100) == b"importing\n"
        assert proc.poll() is None, "the CLI ended while its module was still being imported"
        proc.send_signal(sig)
        try:
            # wait(), not communicate(): that would close serve's stdin, a
            # second reason to stop racing with the signal. The output is
            # small enough for the pipes' buffers.
            proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=DEADLINE)
            pytest.fail(f"{sig.name} during discovery: `xcsh-run {command}` still running after {DEADLINE} s\n{err}")
        out, err = proc.communicate(timeout=DEADLINE)
    finally:
        os.close(reader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left_cgroups = cgroup_dirs([proc.pid])
    remove_cgroups(left_cgroups)

    expected = 128 + int(sig) if command == "serve" else 130
    assert proc.returncode == expected, err
    assert "Traceback" not in err and "ExceptionGroup" not in err, err
    if command == "serve":
        assert f"received {sig.name}" in err, err
    else:
        assert err.strip().splitlines()[-1] == f"xcsh-run: interrupted by {sig.name}", err
        assert out == ""
    assert workdirs(tmpdir) == []
    assert left_cgroups == []


def test_signal_during_the_call_still_goes_through_the_ladder(tmp_path: Path) -> None:
    """Once the call exists, a signal cancels the call, whose `cancelled` result is printed (exit 130)."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    proc = subprocess.Popen(
        [XCSH_RUN, "sleeper", "--stream", "--tools", str(TOOLS / "hostile.py")],
        env={**os.environ, "TMPDIR": str(tmpdir)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the tool streams once it runs
        assert json.loads(first)["type"] == "update", first
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    result = json.loads(out.splitlines()[-1])
    assert result["type"] == "result"
    assert result["error"]["kind"] == "cancelled"
    assert "interrupted by SIGTERM" in result["error"]["message"]
    assert "Traceback" not in err
    assert workdirs(tmpdir) == []
    assert cgroup_dirs([proc.pid]) == []
