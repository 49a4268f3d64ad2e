"""Discovery tests: real home and project trees (a temporary HOME), every source, real workers.

Each tool module here is generated from a template whose tool name and import-time
log line identify it, so tests can tell which modules were imported and in which order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import XCSH_RUN, make_runner
from xcsh_run import Candidate, discover_and_load_custom_tools, discover_custom_tool_paths, load_custom_tools

TEMPLATE = """
import os
with open(os.environ["XCSH_RUN_IMPORT_LOG"], "a") as f:
    f.write({label!r} + "\\n")

from xcsh_run.pi import CustomTool

def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        return {label!r}
    return [CustomTool(name=n, description={label!r}, parameters={{"type": "object"}}, execute=execute)
            for n in {names!r}]
"""


def write_tool(folder: Path, stem: str, *names: str, label: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.py"
    path.write_text(TEMPLATE.format(label=label or f"{folder}/{stem}", names=list(names or (stem,))))
    return path


@pytest.fixture
def import_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "imports.log"
    log.write_text("")
    monkeypatch.setenv("XCSH_RUN_IMPORT_LOG", str(log))
    return log


def imported(log: Path) -> list[str]:
    return log.read_text().splitlines()


@pytest.fixture
def tree(tmp_path: Path, import_log: Path) -> tuple[Path, Path]:
    """A project and a home with one module in every file-based source."""
    home = Path(os.environ["HOME"])
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    write_tool(project / ".xcsh" / "tools", "native_project")
    write_tool(home / ".xcsh" / "agent" / "tools", "native_user")
    write_tool(home / ".claude" / "tools", "claude_user")
    write_tool(project / ".claude" / "tools", "claude_project")
    write_tool(home / ".codex" / "tools", "codex_user")
    write_tool(project / ".codex" / "tools", "codex_project")
    plugins = tmp_path / "plugins"
    for name in ("proj_plugin", "claude_plugin", "ours_plugin", "disabled_plugin", "overridden_plugin"):
        write_tool(plugins / name / "tools", name)
    write_tool(plugins / "override_target" / "tools", "override_target")

    def registry(entries: dict[str, list[dict[str, object]]]) -> str:
        return json.dumps({"version": 2, "plugins": entries})

    (project / ".xcsh" / "plugins").mkdir(parents=True)
    (project / ".xcsh" / "plugins" / "installed_plugins.json").write_text(
        registry({"proj@market": [{"scope": "project", "installPath": str(plugins / "proj_plugin")}]})
    )
    (home / ".claude" / "plugins").mkdir(parents=True)
    (home / ".claude" / "plugins" / "installed_plugins.json").write_text(
        registry(
            {
                "claude@market": [{"scope": "user", "installPath": str(plugins / "claude_plugin")}],
                "off@market": [{"scope": "user", "installPath": str(plugins / "disabled_plugin"), "enabled": False}],
                "shared@market": [{"scope": "user", "installPath": str(plugins / "overridden_plugin")}],
            }
        )
    )
    (home / ".xcsh" / "plugins").mkdir(parents=True)
    (home / ".xcsh" / "plugins" / "installed_plugins.json").write_text(
        registry(
            {
                "ours@market": [{"scope": "user", "installPath": str(plugins / "ours_plugin")}],
                # Ours replaces Claude's entry for the same plugin id.
                "shared@market": [{"scope": "user", "installPath": str(plugins / "override_target")}],
            }
        )
    )
    return project, home


def test_every_file_source_in_precedence_order(tree: tuple[Path, Path]) -> None:
    project, _ = tree
    found = [
        (Path(c.resolved).stem, c.source.provider, c.source.level) for c in discover_custom_tool_paths([], str(project))
    ]
    assert found == [
        ("native_project", "native", "project"),  # native: project, then user
        ("native_user", "native", "user"),
        ("claude_user", "claude", "user"),  # Claude: user, then project
        ("claude_project", "claude", "project"),
        ("proj_plugin", "claude-plugins", "project"),  # the project registry first
        ("claude_plugin", "claude-plugins", "user"),
        ("override_target", "claude-plugins", "user"),  # ours overrides Claude's per plugin id
        ("ours_plugin", "claude-plugins", "user"),
        ("codex_user", "codex", "user"),  # Codex: user, then project
        ("codex_project", "codex", "project"),
    ]


def test_marketplace_plugins_carry_their_id(tree: tuple[Path, Path]) -> None:
    project, _ = tree
    names = {c.source.provider_name for c in discover_custom_tool_paths([], str(project))}
    assert {"proj@market", "claude@market", "ours@market", "shared@market"} <= names
    assert "off@market" not in names  # enabled: false


async def test_discover_and_load_returns_tools_with_sources(tree: tuple[Path, Path], import_log: Path) -> None:
    project, _ = tree
    with trio.fail_after(60):
        result = await discover_and_load_custom_tools([], str(project), ["native_user"])
    names = [t.name for t in result.tools]
    assert names == [
        "native_project",
        "claude_user",
        "claude_project",
        "proj_plugin",
        "claude_plugin",
        "override_target",
        "ours_plugin",
        "codex_user",
        "codex_project",
    ]
    (error,) = result.errors
    assert "conflicts with a built-in tool" in error.message and error.source.level == "user"
    assert len(imported(import_log)) == 10


async def test_same_named_module_is_shadowed_and_reported(tmp_path: Path, import_log: Path) -> None:
    home = Path(os.environ["HOME"])
    project = tmp_path / "p"
    first = write_tool(project / ".xcsh" / "tools", "twin", "twin_a")
    write_tool(home / ".claude" / "tools", "twin", "twin_b")
    with trio.fail_after(30):
        result = await discover_and_load_custom_tools([], str(project))
    assert [t.name for t in result.tools] == ["twin_a"]
    (error,) = result.errors
    assert error.shadowed_by == str(first)
    assert error.source.provider == "claude"
    assert "shadowed by" in error.message
    assert imported(import_log) == [f"{first.parent}/twin"]  # the shadowed one was never imported


async def test_metadata_file_named_like_a_module_cannot_hide_it(tmp_path: Path, import_log: Path) -> None:
    home = Path(os.environ["HOME"])
    tools = home / ".claude" / "tools"
    write_tool(tools, "hello")
    (tools / "hello.md").write_text("---\nname: hello\n---\nSays hello")
    (tools / "hello.json").write_text('{"name": "hello"}')
    (tools / "README.md").write_text("docs")
    with trio.fail_after(30):
        result = await discover_and_load_custom_tools([], str(tmp_path))
    assert [t.name for t in result.tools] == ["hello"]
    assert result.errors == []


async def test_conflicts_between_sources_first_wins(tmp_path: Path, import_log: Path) -> None:
    home = Path(os.environ["HOME"])
    project = tmp_path / "p"
    native = write_tool(project / ".xcsh" / "tools", "a_module", "same_name")
    codex = write_tool(home / ".codex" / "tools", "b_module", "same_name")
    with trio.fail_after(30):
        result = await discover_and_load_custom_tools([], str(project))
    (tool,) = result.tools
    assert tool.module == str(native)
    (error,) = result.errors
    assert error.path == str(codex)
    assert f"already loaded from {native} (native)" in error.message


async def test_symlinked_duplicate_across_sources_loads_once(tmp_path: Path, import_log: Path) -> None:
    home = Path(os.environ["HOME"])
    project = tmp_path / "p"
    real = write_tool(project / ".xcsh" / "tools", "linked")
    (home / ".codex" / "tools").mkdir(parents=True)
    (home / ".codex" / "tools" / "other_name.py").symlink_to(real)
    with trio.fail_after(30):
        result = await discover_and_load_custom_tools([str(real)], str(project))
    assert [t.name for t in result.tools] == ["linked"]
    assert result.errors == []
    assert len(imported(import_log)) == 1


async def test_load_custom_tools_loads_only_the_given_paths(tree: tuple[Path, Path], import_log: Path) -> None:
    project, home = tree
    path = home / ".codex" / "tools" / "codex_user.py"
    with trio.fail_after(30):
        result = await load_custom_tools([str(path)], str(project))
    assert [(t.name, t.source.provider) for t in result.tools] == [("codex_user", "config")]
    assert len(imported(import_log)) == 1


async def test_bad_registry_is_a_warning_not_a_failure(tmp_path: Path, import_log: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".claude" / "plugins").mkdir(parents=True)
    (home / ".claude" / "plugins" / "installed_plugins.json").write_text("{not json")
    write_tool(home / ".claude" / "tools", "still_here")
    with trio.fail_after(30):
        async with make_runner(cwd=tmp_path) as runner:
            names = [t.name for t in runner.tools]
            warnings = runner.warnings
    assert names == ["still_here"]
    assert any("unreadable plugin registry" in w for w in warnings)


# --- entry-point plugins: a real distribution, really installed ---------------------

PLUGIN_TOOLS = """
from xcsh_run.pi import CustomTool

