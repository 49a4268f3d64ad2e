"""The fuzzer tells bugs from deliberate errors, keeps searching after a failure, and fails a hang fast.

Through the real console script (``xcsh-run fuzz``, ``xcsh-run TOOL --json``)
and the pytest API (``fuzz_tool``, ``assert_fuzz_clean``), against real
workers. Each tool module is written into the test's own directory.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import trio

from tests.conftest import XCSH_RUN
from xcsh_run import ConfigError, assert_fuzz_clean, fuzz_tool

TOOLS = """
import time

from xcsh_run.pi import CustomTool, ToolError

INT = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
ANY = {"type": "object", "properties": {"path": {"type": "string"}}}


def divide(tool_call_id, params, on_update, ctx, signal):
    return str(100 / params["x"])  # a bug: x = 0 is valid input


def missing(tool_call_id, params, on_update, ctx, signal):
    raise ToolError(f"file not found: {params.get('path')!r}")


def opens(tool_call_id, params, on_update, ctx, signal):
    with open("/nonexistent/" + params.get("path", "x").replace("/", "_")) as f:
        return f.read()


def looks_up(tool_call_id, params, on_update, ctx, signal):
    return {"a": "1"}[params.get("path", "b")]  # a KeyError, though FileNotFoundError is declared


def parses(tool_call_id, params, on_update, ctx, signal):
    return str(int(params["x"]) if params["x"] < 5 else int("not a number"))


