"""Discovery of JavaScript/TypeScript tool modules: candidates, precedence and shadowing, and the module cache.

The modules are loaded by a stub JS worker (``tests/fixtures/js_stub/main.ts``) that
defines one tool, ``stub_echo``, whatever the module: the cache tests count
the workers started, the discovery tests need no worker at all.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import trio

from tests.conftest import ROOT, make_runner
from xcsh_run import SandboxPolicy
from xcsh_run._discovery import bun as bun_mod
from xcsh_run._discovery.cache import fingerprint
from xcsh_run._discovery.finder import Candidate, ToolSource, discover, modules_in

STUB = ROOT / "tests" / "fixtures" / "js_stub" / "main.ts"
FACTORY = "export default () => ({});\n"
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def stub_main(bun: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(bun_mod.MAIN_ENV, str(STUB))
    return bun


def touch(path: Path, text: str = FACTORY) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_js_files_and_folders_are_candidates_and_the_rest_is_not(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    for name in ("a.ts", "b.js", "c.mjs", "types.d.ts", "d.tsx", "e.cjs", "_private.ts", ".hidden.ts", "notes.md"):
        touch(tools / name)
    touch(tools / "pkg" / "package.json", '{"main": "main.ts"}')
    touch(tools / "idx" / "index.ts")
    touch(tools / "pyjs" / "__init__.py", "")
    touch(tools / "pyjs" / "package.json", "{}")  # a Python package with a package.json stays Python
    touch(tools / "plain" / "helper.ts")  # a folder of modules is not a module
    touch(tools / "node_modules" / "package.json", "{}")
    touch(tools / "node_modules" / "dep" / "index.ts")
    found = modules_in(tools)
    assert [p.name for p in found] == ["a.ts", "b.js", "c.mjs", "idx", "pkg", "pyjs"]
    kinds = {
        p.name: Candidate(path=str(p), resolved=str(p), source=ToolSource("config", "Config", "project")).kind
        for p in found
    }
    assert kinds == {"a.ts": "js", "b.js": "js", "c.mjs": "js", "idx": "js", "pkg": "js", "pyjs": "python"}
    names = [Candidate(path=str(p), resolved=str(p), source=ToolSource("c", "c", "user")).name for p in found]
    assert names == ["a", "b", "c", "idx", "pkg", "pyjs"]


def test_a_python_module_comes_before_a_js_module_of_its_name_in_one_folder(tmp_path: Path) -> None:
    project = tmp_path / "project"
    tools = project / ".xcsh" / "tools"
    for name in ("dup.js", "dup.py", "dup.ts", "alpha.ts", "zeta.py"):
        touch(tools / name)
    (project / ".git").mkdir()
    found = discover([], str(project), home=str(tmp_path / "home"), include_sources=True)
    assert [Path(c.path).name for c in found.candidates] == ["alpha.ts", "dup.py", "zeta.py"]
    shadowed = {Path(s.path).name: Path(s.shadowed_by).name for s in found.shadowed}
    assert shadowed == {"dup.js": "dup.py", "dup.ts": "dup.py"}


def test_js_modules_take_part_in_precedence_across_sources(tmp_path: Path) -> None:
    home = tmp_path / "home"
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    touch(project / ".xcsh" / "tools" / "shared.ts")
    touch(home / ".xcsh" / "agent" / "tools" / "shared.py")
    touch(home / ".claude" / "tools" / "mine.mjs")
    touch(project / ".claude" / "tools" / "mine.py")
    touch(home / ".codex" / "tools" / "folder" / "index.ts")
    found = discover([], str(project), home=str(home))
    assert [(Path(c.path).name, c.kind, c.source.provider) for c in found.candidates] == [
        ("shared.ts", "js", "native"),
        ("mine.mjs", "js", "claude"),
        ("folder", "js", "codex"),
    ]
    assert sorted((Path(s.path).name, Path(s.shadowed_by).name) for s in found.shadowed) == [
        ("mine.py", "mine.mjs"),
        ("shared.py", "shared.ts"),
    ]


def test_configured_paths_take_js_files_and_module_folders_as_given(tmp_path: Path) -> None:
    touch(tmp_path / "one.ts")
    touch(tmp_path / "app" / "package.json", "{}")
    touch(tmp_path / "app" / "src" / "inner.ts")
    touch(tmp_path / "several" / "x.mjs")
    touch(tmp_path / "several" / "y.ts")
    found = discover(["one.ts", "app", "several"], str(tmp_path), home=str(tmp_path / "home"), include_sources=False)
    assert [Path(c.path).relative_to(tmp_path).as_posix() for c in found.candidates] == [
        "one.ts",
        "app",
        "several/x.mjs",
        "several/y.ts",
    ]
    assert {c.kind for c in found.candidates} == {"js"}


def test_a_js_folder_fingerprint_covers_its_sources_not_node_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(bun_mod.BUN_ENV, "/nonexistent")  # no Bun: still a fingerprint (of a load error)
    folder = tmp_path / "tool"
    touch(folder / "package.json", '{"main": "src/main.ts"}')
    main = touch(folder / "src" / "main.ts")
    dep = touch(folder / "node_modules" / "dep" / "index.js", "module.exports = 1;\n")
    candidate = Candidate(path=str(folder), resolved=str(folder), source=ToolSource("config", "Config", "project"))
    first = fingerprint(candidate, "v")
    assert first is not None
    dep.write_text("module.exports = 2;\n")
    assert fingerprint(candidate, "v") == first
    main.write_text(FACTORY + "// changed\n")
    second = fingerprint(candidate, "v")
    assert second != first
    touch(folder / "package.json", '{"main": "src/main.ts", "version": "2"}')
    assert fingerprint(candidate, "v") != second


async def test_an_unchanged_js_module_is_not_loaded_again(
    stub_main: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "tools"
    module = touch(tools / "echo.ts")
    with trio.fail_after(50):
        async with make_runner(tools, cwd=tmp_path, sandbox=SandboxPolicy(level="contained")) as runner:
            assert [t.name for t in runner.tools] == ["stub_echo"]
            assert runner.statistics().workers_started == 1
        async with make_runner(tools, cwd=tmp_path, sandbox=SandboxPolicy(level="contained")) as runner:
            assert [t.name for t in runner.tools] == ["stub_echo"]
            assert runner.statistics().workers_started == 0  # from the cache
            result = await runner.call_tool("stub_echo", {"text": "x"})
            assert result.details["module"] == str(module)
        module.write_text(FACTORY + "// edited\n")
        async with make_runner(tools, cwd=tmp_path) as runner:
            assert runner.statistics().workers_started == 1
        # Another JS worker (or Bun) describes the module anew.
        other = tmp_path / "other-main" / "main.ts"
        other.parent.mkdir()
        shutil.copy(STUB, other)
        monkeypatch.setenv(bun_mod.MAIN_ENV, str(other))
        async with make_runner(tools, cwd=tmp_path) as runner:
            assert runner.statistics().workers_started == 1


async def test_a_load_error_for_want_of_bun_is_not_cached(
    stub_main: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "tools"
    touch(tools / "echo.ts")
    monkeypatch.setenv(bun_mod.BUN_ENV, str(tmp_path / "nothing"))
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if "bun" not in p))
    with trio.fail_after(50):
        async with make_runner(tools, cwd=tmp_path) as runner:
            [error] = runner.errors
            assert "no Bun" in error.message
        monkeypatch.setenv(bun_mod.BUN_ENV, stub_main)
        async with make_runner(tools, cwd=tmp_path) as runner:
            assert not runner.errors
            assert [t.name for t in runner.tools] == ["stub_echo"]


def test_the_tool_files_state_sees_a_js_folder_source_change_not_its_node_modules(tmp_path: Path) -> None:
    """What serve's reload and `xcsh-run watch` poll (xcsh_run._discovery.changes)."""
    from xcsh_run._discovery import tool_files_state

    folder = tmp_path / "tool"
    touch(folder / "package.json", '{"main": "src/main.ts"}')
    main = touch(folder / "src" / "main.ts")
    dep = touch(folder / "node_modules" / "dep" / "index.js", "module.exports = 1;\n")
    first = tool_files_state([str(folder)], str(tmp_path))
    assert any(str(main) in str(entry) for entry in first)
    dep.write_text("module.exports = 22;\n")
    assert tool_files_state([str(folder)], str(tmp_path)) == first
    main.write_text(FACTORY + "// a longer file\n")
    assert tool_files_state([str(folder)], str(tmp_path)) != first


def test_an_edit_to_the_js_worker_sources_invalidates_the_module_cache(
    bun: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader decides a module's tools and load errors: in a checkout, editing it must not leave stale entries."""
    worker_js = tmp_path / "js"
    shutil.copytree(Path(bun_mod.worker_main()).parent, worker_js)
    monkeypatch.setenv(bun_mod.MAIN_ENV, str(worker_js / "main.ts"))
    module = touch(tmp_path / "tool.ts")
    candidate = Candidate(path=str(module), resolved=str(module), source=ToolSource("config", "Config", "project"))
    first = fingerprint(candidate, "v")
    assert first is not None and fingerprint(candidate, "v") == first
    loader = worker_js / "loader.ts"
    loader.write_text(loader.read_text() + "\n// edited\n")
    assert fingerprint(candidate, "v") != first
