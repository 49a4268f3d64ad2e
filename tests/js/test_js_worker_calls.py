"""The Bun worker core (worker/js/main.ts): calls, updates, results, error evidence, cancellation.

Driven on real pipes by tests/_support/js_harness.py, with the tool modules of tests/js_fixtures.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import msgspec
import pytest

from tests._support import js_harness
from tests._support.js_harness import FIXTURES, JsWorker, skip_without_bun, wait_stderr, wait_update
from xcsh_run.worker.protocol.frames import encode_message
from xcsh_run.worker.protocol.messages import ErrorResponse, Notification, Request, Response

skip_without_bun()
pytestmark = pytest.mark.timeout(30)

# The harness's fixtures (a worker on pipes; one with basic.ts loaded), shared with test_js_worker.py.
worker = js_harness.worker
basic = js_harness.basic


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
        text = w.result(w.call("big", {"size": 100_000, "update": True}, call_id="c4"))["content"][0]["text"]
        assert text.startswith("RangeError: onUpdate()'s partial result is 100") and "over the 65536 bytes" in text
        error = w.error(w.call("big", {"size": 100_000, "throw": True}, call_id="c3"))
        assert error["code"] == -32000 and error["message"].endswith("(cut to fit the frame limit)")
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
    wait_stderr(basic, "outside any call")


def test_unknown_tool_and_bad_arguments(basic: JsWorker) -> None:
    error = basic.error(basic.call("nope"))
    assert error["code"] == -32002 and error["data"]["kind"] == "not_found"
    error = basic.error(basic.call("echo", [1, 2], call_id="c2"))
    assert error["code"] == -32001 and error["data"]["path"] == "$"


# --- cancellation and signals ----------------------------------------------------------


def test_cancel_then_sigterm_answers_cancelled_with_the_reason(basic: JsWorker) -> None:
    req = basic.call("sleepy", call_id="s1")
    wait_update(basic)
    basic.notify("$/cancel", {"call_id": "s1", "reason": "timeout"})
    basic.proc.send_signal(signal.SIGTERM)
    answer, before = basic.answer(req)
    assert msgspec.to_builtins(answer)["error"] == {
        "code": -32004,
        "message": "cancelled: timeout",
        "data": {"kind": "cancelled"},
    }
    assert before == []  # answered as the signal fired: the update the tool sends then is dropped
    basic.proc.send_signal(signal.SIGTERM)
    assert basic.wait() == 0


def test_sigterm_alone_cancels_the_call_as_terminated(basic: JsWorker) -> None:
    req = basic.call("sleepy", call_id="s1")
    wait_update(basic)
    basic.proc.send_signal(signal.SIGTERM)
    assert basic.error(req)["message"] == "cancelled: terminated"
    basic.proc.send_signal(signal.SIGTERM)  # idle now
    assert basic.wait() == 0


def test_a_cancel_before_its_call_starts_it_cancelled(basic: JsWorker) -> None:
    basic.notify("$/cancel", {"call_id": "early", "reason": "cancelled"})
    error = basic.error(basic.call("echo", {"text": "x"}, call_id="early"))
    assert error["code"] == -32004 and error["message"] == "cancelled: cancelled"


def test_ctx_abort_notifies_the_host_and_an_uncaught_exception_fails_the_call(basic: JsWorker) -> None:
    answer, before = basic.answer(basic.call("aborts", call_id="a1"))
    notices = [(m.method, msgspec.json.decode(m.params)) for m in before if isinstance(m, Notification)]
    assert notices == [("abort", {"call_id": "a1", "reason": "enough"})]
    error = msgspec.to_builtins(answer)["error"]
    assert error["code"] == -32000 and "thrown in a timer" in error["message"]
    assert "uncaught exception" in error["message"] and error["data"]["exception"] == "EvalError"


def test_pipelined_requests_are_answered_one_at_a_time_in_order(basic: JsWorker) -> None:
    def call(i: int) -> bytes:
        params = {"call_id": f"p{i}", "tool": "echo", "arguments": {"text": str(i)}}
        return encode_message(Request(id=i, method="call", params=params))

    frames = b"".join(call(i) for i in range(1, 51))
    basic.write(frames)  # one write: many frames in one read of the reader thread
    texts = []
    for _ in range(50):
        msg = basic.next_message()
        assert isinstance(msg, Response)
        texts.append((msg.id, msgspec.json.decode(msg.result)["content"][0]["text"]))
    assert texts == [(i, f"echo {i}") for i in range(1, 51)]


def test_a_session_event_during_a_call_is_answered_after_it(basic: JsWorker) -> None:
    req = basic.call("sleepy", call_id="s1")
    wait_update(basic)
    session = basic.request("session", {"event": {"reason": "tree"}, "ctx": {}})
    basic.notify("$/cancel", {"call_id": "s1", "reason": "cancelled"})
    first = basic.next_message()
    assert isinstance(first, ErrorResponse) and first.id == req
    assert basic.result(session)["warnings"] == ["bug.onSession('tree') raised Error: hook broke"]


def test_the_signal_is_aborted_with_an_abort_error_carrying_the_reason(basic: JsWorker, tmp_path: Path) -> None:
    marker = tmp_path / "seen.json"
    req = basic.call("reason", {"marker": str(marker)}, call_id="r1")
    wait_update(basic)
    basic.notify("$/cancel", {"call_id": "r1", "reason": "user pressed stop"})
    assert basic.error(req)["message"] == "cancelled: user pressed stop"
    # The listener ran synchronously inside abort(), before the answer was written.
    seen = json.loads(marker.read_text())
    assert seen == {"aborted": True, "name": "AbortError", "message": "user pressed stop", "error": True}
