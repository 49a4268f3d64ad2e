"""`list` as a check (its exit code, `--check`), shell completion of a tool's flags, `describe`'s suggestion.

Everything runs the real `xcsh-run` as a subprocess; completion is asked the
way the shells' scripts ask it (typer's protocol: `_XCSH_RUN_COMPLETE` and the
words typed), and once through the generated script in a real bash.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_cold_cli import counted, is_worker
from tests.conftest import XCSH_RUN

SLOW_COUNT = """
from typing import Literal

import msgspec

from xcsh_run.pi import CustomTool


class Params(msgspec.Struct):
    text: str
    times: int = 1
    mode: Literal["words", "chars"] = "words"
    tags: list[Literal["red", "blue"]] = []
    lower: bool = True
    timeout: float = 1.0  # a run option's name: reachable through --args only


def factory(api):
    return CustomTool(name="slow_count", label="Slow count", description="Counts, slowly.", parameters=Params,
                      execute=lambda tool_call_id, params, on_update, ctx, signal: str(len(params.text)))
"""

BROKEN = "import no_such_module_for_xcsh_run_tests\n"
FAILURE = (
    ".xcsh/tools/broken.py [native, project]: importing the module raised ModuleNotFoundError: "
    "No module named 'no_such_module_for_xcsh_run_tests'"
)


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    tools = folder / ".xcsh" / "tools"
    tools.mkdir(parents=True)
    (tools / "slow_count.py").write_text(SLOW_COUNT)
    (tools / "broken.py").write_text(BROKEN)
    return folder


# `xcsh-run list`: a failed module fails the command


def test_list_exits_1_when_a_module_failed_to_load_and_still_lists_the_rest(project: Path) -> None:
    proc = run("list", cwd=project)
    assert proc.returncode == 1, proc.stderr
    assert "slow_count  Slow count  [native, project] .xcsh/tools/slow_count.py" in proc.stdout
    assert f"Failed to load:\n  {FAILURE}\n" in proc.stdout
    assert "a module failed to load; each line above names the file" in proc.stderr
    assert "run `xcsh-run list --check` to check again" in proc.stderr
    # The same verdict for programs.
    as_json = run("list", "--json", cwd=project)
    assert as_json.returncode == 1
    assert [e["path"] for e in json.loads(as_json.stdout)["errors"]] == [str(project / ".xcsh/tools/broken.py")]
    (project / ".xcsh" / "tools" / "broken.py").unlink()
    fixed = run("list", cwd=project)
    assert fixed.returncode == 0, fixed.stderr
    assert "Failed to load" not in fixed.stdout and "failed to load" not in fixed.stderr


def test_the_check_it_suggests_names_the_same_tools_paths(project: Path) -> None:
    extra = project / "extra dir"
    extra.mkdir()
    (extra / "bad.py").write_text(BROKEN)
    proc = run("list", "--check", "--tools", str(extra), cwd=project)
    assert proc.returncode == 1, proc.stderr
    suggested = f"xcsh-run list --check --tools '{extra}'"
    assert f"run `{suggested}` to check again" in proc.stderr, proc.stderr
    # The suggestion, run as printed, still sees the failure (a bare `list --check` would not load it).
    again = subprocess.run(
        suggested.replace("xcsh-run", shlex.quote(XCSH_RUN), 1), shell=True, cwd=project, capture_output=True,
        text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert again.returncode == 1 and "bad.py" in again.stdout + again.stderr, again


def test_a_cached_list_fails_as_the_first_did(project: Path, tmp_path: Path) -> None:
    first, spawned = counted(project, tmp_path, "list")
    assert first.returncode == 1, first.stderr
    assert sum(is_worker(argv) for _, argv in spawned) == 2  # both modules were loaded
    cached, spawned = counted(project, tmp_path, "list")
    assert spawned == []  # the module cache answered, the load error included
    assert (cached.returncode, cached.stdout, cached.stderr) == (first.returncode, first.stdout, first.stderr)
    checked, spawned = counted(project, tmp_path, "list", "--check")
    assert spawned == []
    assert (checked.returncode, checked.stdout) == (1, FAILURE + "\n")


def test_list_check_prints_only_the_failures_and_nothing_when_all_load(project: Path) -> None:
    proc = run("list", "--check", cwd=project)
    assert proc.returncode == 1
    assert proc.stdout == FAILURE + "\n"  # no root, no tools, no header
    assert proc.stderr.startswith("xcsh-run: a module failed to load")
    assert len(proc.stderr.splitlines()) == 1
    (project / ".xcsh" / "tools" / "broken.py").unlink()
    # A module shadowed by one of the same name is not loaded, and is not a failure.
    user_tools = Path(os.environ["HOME"]) / ".xcsh" / "agent" / "tools"
    user_tools.mkdir(parents=True)
    (user_tools / "slow_count.py").write_text(SLOW_COUNT)
    clean = run("list", "--check", cwd=project)
    assert (clean.returncode, clean.stdout, clean.stderr) == (0, "", "")
    assert "Shadowed" in run("list", cwd=project).stdout


def test_list_check_and_json_together_is_a_usage_error(project: Path) -> None:
    proc = run("list", "--check", "--json", cwd=project)
    assert proc.returncode == 2
    assert "give --check or --json, not both" in proc.stderr
    assert proc.stdout == ""


# Shell completion


def complete_bash(project: Path, line: str) -> list[str]:
    """What `xcsh-run` offers bash for the last word of ``line`` (a trailing space: a new, empty word)."""
    words = line.split(" ")
    env = {"_XCSH_RUN_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
    proc = run(cwd=project, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def complete_zsh(project: Path, line: str) -> str:
    proc = run(cwd=project, env={"_XCSH_RUN_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": line})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def cached(project: Path) -> Path:
    """The project, its modules' descriptions in the module cache (what completion reads)."""
    assert "slow_count" in run("list", cwd=project).stdout
    return project


