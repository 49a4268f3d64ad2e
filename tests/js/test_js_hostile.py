"""Hostile TypeScript tools through real Bun workers: the twins of test_hostile.py, test_load.py's
import-time failures and the limits of test_sandbox.py.

Each call gets one result of the right kind within timeout + grace + 1 s, the
host carries on (a fresh worker serves the next call, healthy modules beside a
broken one load), and nothing is left behind (the autouse fixture checks that).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests._support.js import JS_TOOLS, require_bun, write_tool
from tests._support.mcp_clients import DEADLINE, open_session
from tests.conftest import MACHINE, TOOLS, make_runner, needs_strict
from tests.mcp.test_mcp import error_of, start_busy, text_of
from xcsh_run import SandboxPolicy

require_bun()

HOSTILE = JS_TOOLS / "hostile.ts"
TIMEOUT = 2.0
GRACE = 0.5
needs_limits = pytest.mark.skipif(
    not (MACHINE.cgroup_v2 and MACHINE.memory_cgroup and MACHINE.pids_cgroup),
    reason="needs writable cgroup v2 plus memory and pids controllers (run as root)",
)


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
    with trio.fail_after(40):
        async with make_runner(HOSTILE, grace=GRACE, **options) as runner:
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
        ("libc_exit", {"code": 13}, 13, None),
        ("process_abort", {}, None, "SIGABRT"),
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


async def test_a_crash_report_carries_what_the_tool_wrote_to_stderr() -> None:
    result, _ = await _call("last_words_then_abort")
    assert result.kind == "crashed" and result.error.signal == "SIGABRT", result
    assert "last words before the crash" in result.error.stderr_tail


async def test_process_exit_in_a_call_is_a_tool_error_naming_it() -> None:
    """As `sys.exit()` in a Python tool: the worker traps it, and the fuzzer counts it as a bug."""
    result, elapsed = await _call("process_exit", {"code": 13})
    assert result.kind == "tool_error", result
    assert "process.exit(13)" in result.text
    assert result.error.exception == "ProcessExit"
    assert result.error.raised_at == f"{HOSTILE}:{_line_of('process.exit(params.code')}"
    assert elapsed < TIMEOUT


def _line_of(fragment: str) -> int:
    return next(i for i, line in enumerate(HOSTILE.read_text().splitlines(), 1) if fragment in line)


# --- the cancellation ladder ---------------------------------------------------------------------


async def test_a_loop_ignoring_its_abort_signal_is_killed_at_grace() -> None:
    """A synchronous loop never yields: neither `$/cancel` nor SIGTERM can reach JavaScript; SIGKILL at grace."""
    result, elapsed = await _call("busy_loop")
    assert result.kind == "timeout", result
    assert result.error.rung == "killed"
    assert f"timed out after {TIMEOUT:g} s" in result.text
    assert TIMEOUT + GRACE <= elapsed < TIMEOUT + GRACE + 1.0


async def test_an_await_that_ignores_its_signal_still_ends_by_the_grace() -> None:
    """The event loop is free: the worker answers the call as cancelled at once, and the host retires it."""
    result, elapsed = await _call("awaits_forever")
    assert result.kind == "timeout", result
    assert result.error.rung == "cooperative"
    assert TIMEOUT <= elapsed < TIMEOUT + GRACE


async def test_a_tool_honouring_its_signal_stops_cooperatively() -> None:
    result, elapsed = await _call("sleeper")
    assert result.kind == "timeout", result
    assert result.error.rung == "cooperative"
    assert TIMEOUT <= elapsed < TIMEOUT + GRACE


async def test_cancel_by_id_aborts_the_signal_and_the_tool_cleans_up(tmp_path: Path) -> None:
    marker = tmp_path / "cleanup"
    with trio.fail_after(30):
        async with make_runner(HOSTILE, grace=GRACE) as runner:
            result = await runner.call_tool(
                "sleeper",
                {"marker": str(marker)},
                tool_call_id="c9",
                on_update=lambda _: runner.cancel("c9", "user pressed stop"),
            )
            after = await runner.call_tool("heartbeat")
    assert result.kind == "cancelled", result
    assert result.error is not None and result.error.rung == "cooperative"
    assert "user pressed stop" in result.text
    assert marker.read_text().startswith("cleaned up: ")
    assert "user pressed stop" in marker.read_text()
    assert after.text == "beat"


async def test_closing_the_runner_stops_a_loop_running_in_another_task() -> None:
    results = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async with make_runner(HOSTILE, grace=GRACE) as runner:
                started = trio.Event()

                async def call() -> None:
                    results.append(await runner.call_tool("busy_loop", on_update=lambda _: started.set()))

                nursery.start_soon(call)
                await started.wait()
            assert runner.statistics().busy_workers == 0
    (result,) = results
    assert result.kind == "cancelled"
    assert "runner closing" in result.text


# --- unhandled errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "message", "what"),
    [
        ("unhandled_rejection", "nobody catches this", "an unhandled promise rejection while the call ran"),
        ("uncaught_in_timer", "thrown from a timer", "an uncaught exception while the call ran"),
    ],
)
async def test_an_unhandled_error_fails_its_call_and_the_host_carries_on(tool: str, message: str, what: str) -> None:
    """Bun would exit on either; the worker turns it into the running call's tool_error instead."""
    result, elapsed = await _call(tool)
    assert elapsed < TIMEOUT  # ended by itself, not by the deadline
    assert result.kind == "tool_error", result
    assert message in result.text and what in result.text, result.text


