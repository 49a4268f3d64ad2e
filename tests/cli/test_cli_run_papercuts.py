"""A new tool author's first runs: where a tool failed, flags in validation errors, TOOL --help, a tool file alone.

Every test runs the real ``xcsh-run`` command in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests._support.js import require_bun
from tests.conftest import XCSH_RUN
from xcsh_run._version import __version__

FAILS = """
import json
from typing import Annotated, Literal

import msgspec

from xcsh_run.pi import CustomTool


class Params(msgspec.Struct):
    how: Literal["raise", "json", "escape"] = "raise"


def helper(step):
    raise RuntimeError(f"planted failure at step {step}")  # line 15


def execute(tool_call_id, params, on_update, ctx, signal):
    if params.how == "json":
        return json.loads("{")  # line 20: raised inside the json module, called from here
    if params.how == "escape":
        raise ValueError("forged \\x1b]0;owned\\x07 title")
    helper(2)


def factory(api):
    return CustomTool(name="fails", label="Fails", description="Fails on purpose.", parameters=Params,
                      execute=execute)
"""

# Returns what is not a result: the worker's own check raises, and no line of the tool's is to blame.
RETURNS_VIDEO = """
from xcsh_run.pi import CustomTool


def factory(api):
    return CustomTool(name="returns_video", label="Video", description="Returns a bad block.",
                      parameters={"type": "object"},
                      execute=lambda tool_call_id, params, on_update, ctx, signal: {"content": [{"type": "video"}]})
"""

FAILS_TS = """import type { CustomToolFactory } from "@f5-sales-demo/xcsh";

function helper(step: number): never {
  throw new RangeError(`planted failure at step ${step}`); // line 4
}

const factory: CustomToolFactory = (pi) => ({
  name: "fails_ts",
  label: "Fails (TypeScript)",
  description: "Fails on purpose.",
  parameters: pi.typebox.Type.Object({}),
  async execute() {
    helper(2);
    return { content: [] };
  },
});

export default factory;
"""

# A msgspec.Struct and a JSON Schema dict with the same fields: both checkers must name the flag.
BOUNDED = """
from typing import Annotated, Literal

import msgspec

from xcsh_run.pi import CustomTool


class Params(msgspec.Struct):
    path: str
    n: Annotated[int, msgspec.Meta(ge=1)] = 1
    mode: Literal["fast", "slow"] = "fast"
    ratio: float = 0.5
    tags: list[str] = []


SCHEMA = {"type": "object", "required": ["path"], "properties": {
    "path": {"type": "string"},
    "n": {"type": "integer", "minimum": 1, "default": 1},
    "mode": {"enum": ["fast", "slow"]},
    "ratio": {"type": "number"},
}}


def execute(tool_call_id, params, on_update, ctx, signal):
    return "ran"


def factory(api):
    return [
        CustomTool(name="bounded", label="Bounded", description="Takes a path.\\nAnd a count.", parameters=Params,
                   execute=execute),
        CustomTool(name="bounded_schema", label="Bounded (schema)", description="Takes a path.", parameters=SCHEMA,
                   execute=execute),
    ]
"""

ONE = """
import msgspec

from xcsh_run.pi import CustomTool


class Params(msgspec.Struct):
    text: str
    times: int = 1


def factory(api):
    return CustomTool(name="shout", label="Shout", description="Shouts a text.", parameters=Params,
                      execute=lambda tool_call_id, params, on_update, ctx, signal: params.text.upper() * params.times)
"""

# The project's own tool of the same name: a tool file run alone must not pick this one.
PROJECT_SHOUT = """
from xcsh_run.pi import CustomTool


def factory(api):
    return CustomTool(name="shout", label="Shout", description="The project's.", parameters={"type": "object"},
                      execute=lambda tool_call_id, params, on_update, ctx, signal: "the project's shout")
"""

TWO = """
from xcsh_run.pi import CustomTool


def factory(api):
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    return [
        CustomTool(name="first", label="First", description="One.", parameters=schema,
                   execute=lambda tool_call_id, params, on_update, ctx, signal: f"first {params.get('x')}"),
        CustomTool(name="second", label="Second", description="Two.", parameters=schema,
                   execute=lambda tool_call_id, params, on_update, ctx, signal: f"second {params.get('x')}"),
    ]
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    tools = folder / ".xcsh" / "tools"
    tools.mkdir(parents=True)
    (tools / "fails.py").write_text(FAILS)
    (tools / "bounded.py").write_text(BOUNDED)
    return folder


