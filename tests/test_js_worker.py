"""The Bun worker core (worker/js/main.ts) on real pipes, driven with the Python protocol code.

Each test plays the launch step itself: it makes the two pipes, starts Bun in a
new session with the handoff in ``XCSH_WORKER_INIT`` (as worker/__main__.py does
after it has checked ``initialize``), and then speaks frames through
``worker._frames`` / ``worker._messages``. Tool modules are in tests/js_fixtures.
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

from worker._frames import FrameDecoder, _NeedData, encode_message
from worker._messages import ErrorResponse, Message, Notification, Request, Response

ROOT = Path(__file__).parent.parent
JS = ROOT / "worker" / "js"
FIXTURES = Path(__file__).parent / "js_fixtures"
BUN = os.environ.get("XCSH_RUN_BUN") or str(ROOT / ".cache/bun/node_modules/bun/bin/bun.exe")

if not os.path.exists(BUN):
    if os.environ.get("CI"):
        raise RuntimeError(f"Bun is missing at {BUN}: set XCSH_RUN_BUN or install it under .cache/bun")
    pytest.skip(f"Bun not found at {BUN} (set XCSH_RUN_BUN)", allow_module_level=True)

pytestmark = pytest.mark.timeout(30)
DEADLINE = 10.0


class JsWorker:
    """One Bun worker on pipes of our own; the host side, with frames in and out."""

    def __init__(self, tmp: Path, *, max_frame_bytes: int | None = None, buffered: bytes = b"", has_ui: bool = False):
        r_in, self.w_in = os.pipe()
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
            "kill_fd": -1,
            "buffered": base64.b64encode(buffered).decode(),
            "typebox": "",
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
                pass_fds=(r_in, w_out),
                start_new_session=True,
                env=env,
                cwd=tmp,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
            )
        os.close(r_in)
        os.close(w_out)
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
            if not isinstance(msg, _NeedData):
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


# --- handshake and load ------------------------------------------------------------


def test_handshake_answers_initialize_and_hides_the_handoff(worker: JsWorker, tmp_path: Path) -> None:
    answer = worker.handshake()
    assert answer["protocol_version"] == 1
    assert answer["pid"] == worker.proc.pid  # the worker itself: the launch step exec's Bun in place
    assert answer["python"].startswith("bun 1.")
    assert answer["unenforced"] == ["landlock: test"] and answer["supervisor"] == 0
    worker.result(worker.request("load", {"path": str(FIXTURES / "basic.ts")}))
    details = worker.result(worker.call("echo", {"text": "hi"}, ctx={"model": "m1"}))["details"]
    assert details["init"] is None  # XCSH_WORKER_INIT was deleted before any tool code ran
    assert details["cwd"] == str(tmp_path)
    assert details["ctx"] == {"model": "m1", "idle": False}


@pytest.mark.parametrize(
    ("module", "names"),
    [
        ("single.ts", ["single"]),
        ("promise.ts", ["later"]),
        ("cjs.js", ["cjs"]),
        ("pkgtool", ["pkg"]),
    ],
)
def test_load_accepts_every_factory_form(worker: JsWorker, module: str, names: list[str]) -> None:
    loaded = worker.load(FIXTURES / module)
    assert [t["name"] for t in loaded["tools"]] == names
    assert loaded["entry_errors"] == []
    tool = loaded["tools"][0]
    assert tool["params_kind"] == "json_schema" and tool["parameters"]["type"] == "object"
    assert tool["label"]  # defaults to the name


def test_load_describes_tools_and_lists_bad_entries(worker: JsWorker) -> None:
    loaded = worker.load(FIXTURES / "basic.ts")
    names = [t["name"] for t in loaded["tools"]]
    assert names[:3] == ["echo", "upd", "bug"] and len(names) == 11
    echo = loaded["tools"][0]
    assert echo["label"] == "Echo"
    assert echo["has_on_session"] and echo["has_render_call"] and echo["has_render_result"]
    assert "hidden" not in echo  # defaults are omitted, as on the wire
    assert loaded["tools"][1]["label"] == "upd"
    errors = {e["index"]: e["message"] for e in loaded["entry_errors"]}
    assert sorted(errors) == [11, 12, 13, 14, 15]
    assert "got null" in errors[11]
    assert "execute must be a function" in errors[12]
    assert "already defined by an earlier entry" in errors[13]
    assert "name must be a non-empty string" in errors[14]
    assert "must describe an object" in errors[15]


@pytest.mark.parametrize(
    ("module", "words"),
    [
        ("nodefault.ts", ["Tool must export a default function", "export default function"]),
        ("throws.ts", ["importing the module raised URIError: broken at import"]),
        ("exits.ts", ["called process.exit(1) while being imported"]),
        ("factory_throws.ts", ["factory(api) raised EvalError: factory broke"]),
        ("missing.ts", ["importing the module raised"]),
    ],
)
def test_load_failures_are_load_errors(worker: JsWorker, module: str, words: list[str]) -> None:
    worker.handshake()
    error = worker.error(worker.request("load", {"path": str(FIXTURES / module)}))
    assert error["code"] == -32003 and error["data"]["kind"] == "load_error"
    for word in words:
        assert word in error["message"]
    assert str(FIXTURES / module) in error["message"]
    if module in ("throws.ts", "factory_throws.ts"):
        assert str(FIXTURES / module) in error["data"]["traceback"]
    # The worker lives on (a tool's process.exit never ends it) and refuses a second load.
    again = worker.error(worker.request("load", {"path": str(FIXTURES / "single.ts")}))
    assert again["code"] == -32003 and "already loaded" in again["message"]


def test_bytes_buffered_by_the_launch_step_are_read_first(tmp_path: Path) -> None:
    load = encode_message(Request(id=2, method="load", params={"path": str(FIXTURES / "single.ts")}))
    w = JsWorker(tmp_path, buffered=load[:10])
    try:
        w.handshake()
        w.write(load[10:])
        assert w.result(2)["tools"][0]["name"] == "single"
    finally:
        w.close()


# --- calls ------------------------------------------------------------------------------


def test_call_sends_updates_in_order_before_its_result(basic: JsWorker) -> None:
    answer, before = basic.answer(basic.call("upd", call_id="u1"))
    assert isinstance(answer, Response)
    updates = [msgspec.json.decode(m.params) for m in before if isinstance(m, Notification)]
    assert [u["partial"]["content"][0]["text"] for u in updates] == ["one", "two"]
    assert all(u["call_id"] == "u1" for u in updates)
    assert updates[0]["partial"]["details"] == {"n": 1} and updates[1]["partial"]["details"] is None
    result = msgspec.json.decode(answer.result)
    assert result["content"] == [{"type": "text", "text": "done"}]
    assert 'no "content" array' in result["details"]["message"]  # a partial without content throws in the tool


def test_result_blocks_keep_only_mcp_keys(basic: JsWorker) -> None:
    result = basic.result(basic.call("echo", {"text": "a"}, call_id="tc-9"))
    assert result["content"] == [{"type": "text", "text": "echo a"}]
    assert result["details"]["toolCallId"] == "tc-9" and result["details"]["params"] == {"text": "a"}


def test_a_planted_bug_is_a_tool_error_with_evidence(basic: JsWorker) -> None:
    error = basic.error(basic.call("bug"))
    assert error["code"] == -32000
    data = error["data"]
    assert data["kind"] == "tool_error"
    assert data["exception"] == "TypeError" and data["exception_mro"] == ["TypeError", "Error"]
    assert data["raised_at"].startswith(str(FIXTURES / "basic.ts") + ":")
    line = int(data["raised_at"].rsplit(":", 1)[1])
    assert "params.missing.field" in (FIXTURES / "basic.ts").read_text().splitlines()[line - 1]
    assert "deliberate" not in data and "TypeError" in data["traceback"]


@pytest.mark.parametrize(("kind", "exception"), [("tool", "ToolError"), ("expected", "Refusal")])
def test_deliberate_errors_are_marked(basic: JsWorker, kind: str, exception: str) -> None:
    data = basic.error(basic.call("deliberate", {"kind": kind}))["data"]
    assert data["exception"] == exception and data["deliberate"] is True


def test_bad_results_are_tool_errors_naming_the_fix(basic: JsWorker) -> None:
    error = basic.error(basic.call("baddetails"))
    assert error["code"] == -32000 and "details are not JSON-serialisable" in error["message"]
    error = basic.error(basic.call("badblock", call_id="c2"))
    assert "content[0].data must be base64 text" in error["message"] and 'toString("base64")' in error["message"]
    assert error["data"]["exception_mro"] == ["ResultError", "TypeError", "Error"]


def test_a_result_over_the_frame_limit_is_limit_exceeded(tmp_path: Path) -> None:
    w = JsWorker(tmp_path, max_frame_bytes=64 * 1024)
    try:
        w.load(FIXTURES / "basic.ts")
        error = w.error(w.call("big", {"size": 100_000}))
        assert error["code"] == -32005 and error["data"] == {"kind": "limit_exceeded", "limit": "output"}
        assert w.result(w.call("big", {"size": 10}, call_id="c2"))["content"][0]["text"] == "x" * 10
    finally:
        w.close()


def test_process_exit_in_a_tool_is_a_tool_error_and_the_worker_lives_on(basic: JsWorker) -> None:
    error = basic.error(basic.call("exits"))
    assert error["code"] == -32000 and "the tool called process.exit(3)" in error["message"]
    assert error["data"]["exception"] == "ProcessExit"
    assert basic.result(basic.call("echo", {"text": "still"}, call_id="c2"))["content"][0]["text"] == "echo still"


def test_an_unhandled_rejection_fails_the_call_then_is_only_logged(basic: JsWorker) -> None:
    error = basic.error(basic.call("rejects"))
    assert (
        error["code"] == -32000 and "floating" in error["message"] and "unhandled promise rejection" in error["message"]
    )
    assert error["data"]["exception"] == "SyntaxError"
    # Outside a call: a line on stderr, and the worker keeps serving.
    assert basic.result(basic.call("rejects", {"later": True}, call_id="c2"))["content"][0]["text"] == "returned first"
    assert basic.result(basic.call("echo", {"text": "x"}, call_id="c3"))["content"][0]["text"] == "echo x"
    deadline = time.monotonic() + DEADLINE
    while "outside any call" not in basic.stderr():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_unknown_tool_and_bad_arguments(basic: JsWorker) -> None:
    error = basic.error(basic.call("nope"))
    assert error["code"] == -32002 and error["data"]["kind"] == "not_found"
    error = basic.error(basic.call("echo", [1, 2], call_id="c2"))
    assert error["code"] == -32001 and error["data"]["path"] == "$"


# --- cancellation and signals ----------------------------------------------------------


def _wait_update(w: JsWorker) -> None:
    msg = w.next_message()
    assert isinstance(msg, Notification) and msg.method == "update", msg


def test_cancel_then_sigterm_answers_cancelled_with_the_reason(basic: JsWorker) -> None:
    req = basic.call("sleepy", call_id="s1")
    _wait_update(basic)
    basic.notify("$/cancel", {"call_id": "s1", "reason": "timeout"})
    basic.proc.send_signal(signal.SIGTERM)
    error = basic.error(req)
    assert error == {"code": -32004, "message": "cancelled: timeout", "data": {"kind": "cancelled"}}


def test_sigterm_alone_cancels_the_call_as_terminated(basic: JsWorker) -> None:
    req = basic.call("sleepy", call_id="s1")
    _wait_update(basic)
    basic.proc.send_signal(signal.SIGTERM)
    assert basic.error(req)["message"] == "cancelled: terminated"
    basic.proc.send_signal(signal.SIGTERM)  # idle now
    assert basic.wait() == 0


def test_a_cancel_before_its_call_starts_it_cancelled(basic: JsWorker) -> None:
    basic.notify("$/cancel", {"call_id": "early", "reason": "cancelled"})
    error = basic.error(basic.call("echo", {"text": "x"}, call_id="early"))
    assert error["code"] == -32004 and error["message"] == "cancelled: cancelled"


def test_sigterm_while_idle_exits_0(basic: JsWorker) -> None:
    basic.proc.send_signal(signal.SIGINT)  # ignored: the host owns cancellation
    basic.proc.send_signal(signal.SIGTERM)
    assert basic.wait() == 0


def test_shutdown_answers_null_and_exits_0(basic: JsWorker) -> None:
    assert basic.result(basic.request("shutdown", {})) is None
    assert basic.wait() == 0


def test_eof_during_a_busy_loop_kills_the_whole_group(basic: JsWorker) -> None:
    basic.call("busy")
    _wait_update(basic)  # the main thread is in the loop now
    os.close(basic.w_in)
    assert basic.wait() == -signal.SIGKILL  # the reader thread took the lifeline


def test_garbage_from_the_host_takes_the_lifeline(basic: JsWorker) -> None:
    basic.write(b"\x00\x00\x00\x05hello")
    assert basic.wait() == -signal.SIGKILL
    assert "malformed message" in basic.stderr()


def test_an_answer_to_a_request_never_sent_takes_the_lifeline(basic: JsWorker) -> None:
    basic.write(encode_message(Response(id=42, result=None)))
    assert basic.wait() == -signal.SIGKILL
    assert "never sent: 42" in basic.stderr()


# --- refusals ---------------------------------------------------------------------------


def test_refusals_carry_no_data_and_the_connection_goes_on(basic: JsWorker) -> None:
    assert basic.error(basic.request("frobnicate", {})) == {"code": -32601, "message": "unknown method 'frobnicate'"}
    assert basic.error(basic.request("ui", {}))["code"] == -32601  # a method the worker sends
    error = basic.error(basic.request("initialize", {"protocol_version": 1, "host_pid": 1, "cwd": "/"}))
    assert error == {"code": -32600, "message": "'initialize' is not allowed while the connection is LOADED"}
    error = basic.error(basic.request("call", {"call_id": 3, "tool": "echo", "arguments": {}}))
    assert error["code"] == -32602 and error["message"].startswith("bad call params: ") and "data" not in error
    req = basic.call("sleepy", call_id="s1")
    _wait_update(basic)
    assert basic.error(basic.request("shutdown", {}, req_id=req))["code"] == -32600  # its id is in use
    basic.notify("$/cancel", {"call_id": "s1", "reason": "done"})
    assert basic.error(req)["code"] == -32004
    basic.notify("no/such", {})  # ignored
    assert basic.result(basic.call("echo", {"text": "ok"}, call_id="c9"))["content"][0]["text"] == "echo ok"


# --- session, render, pending actions ---------------------------------------------------


def test_session_calls_each_hook_and_reports_failures_as_warnings(basic: JsWorker) -> None:
    result = basic.result(basic.request("session", {"event": {"reason": "start"}, "ctx": {}}))
    assert result == {"warnings": ["bug.on_session('start') raised Error: hook broke"]}
    details = basic.result(basic.call("echo", {"text": "x"}))["details"]
    assert details["sessionEvents"] == ["start"]


def test_render_hooks(basic: JsWorker) -> None:
    text = basic.result(basic.request("render", {"tool": "echo", "kind": "call", "args": {"text": "a"}}))
    assert text == {"text": "echo(a)"}
    result = {"content": [{"type": "text", "text": "r"}], "details": None}
    text = basic.result(basic.request("render", {"tool": "echo", "kind": "result", "result": result}))
    assert text == {"text": "r expanded=false"}
    error = basic.error(
        basic.request("render", {"tool": "echo", "kind": "result", "result": {**result, "is_error": True}})
    )
    assert error["code"] == -32000 and "renderResult returned number, not a string" in error["message"]
    assert basic.error(basic.request("render", {"tool": "upd", "kind": "call"}))["code"] == -32002


def test_an_unknown_pending_action_is_not_found(basic: JsWorker) -> None:
    error = basic.error(basic.request("pending/resolve", {"action_id": "a9", "action": "apply", "reason": "r"}))
    assert error["code"] == -32002 and "a9" in error["message"]
