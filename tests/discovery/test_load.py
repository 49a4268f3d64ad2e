"""Contract tests: loading modules in workers. Import-time failures become load errors, and
discovery goes on."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.conftest import BROKEN, TOOLS, make_runner


@pytest.mark.parametrize(
    ("module", "fragments"),
    [
        ("exits.py", ["called sys.exit(7) while being imported"]),
        ("reads_stdin.py", ["EOFError"]),  # stdin is the null device: input() ends at once
        ("segfaults.py", ["was killed by SIGSEGV while loading", "Fatal Python error: Segmentation fault"]),
        ("syntax_error.py", ["SyntaxError", "line 2"]),
        ("no_factory.py", ["defines no factory(api) function"]),
        ("factory_raises.py", ["factory(api) raised RuntimeError: factory broke"]),
    ],
)
async def test_import_time_failure_is_a_load_error(module: str, fragments: list[str]) -> None:
    with trio.fail_after(20):
        async with make_runner(BROKEN / module, TOOLS / "basic.py") as runner:
            errors = runner.errors
            # Discovery went on: the healthy module next to it loaded.
            ok = await runner.call_tool("add", {"a": 1})
    assert ok.text == "1"
    (error,) = errors
    assert error.path == str(BROKEN / module)
    assert error.source.provider == "config"
    text = error.message + (error.stderr_tail or "")
    for fragment in fragments:
        assert fragment in text, text


async def test_endless_loop_at_import_hits_the_load_timeout() -> None:
    with trio.fail_after(20):
        start = trio.current_time()
        async with make_runner(BROKEN / "loops.py", TOOLS / "basic.py", load_timeout=1.0) as runner:
            elapsed = trio.current_time() - start
            errors = runner.errors
            names = [t.name for t in runner.tools]
    (error,) = errors
    assert "of CPU importing (load timeout 1 s of CPU); it may loop" in error.message
    assert "add" in names
    assert elapsed < 1.0 + 2.0


async def test_reading_stdin_at_import_sees_an_empty_stream() -> None:
    with trio.fail_after(20):
        async with make_runner(BROKEN / "stdin_read.py") as runner:
            result = await runner.call_tool("stdin_at_import")
    assert result.text == "''"


async def test_factory_entries_are_validated_one_by_one() -> None:
    with trio.fail_after(20):
        async with make_runner(BROKEN / "mixed_entries.py") as runner:
            names = sorted(t.name for t in runner.tools)
            messages = sorted(e.message for e in runner.errors)
            result = await runner.call_tool("dict_tool")
    assert names == ["dict_tool", "good_one"]
    assert result.text == "ok"
    assert len(messages) == 4
    assert any("entry 1 of factory(api): expected a CustomTool, got int" in m for m in messages)
    assert any("entry 2 of factory(api): name must be" in m for m in messages)
    assert any("entry 4 of factory(api): tool name 'good_one' is already defined" in m for m in messages)
    assert any("entry 5 of factory(api): tool 'bad_schema': parameters must be" in m for m in messages)


async def test_name_conflicts_first_wins_and_builtins_are_reserved(tmp_path: Path) -> None:
    second = tmp_path / "second"
    second.mkdir()
    (second / "basic_copy.py").write_text((TOOLS / "basic.py").read_text())
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py", second, builtin_tool_names=["echo"]) as runner:
            add = runner.get_tool("add")
            errors = [e.message for e in runner.errors]
            echo = runner.get_tool("echo")
    assert add is not None and add.module == str(TOOLS / "basic.py")
    assert echo is None
    assert any("'echo' conflicts with a built-in tool" in m for m in errors)
    assert any(f"'add' conflicts with the tool already loaded from {TOOLS / 'basic.py'}" in m for m in errors)


async def test_metadata_and_missing_paths_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "tool.md").write_text("# a description")
    with trio.fail_after(20):
        async with make_runner(tmp_path / "tool.md", tmp_path / "missing.py") as runner:
            messages = sorted(e.message for e in runner.errors)
    assert "cannot be loaded as modules" in messages[1]
    assert "no such file or folder" in messages[0]


async def test_native_folder_is_discovered_and_private_files_skipped(tmp_path: Path) -> None:
    folder = tmp_path / ".xcsh" / "tools"
    folder.mkdir(parents=True)
    (folder / "basic.py").write_text((TOOLS / "basic.py").read_text())
    (folder / "_helper.py").write_text("raise SystemExit('never imported')\n")
    (folder / ".hidden.py").write_text("raise SystemExit('never imported')\n")
    (folder / "basic.json").write_text("{}")
    with trio.fail_after(20):
        async with make_runner(cwd=tmp_path) as runner:
            tools = runner.tools
            errors = runner.errors
    assert errors == []
    assert {t.source.provider for t in tools} == {"native"}
    assert "add" in {t.name for t in tools}


async def test_symlinked_duplicate_loads_once(tmp_path: Path) -> None:
    (tmp_path / "link.py").symlink_to(TOOLS / "basic.py")
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py", tmp_path / "link.py") as runner:
            errors = runner.errors
            stats = runner.statistics()
    assert errors == []
    assert stats.idle_workers == 1