@pytest.mark.parametrize("prefix", ["xcsh-run slow_count", "xcsh-run run slow_count"])
def test_a_tools_own_flags_complete_after_its_name(cached: Path, prefix: str) -> None:
    assert complete_bash(cached, f"{prefix} --ti") == ["--times", "--timeout"]
    assert complete_bash(cached, f"{prefix} --te") == ["--text"]
    assert complete_bash(cached, f"{prefix} --no") == ["--no-lower"]
    offered = complete_bash(cached, f"{prefix} --")
    assert {"--text", "--times", "--mode", "--tags", "--lower", "--no-lower"} <= set(offered)
    assert {"--args", "--json", "--sandbox", "--cwd", "--help"} <= set(offered)
    assert offered.count("--timeout") == 1  # the field `timeout` takes no flag: the run option keeps it
    assert "--xcsh-run-tool-help" not in offered
    # A flag given is not offered again, unless it repeats.
    again = complete_bash(cached, f"{prefix} --text hi --tags red --t")
    assert "--text" not in again and "--tags" in again


def test_choices_complete_for_enum_flags_and_the_sandbox(cached: Path) -> None:
    assert complete_bash(cached, "xcsh-run slow_count --mode ") == ["chars", "words"]
    assert complete_bash(cached, "xcsh-run slow_count --mode = w") == ["words"]  # bash splits --mode=w at =
    assert complete_bash(cached, "xcsh-run slow_count --text a --tags ") == ["blue", "red"]  # as the schema has them
    assert complete_bash(cached, "xcsh-run slow_count --sandbox ") == ["none", "contained", "strict"]
    assert complete_bash(cached, "xcsh-run slow_count --sandbox = st") == ["strict"]
    assert complete_bash(cached, "xcsh-run run slow_count --network ") == ["off", "netns"]
    assert complete_bash(cached, "xcsh-run list --sandbox c") == ["contained"]
    # A value with no choices offers nothing (the shell completes file names), not the commands.
    assert complete_bash(cached, "xcsh-run slow_count --text ") == []
    assert complete_bash(cached, "xcsh-run slow_count --mode words --timeout 3 ") == []