# --- output and protocol abuse -------------------------------------------------------------------


async def test_console_log_floods_and_fake_frames_cannot_forge_a_result() -> None:
    result, _ = await _call("flood", {"rounds": 300, "lines": 20000})
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


@pytest.mark.parametrize("args", [{"only": True}, {}], ids=["protocol-out", "every-fd"])
async def test_closing_the_protocol_fds_is_a_crash_at_once(args: dict[str, Any]) -> None:
    """The worker cannot answer any more: it takes its lifeline, and the host reports that, not a timeout."""
    result, elapsed = await _call("close_fds", args)
    assert result.kind == "crashed", result
    assert "writing the response pipe failed (EBADF)" in result.text
    assert elapsed < 1.0


async def test_a_twenty_mib_result_arrives_whole() -> None:
    with trio.fail_after(60):
        async with make_runner(HOSTILE) as runner:
            result = await runner.call_tool("big", {"mib": 20})
            after = await runner.call_tool("heartbeat")
    assert not result.is_error, result.text[:300]
    assert len(result.text) == 20 * 2**20 and set(result.text) == {"x"}
    assert after.text == "beat"


async def test_a_result_over_the_frame_limit_is_limit_exceeded() -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTILE, max_frame_bytes=2**20) as runner:
            result = await runner.call_tool("big", {"mib": 2})
            small = await runner.call_tool("big", {"mib": 0.5})
    assert result.kind == "limit_exceeded", result
    assert result.error is not None and result.error.limit == "output"
    assert not small.is_error


# --- processes the tool starts -------------------------------------------------------------------


async def test_a_daemon_started_through_exec_dies_with_the_call() -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTILE, grace=GRACE) as runner:
            result = await runner.call_tool("exec_daemon", timeout=TIMEOUT)
            assert not result.is_error, result
            pids = result.details["pids"]
            # A call may not leave processes behind: its worker was retired with its tree.
            assert _alive(pids) == []
            assert runner.statistics().idle_workers == 0
            assert (await runner.call_tool("heartbeat")).text == "beat"


async def test_dozens_of_setsid_children_leave_no_survivor() -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTILE, grace=GRACE) as runner:
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


async def test_a_daemon_then_a_stuck_loop_is_killed_with_its_daemon() -> None:
    with trio.fail_after(30):
        async with make_runner(HOSTILE, grace=GRACE) as runner:
            pids: list[int] = []
            result = await runner.call_tool(
                "daemon_then_spin", timeout=TIMEOUT, on_update=lambda partial: pids.extend(partial["details"]["pids"])
            )
    assert result.kind == "timeout" and result.error is not None and result.error.rung == "killed", result
    assert len(pids) == 1 and _alive(pids) == []


@pytest.mark.parametrize("level", ["contained", pytest.param("strict", marks=needs_strict)])
async def test_host_sigkill_takes_the_bun_worker_tree_down(tmp_path: Path, level: str) -> None:
    """The lifeline: a host that dies without cleaning up still leaves nothing behind."""
    script = tmp_path / "host.py"
    policy = f"SandboxPolicy(level={level!r}, allow_exec=('sleep',))" if level == "strict" else "SandboxPolicy()"
    script.write_text(
        "import sys, trio\n"
        "from xcsh_run import open_runner, SandboxPolicy\n"
        "async def main():\n"
        f"    async with open_runner([{str(HOSTILE)!r}], sandbox={policy}) as r:\n"
        "        def ready(partial):\n"
        "            print(*partial['details']['pids'], flush=True)\n"
        "        await r.call_tool('many_setsid', {'count': 5, 'hang': True}, on_update=ready)\n"
        "trio.run(main)\n"
    )
    with trio.fail_after(40):
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
        found = [p for p in map(_proc_or_none, pids + workers) if p]
        _, alive = await trio.to_thread.run_sync(lambda: psutil.wait_procs(found, timeout=10))
        assert alive == []


