"""The Bun worker core (worker/js/main.ts): handshake, load, refusals, the lifeline, session, render.

Driven on real pipes by tests/_support/js_harness.py, with the tool modules of tests/js_fixtures.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from tests._support import js_harness
from tests._support.js_harness import FIXTURES, JsWorker, skip_without_bun, wait_update
from xcsh_run.worker.protocol.frames import encode_message
from xcsh_run.worker.protocol.messages import ErrorObject, ErrorResponse, Notification, Request, Response

skip_without_bun()
pytestmark = pytest.mark.timeout(30)

# The harness's fixtures (a worker on pipes; one with basic.ts loaded), shared with test_js_worker_calls.py.
worker = js_harness.worker
basic = js_harness.basic


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
    assert details["childInit"] == ["unset", "unset x"]  # and Bun.spawn's children do not get it either
    assert details["cwd"] == str(tmp_path)
    assert details["ctx"] == {"model": "m1", "idle": False, "queued": False}
    assert details["hasUI"] is False


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
    assert names[:3] == ["echo", "upd", "bug"] and len(names) == 13
    echo = loaded["tools"][0]
    assert echo["label"] == "Echo"
    assert echo["has_on_session"] and echo["has_render_call"] and echo["has_render_result"]
    assert "hidden" not in echo  # defaults are omitted, as on the wire
    assert loaded["tools"][1]["label"] == "upd"
    assert loaded["tools"][1]["requires"] == {"programs": ["git"], "read": ["/srv/data"], "network": ["tcp:443"]}
    errors = {e["index"]: e["message"] for e in loaded["entry_errors"]}
    assert sorted(errors) == [13, 14, 15, 16, 17, 18]
    assert "got null" in errors[13]
    assert "execute must be a function" in errors[14]
    assert "already defined by an earlier entry" in errors[15]
    assert "name must be a non-empty string" in errors[16]
    assert "must describe an object" in errors[17]
    assert "'tcp:PORT' with a port from 1 to 65535" in errors[18]


@pytest.mark.parametrize(
    ("module", "words"),
    [
        ("nodefault.ts", ["Tool must export a default function", "export default function"]),
        ("throws.ts", ["importing the module raised URIError: broken at import"]),
        ("exits.ts", ["called process.exit(1) while being imported"]),
        ("factory_throws.ts", ["factory(api) raised EvalError: factory broke"]),
        ("missing.ts", ["importing the module raised ResolveMessage: Cannot find module"]),
        ("syntax_error.ts", ["raised BuildMessage: Unexpected end of file at ", "syntax_error.ts:2:"]),
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


# --- exits and the lifeline ----------------------------------------------------------


def test_sigterm_while_idle_exits_0(basic: JsWorker) -> None:
    basic.proc.send_signal(signal.SIGINT)  # ignored: the host owns cancellation
    basic.proc.send_signal(signal.SIGTERM)
    assert basic.wait() == 0


def test_shutdown_answers_null_and_exits_0(basic: JsWorker) -> None:
    assert basic.result(basic.request("shutdown", {})) is None
    assert basic.wait() == 0


def test_eof_during_a_busy_loop_kills_the_whole_group(tmp_path: Path) -> None:
    kill_file = tmp_path / "cgroup.kill"
    w = JsWorker(tmp_path, kill_file=kill_file)
    try:
        w.load(FIXTURES / "basic.ts")
        w.call("busy")
        wait_update(w)  # the main thread is in the loop now, and sees nothing
        os.close(w.w_in)
        assert w.wait() == -signal.SIGKILL  # the reader thread took the lifeline
        assert kill_file.read_text() == "1"  # the boundary's cgroup.kill first
    finally:
        w.close()


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (_frame(b"hello"), "frame is not a JSON-RPC message"),
        (b"\xff\xff\xff\xff", "frame announces 4294967295 bytes, over the 67108864-byte limit"),
        (_frame(b""), "frame is not a JSON-RPC message"),
        (_frame(b'{"jsonrpc":"2.0","method":"x","extra":1}'), "unknown field `extra`"),
        (_frame(b'{"jsonrpc":"2.0","id":null,"method":"call"}'), "request id must be an integer or a string"),
        (_frame(b'{"jsonrpc":"1.0","method":"x"}'), 'lacks "jsonrpc": "2.0"'),
        (_frame(b'{"jsonrpc":"2.0","params":{}}'), '"params" without "method"'),
        (_frame(b'{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}'), "both"),
        (_frame(b'"\xc3\x28"'), "not valid UTF-8"),
        (_frame(b"[]"), "Expected `object`, got `array`"),
    ],
    ids=[
        "not-json",
        "oversize",
        "empty",
        "extra-member",
        "null-id",
        "version",
        "params-alone",
        "both",
        "utf8",
        "array",
    ],
)
def test_garbage_from_the_host_takes_the_lifeline(basic: JsWorker, data: bytes, why: str) -> None:
    basic.write(data)
    assert basic.wait() == -signal.SIGKILL
    assert "the host sent a malformed message: " in basic.stderr() and why in basic.stderr()


def test_an_answer_to_a_request_never_sent_takes_the_lifeline(basic: JsWorker) -> None:
    basic.write(encode_message(Response(id=42, result=None)))
    assert basic.wait() == -signal.SIGKILL
    assert "never sent: 42" in basic.stderr()


def test_ui_changed_is_seen_by_the_next_call(basic: JsWorker) -> None:
    basic.notify("ui/changed", {"has_ui": True})
    assert basic.result(basic.call("echo", {"text": "x"}))["details"]["hasUI"] is True


def test_a_malformed_cancel_takes_the_lifeline(basic: JsWorker) -> None:
    basic.notify("$/cancel", {"call_id": 7})
    assert basic.wait() == -signal.SIGKILL
    assert "malformed '$/cancel' message" in basic.stderr()


# --- refusals ---------------------------------------------------------------------------


def test_refusals_carry_no_data_and_the_connection_goes_on(basic: JsWorker) -> None:
    assert basic.error(basic.request("frobnicate", {})) == {"code": -32601, "message": "unknown method 'frobnicate'"}
    assert basic.error(basic.request("ui", {}))["code"] == -32601  # a method the worker sends
    error = basic.error(basic.request("initialize", {"protocol_version": 1, "host_pid": 1, "cwd": "/"}))
    assert error == {"code": -32600, "message": "'initialize' is not allowed while the connection is LOADED"}
    error = basic.error(basic.request("call", {"call_id": 3, "tool": "echo", "arguments": {}}))
    assert error["code"] == -32602 and error["message"].startswith("bad call params: ") and "data" not in error
    req = basic.call("sleepy", call_id="s1")
    wait_update(basic)
    assert basic.error(basic.request("shutdown", {}, req_id=req))["code"] == -32600  # its id is in use
    basic.notify("$/cancel", {"call_id": "s1", "reason": "done"})
    assert basic.error(req)["code"] == -32004
    basic.notify("no/such", {})  # ignored
    assert basic.result(basic.call("echo", {"text": "ok"}, call_id="c9"))["content"][0]["text"] == "echo ok"


# --- session, render, pending actions ---------------------------------------------------


def test_session_calls_each_hook_and_reports_failures_as_warnings(basic: JsWorker) -> None:
    result = basic.result(basic.request("session", {"event": {"reason": "start"}, "ctx": {}}))
    assert result == {"warnings": ["bug.onSession('start') raised Error: hook broke"]}
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


# --- the host API through HostLink (needs the real api.ts) --------------------------------


@pytest.fixture
def hostapi(tmp_path: Path) -> Iterator[JsWorker]:
    w = JsWorker(tmp_path, has_ui=True)
    try:
        if not w.load(FIXTURES / "hostapi.ts")["tools"]:
            pytest.skip("worker/js/api.ts is the stub without ui and pushPendingAction")
        yield w
    finally:
        w.close()


def test_a_ui_prompt_is_a_worker_request_answered_by_the_host(hostapi: JsWorker) -> None:
    req = hostapi.call("prompt", call_id="p1")
    ask = hostapi.next_message()
    assert isinstance(ask, Request) and ask.method == "ui" and ask.id == 1  # the worker's own ids: 1, 2, ...
    assert msgspec.json.decode(ask.params) == {"call_id": "p1", "method": "input", "args": ["Name", "placeholder"]}
    hostapi.write(encode_message(ErrorResponse(id=1, error=ErrorObject(code=-32602, message="bad ui params"))))
    ask = hostapi.next_message()
    assert isinstance(ask, Request) and ask.id == 2
    assert msgspec.json.decode(ask.params)["args"] == ["Deploy", "Deploy to prod?"]
    hostapi.write(encode_message(Response(id=2, result=True)))
    result = hostapi.result(req)
    assert result["content"][0]["text"] == "confirmed=true"
    assert result["details"]["refused"] == "the host refused ui: bad ui params"
    hostapi.write(encode_message(Response(id=2, result=True)))  # a second answer: a protocol violation
    assert hostapi.wait() == -signal.SIGKILL


def test_pending_actions_are_applied_and_rejected_by_the_host(hostapi: JsWorker) -> None:
    answer, before = hostapi.answer(hostapi.call("defer", call_id="d1"))
    assert isinstance(answer, Response)
    pushes = [msgspec.json.decode(m.params) for m in before if isinstance(m, Notification)]
    assert [(p["action_id"], p["label"], p["call_id"]) for p in pushes] == [
        ("a1", "rename x to y", "d1"),
        ("a2", "second", "d1"),
        ("a3", "third", "d1"),
    ]
    assert pushes[0]["details"] == {"from": "x"} and "details" not in pushes[1]
    resolve = {"action_id": "a1", "action": "apply", "reason": "looks right"}
    result = hostapi.result(hostapi.request("pending/resolve", resolve))
    assert result == {"result": {"content": [{"type": "text", "text": "applied: looks right"}], "details": None}}
    again = hostapi.error(hostapi.request("pending/resolve", resolve))
    assert again["code"] == -32002  # taken off the worker's list
    assert hostapi.result(hostapi.request("pending/resolve", {**resolve, "action_id": "a2"})) == {"result": None}
    discard = {"action_id": "a3", "action": "discard", "reason": "no"}
    error = hostapi.error(hostapi.request("pending/resolve", discard))
    assert error["code"] == -32000 and "reject()'s result's \"content\" must be an array" in error["message"]
