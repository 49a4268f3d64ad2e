"""A broken tool is not a missing one: calling a name whose module failed to load is ``load_error``.

Through the real CLI (exit 1 and the reason inline, with the module cache cold
and warm), the API and MCP ``tools/call``; ``not_found`` (exit 2) stays the
answer when nothing failed or the name is a typo of a loaded tool's.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import trio

from tests._support.mcp_clients import DEADLINE, stdio_session
from tests.conftest import XCSH_RUN
from xcsh_run import open_runner

TOOL = """
from xcsh_run.pi import CustomTool

def factory(api):
    return CustomTool(name={name!r}, description="fine", parameters={{"type": "object"}},
                      execute=lambda *a: "ran " + {name!r})
"""
# A syntax error on line 3.
BROKEN = "from xcsh_run.pi import CustomTool\n\ndef factory(api:\n    return []\n"


def xcsh_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def project(root: Path, **modules: str) -> Path:
    """A project with ``.xcsh/tools/<stem>.py`` for each keyword: a tool of that name, or the given source."""
    tools = root / ".xcsh" / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    for stem, source in modules.items():
        (tools / f"{stem}.py").write_text(source or TOOL.format(name=stem))
    return root


def error_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    out = json.loads(proc.stdout)
    assert out["is_error"], out
    error: dict[str, Any] = out["error"]
    return error


def test_a_syntax_error_in_the_tools_module_is_a_load_error_naming_it(tmp_path: Path) -> None:
    root = project(tmp_path / "p", foo=BROKEN, other="")
    proc = xcsh_run("foo", cwd=root)
    assert proc.returncode == 1, proc.stderr
    assert "load_error" in proc.stderr and "foo.py" in proc.stderr
    assert "SyntaxError" in proc.stderr and "line 3" in proc.stderr
    error = error_of(xcsh_run("foo", "--json", cwd=root))
    assert error["kind"] == "load_error"
    assert error["module"].endswith("/.xcsh/tools/foo.py")
    assert "SyntaxError" in error["message"]


def test_the_rule_holds_with_the_cache_warm_for_the_other_modules(tmp_path: Path) -> None:
    root = project(tmp_path / "p", foo="", other="")
    for name in ("other", "foo", "other"):  # every module is in the cache now
        assert xcsh_run(name, cwd=root).stdout == f"ran {name}\n"
    # An edit breaks foo.py: the cache has nothing for its new content.
    (root / ".xcsh" / "tools" / "foo.py").write_text(BROKEN)
    proc = xcsh_run("foo", cwd=root)
    assert proc.returncode == 1 and "SyntaxError" in proc.stderr and "foo.py" in proc.stderr, proc.stderr
    # A new broken module (sorted before the others, as read first) is reported the same way.
    (root / ".xcsh" / "tools" / "a_new.py").write_text(BROKEN)
    proc = xcsh_run("a_new", cwd=root)
    assert proc.returncode == 1 and "a_new.py" in proc.stderr and "SyntaxError" in proc.stderr, proc.stderr
    # And once more, with the failure itself cached.
    proc = xcsh_run("a_new", cwd=root)
    assert proc.returncode == 1 and "a_new.py" in proc.stderr and "SyntaxError" in proc.stderr, proc.stderr
    assert xcsh_run("other", cwd=root).returncode == 0


def test_a_broken_package_folder_is_named_by_its_folder(tmp_path: Path) -> None:
    root = project(tmp_path / "p", other="")
    package = root / ".xcsh" / "tools" / "pkgtool"
    package.mkdir()
    (package / "__init__.py").write_text(BROKEN)
    proc = xcsh_run("pkgtool", cwd=root)
    assert proc.returncode == 1 and "pkgtool" in proc.stderr and "SyntaxError" in proc.stderr, proc.stderr


def test_an_unknown_name_with_a_failed_module_lists_every_failure(tmp_path: Path) -> None:
    root = project(tmp_path / "p", bar=BROKEN, baz="raise RuntimeError('no database')\n", good="")
    proc = xcsh_run("report", cwd=root)
    assert proc.returncode == 1, proc.stderr
    assert "load_error" in proc.stderr and "2 module(s) failed to load" in proc.stderr
    assert "bar.py" in proc.stderr and "SyntaxError" in proc.stderr
    assert "baz.py" in proc.stderr and "no database" in proc.stderr
    # Not tied to one module: no module is named as the culprit.
    assert "module" not in error_of(xcsh_run("report", "--json", cwd=root))


def test_a_typo_of_a_loaded_tool_stays_not_found_with_its_suggestion(tmp_path: Path) -> None:
    root = project(tmp_path / "p", bar=BROKEN, good="")
    proc = xcsh_run("goood", cwd=root)
    assert proc.returncode == 2, proc.stderr
    assert "not_found" in proc.stderr and "did you mean 'good'" in proc.stderr
    assert "1 module(s) failed to load" in proc.stderr


def test_an_unknown_name_with_nothing_failed_is_still_not_found(tmp_path: Path) -> None:
    root = project(tmp_path / "p", good="")
    proc = xcsh_run("report", cwd=root)
    assert proc.returncode == 2, proc.stderr
    assert "not_found" in proc.stderr and "known tools: good" in proc.stderr
    assert error_of(xcsh_run("report", "--json", cwd=root))["kind"] == "not_found"


def test_a_failed_module_does_not_touch_a_tool_of_a_healthy_one(tmp_path: Path) -> None:
    root = project(tmp_path / "p", bar=BROKEN, foo="")
    proc = xcsh_run("foo", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran foo\n"


async def test_the_api_gives_the_same_load_error(tmp_path: Path) -> None:
    root = project(tmp_path / "p", foo=BROKEN)
    with trio.fail_after(60):
        async with open_runner([str(root / ".xcsh" / "tools")], spare_workers=0) as runner:
            result = await runner.call_tool("foo")
    assert result.kind == "load_error"
    assert "foo.py" in result.text and "SyntaxError" in result.text
    assert result.error is not None and result.error.module is not None
    assert result.error.module.endswith("foo.py")


async def test_mcp_tools_call_gives_the_same_load_error(tmp_path: Path) -> None:
    root = project(tmp_path / "p", foo=BROKEN, good="")
    with trio.fail_after(DEADLINE):
        async with stdio_session(str(root / ".xcsh" / "tools")) as s:
            result = await s.call_tool("foo", {})
    assert result.is_error
    assert result.meta is not None
    error = result.meta["xcsh-run/error"]
    assert error["kind"] == "load_error"
    assert "foo.py" in error["message"] and "SyntaxError" in error["message"]


def test_help_flags_and_describe_of_a_broken_tool_say_why_it_failed(tmp_path: Path) -> None:
    # `xcsh-run foo --help`, `xcsh-run foo --top 3` and `describe foo` read the tool's schema
    # before any call: a broken foo.py is its load error there too, not "no tool named foo".
    root = project(tmp_path / "p", foo=BROKEN, other="")
    for args in (("foo", "--help"), ("foo", "--top", "3"), ("describe", "foo")):
        proc = xcsh_run(*args, cwd=root)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert "load_error" in proc.stderr and "foo.py" in proc.stderr and "SyntaxError" in proc.stderr, proc.stderr
        assert "no tool named" not in proc.stderr
    error = error_of(xcsh_run("foo", "--top", "3", "--json", cwd=root))
    assert error["kind"] == "load_error" and "SyntaxError" in error["message"]
    # A name nothing could define is still a usage error.
    proc = xcsh_run("describe", "fooo_nothing", cwd=project(tmp_path / "q", other=""))
    assert proc.returncode == 2 and "no tool named" in proc.stderr, proc.stderr
