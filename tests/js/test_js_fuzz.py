"""`xcsh-run fuzz` on TypeScript tools: a TypeBox schema drives the search, the planted bugs of
examples/buggy_tool.ts are found, and JavaScript's errors are judged by their names.

The real console script runs as a subprocess against real Bun workers (as in
test_fuzz_cli.py and test_fuzz_bugs.py); one fuzz run of the example is shared
by the tests that read its report.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import trio

from tests._support.js import require_bun, write_tool
from tests.conftest import ROOT, XCSH_RUN
from xcsh_run import fuzz_tool

require_bun()

BUGGY = str(ROOT / "examples" / "buggy_tool.ts")
BUGGY_ARGS = ("buggy_echo_ts", "--tools", BUGGY, "--examples", "50", "--seed", "7", "--timeout", "5")
EMPTY_TEXT = f'xcsh-run buggy_echo_ts --args \'{{"text": ""}}\' --tools {BUGGY}'

TOOLS = """
export default (pi) => {
  const T = pi.typebox.Type;
  const INT = T.Object({ x: T.Integer() });
  const PATH = T.Object({ path: T.Optional(T.String()) });
  const TEXT = T.Object({ text: T.String() }, { additionalProperties: false });
  const ToolError = pi.pi.ToolError;
  return [
    { name: "divide_ts", description: "d", parameters: INT,
      execute: async (id, p) => String((100n / BigInt(p.x)).toString()) },  // a RangeError at x = 0
    { name: "refuses_ts", description: "r", parameters: PATH,
      execute: async (id, p) => { throw new ToolError(`file not found: ${p.path}`); } },
    { name: "plain_error_ts", description: "e", parameters: PATH,
      execute: async (id, p) => { throw new Error(`no database for ${p.path}`); } },
    { name: "looks_up_ts", description: "l", parameters: PATH,
      execute: async (id, p) => ({ a: { v: "1" } })[p.path ?? "b"].v },  // a TypeError on most paths
    { name: "word_count_ts", description: "w", parameters: TEXT,
      execute: async (id, p) => ({
        content: [{ type: "text", text: String(p.text.split(/\\s+/u).filter(Boolean).length) }],
        details: { chars: p.text.length },
      }) },
  ];
};
"""


def run(
    *args: str, cwd: Path, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    return write_tool(tmp_path, "fuzzed.ts", TOOLS)


def fuzz(tool: str, tools: Path, *args: str, examples: int = 20) -> subprocess.CompletedProcess[str]:
    return run("fuzz", tool, "--tools", str(tools), "--examples", str(examples), "--seed", "1", *args, cwd=tools.parent)


@pytest.fixture(scope="module")
def buggy_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One fuzz run of the TypeScript buggy tool, shared by the tests below."""
    base = tmp_path_factory.mktemp("buggy_ts")
    (base / "home").mkdir()
    env = {**os.environ, "HOME": str(base / "home"), "XDG_CACHE_HOME": str(base / "cache")}
    return run("fuzz", *BUGGY_ARGS, cwd=base, env=env, timeout=100)


# --- the planted bugs ----------------------------------------------------------------------------


@pytest.mark.timeout(150)  # the shared run (at most 100 s) happens in the first test that asks for it
def test_finds_and_shrinks_both_planted_bugs(buggy_run: subprocess.CompletedProcess[str]) -> None:
    proc = buggy_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "buggy_echo_ts: valid inputs: FAILED, 2 distinct failures" in out
    line = next(i for i, text in enumerate(Path(BUGGY).read_text().splitlines(), 1) if "planted bug 1" in text)
    assert "tool_error: TypeError: null is not an object" in out
    assert f"(raised at {BUGGY}:{line}; TypeError signals a bug)" in out
    assert f"    reproduce: {EMPTY_TEXT}\n" in out
    assert "tool_error: RangeError: " in out and "RangeError signals a bug" in out
    assert f"""reproduce: xcsh-run buggy_echo_ts --args '{{"text": "0", "repeat": -1}}' --tools {BUGGY}""" in out
    # The TypeBox schema forbids extra keys and non-integers: the host refuses every near-miss.
    assert "buggy_echo_ts: near-misses: ok (50 calls)" in out
    assert "buggy_echo_ts: no process left behind: ok" in out
    assert out.rstrip().endswith("2 failures found (seed 7; rerun with --seed 7)")


