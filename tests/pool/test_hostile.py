"""Contract tests: hostile tools through real workers. Each gets one result of the right kind,
within timeout + grace + 1 s, and leaves no process behind (the autouse fixture checks that)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests.conftest import TOOLS, make_runner

TIMEOUT = 2.0
GRACE = 0.5


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


async def _call(tool: str, args: dict[str, Any] | None = None, **options: Any) -> tuple[Any, float]:
    with trio.fail_after(30):
        async with make_runner(TOOLS / "hostile.py", grace=GRACE, **options) as runner:
            start = trio.current_time()
            result = await runner.call_tool(tool, args or {}, timeout=TIMEOUT)
            elapsed = trio.current_time() - start
            assert runner.statistics().busy_workers == 0
            # The host is still healthy: a fresh worker serves the next call.
            follow_up = await runner.call_tool("sleeper", {"seconds": 0})
            assert follow_up.text == "slept", follow_up
    return result, elapsed


@pytest.mark.parametrize(
    ("tool", "args", "exit_code", "signal"),
    [
        ("os_exit", {"code": 13}, 13, None),
        ("segfault", {}, None, "SIGSEGV"),
        ("sigkill_self", {}, None, "SIGKILL"),
    ],
)
async def test_worker_death_is_crashed(
    tool: str, args: dict[str, Any], exit_code: int | None, signal: str | None
) -> None:
    result, elapsed = await _call(tool, args)
    assert result.kind == "crashed", result
    assert result.error.exit_code == exit_code
    assert result.error.signal == signal
    assert (signal or f"code {exit_code}") in result.text
    assert elapsed < 1.0 + TIMEOUT


async def test_segfault_report_carries_the_python_traceback() -> None:
    result, _ = await _call("segfault")
    assert "Fatal Python error: Segmentation fault" in result.error.stderr_tail
    assert "hostile.py" in result.error.stderr_tail


@pytest.mark.parametrize(
    ("tool", "rung"),
    [
        ("busy_loop", "cooperative"),  # SIGTERM raises ToolCancelled at the next bytecode
        ("sleeper", "cooperative"),
        ("async_sleeper", "cooperative"),  # the task is cancelled
        ("ignore_sigterm", "killed"),
        ("long_c_call", "killed"),  # no Python handler can run inside the C call
        ("fork_then_hang", "killed"),
    ],
)
async def test_timeout_goes_through_the_ladder(tool: str, rung: str) -> None:
    result, elapsed = await _call(tool)
    assert result.kind == "timeout", result
    assert result.error.rung == rung
    assert f"timed out after {TIMEOUT:g} s" in result.text
    assert TIMEOUT <= elapsed < TIMEOUT + GRACE + 1.0


async def test_flood_with_fake_frames_cannot_forge_a_result() -> None:
    result, _ = await _call("flood", {"rounds": 300})
    assert not result.is_error, result
    assert result.text == "flooded"
    assert "FORGED" not in result.text


async def test_garbage_on_every_fd_is_a_protocol_error() -> None:
    result, _ = await _call("garbage_fds")
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
async def test_forged_frames_are_a_protocol_error_and_the_host_survives(mode: str, fragment: str) -> None:
    result, elapsed = await _call("forge_frames", {"mode": mode})
    assert result.kind == "protocol_error", result
    assert fragment in result.text
    assert elapsed < 1.0  # ended at once, not at the timeout


async def test_double_fork_daemon_dies_with_the_call() -> None:
    with trio.fail_after(30):
        async with make_runner(TOOLS / "hostile.py", grace=GRACE) as runner:
            start = trio.current_time()
            result = await runner.call_tool("daemon", timeout=TIMEOUT)
            # It holds stdout and stderr open: the result must not wait for EOF.
            assert trio.current_time() - start < 1.0
            assert not result.is_error
            pids = result.details["pids"]
            # A call may not leave processes behind: its worker was retired with its tree.
            assert _alive(pids) == []
            assert runner.statistics().idle_workers == 0


async def test_dozens_of_setsid_children_leave_no_survivor() -> None:
    with trio.fail_after(30):
        async with make_runner(TOOLS / "hostile.py", grace=GRACE) as runner:
            pids: list[int] = []
            result = await runner.call_tool(
                "many_setsid",
                {"count": 40, "hang": True},
                timeout=TIMEOUT,
                on_update=lambda partial: pids.extend(partial["details"]["pids"]),
            )
            assert result.kind == "timeout"
            assert len(pids) == 40
            assert _alive(pids) == []


async def test_cancel_by_id_is_a_cancelled_result_and_the_tool_cleans_up(tmp_path: Path) -> None:
    marker = tmp_path / "cleanup"
    with trio.fail_after(30):
        async with make_runner(TOOLS / "hostile.py", grace=GRACE) as runner:
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
    (result,) = results
    assert result.kind == "cancelled"
    assert result.error.rung == "cooperative"
    assert "user pressed stop" in result.text
    assert marker.read_text() == "cleaned up: user pressed stop"


async def test_cancel_of_async_tool_cancels_its_task(tmp_path: Path) -> None:
    marker = tmp_path / "cleanup"
    with trio.fail_after(30):
        async with make_runner(TOOLS / "hostile.py", grace=GRACE) as runner:
            result = await runner.call_tool(
                "async_sleeper",
                {"marker": str(marker)},
                tool_call_id="a1",
                on_update=lambda _: runner.cancel("a1", "stop"),
            )
    assert result.kind == "cancelled" and result.error.rung == "cooperative"
    assert marker.read_text() == "cancelled: stop"


async def test_unknown_cancel_id_is_reported() -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "hostile.py") as runner:
            assert runner.cancel("nope") is False


@pytest.mark.parametrize("level", ["contained", "strict"])
async def test_host_sigkill_takes_the_worker_tree_down(tmp_path: Path, level: str) -> None:
    """The lifeline: a host that dies without cleaning up still leaves nothing behind."""
    script = tmp_path / "host.py"
    script.write_text(
        "import sys, trio\n"
        "from xcsh_run import open_runner, SandboxPolicy\n"
        "async def main():\n"
        f"    async with open_runner([{str(TOOLS / 'hostile.py')!r}], sandbox=SandboxPolicy(level={level!r})) as r:\n"
        "        def ready(partial):\n"
        "            print(*partial['details']['pids'], flush=True)\n"
        "        await r.call_tool('many_setsid', {'count': 5, 'hang': True}, on_update=ready)\n"
        "trio.run(main)\n"
    )
    with trio.fail_after(30):
        proc = await trio.lowlevel.open_process([sys.executable, str(script)], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(4096)
            assert chunk, "host exited before the tool started"
            line += chunk
        pids = [int(x) for x in line.split()]
        workers = [c.pid for c in psutil.Process(proc.pid).children()]
        assert len(pids) == 5 and workers
        proc.kill()
        await proc.wait()
        await proc.stdout.aclose()
        # Wait (bounded) for the kernel to deliver the lifeline's kill.
        _, alive = await trio.to_thread.run_sync(
            lambda: psutil.wait_procs([p for p in map(_proc_or_none, pids + workers) if p], timeout=10)
        )
        assert alive == []


def _proc_or_none(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


async def test_closing_the_runner_stops_calls_running_in_other_tasks() -> None:
    results = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async with make_runner(TOOLS / "hostile.py", grace=GRACE) as runner:
                started = trio.Event()

                async def call() -> None:
                    results.append(await runner.call_tool("ignore_sigterm", on_update=lambda _: started.set()))

                nursery.start_soon(call)
                await started.wait()
            # The runner is closed: its workers are gone even though the call's task lives on.
            assert runner.statistics().busy_workers == 0
    (result,) = results
    assert result.kind == "cancelled"
    assert "runner closing" in result.text
