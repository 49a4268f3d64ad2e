"""Hostile TypeScript tools that only the Bun worker has to face: a memory hog under the memory limit,
import-time failures (the twins of test_load.py's), and a cancel through `xcsh-run serve`. The hostile
calls both runtimes share are contract tests, in tests/contract/test_hostile.py.

Each call gets one result of the right kind, the host carries on (healthy modules beside a broken
one load, the session goes on), and nothing is left behind (the autouse fixture checks that).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio

from tests._support.js import JS_TOOLS, require_bun, write_tool
from tests._support.mcp_clients import DEADLINE, open_session
from tests.conftest import MACHINE, TOOLS, make_runner
from tests.mcp.test_mcp import error_of, start_busy, text_of
from xcsh_run import SandboxPolicy

require_bun()

HOSTILE = JS_TOOLS / "hostile.ts"
needs_limits = pytest.mark.skipif(
    not (MACHINE.cgroup_v2 and MACHINE.memory_cgroup and MACHINE.pids_cgroup),
    reason="needs writable cgroup v2 plus memory and pids controllers (run as root)",
)


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
            crashed = await s.call_tool("os_exit", {"code": 13})
            assert error_of(crashed)["kind"] == "crashed" and error_of(crashed)["exit_code"] == 13
            assert text_of(await s.call_tool("heartbeat", {})) == "beat"
        # Survivors are checked when the session ends, by the autouse fixture.
