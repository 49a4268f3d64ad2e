"""A tool's own flags and help, --version and shell completion: the real `xcsh-run` as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import XCSH_RUN
from xcsh_run._version import __version__

WORD_FREQ = '''
from typing import Any, Literal

import msgspec

from xcsh_run.pi import CustomTool


class Params(msgspec.Struct, forbid_unknown_fields=True):
    """Count words."""

    text: str
    top: int = 5
    max_count: int | None = None
    mode: Literal["words", "chars"] = "words"
    tags: list[str] = []
    lower: bool = True
    ratio: float = 1.0
    options: dict[str, Any] = {}
    timeout: float = 1.0


def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        return msgspec.json.encode(params).decode()

    return CustomTool(name="word_freq", label="Word frequency", description="Counts the words of a text.",
                      parameters=Params, execute=execute)
'''

SHAPE = """
import json

from xcsh_run.pi import CustomTool


def factory(api):
    schema = {"type": "object", "properties": {
        "kind": {"type": "string", "enum": ["circle", "square"], "description": "Which shape to draw."},
        "size": {"anyOf": [{"enum": [1, 2, 3]}, {"type": "null"}]}},
        "required": ["kind"]}
    return CustomTool(name="shape", label="Shape", description="Draws a shape.", parameters=schema,
                      execute=lambda tool_call_id, params, on_update, ctx, signal: json.dumps(params))
"""


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    tools = folder / ".xcsh" / "tools"
    tools.mkdir(parents=True)
    (tools / "word_freq.py").write_text(WORD_FREQ)
    (tools / "shape.py").write_text(SHAPE)
    return folder


def test_tool_help_shows_description_fields_types_defaults_and_choices(project: Path) -> None:
    proc = run("word_freq", "--help", cwd=project)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Counts the words of a text." in out
    assert out.startswith("Usage: xcsh-run word_freq [OPTIONS]\n")
    assert "--text TEXT" in out and "[required]" in out
    assert "--top INTEGER" in out and "[default: 5]" in out
    assert "--max-count INTEGER" in out  # `_` also as `-`
    assert "--mode [chars|words]" in out and "[default: words]" in out
    assert "--tags TEXT" in out and "[repeatable]" in out
    assert "--lower / --no-lower" in out
    assert "--ratio NUMBER" in out
    assert "--options JSON" in out
    assert "Only through --args (--timeout is a run option)" in out
    # Then the common run options, briefly.
    assert out.index("Run options") > out.index("--options JSON")
    assert "--args" in out.split("Run options", 1)[1]


def test_tool_help_of_a_json_schema_tool(project: Path) -> None:
    proc = run("run", "shape", "--help", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "--kind [circle|square]" in proc.stdout
    assert "Which shape to draw.  [required]" in proc.stdout
    assert "--size [1|2|3]" in proc.stdout


def test_field_flags_become_arguments(project: Path) -> None:
    proc = run(
        "word_freq", "--text", "a b", "--top", "3", "--max_count", "2", "--mode", "chars", "--tags", "x",
        "--tags=y", "--no-lower", "--ratio", "0.5", "--options", '{"k": [1]}', cwd=project,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "text": "a b", "top": 3, "max_count": 2, "mode": "chars", "tags": ["x", "y"], "lower": False,
        "ratio": 0.5, "options": {"k": [1]}, "timeout": 1.0,
    }  # fmt: skip


def test_a_flag_wins_over_the_same_field_in_args(project: Path) -> None:
    proc = run("word_freq", "--args", '{"text": "t", "top": 1, "timeout": 2.5}', "--top", "3", cwd=project)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert (got["top"], got["text"], got["timeout"]) == (3, "t", 2.5)  # --args still reaches `timeout`


def test_flags_of_a_json_schema_tool(project: Path) -> None:
    proc = run("shape", "--kind", "square", "--size", "2", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"kind": "square", "size": 2}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--tpo", "3"], "No such option: --tpo (did you mean --top"),
        (["--top", "x"], "--top expects an integer, got 'x'"),
        (["--mode", "lines"], "--mode: 'lines' is not one of the choices: chars, words"),
        (["--top"], "--top needs a value"),
        (["stray"], "unexpected argument 'stray'"),
    ],
)
def test_bad_field_flags_are_usage_errors(project: Path, args: list[str], fragment: str) -> None:
    proc = run("word_freq", "--text", "a", *args, cwd=project)
    assert proc.returncode == 2
    assert fragment in proc.stderr
    assert proc.stdout == ""


def test_an_unknown_flag_of_an_unknown_tool_is_a_usage_error(project: Path) -> None:
    proc = run("no_such_tool", "--top", "3", cwd=project)
    assert proc.returncode == 2
    assert "no tool named 'no_such_tool' to take --top" in proc.stderr


def test_version(project: Path) -> None:
    proc = run("--version", cwd=project)
    assert proc.returncode == 0
    assert proc.stdout == f"xcsh-run {__version__}\n"


def complete(project: Path, words: str, cword: int) -> list[str]:
    env = {"_XCSH_RUN_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    proc = run(cwd=project, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_completion_of_commands_and_cached_tool_names(project: Path) -> None:
    # Nothing is cached yet: completion does not start workers to find out.
    cold = complete(project, "xcsh-run ", 1)
    assert {"run", "list", "describe", "serve", "fuzz", "new", "doctor"} <= set(cold)
    assert "word_freq" not in cold
    assert run("list", cwd=project).returncode == 0  # fills the module cache
    assert {"list", "word_freq", "shape"} <= set(complete(project, "xcsh-run ", 1))
    assert complete(project, "xcsh-run wo", 1) == ["word_freq"]
    assert complete(project, "xcsh-run describe s", 2) == ["shape"]
    assert complete(project, "xcsh-run run w", 2) == ["word_freq"]
    assert complete(project, "xcsh-run fuzz sh", 2) == ["shape"]
    assert "--version" in complete(project, "xcsh-run --v", 1)


def test_completion_script_for_bash(project: Path) -> None:
    proc = run("--show-completion", "bash", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "_XCSH_RUN_COMPLETE=complete_bash" in proc.stdout