def test_first_words_still_complete(cached: Path) -> None:
    assert complete_bash(cached, "xcsh-run slow") == ["slow_count"]
    assert "list" in complete_bash(cached, "xcsh-run ")
    assert complete_bash(cached, "xcsh-run describe slow") == ["slow_count"]


def test_completion_through_the_zsh_protocol(cached: Path) -> None:
    flags = complete_zsh(cached, "xcsh-run slow_count --ti")
    assert flags.startswith("_arguments ")
    assert '"--times"' in flags and '"--timeout":' in flags
    choices = complete_zsh(cached, "xcsh-run slow_count --mode ")
    assert '"chars"' in choices and '"words"' in choices and "--" not in choices
    assert '"strict"' in complete_zsh(cached, "xcsh-run slow_count --sandbox=s")


def test_completion_starts_no_worker(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_XCSH_RUN_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", "xcsh-run slow_count --")
    monkeypatch.setenv("COMP_CWORD", "2")
    # Nothing cached: the run options only, and no worker to find the tool's flags.
    cold, spawned = counted(project, tmp_path)
    assert cold.returncode == 0, cold.stderr
    assert "--timeout" in cold.stdout.split() and "--text" not in cold.stdout.split()
    assert spawned == []
    monkeypatch.delenv("_XCSH_RUN_COMPLETE")
    assert "slow_count" in run("list", cwd=project).stdout  # fills the module cache
    monkeypatch.setenv("_XCSH_RUN_COMPLETE", "complete_bash")
    warm, spawned = counted(project, tmp_path)
    assert "--text" in warm.stdout.split()
    assert spawned == []


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_generated_script_completes_a_tools_flags_in_a_real_bash(cached: Path) -> None:
    # The script as `--show-completion bash` prints it, sourced; the function it registers for
    # xcsh-run called as bash calls it on TAB (COMP_WORDS, COMP_CWORD; $1 the command, $2 the word).
    script = r"""
    eval "$(xcsh-run --show-completion bash)"
    spec=$(complete -p xcsh-run) || exit 9
    fn=${spec##*-F }; fn=${fn%% *}
    ask() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); "$fn" xcsh-run "${@: -1}" "${@: -2:1}"; }
    ask xcsh-run slow_count --ti; printf 'flags:%s\n' "${COMPREPLY[@]}"
    ask xcsh-run slow_count --mode ''; printf 'mode:%s\n' "${COMPREPLY[@]}"
    ask xcsh-run slo; printf 'name:%s\n' "${COMPREPLY[@]}"
    """
    env = {
        **os.environ,
        "PATH": f"{Path(XCSH_RUN).parent}{os.pathsep}{os.environ['PATH']}",
        "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1",
    }
    proc = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script], cwd=cached, env=env, capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "flags:--times", "flags:--timeout", "mode:chars", "mode:words", "name:slow_count",
    ]  # fmt: skip


# `describe`


def test_describe_suggests_the_close_tool_name(project: Path) -> None:
    proc = run("describe", "slow_cont", cwd=project)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "xcsh-run: no tool named 'slow_cont'; did you mean 'slow_count'?" in proc.stderr
    # The same words a run of the name gets: one suggestion, written once.
    assert "no tool named 'slow_cont'; did you mean 'slow_count'?" in run("slow_cont", cwd=project).stderr
    (project / ".xcsh" / "tools" / "broken.py").unlink()
    far = run("describe", "zzz", cwd=project)
    assert far.returncode == 2
    assert "xcsh-run: no tool named 'zzz'; known tools: slow_count" in far.stderr
