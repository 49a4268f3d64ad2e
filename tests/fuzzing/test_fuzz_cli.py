"""CLI tests: xcsh-run fuzz ... (and the Python API behind it: fuzz_tool, assert_fuzz_clean).

The real console script runs as a subprocess against real workers. The planted
bugs are in ``examples/buggy_tool.py``: a crash on an empty text and a hang on
a negative repeat count. Each run of it costs up to 20 call timeouts (finding
and shrinking the hang, then searching on: --max-timeouts), so it runs once per
seed for the module.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import trio

from tests.conftest import ROOT, TOOLS, XCSH_RUN
from xcsh_run import ConfigError, FuzzReport, assert_fuzz_clean, fuzz_tool

BUGGY = str(ROOT / "examples" / "buggy_tool.py")
WORD_COUNT = str(ROOT / "examples" / "word_count.py")
CRASH_REPRODUCER = f'xcsh-run buggy_echo --args \'{{"text": ""}}\' --tools {BUGGY}'
HANG_REPRODUCER = f'xcsh-run buggy_echo --args \'{{"text": "0", "repeat": -1}}\' --timeout 1 --tools {BUGGY}'
BUGGY_ARGS = ("buggy_echo", "--tools", BUGGY, "--examples", "50", "--seed", "7", "--timeout", "1")


def fuzz(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, "fuzz", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def buggy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One fuzz run of the buggy tool with a JUnit report, shared by the tests below."""
    base = tmp_path_factory.mktemp("buggy")
    (base / "home").mkdir()
    env = {**os.environ, "HOME": str(base / "home"), "XDG_CACHE_HOME": str(base / "cache")}
    junit = base / "fuzz.xml"
    return fuzz(*BUGGY_ARGS, "--junit", str(junit), cwd=base, env=env), junit


