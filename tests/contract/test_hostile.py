"""Hostile tools through real workers of both runtimes (tests/contract/). Each gets one result of the
right kind, within timeout + grace + 1 s; the host carries on (a fresh worker serves the next call);
and nothing is left behind (the autouse fixture checks that)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests.conftest import make_runner, needs_strict
from tests.contract.conftest import on, only, tool_file

TIMEOUT = 2.0
GRACE = 0.5
HANG_MARGIN = 10.0


@pytest.fixture
def hostile(runtime: str) -> Path:
    return tool_file(runtime, "hostile")


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _proc_or_none(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


async def _call(module: Path, tool: str, args: dict[str, Any] | None = None, **options: Any) -> tuple[Any, float]:
    with trio.fail_after(40):
        async with make_runner(module, grace=GRACE, **options) as runner:
            assert runner.errors == [], runner.errors
            start = trio.current_time()
            result = await runner.call_tool(tool, args or {}, timeout=TIMEOUT)
            elapsed = trio.current_time() - start
            assert runner.statistics().busy_workers == 0
            # The host is still healthy: a worker (a fresh one after a death) serves the next call.
            follow_up = await runner.call_tool("sleeper", {"seconds": 0})
            assert follow_up.text == "slept", follow_up
    return result, elapsed


# --- deaths during a call ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args", "exit_code", "signal"),
    [
        ("os_exit", {"code": 13}, 13, None),
        ("segfault", {}, None, "SIGSEGV"),
        ("process_abort", {}, None, "SIGABRT"),
        ("sigkill_self", {}, None, "SIGKILL"),
    ],
)
async def test_worker_death_is_crashed(
    hostile: Path, tool: str, args: dict[str, Any], exit_code: int | None, signal: str | None
) -> None:
    result, elapsed = await _call(hostile, tool, args)
    assert result.kind == "crashed", result
    assert result.error.exit_code == exit_code
    assert result.error.signal == signal
    assert (signal or f"code {exit_code}") in result.text
    assert elapsed < 1.0 + TIMEOUT


async def test_a_crash_report_carries_what_the_tool_wrote_to_stderr(hostile: Path) -> None:
    result, _ = await _call(hostile, "last_words_then_abort")
    assert result.kind == "crashed" and result.error.signal == "SIGABRT", result
    assert "last words before the crash" in result.error.stderr_tail


@only("python")  # faulthandler's dump is CPython's; Bun prints its own crash banner
async def test_segfault_report_carries_the_python_traceback(hostile: Path) -> None:
    result, _ = await _call(hostile, "segfault")
    assert "Fatal Python error: Segmentation fault" in result.error.stderr_tail
    assert "hostile.py" in result.error.stderr_tail


@only("bun")  # process.exit is JavaScript's; the Python worker's sys.exit is a BaseException, tested with the worker
async def test_process_exit_in_a_call_is_a_tool_error_naming_it(hostile: Path) -> None:
    """As `sys.exit()` in a Python tool: the worker traps it, and the fuzzer counts it as a bug."""
    result, elapsed = await _call(hostile, "process_exit", {"code": 13})
    assert result.kind == "tool_error", result
    assert "process.exit(13)" in result.text
    assert result.error.exception == "ProcessExit"
    line = next(i for i, text in enumerate(hostile.read_text().splitlines(), 1) if "process.exit(params.code" in text)
    assert result.error.raised_at == f"{hostile}:{line}"
    assert elapsed < TIMEOUT


# --- the cancellation ladder ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "tool", "rung"),
    [
        on("python", "sleeper", "cooperative"),
        on("bun", "sleeper", "cooperative"),  # the tool honours its AbortSignal
        # Where the runtimes genuinely differ: in Python, SIGTERM raises ToolCancelled at the next
        # bytecode; a synchronous JavaScript loop never yields, so neither `$/cancel` nor SIGTERM
        # reaches it and only SIGKILL at the grace stops it.
        on("python", "busy_loop", "cooperative"),
        on("bun", "busy_loop", "killed"),
        on("python", "async_sleeper", "cooperative"),  # the asyncio task is cancelled
        on("python", "ignore_sigterm", "killed"),
        on("python", "long_c_call", "killed"),  # no Python handler can run inside the C call
        on("python", "fork_then_hang", "killed"),
        # The event loop is free: the worker answers the call as cancelled at once, and the host retires it.
        on("bun", "awaits_forever", "cooperative"),
    ],
    indirect=["runtime"],
)
async def test_timeout_goes_through_the_ladder(hostile: Path, tool: str, rung: str) -> None:
    result, elapsed = await _call(hostile, tool)
    assert result.kind == "timeout", result
    assert result.error.rung == rung
    assert f"timed out after {TIMEOUT:g} s" in result.text
    # The upper bound is for a hang, not a speed (speed is the benchmarks'): killing a Bun worker's
    # tree on a loaded 2-core machine has taken 2.5 s after the kill.
    assert TIMEOUT <= elapsed < TIMEOUT + GRACE + HANG_MARGIN
    if rung == "killed":  # SIGKILL comes at the grace, not before
        assert elapsed >= TIMEOUT + GRACE
    else:  # the worker answered within the grace
        assert elapsed < TIMEOUT + GRACE


async def test_cancel_by_id_is_a_cancelled_result_and_the_tool_cleans_up(hostile: Path, tmp_path: Path) -> None:
    marker = tmp_path / "cleanup"
    with trio.fail_after(30):
        async with make_runner(hostile, grace=GRACE) as runner:
            results = []
            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    results.append(
                        await runner.call_tool(
                            "sleeper",
                            {"marker": str(marker)},
                            tool_call_id="c9",
                            on_update=lambda _: runner.cancel("c9", "user pressed stop"),
                        )
                    )

                nursery.start_soon(call)
            after = await runner.call_tool("heartbeat")
    (result,) = results
    assert result.kind == "cancelled", result
    assert result.error is not None and result.error.rung == "cooperative"
    assert "user pressed stop" in result.text
    assert marker.read_text() == "cleaned up: user pressed stop"
    assert after.text == "beat"


@only("python")  # an asyncio task to cancel is Python's; a TypeScript tool has only its AbortSignal
async def test_cancel_of_async_tool_cancels_its_task(hostile: Path, tmp_path: Path) -> None:
    marker = tmp_path / "cleanup"
    with trio.fail_after(30):
        async with make_runner(hostile, grace=GRACE) as runner:
            result = await runner.call_tool(
                "async_sleeper",
                {"marker": str(marker)},
                tool_call_id="a1",
                on_update=lambda _: runner.cancel("a1", "stop"),
            )
    assert result.kind == "cancelled" and result.error is not None and result.error.rung == "cooperative"
    assert marker.read_text() == "cancelled: stop"


async def test_unknown_cancel_id_is_reported(hostile: Path) -> None:
    with trio.fail_after(20):
        async with make_runner(hostile) as runner:
            assert runner.cancel("nope") is False


@pytest.mark.parametrize(
    ("runtime", "tool"),
    # A call no signal stops: Python's ignores SIGTERM; a JavaScript loop never sees one.
    [on("python", "ignore_sigterm"), on("bun", "busy_loop")],
    indirect=["runtime"],
)
async def test_closing_the_runner_stops_calls_running_in_other_tasks(hostile: Path, tool: str) -> None:
    results = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async with make_runner(hostile, grace=GRACE) as runner:
                started = trio.Event()

                async def call() -> None:
                    results.append(await runner.call_tool(tool, on_update=lambda _: started.set()))

                nursery.start_soon(call)
                await started.wait()
            # The runner is closed: its workers are gone even though the call's task lives on.
            assert runner.statistics().busy_workers == 0
    (result,) = results
    assert result.kind == "cancelled"
    assert "runner closing" in result.text


# --- unhandled errors ----------------------------------------------------------------------------


@only("bun")  # stray promise rejections and timer exceptions are JavaScript's; Bun would exit on either
@pytest.mark.parametrize(
    ("tool", "message", "what"),
    [
        ("unhandled_rejection", "nobody catches this", "an unhandled promise rejection while the call ran"),
        ("uncaught_in_timer", "thrown from a timer", "an uncaught exception while the call ran"),
    ],
)
async def test_an_unhandled_error_fails_its_call_and_the_host_carries_on(
    hostile: Path, tool: str, message: str, what: str
) -> None:
    """The worker turns it into the running call's tool_error instead."""
    result, elapsed = await _call(hostile, tool)
    assert elapsed < TIMEOUT  # ended by itself, not by the deadline
    assert result.kind == "tool_error", result
    assert message in result.text and what in result.text, result.text