def _proc_or_none(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


# --- limits --------------------------------------------------------------------------------------


@needs_limits
async def test_a_memory_hog_is_limit_exceeded_memory() -> None:
    with trio.fail_after(60):
        async with make_runner(HOSTILE, sandbox=SandboxPolicy(memory_mb=256)) as runner:
            result = await runner.call_tool("memory_hog", timeout=30)
            after = await runner.call_tool("heartbeat")
    assert result.kind == "limit_exceeded", result
    assert result.error is not None and result.error.limit == "memory"
    assert after.text == "beat"  # the host is unharmed


# --- import time ---------------------------------------------------------------------------------

HEALTHY = """
export default (pi) => ({
  name: "healthy", description: "still here", parameters: pi.typebox.Type.Object({}),
  execute: async () => "healthy",
});
"""

BROKEN: dict[str, tuple[str, str]] = {
    "exits.ts": (
        "process.exit(7);\nexport default () => [];\n",
        r"the module called process\.exit\(7\) while being imported; a tool module must not exit",
    ),
    "throws.ts": (
        'throw new TypeError("import broke");\nexport default () => [];\n',
        r"raised TypeError: import broke",
    ),
    "syntax_error.ts": (
        "export default (pi) => {\n  return [\n",
        r"raised BuildMessage: Unexpected end of file at \S*syntax_error\.ts:2:\d+",
    ),
    "no_default.ts": ("export const tool = { name: 'x' };\n", r"Tool must export a default function.*; add `export"),
    "factory_throws.ts": (
        'export default () => { throw new Error("factory broke"); };\n',
        r"factory\(api\) raised Error: factory broke",
    ),
    "rejects_at_import.ts": (
        'await Promise.reject(new Error("top-level await failed"));\n',
        r"importing the module raised Error: top-level await failed",
    ),
}


@pytest.mark.parametrize("module", sorted(BROKEN))
async def test_an_import_time_failure_is_a_load_error_and_discovery_goes_on(tmp_path: Path, module: str) -> None:
    source, pattern = BROKEN[module]
    broken = write_tool(tmp_path / "tools", module, source)
    healthy = write_tool(tmp_path / "tools", "healthy.ts", HEALTHY)
    with trio.fail_after(30):
        async with make_runner(broken, healthy, TOOLS / "basic.py") as runner:
            errors = runner.errors
            ok = await runner.call_tool("healthy")
            python = await runner.call_tool("add", {"a": 1})
    assert ok.text == "healthy" and python.text == "1"
    (error,) = errors
    assert error.path == str(broken)
    text = error.message + (error.stderr_tail or "")
    assert module in text, text
    assert re.search(pattern, text), text


async def test_a_busy_loop_at_import_hits_the_load_timeout(tmp_path: Path) -> None:
    loops = write_tool(tmp_path / "tools", "loops.ts", "for (;;) {}\nexport default () => [];\n")
    healthy = write_tool(tmp_path / "tools", "healthy.ts", HEALTHY)
    with trio.fail_after(30):
        start = trio.current_time()
        async with make_runner(loops, healthy, load_timeout=1.0) as runner:
            elapsed = trio.current_time() - start
            errors = runner.errors
            names = [t.name for t in runner.tools]
            ok = await runner.call_tool("healthy")
    (error,) = errors
    assert "of CPU importing (load timeout 1 s of CPU); it may loop" in error.message
    assert "healthy" in names and ok.text == "healthy"
    assert elapsed < 1.0 + 3.0


async def test_reading_stdin_at_import_sees_an_empty_stream(tmp_path: Path) -> None:
    module = write_tool(
        tmp_path / "tools",
        "stdin_read.ts",
        'import { readFileSync } from "node:fs";\n'
        'const SYNC = readFileSync(0, "utf8");\n'
        "const ASYNC = await Bun.stdin.text();\n"
        "export default (pi) => ({\n"
        '  name: "stdin_at_import", description: "read stdin at import", parameters: pi.typebox.Type.Object({}),\n'
        "  execute: async () => JSON.stringify([SYNC, ASYNC]),\n"
        "});\n",
    )
    with trio.fail_after(30):
        async with make_runner(module) as runner:
            assert runner.errors == [], runner.errors
            result = await runner.call_tool("stdin_at_import")
    assert result.text == '["",""]'


# --- through xcsh-run serve ----------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["busy_loop", "sleeper"])
async def test_an_mcp_cancel_stops_a_typescript_tool_and_the_session_goes_on(tool: str, transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, str(HOSTILE)) as s:
            async with trio.open_nursery() as nursery:
                scope, message, results = await start_busy(nursery, s, tool)
                assert message == "started"  # the tool's first update, as the progress message
                scope.cancel()  # the SDK sends notifications/cancelled for the request
            assert results == []
            assert text_of(await s.call_tool("heartbeat", {})) == "beat"
            crashed = await s.call_tool("libc_exit", {"code": 13})
            assert error_of(crashed)["kind"] == "crashed" and error_of(crashed)["exit_code"] == 13
            assert text_of(await s.call_tool("heartbeat", {})) == "beat"
        # Survivors are checked when the session ends, by the autouse fixture.
