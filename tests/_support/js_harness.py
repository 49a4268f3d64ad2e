"""The host side of a Bun worker on real pipes, for tests/test_js_worker*.py.

:class:`JsWorker` plays the launch step itself: it makes the two pipes, starts
Bun in a new session with the handoff in ``XCSH_WORKER_INIT`` (as
worker/__main__.py does after it has checked ``initialize``), and then speaks
frames through ``xcsh_run.worker.protocol.frames`` / ``xcsh_run.worker.protocol.messages``. Tool modules are in
tests/js_fixtures.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from xcsh_run.worker.protocol.frames import FrameDecoder, NeedData, encode_message
from xcsh_run.worker.protocol.messages import ErrorResponse, Message, Notification, Request, Response

ROOT = Path(__file__).parents[2]
JS = ROOT / "worker" / "js"
FIXTURES = ROOT / "tests" / "fixtures" / "js_fixtures"
BUN = os.environ.get("XCSH_RUN_BUN") or str(ROOT / ".cache/bun/node_modules/bun/bin/bun.exe")
TYPEBOX = os.environ.get("XCSH_RUN_TYPEBOX") or str(ROOT / ".cache/bun/node_modules/@sinclair/typebox")
DEADLINE = 10.0


def skip_without_bun() -> None:
    """Skip the calling test module when Bun is absent (outside CI, where its absence is an error)."""
    if not os.path.exists(BUN):
        if os.environ.get("CI"):
            raise RuntimeError(f"Bun is missing at {BUN}: set XCSH_RUN_BUN or install it under .cache/bun")
        pytest.skip(f"Bun not found at {BUN} (set XCSH_RUN_BUN)", allow_module_level=True)


class JsWorker:
    """One Bun worker on pipes of our own; the host side, with frames in and out."""

    def __init__(
        self,
        tmp: Path,
        *,
        max_frame_bytes: int | None = None,
        buffered: bytes = b"",
        has_ui: bool = False,
        kill_file: Path | None = None,
    ):
        """``kill_file`` stands in for the boundary's cgroup.kill: the lifeline writes "1" to it."""
        r_in, self.w_in = os.pipe()
        kill_fd = os.open(kill_file, os.O_WRONLY | os.O_CREAT, 0o600) if kill_file is not None else -1
        self.r_out, w_out = os.pipe()
        params: dict[str, Any] = {"protocol_version": 1, "host_pid": os.getpid(), "cwd": str(tmp)}
        if max_frame_bytes is not None:
            params["max_frame_bytes"] = max_frame_bytes
        if has_ui:
            params["has_ui"] = True
        handoff = {
            "id": 1,
            "params": params,
            "unenforced": ["landlock: test"],
            "supervisor": 0,
            "fd_in": r_in,
            "fd_out": w_out,
            "kill_fd": kill_fd,
            "buffered": base64.b64encode(buffered).decode(),
            "typebox": TYPEBOX if os.path.isdir(TYPEBOX) else "",
        }
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp),
            "XCSH_RUN_TEST_MARK": os.environ["XCSH_RUN_TEST_MARK"],
            "XCSH_WORKER_INIT": json.dumps(handoff),
        }
        self.stderr_path = tmp / "worker.stderr"
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                # --config=PATH: Bun 1.4.5 takes "-c PATH" (with a space) for the script to run.
                [BUN, "--no-install", "--no-env-file", f"--config={JS / 'bunfig.toml'}", str(JS / "main.ts")],
                pass_fds=(r_in, w_out) if kill_fd < 0 else (r_in, w_out, kill_fd),
                start_new_session=True,
                env=env,
                cwd=tmp,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
            )
        os.close(r_in)
        os.close(w_out)
        if kill_fd >= 0:
            os.close(kill_fd)
        self.decoder = FrameDecoder()
        self.next_id = 100
        self.inbox: list[Message] = []

    # --- host -> worker ---------------------------------------------------------
    def write(self, data: bytes) -> None:
        os.write(self.w_in, data)

    def request(self, method: str, params: Any, req_id: int | str | None = None) -> int | str:
        if req_id is None:
            self.next_id += 1
            req_id = self.next_id
        self.write(encode_message(Request(id=req_id, method=method, params=params)))
        return req_id

    def notify(self, method: str, params: Any) -> None:
        self.write(encode_message(Notification(method=method, params=params)))

    # --- worker -> host ---------------------------------------------------------
    def next_message(self, timeout: float = DEADLINE) -> Message | None:
        """The next message, or None at the end of the stream."""
        end = time.monotonic() + timeout
        while True:
            if self.inbox:
                return self.inbox.pop(0)
            msg = self.decoder.next_message()
            if not isinstance(msg, NeedData):
                return msg
            left = end - time.monotonic()
            assert left > 0, f"no message from the worker within {timeout} s; stderr: {self.stderr()}"
            ready, _, _ = select.select([self.r_out], [], [], left)
            if ready:
                chunk = os.read(self.r_out, 1 << 16)
                if not chunk:
                    return None
                self.decoder.receive_data(chunk)

    def answer(self, req_id: int | str, timeout: float = DEADLINE) -> tuple[Response | ErrorResponse, list[Message]]:
        """The answer to ``req_id`` and every message that came before it."""
        before: list[Message] = []
        while True:
            msg = self.next_message(timeout)
            assert msg is not None, f"the worker ended before answering {req_id}; stderr: {self.stderr()}"
            if isinstance(msg, Response | ErrorResponse) and msg.id == req_id:
                return msg, before
            before.append(msg)

    def result(self, req_id: int | str) -> Any:
        msg, _ = self.answer(req_id)
        assert isinstance(msg, Response), f"expected a result, got {msg}; stderr: {self.stderr()}"
        return msgspec.json.decode(msg.result)

    def error(self, req_id: int | str) -> dict[str, Any]:
        msg, _ = self.answer(req_id)
        assert isinstance(msg, ErrorResponse), f"expected an error, got {msg}"
        error = msgspec.to_builtins(msg.error)
        assert isinstance(error, dict)
        return error

    def handshake(self) -> dict[str, Any]:
        msg = self.next_message()
        assert isinstance(msg, Response) and msg.id == 1, f"{msg}; stderr: {self.stderr()}"
        result = msgspec.json.decode(msg.result)
        assert isinstance(result, dict)
        return result

    def load(self, path: Path | str) -> dict[str, Any]:
        self.handshake()
        result = self.result(self.request("load", {"path": str(path)}))
        assert isinstance(result, dict)
        return result

    def call(self, tool: str, arguments: Any = None, call_id: str = "c1", **extra: Any) -> int | str:
        params = {"call_id": call_id, "tool": tool, "arguments": {} if arguments is None else arguments, **extra}
        return self.request("call", params)

    def wait(self, timeout: float = DEADLINE) -> int:
        return self.proc.wait(timeout)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        for fd in (self.w_in, self.r_out):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(DEADLINE)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[JsWorker]:
    w = JsWorker(tmp_path)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture
def basic(worker: JsWorker) -> JsWorker:
    worker.load(FIXTURES / "basic.ts")
    return worker


def wait_update(w: JsWorker) -> None:
    """The next message is an ``update`` (a tool that sends one before it waits or loops is there now)."""
    msg = w.next_message()
    assert isinstance(msg, Notification) and msg.method == "update", msg


def wait_stderr(w: JsWorker, text: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while text not in w.stderr():
        assert time.monotonic() < deadline, f"{text!r} not on the worker's stderr: {w.stderr()}"
        time.sleep(0.02)
