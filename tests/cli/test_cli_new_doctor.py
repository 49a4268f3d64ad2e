"""`xcsh-run new` and `xcsh-run doctor`, through the real CLI in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import XCSH_RUN


def run(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / ".git").mkdir(parents=True)
    (folder / "src" / "deep").mkdir(parents=True)
    return folder


def test_new_scaffolds_a_tool_that_runs_and_a_test_that_passes(project: Path) -> None:
    proc = run("new", "word_count", cwd=project / "src" / "deep")
    assert proc.returncode == 0, proc.stderr
    tool = project / ".xcsh" / "tools" / "word_count.py"
    test = project / "tests" / "test_word_count.py"
    assert f"created {tool}" in proc.stdout and f"created {test}" in proc.stdout
    ran = run("word_count", "--text", "hi", "--repeat", "3", cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "hi hi hi\n"
    helped = run("word_count", "--help", cwd=project)
    assert "--repeat INTEGER" in helped.stdout and "How many times." in helped.stdout
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test.relative_to(project))],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "2 passed" in tested.stdout


def test_new_refuses_to_overwrite(project: Path) -> None:
    assert run("new", "mine", cwd=project).returncode == 0
    tool = project / ".xcsh" / "tools" / "mine.py"
    tool.write_text("# edited\n")
    proc = run("new", "mine", cwd=project)
    assert proc.returncode == 2
    assert "already exist" in proc.stderr and "nothing was written" in proc.stderr
    assert tool.read_text() == "# edited\n"
    # Only the test is there: still refused, and no tool is written either.
    (project / "tests" / "test_other.py").write_text("# mine\n")
    assert run("new", "other", cwd=project).returncode == 2
    assert not (project / ".xcsh" / "tools" / "other.py").exists()


@pytest.mark.parametrize(
    ("name", "why", "suggestion"),
    [
        ("my-tool", "is not a Python identifier", "my_tool"),
        ("with space", "is not a Python identifier", "with_space"),
        ("1bad", "is not a Python identifier", "tool_1bad"),
        ("class", "is a Python keyword", "class_tool"),
        ("_hidden", "starts with _, and discovery skips the modules whose name does", "hidden"),
        ("", "the tool name is empty", None),
        ("@!", "is not a Python identifier", None),
    ],
)
def test_new_rejects_a_name_discovery_would_not_find_and_suggests_one(
    project: Path, name: str, why: str, suggestion: str | None
) -> None:
    proc = run("new", name, cwd=project)
    assert proc.returncode == 2
    assert proc.stderr.startswith("xcsh-run: ") and why in proc.stderr
    if suggestion is None:
        assert "did you mean" not in proc.stderr and "give one such as word_count" in proc.stderr
    else:
        assert proc.stderr.rstrip().endswith(f"did you mean {suggestion!r}?"), proc.stderr
    assert not (project / ".xcsh").exists()
    if suggestion is not None:  # the suggestion is a name new takes
        assert run("new", suggestion, cwd=project).returncode == 0


def test_new_refuses_an_unknown_template_and_a_typescript_one_but_basic(project: Path) -> None:
    unknown = run("new", "mine", "--template", "web", cwd=project)
    assert unknown.returncode == 2
    assert "unknown --template 'web'; the templates: basic, async, exec, script" in unknown.stderr
    typescript = run("new", "mine", "--ts", "--template", "exec", cwd=project)
    assert typescript.returncode == 2
    assert "--ts writes the basic tool only" in typescript.stderr
    assert not (project / ".xcsh").exists()


def test_new_finds_the_project_root(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    inner = outer / "inner"
    (outer / ".git").mkdir(parents=True)
    (inner / ".xcsh").mkdir(parents=True)
    (inner / "sub").mkdir()
    assert run("new", "a", cwd=inner / "sub").returncode == 0
    assert (inner / ".xcsh" / "tools" / "a.py").is_file()  # .xcsh wins over an outer .git
    bare = tmp_path / "bare"
    bare.mkdir()
    assert run("new", "b", "--cwd", str(bare), cwd=tmp_path).returncode == 0
    assert (bare / ".xcsh" / "tools" / "b.py").is_file()  # neither: the current folder


@pytest.mark.timeout(400)
def test_new_ts_scaffolds_a_typescript_tool_that_runs_in_bun_and_a_test_that_passes(project: Path, bun: str) -> None:
    proc = run("new", "greet", "--ts", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # Bun is found: no warning, and the run to try
    assert "try: xcsh-run greet --text hello --repeat 2" in proc.stdout
    tool_path = project / ".xcsh" / "tools" / "greet.ts"
    test = project / "tests" / "test_greet.py"
    assert f"created {tool_path}" in proc.stdout and f"created {test}" in proc.stdout
    tool = tool_path.read_text()
    assert "const factory: CustomToolFactory = (pi) =>" in tool
    assert "pi.typebox.Type.Object" in tool and "export default factory" in tool
    assert 'name: "greet"' in tool
    ran = run("greet", "--text", "hi", "--repeat", "3", cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "hi hi hi\n"
    assert '"greet.ts"' in test.read_text()
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test.relative_to(project))],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "2 passed" in tested.stdout


def no_bun_env(tmp_path: Path) -> dict[str, str]:
    """An environment where bun.py's search finds nothing: a variable naming no file, no config, install or PATH."""
    home = tmp_path / "no-bun-home"
    home.mkdir()
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not os.path.exists(
        os.path.join(p, "bun")))  # fmt: skip
    return {**os.environ, "XCSH_RUN_BUN": str(tmp_path / "no-bun"), "HOME": str(home),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": path}  # fmt: skip


def test_new_ts_without_bun_writes_the_files_and_warns_with_the_command_that_gets_bun(
    project: Path, tmp_path: Path
) -> None:
    env = no_bun_env(tmp_path)
    proc = subprocess.run(
        [XCSH_RUN, "new", "greet", "--ts"], cwd=project, env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    tool = project / ".xcsh" / "tools" / "greet.ts"
    assert tool.is_file() and (project / "tests" / "test_greet.py").is_file()
    assert proc.stderr.startswith("xcsh-run: warning: greet.ts cannot load yet: no Bun to run"), proc.stderr
    assert f"XCSH_RUN_BUN names {tmp_path / 'no-bun'}, which is not an executable file" in proc.stderr
    assert "install it with `xcsh-run install-bun`" in proc.stderr
    # No run is suggested as if it worked: only once Bun is there.
    assert "\ntry:" not in "\n" + proc.stdout
    assert "then try: xcsh-run greet --text hello --repeat 2" in proc.stdout
    # The warning is true: that run fails to load, for the same reason.
    ran = subprocess.run(
        [XCSH_RUN, "greet", "--text", "hi"], cwd=project, env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert ran.returncode == 1 and "load_error" in ran.stderr and "no Bun to run" in ran.stderr


def test_doctor_reports_each_level(project: Path) -> None:
    proc = run("doctor", "--json", "--cwd", str(project / "src"), cwd=project)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    assert proc.returncode == (0 if report["ok"] else 1)
    assert report["ok"] == report["levels"]["contained"]["starts"]
    assert report["default_level"] == "contained"
    assert report["project_root"] == str(project)
    machine = report["machine"]
    for key in ("cgroup_v2", "memory_controller", "pids_controller", "seccomp", "user_namespaces", "pidfd"):
        assert isinstance(machine[key], bool), key
    assert isinstance(machine["landlock_abi"], int)
    assert set(report["levels"]) == {"none", "contained", "strict"}
    for state in report["levels"].values():
        assert set(state) == {"starts", "fully_enforced", "missing", "weakened"}
        assert state["fully_enforced"] == (state["starts"] and not state["weakened"])
        assert state["starts"] == (not state["missing"])
    assert report["levels"]["none"]["fully_enforced"] is True
    for key in ("python", "version", "cache_dir", "executable"):
        assert report[key]
    text = run("doctor", cwd=project)
    assert text.returncode == proc.returncode
    assert "Landlock ABI:" in text.stdout and "contained (default):" in text.stdout and "strict:" in text.stdout
