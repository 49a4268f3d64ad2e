"""CLI papercuts: command suggestions, --tools paths, --json usage errors, enum choices, --cwd (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import XCSH_RUN

PICK = """
import enum
from typing import Literal

import msgspec

from xcsh_run.pi import CustomTool


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Inner(msgspec.Struct):
    unit: Literal["cm", "in"]


class Params(msgspec.Struct):
    mode: Literal["fast", "slow"] = "fast"
    colour: Colour = Colour.RED
    sizes: list[Inner] = []


def factory(api):
    return CustomTool(name="pick", label="Pick", description="Picks.", parameters=Params,
                      execute=lambda tool_call_id, params, on_update, ctx, signal: params.mode)
"""

SHAPE = """
from xcsh_run.pi import CustomTool


def factory(api):
    schema = {"type": "object", "properties": {
        "kind": {"type": "string", "enum": ["circle", "square"]},
        "size": {"anyOf": [{"enum": [1, 2, 3]}, {"type": "null"}]}}}
    return CustomTool(name="shape", label="Shape", description="Draws a shape.", parameters=schema,
                      execute=lambda tool_call_id, params, on_update, ctx, signal: str(params.get("kind")))
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
    (tools / "pick.py").write_text(PICK)
    (tools / "shape.py").write_text(SHAPE)
    return folder


def test_a_mistyped_command_suggests_the_command(project: Path) -> None:
    proc = run("lst", cwd=project)
    assert proc.returncode == 2
    assert "no tool named 'lst'" in proc.stderr
    assert "did you mean the command `list`?" in proc.stderr
    # A name close to no command gets no such suggestion.
    assert "did you mean the command" not in run("zzzzzz", cwd=project).stderr


def test_a_tool_whose_name_is_close_to_a_command_still_runs(project: Path) -> None:
    (project / ".xcsh" / "tools" / "lst.py").write_text(
        "from xcsh_run.pi import CustomTool\n"
        "def factory(api):\n"
        "    return CustomTool(name='lst', label='l', description='d', parameters={'type': 'object'},\n"
        "                      execute=lambda *a: 'listed')\n"
    )
    proc = run("lst", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "listed\n"
    assert "did you mean" not in proc.stderr


@pytest.mark.parametrize(
    "command",
    [["pick"], ["run", "pick"], ["list"], ["describe", "pick"], ["serve"], ["fuzz", "pick"]],
)
def test_a_missing_tools_path_is_a_usage_error_on_every_command(project: Path, command: list[str]) -> None:
    proc = run(*command, "--tools", "tols/mine.py", cwd=project)
    assert proc.returncode == 2, proc.stderr
    assert "'tols/mine.py' does not exist" in proc.stderr
    assert str(project / "tols" / "mine.py") in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--args", '{"mode" "fast"}'], "--args is not valid JSON: Expecting ':' delimiter"),
        (["--args", "[1]"], "--args must be a JSON object"),
        (["--args-file", "/nonexistent/args.json"], "cannot read --args-file"),
        (["--mode", "medium"], "--mode: 'medium' is not one of the choices: fast, slow"),
    ],
)
def test_malformed_args_with_json_print_a_json_error(project: Path, args: list[str], fragment: str) -> None:
    proc = run("pick", *args, "--json", cwd=project)
    assert proc.returncode == 2
    out = json.loads(proc.stdout)
    assert out["content"] == [] and out["details"] is None and out["is_error"] is True
    assert out["error"]["kind"] == "invalid_arguments"
    assert fragment in out["error"]["message"]
    assert fragment in proc.stderr  # and the one line for people, as without --json


@pytest.mark.parametrize(
    ("tool", "arguments", "fragments"),
    [
        # msgspec Structs, validated in the worker: Literal, enum.Enum, and one nested in a list.
        ("pick", {"mode": "medium"}, ["Invalid enum value", '"fast", "slow"', "$.mode"]),
        ("pick", {"colour": "blue"}, ['"green", "red"', "$.colour"]),
        ("pick", {"sizes": [{"unit": "cm"}, {"unit": "mm"}]}, ['"cm", "in"', "$.sizes[1].unit"]),
        # JSON Schema dicts, validated in the host: an enum, and an optional one (anyOf with null).
        ("shape", {"kind": "triangle"}, ['"triangle" is not one of the choices: "circle", "square"', "$.kind"]),
        ("shape", {"size": 5}, ["5 is not one of the choices: 1, 2, 3", "$.size"]),
    ],
)
def test_an_invalid_enum_value_lists_the_choices(
    project: Path, tool: str, arguments: dict[str, object], fragments: list[str]
) -> None:
    proc = run(tool, "--args", json.dumps(arguments), "--json", cwd=project)
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["kind"] == "invalid_arguments"
    for fragment in fragments:
        assert fragment in error["message"]


def test_cwd_runs_every_command_as_if_started_there(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert run("pick", cwd=elsewhere).returncode == 2  # not found from here
    proc = run("pick", "--args", '{"mode": "slow"}', "--cwd", str(project), cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "slow\n"
    listing = json.loads(run("list", "--json", "--cwd", str(project), cwd=elsewhere).stdout)
    assert {t["name"] for t in listing["tools"]} == {"pick", "shape"}
    described = run("describe", "shape", "--cwd", str(project), cwd=elsewhere)
    assert json.loads(described.stdout)["name"] == "shape"
    fuzzed = run("fuzz", "shape", "--examples", "3", "--seed", "0", "--cwd", str(project), cwd=elsewhere)
    assert fuzzed.returncode == 0, fuzzed.stdout + fuzzed.stderr
    # --tools is relative to DIR, as the current directory would be.
    (project / "extra").mkdir()
    (project / "extra" / "pick2.py").write_text(PICK.replace('name="pick"', 'name="pick2"'))
    proc = run("pick2", "--tools", "extra", "--cwd", str(project), cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("command", ["run", "list", "describe", "serve", "fuzz", "new", "doctor"])
def test_a_bad_cwd_is_a_usage_error(project: Path, command: str) -> None:
    args = {"run": ["pick"], "describe": ["pick"], "fuzz": ["pick"], "new": ["tool"]}.get(command, [])
    proc = run(command, *args, "--cwd", str(project / "nope"), cwd=project)
    assert proc.returncode == 2
    assert "--cwd" in proc.stderr and "cannot change to" in proc.stderr