def make_tools(api):
    return CustomTool(name="plugin_greet", description="from an installed plugin", parameters={"type": "object"},
                      execute=lambda *a: "hello from " + __name__)
"""


@pytest.fixture(scope="session")
def plugin_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install --target`` of a real distribution declaring an ``xcsh.tools`` entry point."""
    src = tmp_path_factory.mktemp("plugin-src")
    (src / "xcsh_test_plugin").mkdir()
    (src / "xcsh_test_plugin" / "__init__.py").write_text("")
    (src / "xcsh_test_plugin" / "tools.py").write_text(PLUGIN_TOOLS)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "xcsh-test-plugin"\nversion = "1.0"\n'
        '[project.entry-points."xcsh.tools"]\ngreet = "xcsh_test_plugin.tools:make_tools"\n'
        '[tool.setuptools]\npackages = ["xcsh_test_plugin"]\n'
    )
    target = tmp_path_factory.mktemp("plugin-target")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(src),
        ],
        check=True,
        timeout=120,
        capture_output=True,
    )
    assert (target / "xcsh_test_plugin-1.0.dist-info" / "entry_points.txt").is_file()
    return target


async def test_entry_point_plugin_in_the_plugin_prefix(plugin_dist: Path, tmp_path: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".xcsh").mkdir(exist_ok=True)
    (home / ".xcsh" / "plugins").symlink_to(plugin_dist, target_is_directory=True)
    with trio.fail_after(30):
        async with make_runner(cwd=tmp_path) as runner:
            (tool,) = runner.tools
            result = await runner.call_tool("plugin_greet")
    assert tool.source.provider == "plugin" and tool.source.provider_name == "xcsh-test-plugin"
    assert tool.module.endswith("xcsh_test_plugin/tools.py")
    # Imported by its real name, so relative imports and __name__ work as installed.
    assert result.text == "hello from xcsh_test_plugin.tools"


