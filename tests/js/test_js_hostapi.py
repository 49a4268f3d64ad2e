"""The tool API of a TypeScript tool across the process boundary, through the runner and real Bun
workers: the twin of test_hostapi.py (UI, logger, ctx, exec, session events, render hooks,
pending actions)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests._support.js import JS_TOOLS, require_bun
from tests.conftest import make_runner
from tests.host.test_hostapi import RecordingUI

require_bun()

HOSTAPI = JS_TOOLS / "hostapi.ts"


async def test_ui_is_a_no_op_until_one_is_attached_then_bridged() -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            before = await runner.call_tool("ask")
            ui = RecordingUI()
            runner.set_ui_context(ui)  # swapped in while the worker is alive
            after = await runner.call_tool("ask")
            typed = await runner.call_tool("ask_input")
    assert before.details == {"confirm": False, "select": None, "has_ui": False}
    assert after.details == {"confirm": True, "select": "b", "has_ui": True}
    assert typed.details == {"input": "typed", "has_ui": True}
    assert ("confirm", ("Proceed?", "really?")) in ui.asked
    assert ("notify", ("asked", "info")) in ui.asked and ("set_status", ("k", "v")) in ui.asked


async def test_ui_prompt_of_a_cancelled_call_is_answered_and_dismissed() -> None:
    ui = RecordingUI(block=trio.Event())  # never answers by itself
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            runner.set_ui_context(ui)
            results = []
            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    results.append(await runner.call_tool("ask", tool_call_id="q1"))

                nursery.start_soon(call)
                await ui.confirm_asked.wait()
                runner.cancel("q1", "user left")
    (result,) = results
    assert result.kind == "cancelled", result
    assert result.error is not None and result.error.rung == "cooperative"
    assert ui.dismissed


async def test_logger_records_reach_the_host_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="xcsh_run.tool")
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            await runner.call_tool("log", {"count": 2}, tool_call_id="L1")
            await runner.call_tool("log", {"count": 1500}, tool_call_id="L2")
    first = [r for r in caplog.records if getattr(r, "call_id", None) == "L1"]
    assert [r.getMessage() for r in first] == ["record 0 from L1", "record 1 from L1"]
    assert first[0].tool == "log" and first[0].levelno == logging.WARNING and first[0].pid > 0  # type: ignore[attr-defined]
    second = [r for r in caplog.records if getattr(r, "call_id", None) == "L2"]
    assert len(second) == 1001  # bounded: 1000 records, then one saying how many were dropped
    assert "500 log records dropped" in second[-1].getMessage()


async def test_ctx_carries_the_host_state_and_abort_cancels_the_whole_operation() -> None:
    results: dict[str, Any] = {}
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            runner.set_context({"model": "m1"})
            state = await runner.call_tool("ctx_state")
            async with trio.open_nursery() as nursery:
                aborter_done = trio.Event()

                async def call(name: str, call_id: str, op: str) -> None:
                    results[call_id] = await runner.call_tool(name, tool_call_id=call_id, operation_id=op)
                    if call_id == "aborter":
                        aborter_done.set()

                started = trio.Event()
                nursery.start_soon(call, "sleeper", "other-op", "op2")

                async def grouped() -> None:
                    results["same-op"] = await runner.call_tool(
                        "sleeper", tool_call_id="same-op", operation_id="op1", on_update=lambda _: started.set()
                    )

                nursery.start_soon(grouped)
                await started.wait()
                nursery.start_soon(call, "abort", "aborter", "op1")
                await aborter_done.wait()
                runner.cancel("other-op")
    assert state.details == {"model": "m1", "idle": False, "queued": False}
    assert results["aborter"].kind == "cancelled"
    assert "aborted by abort: enough" in results["aborter"].text
    assert results["same-op"].kind == "cancelled"  # grouped with the aborter: cancelled too
    assert "aborted by abort: enough" in results["same-op"].text
    assert results["other-op"].kind == "cancelled" and "aborted" not in results["other-op"].text


async def test_exec_kills_the_whole_tree_on_timeout() -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            result = await runner.call_tool("exec_tree", {"timeout": 500})
            assert runner.statistics().busy_workers == 0
    assert result.details["killed"] is True
    assert result.details["code"] == -15  # the shell died of our SIGTERM: reported, not hidden as 0
    assert result.details["stdout"] == "started\n"
    # The setsid grandchild escaped the process group, but not the call: the autouse fixture checks that.


@pytest.mark.parametrize(
    ("script", "stdin", "expected"),
    [
        ("exit 3", None, {"stdout": "", "stderr": "", "code": 3, "killed": False}),
        ("echo out; echo err >&2", None, {"stdout": "out\n", "stderr": "err\n", "code": 0, "killed": False}),
        ("cat", "fed", {"stdout": "fed", "stderr": "", "code": 0, "killed": False}),
        ("cat", None, {"stdout": "", "stderr": "", "code": 0, "killed": False}),  # stdin is empty, never the pipe
        ("kill -KILL $$", None, {"stdout": "", "stderr": "", "code": -9, "killed": False}),
    ],
)
async def test_exec_results(script: str, stdin: str | None, expected: dict[str, Any]) -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            result = await runner.call_tool("exec_status", {"script": script, "input": stdin})
    assert result.details == expected, result


async def test_exec_of_a_missing_program_rejects() -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            missing = await runner.call_tool("exec_missing")
    assert missing.kind == "tool_error" and "no-such-program-xyz" in missing.text


async def test_session_events_reach_live_workers_and_errors_are_warnings(tmp_path: Path) -> None:
    marker = tmp_path / "events"
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            runner.set_context({"model": "m2"})
            await runner.call_tool("events")  # a live worker with onSession hooks
            warnings = await runner.emit_session_event({"reason": "start", "previousSessionFile": None})
            await runner.emit_session_event(
                {
                    "reason": "auto_retry_start",
                    "attempt": 1,
                    "maxAttempts": 3,
                    "delayMs": 10,
                    "errorMessage": "x",
                    "marker": str(marker),
                }
            )
            seen = (await runner.call_tool("events")).details
        # Closing the runner delivered `shutdown` to the live worker first.
    assert [e["reason"] for e in seen] == ["start", "auto_retry_start"]
    assert seen[0]["model"] == "m2"
    assert any("broken_session" in w and "on_session broke" in w for w in warnings), warnings
    assert marker.read_text().splitlines() == ["auto_retry_start", "shutdown"]


async def test_render_hooks_run_in_the_worker_with_fallbacks(caplog: pytest.LogCaptureFixture) -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            result = await runner.call_tool("rendered")
            call_text = await runner.render_call("rendered", {"x": 1})
            result_text = await runner.render_result("rendered", result, {"is_partial": True})
            start = trio.current_time()
            hung = await runner.render_result("render_hangs", result, timeout=0.5)
            hung_time = trio.current_time() - start
            garbage = await runner.render_call("render_garbage", {"y": 2})
            after = await runner.render_call("rendered", {"x": 2})  # a new worker, after the hung one was killed
    assert call_text == '<call {"x":1}>'
    assert result_text == "<result plain partial=true>"
    assert hung == "plain" and hung_time < 2.0  # bounded: the hook's worker was killed
    assert garbage == 'Garbage {"y": 2}'
    assert after == '<call {"x":2}>'
    messages = [r.getMessage() for r in caplog.records]
    assert any("did not return within 0.5 s" in m for m in messages)
    assert any("returned number, not a string" in m for m in messages), messages


async def test_pending_actions_resolve_in_the_worker_that_made_them() -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            resolve = runner.get_tool("resolve")
            assert resolve is not None and resolve.hidden
            nothing = await runner.call_tool("resolve", {"action": "apply", "reason": "go"})
            made = await runner.call_tool("propose", {"label": "first"})
            await runner.call_tool("propose", {"label": "second"})
            assert [a["label"] for a in runner.pending_actions()] == ["first", "second"]
            applied = await runner.call_tool("resolve", {"action": "apply", "reason": "looks good"})
            discarded = await runner.call_tool("resolve", {"action": "discard", "reason": "no"})
    assert nothing.kind == "tool_error" and nothing.text == "No pending action to resolve. Nothing to apply or discard."
    assert applied.text == "applied second: looks good"  # the newest first
    assert applied.details["result"]["pid"] == made.details["pid"]
    assert applied.details["label"] == "second" and applied.details["sourceResultDetails"] == {"diff": "+1 -1"}
    assert discarded.text == "Discarded: first. Reason: no"
    assert discarded.details["action"] == "discard" and discarded.details["sourceToolName"] == "propose"


async def test_pending_action_of_a_dead_worker_is_reported_lost() -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTAPI) as runner:
            made = await runner.call_tool("propose", {"label": "doomed"})
            crashed = await runner.call_tool("die")  # the same (idle, reused) worker dies
            lost = await runner.call_tool("resolve", {"action": "apply", "reason": "too late"})
    assert crashed.kind == "crashed"
    assert not psutil.pid_exists(made.details["pid"]) or psutil.Process(made.details["pid"]).status() == "zombie"
    assert lost.kind == "tool_error"
    assert "pending action 'doomed' was lost: the worker that made it was killed by SIGKILL" in lost.text