# --- output and protocol abuse -------------------------------------------------------------------


async def test_floods_and_fake_frames_cannot_forge_a_result(hostile: Path) -> None:
    result, _ = await _call(hostile, "flood", {"rounds": 300, "lines": 20000})
    assert not result.is_error, result
    assert result.text == "flooded"
    assert "FORGED" not in result.text


async def test_garbage_on_every_fd_is_a_protocol_error(hostile: Path) -> None:
    result, _ = await _call(hostile, "garbage_fds")
    assert result.kind == "protocol_error", result
    assert "broke the protocol" in result.text


@pytest.mark.parametrize(
    ("mode", "fragment"),
    [
        ("bad_update", "malformed 'update' message"),
        ("unknown_id", "request id the host never sent: 999999"),
        ("huge_length", "over the 67108864-byte limit"),
    ],
)
async def test_forged_frames_are_a_protocol_error_and_the_host_survives(
    hostile: Path, mode: str, fragment: str
) -> None:
    result, elapsed = await _call(hostile, "forge_frames", {"mode": mode})
    assert result.kind == "protocol_error", result
    assert fragment in result.text
    assert elapsed < 1.0  # ended at once, not at the timeout


@only("bun")  # the Bun worker's own answer to EBADF on its response pipe (its lifeline)
@pytest.mark.parametrize("args", [{"only": True}, {}], ids=["protocol-out", "every-fd"])
async def test_closing_the_protocol_fds_is_a_crash_at_once(hostile: Path, args: dict[str, Any]) -> None:
    """The worker cannot answer any more: it takes its lifeline, and the host reports that, not a timeout."""
    result, elapsed = await _call(hostile, "close_fds", args)
    assert result.kind == "crashed", result
    assert "writing the response pipe failed (EBADF)" in result.text
    assert elapsed < 1.0