async def test_a_plugin_installed_later_is_noticed(plugin_dist: Path, tmp_path: Path) -> None:
    """The entry-point scan is cached, keyed on the searched folders: an install changes the key."""
    import shutil

    prefix = Path(os.environ["HOME"]) / ".xcsh" / "plugins"
    prefix.mkdir(parents=True)
    with trio.fail_after(60):
        async with make_runner(cwd=tmp_path) as runner:
            assert runner.tools == []
        for entry in plugin_dist.iterdir():  # what `pip install --target` would add
            copy = shutil.copytree if entry.is_dir() else shutil.copy2
            copy(entry, prefix / entry.name)
        async with make_runner(cwd=tmp_path) as runner:
            names = [t.name for t in runner.tools]
    assert names == ["plugin_greet"]


def test_entry_point_plugin_in_the_environment(plugin_dist: Path, git_repo: Path) -> None:
    """The host's own environment (here: PYTHONPATH) is searched too, without importing the plugin."""
    env = {**os.environ, "PYTHONPATH": str(plugin_dist)}
    proc = subprocess.run(
        [XCSH_RUN, "list", "--json"], cwd=git_repo, env=env, capture_output=True, text=True, timeout=60
    )
    data = json.loads(proc.stdout)
    plugin = [t for t in data["tools"] if t["name"] == "plugin_greet"]
    assert plugin and plugin[0]["source"]["provider"] == "plugin"
    out = subprocess.run([XCSH_RUN, "plugin_greet"], cwd=git_repo, env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout == "hello from xcsh_test_plugin.tools\n", out.stderr


# --- the cache --------------------------------------------------------------------------


def make_many(folder: Path, count: int) -> None:
    for i in range(count):
        write_tool(folder, f"mod{i:02d}", f"tool{i:02d}", label=f"mod{i:02d}")


def test_second_cli_call_imports_one_module_and_list_none(git_repo: Path, import_log: Path) -> None:
    make_many(git_repo / ".xcsh" / "tools", 50)
    first = subprocess.run([XCSH_RUN, "tool07"], cwd=git_repo, capture_output=True, text=True, timeout=120)
    assert first.stdout == "mod07\n", first.stderr
    # Every module before mod07 in precedence was settled (any could have
    # defined tool07); the ones after it need not be, and are not waited for.
    first_imports = imported(import_log)
    assert {f"mod{i:02d}" for i in range(8)} <= set(first_imports)
    assert len(first_imports) == len(set(first_imports))  # none twice
    listing = subprocess.run([XCSH_RUN, "list", "--json"], cwd=git_repo, capture_output=True, text=True, timeout=120)
    assert len(json.loads(listing.stdout)["tools"]) == 51  # plus repo_stats in the fixture repo
    # The rest were imported now (one cancelled mid-import by the first call, if any, twice).
    assert set(imported(import_log)) == {f"mod{i:02d}" for i in range(50)}
    import_log.write_text("")
    second = subprocess.run([XCSH_RUN, "tool42"], cwd=git_repo, capture_output=True, text=True, timeout=60)
    assert second.stdout == "mod42\n"
    assert imported(import_log) == ["mod42"]  # exactly one worker: the module defining the tool
    listing = subprocess.run([XCSH_RUN, "list", "--json"], cwd=git_repo, capture_output=True, text=True, timeout=60)
    assert len(json.loads(listing.stdout)["tools"]) == 51
    assert imported(import_log) == ["mod42"]  # list imported nothing


async def test_changed_added_and_removed_files_are_noticed(tmp_path: Path, import_log: Path) -> None:
    tools = tmp_path / "tools"
    a = write_tool(tools, "a", "tool_a")
    b = write_tool(tools, "b", "tool_b")
    with trio.fail_after(60):
        async with make_runner(tools, cwd=tmp_path) as runner:
            assert runner.statistics().workers_started == 2
        # Same size and mtime, different content: the fingerprint is the content.
        stat = a.stat()
        a.write_text(a.read_text().replace("tool_a", "tool_x"))
        os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        b.unlink()
        write_tool(tools, "c", "tool_c")
        async with make_runner(tools, cwd=tmp_path) as runner:
            names = sorted(t.name for t in runner.tools)
            started = runner.statistics().workers_started
    assert names == ["tool_c", "tool_x"]
    assert started == 2  # a (changed) and c (new)


async def test_cached_load_errors_are_reported_without_importing(tmp_path: Path, import_log: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    log_line = "open(os.environ['XCSH_RUN_IMPORT_LOG'], 'a').write('broken\\n')"
    (tools / "broken.py").write_text(f"import os\n{log_line}\n1/0\n")
    with trio.fail_after(30):
        for _ in range(2):
            async with make_runner(tools, cwd=tmp_path) as runner:
                (error,) = runner.errors
                assert "ZeroDivisionError" in error.message
    assert imported(import_log) == ["broken"]


async def test_corrupt_or_unwritable_cache_is_a_warning(tmp_path: Path, import_log: Path) -> None:
    tools = tmp_path / "tools"
    write_tool(tools, "a", "tool_a")
    cache = tmp_path / "cache-dir"
    with trio.fail_after(60):
        async with make_runner(tools, cwd=tmp_path, cache_dir=cache):
            pass
        for entry in (cache / "modules").iterdir():
            entry.write_text("{garbage")
        async with make_runner(tools, cwd=tmp_path, cache_dir=cache) as runner:
            assert [t.name for t in runner.tools] == ["tool_a"]
            assert any("is corrupt" in w for w in runner.warnings)
        not_a_dir = tmp_path / "file"
        not_a_dir.write_text("")
        async with make_runner(tools, cwd=tmp_path, cache_dir=not_a_dir) as runner:
            result = await runner.call_tool("tool_a")
            assert any("cannot write" in w for w in runner.warnings)
    assert result.text == f"{tools}/a"
    assert imported(import_log) == [f"{tools}/a"] * 3  # first run, after corruption, unwritable run


async def test_calling_a_cached_tool_spawns_its_worker_on_demand(tmp_path: Path, import_log: Path) -> None:
    tools = tmp_path / "tools"
    write_tool(tools, "a", "tool_a")
    write_tool(tools, "b", "tool_b")
    with trio.fail_after(60):
        async with make_runner(tools, cwd=tmp_path):
            pass
        import_log.write_text("")
        async with make_runner(tools, cwd=tmp_path) as runner:
            assert runner.statistics().workers_started == 0
            result = await runner.call_tool("tool_b")
            assert runner.statistics().workers_started == 1
    assert result.text == f"{tools}/b"
    assert imported(import_log) == [f"{tools}/b"]


async def test_tool_removed_after_discovery_is_a_load_error(tmp_path: Path, import_log: Path) -> None:
    tools = tmp_path / "tools"
    a = write_tool(tools, "a", "tool_a")
    with trio.fail_after(60):
        async with make_runner(tools, cwd=tmp_path):
            pass
        async with make_runner(tools, cwd=tmp_path) as runner:
            a.write_text(a.read_text().replace("tool_a", "tool_renamed"))
            result = await runner.call_tool("tool_a")
    assert result.kind == "load_error"
    assert "no longer defines a tool named 'tool_a'" in result.text


# --- a run whose tool the cache settles ---------------------------------------------------


@pytest.fixture
def entry_point_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every time discovery reaches the entry-point source (a scan, or the scan's own cache)."""
    from xcsh_run._discovery import finder as _discovery

    scans: list[str] = []
    real = _discovery.cached_entry_point_candidates

    def counting(*args: Any, **kwargs: Any) -> list[Candidate]:
        scans.append("scan")
        return real(*args, **kwargs)

    monkeypatch.setattr(_discovery, "cached_entry_point_candidates", counting)
    return scans


async def picked(project: Path, name: str, *paths: Path) -> tuple[str | None, int]:
    """The module a runner opened for ``name`` calls it from, and how many workers it started."""
    async with make_runner(*paths, cwd=project, wanted_tool=name, discover_sources=True) as runner:
        info = runner.get_tool(name)
        return (info.module if info is not None else None), runner.statistics().workers_started


async def test_a_cache_settled_run_picks_what_a_full_load_picks(
    tree: tuple[Path, Path], import_log: Path, entry_point_scans: list[str], tmp_path: Path
) -> None:
    """Every tool of every source, with conflicts and a shadowed module: the same module, from the cache alone."""
    project, home = tree
    write_tool(home / ".claude" / "tools", "native_project", "shadowed_name")  # shadowed by the project's
    write_tool(home / ".xcsh" / "agent" / "tools", "conflicting", "codex_user", "only_here")  # wins over Codex
    configured = write_tool(tmp_path / "configured", "configured", "configured_tool")
    with trio.fail_after(120):
        async with make_runner(configured, cwd=project, discover_sources=True) as runner:
            full = {t.name: t.module for t in runner.tools}
        assert entry_point_scans == ["scan"]
        assert full["codex_user"].endswith("/conflicting.py") and "shadowed_name" not in full
        for name, module in full.items():
            entry_point_scans.clear()
            assert await picked(project, name, configured) == (module, 0), name
            # Only a tool defined after the entry-point source needs it read.
            assert entry_point_scans == (["scan"] if name == "configured_tool" else []), name
        # A name nobody defines is answered by a full load, with its error.
        assert await picked(project, "shadowed_name", configured) == (None, 0)
        assert entry_point_scans[-1:] == ["scan"]


async def test_a_cache_settled_run_notices_every_change_before_its_module(tmp_path: Path, import_log: Path) -> None:
    """A module added, edited (same size and mtime), removed or shadowing, anywhere before the cached one."""
    home = Path(os.environ["HOME"])
    project = tmp_path / "p"
    (project / ".git").mkdir(parents=True)
    cached = write_tool(home / ".codex" / "tools", "greeter", "greet")
    first = write_tool(project / ".xcsh" / "tools", "first", "other")
    with trio.fail_after(120):
        assert await picked(project, "greet") == (str(cached), 2)  # the cache is cold: both load
        assert await picked(project, "greet") == (str(cached), 0)
        # Edited to define it, with its size and mtime kept: the content is what counts.
        stat = first.stat()
        first.write_text(first.read_text().replace("'other'", "'greet'"))
        os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert await picked(project, "greet") == (str(first), 1)
        assert await picked(project, "greet") == (str(first), 0)
        # Removed: the later one again, with no worker.
        first.unlink()
        assert await picked(project, "greet") == (str(cached), 0)
        # Added in a source before it (Claude, user).
        added = write_tool(home / ".claude" / "tools", "added", "greet")
        assert await picked(project, "greet") == (str(added), 1)
        # A module named like the cached one, earlier: it shadows it, so the cached entry no longer counts.
        added.unlink()
        write_tool(project / ".claude" / "tools", "greeter", "not_greet")
        assert await picked(project, "greet") == (None, 1)