# 1. Where a tool failed, and its traceback on demand.


def test_a_tool_error_names_the_tools_file_and_line(project: Path) -> None:
    proc = run("fails", cwd=project)
    assert proc.returncode == 1
    where = os.path.join(".xcsh", "tools", "fails.py")
    assert f"xcsh-run: tool_error: RuntimeError: planted failure at step 2 (raised at {where}:15;" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "--traceback" in proc.stderr  # says how to see it
    # Raised inside the standard library: the line named is the tool's own, the innermost of its frames.
    inner = run("fails", "--how", "json", cwd=project)
    assert inner.returncode == 1
    assert f"(raised at {where}:20;" in inner.stderr, inner.stderr
    # The worker's check of a result: neither the worker's file nor its exception type is named.
    (project / ".xcsh" / "tools" / "returns_video.py").write_text(RETURNS_VIDEO)
    checked = run("returns_video", cwd=project)
    assert checked.returncode == 1
    assert "xcsh-run: tool_error: the result's content[0] is not a content block" in checked.stderr
    assert "raised at" not in checked.stderr and "ResultError" not in checked.stderr


@pytest.mark.parametrize("flag", ["--traceback", "-v"])
def test_traceback_or_verbose_prints_the_tools_traceback(project: Path, flag: str) -> None:
    proc = run("fails", flag, cwd=project)
    assert proc.returncode == 1
    assert "Traceback (most recent call last):" in proc.stderr
    assert 'fails.py", line 15, in helper' in proc.stderr
    assert 'fails.py", line 23, in execute' in proc.stderr
    assert "_runtime" not in proc.stderr  # the worker's own frames are left out
    # The summary line comes last, after the traceback, as Python's own does.
    assert proc.stderr.rstrip().splitlines()[-1].startswith("xcsh-run: tool_error: RuntimeError: planted failure")


def test_a_traceback_shows_the_tools_escape_sequences_without_obeying_them(project: Path) -> None:
    proc = run("fails", "--how", "escape", "--traceback", cwd=project)
    assert proc.returncode == 1
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    assert "forged \\x1b]0;owned\\x07 title" in proc.stderr
    assert "Traceback (most recent call last):" in proc.stderr


def test_a_typescript_tool_error_names_its_file_and_line_and_shows_its_stack(project: Path) -> None:
    require_bun(module=False)
    (project / ".xcsh" / "tools" / "fails_ts.ts").write_text(FAILS_TS)
    proc = run("fails_ts", cwd=project)
    assert proc.returncode == 1, proc.stderr
    where = os.path.join(".xcsh", "tools", "fails_ts.ts")
    assert f"tool_error: RangeError: planted failure at step 2 (raised at {where}:4;" in proc.stderr
    assert "at helper" not in proc.stderr
    traced = run("fails_ts", "--traceback", cwd=project)
    assert "at helper (" in traced.stderr and "fails_ts.ts:4" in traced.stderr
    assert "worker/js" not in traced.stderr.replace(os.sep, "/")


# 2. Validation errors name the flag that carried the value.


@pytest.mark.parametrize("tool", ["bounded", "bounded_schema"])
def test_a_missing_required_field_names_its_flag(project: Path, tool: str) -> None:
    proc = run(tool, "--n", "2", cwd=project)
    assert proc.returncode == 2
    assert "--path is required" in proc.stderr, proc.stderr
    # Without any argument at all, the flag is named too.
    bare = run(tool, cwd=project)
    assert bare.returncode == 2
    assert "--path is required" in bare.stderr, bare.stderr


@pytest.mark.parametrize("tool", ["bounded", "bounded_schema"])
def test_a_flag_value_the_schema_refuses_names_the_flag(project: Path, tool: str) -> None:
    proc = run(tool, "--path", "p", "--n", "0", cwd=project)
    assert proc.returncode == 2
    assert "--n: " in proc.stderr and "$.n" not in proc.stderr, proc.stderr
    assert "0" in proc.stderr.split("--n: ", 1)[1]
    as_json = run(tool, "--path", "p", "--n", "0", "--json", cwd=project)
    error = json.loads(as_json.stdout)["error"]
    assert error["kind"] == "invalid_arguments" and error["path"] == "$.n"  # programs keep the JSON path
    assert "--n: " in error["message"]