async def test_a_twenty_mib_result_arrives_whole(hostile: Path) -> None:
    with trio.fail_after(60):
        async with make_runner(hostile) as runner:
            result = await runner.call_tool("big", {"mib": 20})
            after = await runner.call_tool("heartbeat")
    assert not result.is_error, result.text[:300]
    assert len(result.text) == 20 * 2**20 and set(result.text) == {"x"}
    assert after.text == "beat"


async def test_a_result_over_the_frame_limit_is_limit_exceeded(hostile: Path) -> None:
    with trio.fail_after(30):
        async with make_runner(hostile, max_frame_bytes=2**20) as runner:
            result = await runner.call_tool("big", {"mib": 2})
            small = await runner.call_tool("big", {"mib": 0.5})
    assert result.kind == "limit_exceeded", result
    assert result.error is not None and result.error.limit == "output"
    assert not small.is_error


# --- processes the tool starts -------------------------------------------------------------------


# `daemon` starts it from the tool's own process and holds stdout and stderr open; `exec_daemon`
# through the API's exec, in a new session.
@pytest.mark.parametrize("tool", ["daemon", "exec_daemon"])
async def test_a_daemon_dies_with_the_call(hostile: Path, tool: str) -> None:
    with trio.fail_after(30):
        async with make_runner(hostile, grace=GRACE) as runner:
            start = trio.current_time()
            result = await runner.call_tool(tool, timeout=TIMEOUT)
            # The result must not wait for the daemon's EOF on stdout and stderr.
            assert trio.current_time() - start < 1.0
            assert not result.is_error, result
            pids = result.details["pids"]
            # A call may not leave processes behind: its worker was retired with its tree.
            assert _alive(pids) == []
            assert runner.statistics().idle_workers == 0
            assert (await runner.call_tool("heartbeat")).text == "beat"


