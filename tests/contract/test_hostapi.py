"""The tool's host API across the process boundary (UI, logger, ctx, exec, session events, render
hooks, pending actions), through the runner and real workers of both runtimes (tests/contract/)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests.conftest import make_runner
from tests.contract.conftest import on, tool_file

# Where the runtimes genuinely differ, in what the host reports of a tool's own code: the
# language's name of a hook, of a type, of an exception.
SESSION_HOOK_FAILED = {
    "python": "broken_session.on_session('start') raised ValueError: on_session broke",
    "bun": "broken_session.onSession('start') raised Error: on_session broke",
}
RENDER_NOT_A_STRING = {"python": "returned int, not a string", "bun": "returned number, not a string"}


@pytest.fixture
def hostapi(runtime: str) -> Path:
    return tool_file(runtime, "hostapi")


class RecordingUI:
    """A UI that answers and records what it was asked; ``confirm`` may wait on an event."""

    def __init__(self, block: trio.Event | None = None) -> None:
        self.asked: list[tuple[str, tuple[Any, ...]]] = []
        self.block = block
        self.dismissed = False
        self.confirm_asked = trio.Event()

    async def confirm(self, title: str, message: str) -> bool:
        self.asked.append(("confirm", (title, message)))
        self.confirm_asked.set()
        if self.block is not None:
            try:
                await self.block.wait()
            except trio.Cancelled:
                self.dismissed = True
                raise
        return True

    def select(self, title: str, options: list[str]) -> str:
        self.asked.append(("select", (title, options)))
        return options[-1]

    def input(self, title: str, placeholder: str | None = None) -> str:
        self.asked.append(("input", (title, placeholder)))
        return "typed"

    def notify(self, message: str, type: str = "info") -> None:
        self.asked.append(("notify", (message, type)))

    def set_status(self, key: str, text: str | None) -> None:
        self.asked.append(("set_status", (key, text)))


async def test_ui_is_a_no_op_until_one_is_attached_then_bridged(hostapi: Path) -> None:
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            before = await runner.call_tool("ask")
            ui = RecordingUI()
            runner.set_ui_context(ui)  # swapped in while the worker is alive
            after = await runner.call_tool("ask")
            async_after = await runner.call_tool("ask_async")
    assert before.details == {"confirm": False, "select": None, "has_ui": False}
    assert after.details == {"confirm": True, "select": "b", "has_ui": True}
    assert async_after.details == {"confirm": True, "input": "typed", "has_ui": True}
    assert ("confirm", ("Proceed?", "really?")) in ui.asked
    assert ("notify", ("asked", "info")) in ui.asked and ("set_status", ("k", "v")) in ui.asked


async def test_ui_prompt_of_a_cancelled_call_is_answered_and_dismissed(hostapi: Path) -> None:
    ui = RecordingUI(block=trio.Event())  # never answers by itself
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
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
    assert result.error is not None and result.error.rung == "cooperative"  # the tool stopped, not killed
    assert ui.dismissed


async def test_logger_records_reach_the_host_log(hostapi: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="xcsh_run.tool")
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            await runner.call_tool("log", {"count": 2}, tool_call_id="L1")
            await runner.call_tool("log", {"count": 1500}, tool_call_id="L2")
    first = [r for r in caplog.records if getattr(r, "call_id", None) == "L1"]
    assert [r.getMessage() for r in first] == ["record 0 from L1", "record 1 from L1"]
    assert first[0].tool == "log" and first[0].levelno == logging.WARNING and first[0].pid > 0  # type: ignore[attr-defined]
    second = [r for r in caplog.records if getattr(r, "call_id", None) == "L2"]
    assert len(second) == 1001  # bounded: 1000 records, then one saying how many were dropped
    assert "500 log records dropped" in second[-1].getMessage()


@pytest.mark.parametrize(
    ("runtime", "state"),
    [
        on("python", {"model": "m1"}),
        # The TypeScript ctx is the original's: the state spread, plus isIdle() and hasQueuedMessages().
        on("bun", {"model": "m1", "idle": False, "queued": False}),
    ],
    indirect=["runtime"],
)
async def test_ctx_carries_the_host_state(hostapi: Path, state: dict[str, Any]) -> None:
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            runner.set_context({"model": "m1"})
            result = await runner.call_tool("ctx_state")
    assert result.details == state, result


async def test_ctx_abort_cancels_the_whole_operation(hostapi: Path) -> None:
    results: dict[str, Any] = {}
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            runner.set_context({"model": "m1"})
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
    assert results["aborter"].kind == "cancelled"
    assert "aborted by abort: enough" in results["aborter"].text
    assert results["same-op"].kind == "cancelled"  # grouped with the aborter: cancelled too
    assert "aborted by abort: enough" in results["same-op"].text
    assert results["other-op"].kind == "cancelled" and "aborted" not in results["other-op"].text


async def test_exec_kills_the_whole_tree_on_timeout(hostapi: Path) -> None:
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            # The fixture's own timeout: 0.5 s in Python's api.exec, 500 ms in pi.exec.
            result = await runner.call_tool("exec_tree")
            assert runner.statistics().busy_workers == 0
    assert result.details["killed"] is True
    assert result.details["code"] == -15  # the shell died of our SIGTERM: reported, not hidden as 0
    assert result.details["stdout"] == "started\n"
    # The setsid grandchild escaped the process group, but not the call: the autouse
    # fixture checks that no sleep survived.


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
async def test_exec_results(hostapi: Path, script: str, stdin: str | None, expected: dict[str, Any]) -> None:
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            result = await runner.call_tool("exec_status", {"script": script, "input": stdin})
    assert result.details == expected, result


async def test_exec_async_and_missing_program(hostapi: Path) -> None:
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            ok = await runner.call_tool("exec_async")
            missing = await runner.call_tool("exec_missing")
    assert ok.details == {"stdout": "async-3\n", "code": 0}
    assert missing.kind == "tool_error" and "no-such-program-xyz" in missing.text


async def test_session_events_reach_live_workers_and_errors_are_warnings(
    hostapi: Path, runtime: str, tmp_path: Path
) -> None:
    marker = tmp_path / "events"
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            runner.set_context({"model": "m2"})
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
            with pytest.raises(ValueError, match="session event reason must be one of"):
                await runner.emit_session_event({"reason": "nope"})
        # Closing the runner delivered `shutdown` to the live worker first.
    assert [e["reason"] for e in seen] == ["start", "auto_retry_start"]
    assert seen[0]["ctx"] == {"model": "m2"} and seen[0]["model"] == "m2"
    assert any(SESSION_HOOK_FAILED[runtime] in w for w in warnings), warnings
    assert marker.read_text().splitlines() == ["auto_retry_start", "shutdown"]


async def test_a_context_json_cannot_carry_is_a_clear_result_and_a_warning_not_a_hang(hostapi: Path) -> None:
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            await runner.call_tool("events")  # a live worker with on_session hooks
            runner.context = {"handle": object()}
            result = await runner.call_tool("events")
            warnings = await runner.emit_session_event({"reason": "start", "previousSessionFile": None})
            runner.context = {"model": "m3"}
            after = await runner.call_tool("events")
            runner.context = {"handle": object()}
        # Closing, with that context again, still sent `shutdown` to every worker and returned.
    assert result.kind == "invalid_arguments" and "ctx values must be JSON" in result.text, result
    assert warnings and all("session event not delivered" in w for w in warnings), warnings
    assert not after.is_error, after


async def test_render_hooks_run_in_the_worker_with_fallbacks(
    hostapi: Path, runtime: str, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            result = await runner.call_tool("rendered")
            call_text = await runner.render_call("rendered", {"x": 1})
            result_text = await runner.render_result("rendered", result, {"is_partial": True})
            start = trio.current_time()
            hung = await runner.render_result("render_hangs", result, timeout=0.5)
            hung_time = trio.current_time() - start
            garbage = await runner.render_call("render_garbage", {"y": 2})
            plain = await runner.render_call("add_nothing", {})
            after = await runner.render_call("rendered", {"x": 2})  # a new worker, after the hung one was killed
    assert call_text == '<call {"x":1}>'
    assert result_text == "<result plain partial=true>"
    assert hung == "plain" and hung_time < 2.0  # bounded: the hook's worker was killed
    assert garbage == 'Garbage {"y": 2}'
    assert plain == "add_nothing {}"
    assert after == '<call {"x":2}>'
    messages = [r.getMessage() for r in caplog.records]
    assert any("did not return within 0.5 s" in m for m in messages)
    assert any(RENDER_NOT_A_STRING[runtime] in m for m in messages), messages


async def test_pending_actions_resolve_in_the_worker_that_made_them(hostapi: Path) -> None:
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            resolve = runner.get_tool("resolve")
            assert resolve is not None and resolve.hidden
            nothing = await runner.call_tool("resolve", {"action": "apply", "reason": "go"})
            made = await runner.call_tool("propose", {"label": "first"})
            await runner.call_tool("propose", {"label": "second"})
            assert [a.label for a in runner.pending_actions()] == ["first", "second"]
            applied = await runner.call_tool("resolve", {"action": "apply", "reason": "looks good"})
            discarded = await runner.call_tool("resolve", {"action": "discard", "reason": "no"})
            bad = await runner.call_tool("resolve", {"action": "maybe", "reason": "?"})
    assert nothing.kind == "tool_error" and nothing.text == "No pending action to resolve. Nothing to apply or discard."
    assert applied.text == "applied second: looks good"  # the newest first
    assert applied.details["result"]["pid"] == made.details["pid"]
    assert applied.details["label"] == "second" and applied.details["sourceResultDetails"] == {"diff": "+1 -1"}
    assert discarded.text == "Discarded: first. Reason: no"
    assert discarded.details["action"] == "discard" and discarded.details["sourceToolName"] == "propose"
    assert bad.kind == "invalid_arguments"


@pytest.mark.parametrize(
    ("tool", "how"),
    [("die", "exited with code 5"), ("die_by_signal", "was killed by SIGKILL")],
)
async def test_pending_action_of_a_dead_worker_is_reported_lost(hostapi: Path, tool: str, how: str) -> None:
    with trio.fail_after(30):
        async with make_runner(hostapi) as runner:
            made = await runner.call_tool("propose", {"label": "doomed"})
            crashed = await runner.call_tool(tool)  # the same (idle, reused) worker dies
            lost = await runner.call_tool("resolve", {"action": "apply", "reason": "too late"})
    assert crashed.kind == "crashed"
    assert not psutil.pid_exists(made.details["pid"]) or psutil.Process(made.details["pid"]).status() == "zombie"
    assert lost.kind == "tool_error"
    assert f"pending action 'doomed' was lost: the worker that made it {how}" in lost.text


async def test_a_session_event_cut_short_mid_frame_leaves_the_worker_whole(hostapi: Path) -> None:
    # A 16 MiB context makes the session frame far larger than the pipe; the
    # event's deadline expires while it is being written. The rest of that
    # frame must still reach the worker before anything else, or the worker
    # reads the next frame as its rest and the next call hangs until its timeout.
    with trio.fail_after(60):
        async with make_runner(hostapi, discover_sources=False) as runner:
            assert (await runner.call_tool("has_ui", {})).kind is None
            runner.set_context({"big": "x" * (16 << 20)})
            await runner.emit_session_event({"reason": "start"}, timeout=0.003)
            runner.set_context({})
            for _ in range(2):
                result = await runner.call_tool("has_ui", {}, timeout=20)
                assert result.kind is None, result.text
            assert runner.statistics().workers_started == 1  # the same worker, intact


async def test_a_ctx_that_contains_itself_is_invalid_arguments_and_the_worker_lives_on(hostapi: Path) -> None:
    ctx: dict[str, Any] = {}
    ctx["self"] = ctx
    with trio.fail_after(30):
        async with make_runner(hostapi, discover_sources=False) as runner:
            assert (await runner.call_tool("has_ui", {})).kind is None
            result = await runner.call_tool("has_ui", {}, ctx=ctx)
            assert result.kind == "invalid_arguments", result.text
            assert "ctx values must be JSON" in result.text
            assert (await runner.call_tool("has_ui", {})).kind is None
            assert runner.statistics().workers_started == 1