def two_errors(tool_call_id, params, on_update, ctx, signal):
    x = params["x"]
    if x > 5:
        return {"a": "1"}["b"]
    if x < -5:
        return str(10 // (x - x))
    return "fine"


MODES = {
    "type": "object",
    "properties": {"mode": {"enum": ["quick", "wait", "lookup"]}, "n": {"type": "integer"}},
    "required": ["mode"],
}


def two_bugs(tool_call_id, params, on_update, ctx, signal):
    if params["mode"] == "wait":
        while True:  # planted bug 1: a hang on one input class
            time.sleep(0.01)
    if params["mode"] == "lookup":
        return {"quick": "q"}[params["mode"]]  # planted bug 2: a KeyError on another
    return "done"


def hangs(tool_call_id, params, on_update, ctx, signal):
    while True:
        time.sleep(0.01)


def factory(api):
    return [
        CustomTool(name="divide", description="d", parameters=INT, execute=divide),
        CustomTool(name="missing", description="m", parameters=ANY, execute=missing),
        CustomTool(name="opens", description="o", parameters=ANY, execute=opens, expected_errors=(FileNotFoundError,)),
        CustomTool(name="looks_up", description="l", parameters=ANY, execute=looks_up,
                   expected_errors=(FileNotFoundError,)),
        CustomTool(name="parses", description="p", parameters=INT, execute=parses),
        CustomTool(name="two_errors", description="e", parameters=INT, execute=two_errors),
        CustomTool(name="two_bugs", description="t", parameters=MODES, execute=two_bugs),
        # Its own timeout is far longer than the fuzzer's default: the default still applies.
        CustomTool(name="hangs", description="h", parameters=INT, execute=hangs, timeout=600),
    ]
"""


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "fuzzed.py"
    path.write_text(TOOLS)
    return path


def xcsh_run(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def fuzz(
    tool: str, tools: Path, *args: str, examples: int = 20, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return xcsh_run(
        "fuzz", tool, "--tools", str(tools), "--examples", str(examples), "--seed", "1", *args,
        cwd=tools.parent, timeout=timeout,
    )  # fmt: skip


# --- the evidence ---------------------------------------------------------------------


def test_a_tool_error_names_its_exception(tools: Path) -> None:
    proc = xcsh_run("divide", "--args", '{"x": 0}', "--tools", str(tools), "--json", cwd=tools.parent)
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["kind"] == "tool_error"
    assert error["exception"] == "ZeroDivisionError"
    assert error["exception_mro"] == ["ZeroDivisionError", "ArithmeticError", "Exception", "BaseException"]
    line = TOOLS.splitlines().index('    return str(100 / params["x"])  # a bug: x = 0 is valid input') + 1
    assert error["raised_at"] == f"{tools}:{line}"
    assert "deliberate" not in error


def test_a_tool_error_says_when_it_is_deliberate(tools: Path) -> None:
    for tool, exception in (("missing", "xcsh_run.pi.ToolError"), ("opens", "FileNotFoundError")):
        proc = xcsh_run(tool, "--args", '{"path": "a"}', "--tools", str(tools), "--json", cwd=tools.parent)
        assert proc.returncode == 1, proc.stderr
        error = json.loads(proc.stdout)["error"]
        assert (error["exception"], error["deliberate"]) == (exception, True), error
    proc = xcsh_run("missing", "--args", '{"path": "a"}', "--tools", str(tools), cwd=tools.parent)
    assert "file not found: 'a'" in proc.stderr  # the message reaches the result as before


def test_expected_errors_must_be_exception_classes(tmp_path: Path) -> None:
    bad = tmp_path / "bad_expected.py"
    bad.write_text(
        "from xcsh_run.pi import CustomTool\n"
        "def factory(api):\n"
        "    return CustomTool(name='bad', description='b', parameters={'type': 'object'},\n"
        "                      execute=lambda *a: 'x', expected_errors=['FileNotFoundError'])\n"
    )
    proc = xcsh_run("list", "--tools", str(bad), cwd=tmp_path)
    assert "expected_errors must be an exception class or a tuple of them" in proc.stdout + proc.stderr


# --- bugs fail, deliberate errors pass --------------------------------------------------


def test_a_zero_division_on_valid_input_is_flagged(tools: Path) -> None:
    proc = fuzz("divide", tools)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "divide: valid inputs: FAILED, 1 distinct failure" in proc.stdout
    assert "tool_error: ZeroDivisionError: division by zero (raised at fuzzed.py:" in proc.stdout
    assert "a kind of ArithmeticError, which signals a bug)" in proc.stdout
    assert f"    reproduce: xcsh-run divide --args '{{\"x\": 0}}' --tools {tools}\n" in proc.stdout


def test_a_tool_error_raised_on_purpose_passes(tools: Path) -> None:
    proc = fuzz("missing", tools)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "missing: valid inputs: ok (20 calls)" in proc.stdout
    # --fail-on-tool-error keeps its meaning: every tool_error fails, deliberate ones too.
    strict = fuzz("missing", tools, "--fail-on-tool-error", examples=5)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "tool_error: xcsh_run.pi.ToolError: file not found: " in strict.stdout
    assert "deliberate, but every tool_error counts (--fail-on-tool-error)" in strict.stdout


def test_declared_expected_errors_pass_and_others_do_not(tools: Path) -> None:
    declared = fuzz("opens", tools)
    assert declared.returncode == 0, declared.stdout + declared.stderr
    undeclared = fuzz("looks_up", tools)
    assert undeclared.returncode == 1, undeclared.stdout + undeclared.stderr
    assert "tool_error: KeyError: " in undeclared.stdout
    assert "a kind of LookupError, which signals a bug" in undeclared.stdout


def test_the_command_line_allows_and_flags_by_class(tools: Path) -> None:
    allowed = fuzz("divide", tools, "--allow-error", "ArithmeticError")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    # ValueError is not a bug by default (code raises it on purpose), but can be flagged.
    assert fuzz("parses", tools).returncode == 0
    flagged = fuzz("parses", tools, "--flag-error", "ValueError")
    assert flagged.returncode == 1, flagged.stdout + flagged.stderr
    assert "tool_error: ValueError: invalid literal for int() with base 10: 'not a number'" in flagged.stdout
    assert "ValueError is flagged (--flag-error)" in flagged.stdout
    assert f"reproduce: xcsh-run parses --args '{{\"x\": 5}}' --tools {tools}" in flagged.stdout
    bad = fuzz("divide", tools, "--allow-error", "not a class")
    assert bad.returncode == 2
    assert "'not a class' is not an exception class name" in bad.stderr


# --- distinct failures, in one run ----------------------------------------------------


def test_two_planted_bugs_are_both_found_in_one_run(tools: Path) -> None:
    proc = fuzz("two_bugs", tools, "--timeout", "1", "--max-timeouts", "6", examples=30, timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "two_bugs: valid inputs: FAILED, 2 distinct failures" in out
    assert "  timeout: 'two_bugs' timed out after 1 s" in out
    assert f"""reproduce: xcsh-run two_bugs --args '{{"mode": "wait"}}' --timeout 1 --tools {tools}""" in out
    assert "  tool_error: KeyError: 'lookup' (raised at fuzzed.py:" in out
    assert f"""reproduce: xcsh-run two_bugs --args '{{"mode": "lookup"}}' --tools {tools}""" in out
    assert out.rstrip().endswith("2 failures found (seed 1; rerun with --seed 1)")


async def test_distinct_exceptions_are_distinct_failures(tools: Path) -> None:
    """Two exception types from one tool are two failures, each shrunk to its own minimal example."""
    with trio.fail_after(60):
        report = await fuzz_tool("two_errors", tool_paths=[str(tools)], examples=40, seed=2)
    assert sorted((f.result or {}).get("error", {}).get("exception") for f in report.failures) == [
        "KeyError",
        "ZeroDivisionError",
    ]
    assert sorted(json.dumps(f.arguments) for f in report.failures) == ['{"x": -6}', '{"x": 6}']
    with trio.fail_after(60):
        report = await fuzz_tool("two_bugs", tool_paths=[str(tools)], examples=30, seed=3, timeout=1, max_timeouts=6)
    assert sorted((f.problem, json.dumps(f.arguments)) for f in report.failures) == [
        ("timeout", '{"mode": "wait"}'),
        ("tool_error", '{"mode": "lookup"}'),
    ]


# --- the pytest API's default timeout ----------------------------------------------------


async def test_a_hang_fails_fast_with_no_timeout_given(tools: Path) -> None:
    started = time.monotonic()
    with trio.fail_after(18):  # the default per-call timeout is 10 s
        report = await fuzz_tool("hangs", tool_paths=[str(tools)], examples=20, seed=0)
    assert time.monotonic() - started < 18
    (failure,) = report.failures
    assert failure.problem == "timeout"
    assert "timed out after 10 s" in failure.message
    assert failure.reproducer is not None and "--timeout 10" in failure.reproducer
    valid = report.properties[0]
    assert valid.stopped is not None and "1 call timed out" in valid.stopped
    assert "stopped early: 1 call timed out" in report.summary()


def test_assert_fuzz_clean_reports_the_bug(tools: Path) -> None:
    with pytest.raises(AssertionError, match=r"tool_error: ZeroDivisionError: division by zero"):
        assert_fuzz_clean("divide", tool_paths=[str(tools)], examples=20, seed=0)
    assert assert_fuzz_clean("missing", tool_paths=[str(tools)], examples=10, seed=0).ok


async def test_max_timeouts_is_checked() -> None:
    with pytest.raises(ConfigError, match="max_timeouts must be at least 1"):
        await fuzz_tool("hangs", max_timeouts=0)