@pytest.mark.parametrize("tool", ["bounded", "bounded_schema"])
def test_arguments_from_args_json_keep_the_json_path(project: Path, tool: str) -> None:
    proc = run(tool, "--args", '{"path": "p", "n": 0}', cwd=project)
    assert proc.returncode == 2
    assert "$.n" in proc.stderr and "--n" not in proc.stderr
    missing = run(tool, "--args", '{"n": 2}', cwd=project)
    assert missing.returncode == 2
    assert "--path" not in missing.stderr and "path" in missing.stderr
    # A field from --args beside flags for other fields: its JSON path.
    mixed = run(tool, "--args", '{"n": 0}', "--path", "p", cwd=project)
    assert "$.n" in mixed.stderr and "--n:" not in mixed.stderr


# 3. TOOL --help: the tool's own usage and flags, the run options briefly, -V.


def test_tool_help_is_the_tools_own_usage_with_typed_metavars(project: Path) -> None:
    proc = run("bounded", "--help", cwd=project)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("Usage: xcsh-run bounded [OPTIONS]\n")
    assert "Takes a path.\n  And a count." in out
    for shown in ("--path TEXT", "--n INTEGER", "--ratio NUMBER", "--mode [fast|slow]", "--tags TEXT"):
        assert shown in out, shown
    assert "Usage: xcsh-run run" not in out and "{tool}" not in out
    assert "<str>" not in out and "<float>" not in out
    assert "xcsh-run run --help" in out  # where every run option is described
    assert "--args JSON" in out and "--sandbox [none|contained|strict]" in out
    assert len(out.splitlines()) < 45  # not the whole run --help again


@pytest.mark.parametrize("command", ["run", "list"])
def test_sandbox_shows_its_choices_in_every_help(project: Path, command: str) -> None:
    proc = run(command, "--help", cwd=project)
    assert proc.returncode == 0
    assert "--sandbox [none|contained|strict]" in proc.stdout


def test_capital_v_is_version(project: Path) -> None:
    proc = run("-V", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"xcsh-run {__version__}\n"


# 4. A tool file run alone, without a project.


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "shout.py").write_text(ONE)
    (folder / "two.py").write_text(TWO)
    return folder


def test_a_tool_file_runs_its_only_tool_alone(tmp_path: Path, scripts: Path) -> None:
    here = tmp_path / "elsewhere"
    (here / ".xcsh" / "tools").mkdir(parents=True)
    (here / ".xcsh" / "tools" / "shout.py").write_text(PROJECT_SHOUT)
    path = os.path.relpath(scripts / "shout.py", here)
    proc = run(path, "--args", '{"text": "hi"}', cwd=here)
    assert (proc.returncode, proc.stdout) == (0, "HI\n"), proc.stderr
    flags = run(path, "--text", "hi", "--times", "2", cwd=here)
    assert (flags.returncode, flags.stdout) == (0, "HIHI\n"), flags.stderr
    # In its own folder, by its bare file name; the project's tool of that name still runs by name.
    assert run("shout.py", "--text", "a", cwd=scripts).stdout == "A\n"
    assert run("shout", cwd=here).stdout == "the project's shout\n"
    helped = run(path, "--help", cwd=here)
    assert helped.returncode == 0 and helped.stdout.startswith(f"Usage: xcsh-run {path} [OPTIONS]\n")
    assert "--text TEXT" in helped.stdout


def test_a_tool_file_with_several_tools_says_how_to_pick_one(scripts: Path) -> None:
    proc = run("two.py", "--x", "1", cwd=scripts)
    assert proc.returncode == 2
    assert "two.py defines 2 tools: first, second" in proc.stderr, proc.stderr
    assert "xcsh-run two.py first" in proc.stderr
    picked = run("two.py", "second", "--x", "3", cwd=scripts)
    assert (picked.returncode, picked.stdout) == (0, "second 3\n"), picked.stderr
    by_args = run("./two.py", "first", "--args", '{"x": 4}', cwd=scripts)
    assert (by_args.returncode, by_args.stdout) == (0, "first 4\n"), by_args.stderr
    wrong = run("two.py", "third", cwd=scripts)
    assert wrong.returncode == 2 and "two.py defines no tool named 'third'" in wrong.stderr


def test_a_tool_file_that_does_not_exist_is_a_usage_error(scripts: Path) -> None:
    proc = run("./missing.py", "--args", "{}", cwd=scripts)
    assert proc.returncode == 2
    assert "./missing.py" in proc.stderr and "no such file" in proc.stderr
