"""Ctrl-C while a tool's environment is being built: the command exits 130 and the installer is gone.

The build is a new wait in a worker's start (before the worker exists). The
installer is made to hang on a local package index that accepts connections
and never answers, so the interrupt lands mid-build every time, without a
sleep. The installer runs with an allow-listed environment (no test mark):
it is found by a token in its index URL, which the allow-list passes.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import XCSH_RUN
from tests.discovery.test_tool_deps import BUILD_LINE, tool

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def silent_index() -> Iterator[str]:
    """The URL of a package index that accepts every connection and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/{uuid.uuid4().hex}/simple/"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def _processes_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue  # gone, or not ours to read
    return found


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_ctrl_c_during_a_build_exits_130_and_leaves_no_installer(
    installer: str, silent_index: str, tmp_path: Path
) -> None:
    if installer == "uv" and shutil.which("uv") is None and not (Path(sys.executable).parent / "uv").exists():
        pytest.skip("uv is neither on PATH nor beside xcsh-run's interpreter (`make test` installs it)")
    tools = tmp_path / ".xcsh" / "tools"
    tools.mkdir(parents=True)
    (tools / "needs_six.py").write_text(tool("needs_six", ["six==1.16.0"]))
    env = {
        **os.environ,
        "XCSH_RUN_ENV_INSTALLER": installer,
        "PIP_INDEX_URL": silent_index,
        "UV_INDEX_URL": silent_index,
        "UV_DEFAULT_INDEX": silent_index,
        "PIP_CONFIG_FILE": os.devnull,
        "UV_NO_CONFIG": "1",
    }
    token = silent_index.split("/")[3]
    proc = subprocess.Popen(
        [XCSH_RUN, "needs_six"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen = ""
        for line in proc.stderr:  # the build has started once it says so
            seen += line
            if BUILD_LINE in line:
                break
        else:
            pytest.fail(f"no build line: {seen}")
        # The interrupt must land while the installer runs (it hangs on the silent index).
        deadline = time.monotonic() + 30
        while not _processes_with(token):
            assert time.monotonic() < deadline, f"the installer never started: {seen}"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 130, seen + rest
    assert _processes_with(token) == []