async def test_dozens_of_setsid_children_leave_no_survivor(hostile: Path) -> None:
    with trio.fail_after(30):
        async with make_runner(hostile, grace=GRACE) as runner:
            pids: list[int] = []
            result = await runner.call_tool(
                "many_setsid",
                {"count": 40, "hang": True},
                timeout=TIMEOUT,
                on_update=lambda partial: pids.extend(partial["details"]["pids"]),
            )
            assert result.kind == "timeout", result
            assert len(pids) == 40
            assert _alive(pids) == []


@pytest.mark.parametrize(
    ("runtime", "tool"),
    # A daemon, then a call no signal stops: Python's ignores SIGTERM; a JavaScript loop never sees one.
    [on("python", "fork_then_hang"), on("bun", "daemon_then_spin")],
    indirect=["runtime"],
)
async def test_a_daemon_then_a_stuck_call_is_killed_with_its_daemon(hostile: Path, tool: str) -> None:
    with trio.fail_after(30):
        async with make_runner(hostile, grace=GRACE) as runner:
            pids: list[int] = []
            result = await runner.call_tool(
                tool, timeout=TIMEOUT, on_update=lambda partial: pids.extend(partial["details"]["pids"])
            )
    assert result.kind == "timeout" and result.error is not None and result.error.rung == "killed", result
    assert len(pids) == 1 and _alive(pids) == []


@pytest.mark.parametrize(
    ("runtime", "level", "policy"),
    [
        on("python", "contained", "SandboxPolicy(level='contained')"),
        on("python", "strict", "SandboxPolicy(level='strict')"),
        on("bun", "contained", "SandboxPolicy()"),
        # The TypeScript daemons are `sleep` programs (the Python ones forks of the worker): strict must allow it.
        on("bun", "strict", "SandboxPolicy(level='strict', allow_exec=('sleep',))", marks=needs_strict),
    ],
    indirect=["runtime"],
)
async def test_host_sigkill_takes_the_worker_tree_down(hostile: Path, tmp_path: Path, level: str, policy: str) -> None:
    """The lifeline: a host that dies without cleaning up still leaves nothing behind."""
    script = tmp_path / "host.py"
    script.write_text(
        "import sys, trio\n"
        "from xcsh_run import open_runner, SandboxPolicy\n"
        "async def main():\n"
        f"    async with open_runner([{str(hostile)!r}], sandbox={policy}) as r:\n"
        "        def ready(partial):\n"
        "            print(*partial['details']['pids'], flush=True)\n"
        "        await r.call_tool('many_setsid', {'count': 5, 'hang': True}, on_update=ready)\n"
        "trio.run(main)\n"
    )
    with trio.fail_after(40):
        proc = await trio.lowlevel.open_process([sys.executable, str(script)], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        try:
            line = b""
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, "host exited before the tool started"
                line += chunk
            pids = [int(x) for x in line.split()]
            workers = [c.pid for c in psutil.Process(proc.pid).children()]
            assert len(pids) == 5 and workers
        finally:
            # Also when an assertion above failed: no host is left running into the next test.
            proc.kill()
            await proc.wait()
            await proc.stdout.aclose()
        # Wait (bounded) for the kernel to deliver the lifeline's kill.
        found = [p for p in map(_proc_or_none, pids + workers) if p]
        _, alive = await trio.to_thread.run_sync(lambda: psutil.wait_procs(found, timeout=10))
        assert alive == []