def test_finds_and_shrinks_the_planted_bugs(buggy_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, _ = buggy_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "buggy_echo: valid inputs: FAILED, 2 distinct failures" in out
    # Both bugs, each shrunk to its minimal example, printed as a ready command.
    assert "crashed: the worker running 'buggy_echo' exited with code 3" in out
    assert f"    reproduce: {CRASH_REPRODUCER}\n" in out
    assert "timeout: 'buggy_echo' timed out after 1 s" in out
    assert f"    reproduce: {HANG_REPRODUCER}\n" in out
    # Near-misses of a msgspec Struct are all refused before the tool runs.
    assert "buggy_echo: near-misses: ok (50 calls)" in out
    assert "buggy_echo: no process left behind: ok" in out
    assert out.rstrip().endswith("2 failures found (seed 7; rerun with --seed 7)")


def test_junit_report_is_written_and_parseable(buggy_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    _, junit = buggy_run
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "0")
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "buggy_echo"
    assert {p.get("name"): p.get("value") for p in suite.iter("property")} == {"seed": "7", "examples": "50"}
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert list(cases) == ["valid inputs", "near-misses", "no process left behind"]
    failures = cases["valid inputs"].findall("failure")
    assert sorted((f.get("type"), f.get("message")) for f in failures) == [
        ("crashed", CRASH_REPRODUCER),
        ("timeout", HANG_REPRODUCER),
    ]
    assert all('arguments: {"text": ' in (f.text or "") for f in failures)
    assert cases["near-misses"].find("failure") is None
    assert cases["no process left behind"].find("failure") is None


def test_same_seed_same_output(buggy_run: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path) -> None:
    first, _ = buggy_run
    again = fuzz(*BUGGY_ARGS, cwd=tmp_path)
    assert again.returncode == 1
    assert again.stdout == first.stdout


def test_the_reproducer_reproduces(tmp_path: Path) -> None:
    argv = shlex.split(CRASH_REPRODUCER)
    proc = subprocess.run(
        [XCSH_RUN, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 1
    assert "crashed: the worker running 'buggy_echo' exited with code 3" in proc.stderr


def test_a_correct_tool_passes(tmp_path: Path) -> None:
    junit = tmp_path / "out" / "fuzz.xml"
    junit.parent.mkdir()
    proc = fuzz(
        "word_count", "--tools", WORD_COUNT, "--examples", "60", "--seed", "3", "--junit", str(junit), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == (
        "word_count: valid inputs: ok (60 calls)\n"
        "word_count: near-misses: ok (60 calls)\n"
        "word_count: no process left behind: ok\n"
        "no failure found (seed 3)\n"
    )
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "0", "0")


def test_random_seed_is_printed(tmp_path: Path) -> None:
    proc = fuzz("word_count", "--tools", WORD_COUNT, "--examples", "5", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.rstrip().split("\n")[-1].startswith("no failure found (seed ")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["no_such_tool", "--tools", WORD_COUNT], "no tool named 'no_such_tool'; known tools: word_count"),
        (["word_count", "--tools", WORD_COUNT, "--examples", "0"], "--examples must be at least 1"),
        (["word_count", "--tools", WORD_COUNT, "--timeout", "0"], "--timeout must be a positive number"),
        (["word_count", "--seed", "x"], "Invalid value for '--seed'"),
        ([], "Missing argument"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], fragment: str) -> None:
    proc = fuzz(*args, cwd=tmp_path, timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert fragment in proc.stderr


def test_a_module_that_fails_to_load_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit('nope')\n")
    proc = fuzz("broken", "--tools", str(broken), cwd=tmp_path, timeout=30)
    assert proc.returncode == 2
    assert "modules that failed to load" in proc.stderr
    assert "broken.py" in proc.stderr


# --- the Python API ---------------------------------------------------------------------

# A JSON-Schema tool that crashes above 5, and a Struct tool whose Decimal field
# msgspec decodes from a JSON number although its own schema says "string":
# a near-miss the validator lets through.
API_TOOLS = """
import os, decimal, msgspec

class Money(msgspec.Struct, forbid_unknown_fields=True):
    amount: decimal.Decimal

def factory(api):
    def count(tool_call_id, params, on_update, ctx, signal):
        if params["n"] > 5:
            os._exit(9)
        return str(params["n"])

    def money(tool_call_id, params: Money, on_update, ctx, signal):
        return str(params.amount)

    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}},
              "required": ["n"], "additionalProperties": False}
    return [api.pi.CustomTool(name="count", description="n", parameters=schema, execute=count),
            api.pi.CustomTool(name="money", description="m", parameters=Money, execute=money)]
"""


async def test_fuzz_tool_api(tmp_path: Path) -> None:
    tools = tmp_path / "api_tools.py"
    tools.write_text(API_TOOLS)
    with trio.fail_after(60):
        report = await fuzz_tool(["count", "money"], tool_paths=[str(tools)], examples=40, seed=1, grace=0.5)
    assert isinstance(report, FuzzReport)
    assert not report.ok
    assert report.exit_code == 1
    by_problem = {(f.tool, f.property, f.problem): f for f in report.failures}
    assert set(by_problem) == {("count", "valid inputs", "crashed"), ("money", "near-misses", "invalid_accepted")}
    crash = by_problem["count", "valid inputs", "crashed"]
    assert crash.arguments == {"n": 6}  # the smallest crashing value
    assert report.reproducer == crash.reproducer
    assert crash.reproducer == f"xcsh-run count --args '{{\"n\": 6}}' --tools {tools}"
    accepted = by_problem["money", "near-misses", "invalid_accepted"]
    assert accepted.near_miss == "a property of the wrong type"
    assert accepted.arguments is not None and not isinstance(accepted.arguments["amount"], str)
    # Near-misses of the JSON-Schema tool are refused by the host's validator.
    near = next(p for p in report.properties if p.tool == "count" and p.name == "near-misses")
    assert near.failures == [] and near.calls == 40


async def test_fuzz_tool_unknown_tool_raises() -> None:
    with trio.fail_after(30), pytest.raises(ConfigError, match="no tool named 'nope'"):
        await fuzz_tool("nope", tool_paths=[WORD_COUNT], discover_sources=False)


@pytest.mark.timeout(60)
def test_assert_fuzz_clean(tmp_path: Path) -> None:
    report = assert_fuzz_clean("word_count", tool_paths=[WORD_COUNT], examples=20, seed=0)
    assert report.ok and report.failures == [] and report.reproducer is None
    tools = tmp_path / "api_tools.py"
    tools.write_text(API_TOOLS)
    expected = f"crashed: .*\n    reproduce: xcsh-run count --args '{{\"n\": 6}}' --tools {tools}"
    with pytest.raises(AssertionError, match=expected):
        assert_fuzz_clean("count", tool_paths=[str(tools)], examples=30, seed=0)


def test_ctrl_c_stops_the_run_and_leaves_nothing(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [XCSH_RUN, "fuzz", "buggy_echo", "--tools", BUGGY, "--seed", "7", "--timeout", "60"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)  # loaded, and fuzzing (likely inside the 60 s hang by now)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    assert "interrupted by SIGINT" in err
    # The autouse no_survivors fixture checks that no worker outlived the command.


# Hypothesis is a dependency, yet an install may lack it (--no-deps): these run the CLI and the API in a
# Python where it cannot be imported.
WITHOUT_HYPOTHESIS = "import sys; sys.modules['hypothesis'] = None; "
INSTALL_HYPOTHESIS = "a dependency of xcsh-run that is missing from the environment xcsh-run runs in"


def without_hypothesis(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_HYPOTHESIS + code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_without_hypothesis_fuzz_says_how_to_install_it(tmp_path: Path) -> None:
    cli = "from xcsh_run._cli.run import main; main()"
    proc = without_hypothesis(cli, "fuzz", "add", "--tools", str(TOOLS / "basic.py"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert INSTALL_HYPOTHESIS in proc.stderr and "pip install 'hypothesis>=6.100'" in proc.stderr
    assert "Traceback" not in proc.stderr
    api = (
        "import xcsh_run\ntry:\n    xcsh_run.fuzz_tool_sync('add')\nexcept xcsh_run.ConfigError as exc:\n    print(exc)"
    )
    proc = without_hypothesis(api, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert INSTALL_HYPOTHESIS in proc.stdout


@pytest.mark.parametrize("argv", [["add", "--args", '{"a": 1, "b": 2}'], ["list"]])
def test_without_hypothesis_every_other_command_works(tmp_path: Path, argv: list[str]) -> None:
    cli = "from xcsh_run._cli.run import main; main()"
    proc = without_hypothesis(cli, *argv, "--tools", str(TOOLS / "basic.py"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("3" if argv[0] == "add" else "add") in proc.stdout