@pytest.mark.timeout(60)
def test_the_reproducer_reproduces_with_the_evidence(tmp_path: Path) -> None:
    proc = run("buggy_echo_ts", "--args", '{"text": ""}', "--tools", BUGGY, "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["kind"] == "tool_error"
    assert error["exception"] == "TypeError"
    assert error["exception_mro"][:2] == ["TypeError", "Error"]
    line = next(i for i, text in enumerate(Path(BUGGY).read_text().splitlines(), 1) if "planted bug 1" in text)
    assert error["raised_at"] == f"{BUGGY}:{line}"
    assert not error.get("deliberate")
    ok = run("buggy_echo_ts", "--args", '{"text": "ab", "repeat": 2}', "--tools", BUGGY, "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["details"] == {"length": 4, "first": "a"}


# --- how JavaScript errors are judged ------------------------------------------------------------


@pytest.mark.timeout(110)
def test_a_range_error_on_valid_input_is_flagged(tools: Path) -> None:
    proc = fuzz("divide_ts", tools)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "divide_ts: valid inputs: FAILED, 1 distinct failure" in proc.stdout
    assert "tool_error: RangeError: " in proc.stdout and "RangeError signals a bug" in proc.stdout
    assert f"    reproduce: xcsh-run divide_ts --args '{{\"x\": 0}}' --tools {tools}\n" in proc.stdout


@pytest.mark.timeout(130)  # two fuzz runs
def test_a_type_error_is_flagged_and_can_be_allowed(tools: Path) -> None:
    flagged = fuzz("looks_up_ts", tools)
    assert flagged.returncode == 1, flagged.stdout + flagged.stderr
    assert "tool_error: TypeError: " in flagged.stdout and "TypeError signals a bug" in flagged.stdout
    allowed = fuzz("looks_up_ts", tools, "--allow-error", "TypeError")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


@pytest.mark.timeout(240)  # four fuzz runs
def test_tool_error_and_a_plain_error_pass_unless_flagged(tools: Path) -> None:
    refused = fuzz("refuses_ts", tools)
    assert refused.returncode == 0, refused.stdout + refused.stderr
    assert "refuses_ts: valid inputs: ok (20 calls)" in refused.stdout
    plain = fuzz("plain_error_ts", tools)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    flagged = fuzz("plain_error_ts", tools, "--flag-error", "Error", examples=5)
    assert flagged.returncode == 1, flagged.stdout + flagged.stderr
    assert "tool_error: Error: no database for " in flagged.stdout
    assert "Error is flagged (--flag-error)" in flagged.stdout
    every = fuzz("refuses_ts", tools, "--fail-on-tool-error", examples=5)
    assert every.returncode == 1, every.stdout + every.stderr
    assert "deliberate, but every tool_error counts (--fail-on-tool-error)" in every.stdout


@pytest.mark.timeout(110)
def test_a_correct_typescript_tool_passes(tools: Path) -> None:
    proc = fuzz("word_count_ts", tools, examples=40)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == (
        "word_count_ts: valid inputs: ok (40 calls)\n"
        "word_count_ts: near-misses: ok (40 calls)\n"
        "word_count_ts: no process left behind: ok\n"
        "no failure found (seed 1)\n"
    )


async def test_fuzz_tool_api_reports_both_bugs_by_their_exceptions() -> None:
    with trio.fail_after(100):
        report = await fuzz_tool("buggy_echo_ts", tool_paths=[BUGGY], examples=40, seed=3, timeout=5)
    assert not report.ok
    exceptions = sorted((f.result or {}).get("error", {}).get("exception") for f in report.failures)
    assert exceptions == ["RangeError", "TypeError"]
    assert sorted(json.dumps(f.arguments) for f in report.failures) == [
        '{"text": ""}',
        '{"text": "0", "repeat": -1}',
    ]
