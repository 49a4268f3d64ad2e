"""The project root: project sources are read from the nearest folder up with ``.xcsh/`` (else ``.git``).

Through the real CLI from subfolders, and through the API (``Runner.project_root``,
and ``open_runner(paths)`` loading only its paths unless ``discover_sources=True``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import trio

from tests.conftest import XCSH_RUN
from xcsh_run import discover_and_load_custom_tools, open_blocking_runner, open_runner

# A tool that answers with where it was found from and the directory it runs in.
TOOL = """
from xcsh_run.pi import CustomTool

def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        return {label!r} + " " + api.cwd
    return CustomTool(name={name!r}, description="where am I", parameters={{"type": "object"}}, execute=execute)
"""


def write_tool(folder: Path, name: str, label: str, stem: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem or name}.py"
    path.write_text(TOOL.format(name=name, label=label))
    return path


def xcsh_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_a_tool_in_the_projects_xcsh_is_found_from_a_deep_subfolder(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    write_tool(project / ".xcsh" / "tools", "t", "native")
    deep = project / "src" / "deep"
    deep.mkdir(parents=True)
    proc = xcsh_run("t", cwd=deep)
    assert proc.returncode == 0, proc.stderr
    # Found from the root, but run where the user is.
    assert proc.stdout == f"native {os.path.realpath(deep)}\n"


def test_without_xcsh_the_nearest_git_is_the_root(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    write_tool(project / ".codex" / "tools", "t", "codex")
    write_tool(project / ".claude" / "tools", "c", "claude")
    sub = project / "sub"
    sub.mkdir()
    assert xcsh_run("t", cwd=sub).stdout == f"codex {os.path.realpath(sub)}\n"
    assert xcsh_run("c", cwd=sub).stdout == f"claude {os.path.realpath(sub)}\n"
    listing = xcsh_run("list", cwd=sub)
    assert listing.returncode == 0, listing.stderr
    assert f"Project root: {os.path.realpath(project)}\n" in listing.stdout


def test_the_nearest_xcsh_wins_over_an_outer_one_and_over_a_nearer_git(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    write_tool(outer / ".xcsh" / "tools", "t", "outer")
    inner = outer / "inner"
    write_tool(inner / ".xcsh" / "tools", "t", "inner")
    (inner / "src").mkdir()
    assert xcsh_run("t", cwd=inner / "src").stdout.split()[0] == "inner"
    (outer / "other").mkdir()
    assert xcsh_run("t", cwd=outer / "other").stdout.split()[0] == "outer"
    # A git checkout inside a folder with .xcsh/: the .xcsh/ folder is the root, as documented.
    repo = outer / "repo"
    (repo / ".git").mkdir(parents=True)
    assert xcsh_run("t", cwd=repo).stdout.split()[0] == "outer"


def test_the_readme_example_works_from_a_subfolder(git_repo: Path) -> None:
    proc = xcsh_run("repo_stats", "--args", '{"glob":"*.py"}', cwd=git_repo / "pkg")
    assert proc.returncode == 0, proc.stderr
    # git's pathspec is relative to the tool's cwd, the subfolder: pkg/c.py.
    assert proc.stdout == "Found 1 files\n"


def test_homes_own_xcsh_is_never_a_project(tmp_path: Path) -> None:
    """``~/.xcsh`` holds the user's tools and registry: the walk up from inside HOME stops below HOME."""
    home = Path(os.environ["HOME"])
    write_tool(home / ".xcsh" / "agent" / "tools", "user_tool", "user")  # makes ~/.xcsh exist
    write_tool(home / ".xcsh" / "tools", "stray", "stray")
    project = home / "code" / "proj"
    (project / ".git").mkdir(parents=True)
    write_tool(project / ".codex" / "tools", "t", "codex")
    (project / "src").mkdir()
    # Were ~/.xcsh a marker it would win over the nearer .git, and proj's tools would be missed.
    assert xcsh_run("t", cwd=project / "src").stdout.split()[0] == "codex"
    loose = home / "notes"
    loose.mkdir()
    proc = xcsh_run("stray", cwd=loose)
    assert proc.returncode == 2 and "not_found" in proc.stderr, proc.stderr
    assert xcsh_run("user_tool", cwd=loose).stdout.split()[0] == "user"


async def test_runner_exposes_the_root_and_keeps_cwd(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    write_tool(project / ".xcsh" / "tools", "t", "native")
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    with trio.fail_after(60):
        async with open_runner(cwd=deep, spare_workers=0) as runner:
            assert runner.project_root == str(project)
            assert runner.cwd == str(deep)
            result = await runner.call_tool("t")
    assert result.text == f"native {deep}"


async def test_open_runner_with_paths_loads_only_those_paths_unless_asked_to_discover(tmp_path: Path) -> None:
    home = Path(os.environ["HOME"])
    write_tool(home / ".claude" / "tools", "from_home", "claude")
    mine = write_tool(tmp_path / "mine", "mine", "mine")
    with trio.fail_after(60):
        async with open_runner([str(mine)], spare_workers=0) as runner:
            assert [t.name for t in runner.tools] == ["mine"]
        async with open_runner([str(mine)], spare_workers=0, discover_sources=True) as runner:
            assert [t.name for t in runner.tools] == ["from_home", "mine"]
        # No paths: discovery, as before.
        async with open_runner(spare_workers=0) as runner:
            assert [t.name for t in runner.tools] == ["from_home"]
        # An explicit False loads exactly the (here empty) list.
        async with open_runner(spare_workers=0, discover_sources=False) as runner:
            assert runner.tools == []
        found = await discover_and_load_custom_tools([str(mine)], os.getcwd())
        assert [t.name for t in found.tools] == ["from_home", "mine"]


def test_the_blocking_runner_forwards_the_choice(tmp_path: Path) -> None:
    home = Path(os.environ["HOME"])
    write_tool(home / ".claude" / "tools", "from_home", "claude")
    mine = write_tool(tmp_path / "mine", "mine", "mine")
    with open_blocking_runner([str(mine)], spare_workers=0) as runner:
        assert [t.name for t in runner.tools] == ["mine"]
    with open_blocking_runner([str(mine)], spare_workers=0, discover_sources=True) as runner:
        assert [t.name for t in runner.tools] == ["from_home", "mine"]
