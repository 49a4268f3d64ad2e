"""The types of ``api``, ``api.ui``, ``ctx``, ``signal`` and ``api.exec``'s result are public and real.

``xcsh_run.pi`` names them for annotations; a tool annotated with them loads and
runs in a real worker, where the objects it gets are instances of exactly those
types; and a type checker (mypy, strict) accepts a typed tool module and
rejects a misuse, which it could not if the names were ``Any``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests._support.typecheck import mypy_strict
from tests.conftest import XCSH_RUN, make_runner

ROOT = Path(__file__).resolve().parents[2]

TYPED_TOOL = """
from __future__ import annotations

import msgspec

from xcsh_run.pi import UI, AbortSignal, CustomTool, ExecResult, ToolAPI, ToolContext, ToolResult


class Params(msgspec.Struct):
    word: str


def factory(api: ToolAPI) -> list[CustomTool]:
    ui: UI = api.ui

    def execute(
        tool_call_id: str, params: Params, on_update: object, ctx: ToolContext, signal: AbortSignal
    ) -> ToolResult:
        result: ExecResult = api.exec_sync("echo", [params.word], cwd=api.cwd, timeout=10.0, signal=signal)
        kinds = {
            "api": isinstance(api, ToolAPI),
            "ui": isinstance(ui, UI),
            "ctx": isinstance(ctx, ToolContext),
            "signal": isinstance(signal, AbortSignal),
            "exec": isinstance(result, ExecResult),
        }
        answer = ui.select("Pick", ["a", "b"])  # no UI attached: None
        details = {"kinds": kinds, "user": ctx.get("user"), "answer": answer, "aborted": signal.aborted}
        return ToolResult(content=[{"type": "text", "text": result.stdout.strip()}], details=details)

    return [CustomTool(name="typed_echo", description="Echoes through api.exec", parameters=Params,
                       execute=execute, timeout=30.0, concurrency="exclusive")]
"""


def test_the_public_types_import_from_xcsh_run_pi() -> None:
    from xcsh_run import pi
    from xcsh_run.pi import UI, AbortSignal, ExecResult, ToolAPI, ToolContext
    from xcsh_run.worker._tool_api.api import ToolAPI as RealAPI
    from xcsh_run.worker._tool_api.ctx import Ctx
    from xcsh_run.worker._tool_api.exec import ExecResult as RealResult
    from xcsh_run.worker._tool_api.ui import UI as HostUI

    assert (ToolAPI, UI, ToolContext, ExecResult) == (RealAPI, HostUI, Ctx, RealResult)
    assert AbortSignal.__name__ == "AbortSignal"
    for name in ("ToolAPI", "UI", "ToolContext", "ExecResult", "AbortSignal"):
        assert name in pi.__all__
    with pytest.raises(AttributeError, match="no attribute 'ToolAPl'"):
        pi.ToolAPl  # noqa: B018 - a misspelt name still fails


def test_every_public_member_of_the_api_types_has_a_docstring() -> None:
    import inspect

    from xcsh_run.pi import UI, AbortSignal, CustomTool, ExecResult, ToolAPI, ToolContext

    missing = [
        f"{cls.__name__}.{name}"
        for cls in (ToolAPI, UI, ToolContext, AbortSignal, ExecResult, CustomTool)
        for name, member in vars(cls).items()
        if not name.startswith("_") and callable(member) | isinstance(member, property) and not inspect.getdoc(member)
    ]
    assert not missing, missing
    for cls in (ToolAPI, UI, ToolContext, AbortSignal, ExecResult, CustomTool):
        assert "Example" in (cls.__doc__ or "") or "Attributes" in (cls.__doc__ or "") or cls is AbortSignal, cls


async def test_a_tool_annotated_with_the_public_types_loads_and_runs(tmp_path: Path) -> None:
    tool = tmp_path / "typed_tool.py"
    tool.write_text(TYPED_TOOL)
    with trio.fail_after(60):
        async with make_runner(tool) as runner:
            assert runner.errors == []
            runner.set_context({"user": "ada"})
            result = await runner.call_tool("typed_echo", {"word": "hi"})
    assert not result.is_error, result.text
    assert result.text == "hi"
    assert result.details == {
        "kinds": {"api": True, "ui": True, "ctx": True, "signal": True, "exec": True},
        "user": "ada",
        "answer": None,
        "aborted": False,
    }


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    return mypy_strict(tmp_path, source, name="typed_tool.py")


@pytest.mark.slow
def test_mypy_accepts_a_typed_tool_module_and_rejects_a_misuse(tmp_path: Path) -> None:
    good = _mypy(tmp_path, TYPED_TOOL)
    assert good.returncode == 0, good.stdout + good.stderr
    bad = _mypy(
        tmp_path,
        TYPED_TOOL.replace("cwd=api.cwd, timeout=10.0", 'cwd=api.cwd, timeout="soon"').replace(
            "kinds = {", "api.cwdd\n        kinds = {"
        ),
    )
    assert bad.returncode == 1
    assert '"ToolAPI" has no attribute "cwdd"' in bad.stdout, bad.stdout
    assert 'Argument "timeout" to "exec_sync" of "ToolAPI" has incompatible type "str"' in bad.stdout, bad.stdout


def _page_text(path: Path) -> str:
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


@pytest.mark.slow
def test_the_reference_builds_strict_and_documents_the_api_and_the_cli(tmp_path: Path) -> None:
    site = tmp_path / "site"
    # Not --quiet: it keeps warnings from being logged, so --strict never counts them.
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml")]
    # As a user's environment has it: the reference shows forkserver's default computed without it.
    env = {name: value for name, value in os.environ.items() if name != "XCSH_RUN_FORKSERVER"}
    build = subprocess.run([*command, "-d", str(site)], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert build.returncode == 0, build.stderr
    assert "WARNING" not in build.stderr, build.stderr
    authoring = " ".join(_page_text(site / "reference" / "authoring.html").split())
    assert "select(title: str, options: Sequence[str])" in authoring
    assert "Ask the user to pick one of options" in authoring
    assert "timeout: float | None = None" in authoring  # CustomTool's signature
    assert "this tool's own limit for a call, in seconds" in authoring  # and its field's description
    assert '"exclusive": at most one call of this tool runs at a time' in authoring
    assert "The factory contract" in authoring and "a list or tuple of them" in authoring
    runners = " ".join(_page_text(site / "reference" / "runners.html").split())
    for parameter in ("tool_paths", "cwd", "max_workers", "spare_workers", "queue_timeout", "sandbox"):
        assert f"{parameter}:" in runners, parameter  # open_runner's signature
    for face in ("BlockingRunner", "AsyncioRunner", "open_asyncio_runner", "run_tool_sync", "RunnerConfig"):
        assert face in runners, face
    # Defaults by value, not by the constant's name; links, not Sphinx roles; no private constructor.
    for default in (
        "default_timeout: float = 60.0",
        "max_frame_bytes: int = 64 * 1024 * 1024",
        "forkserver: bool = False",
    ):
        assert runners.count(default) == 2, default  # open_runner and RunnerConfig
    assert "DEFAULT_" not in runners
    assert ":class:" not in runners + authoring and ":func:" not in runners and ":meth:" not in runners
    assert re.search(r"\b(Runner|BlockingRunner|AsyncioRunner|RayRunner|BatchResults)\(", runners) is None
    assert 'href="#xcsh_run.open_runner"' in (site / "reference" / "runners.html").read_text()

    # The CLI page is what the CLI prints, command by command.
    cli = _page_text(site / "reference" / "cli.html")
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"}
    top = subprocess.run([XCSH_RUN, "--help"], capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    assert top in cli
    commands = [line.split()[0] for line in top.split("Commands:", 1)[1].splitlines() if line.startswith("  ")]
    assert {"run", "list", "describe", "serve", "fuzz"} <= set(commands)
    for command in commands:
        text = subprocess.run(
            [XCSH_RUN, command, "--help"], capture_output=True, text=True, env=env, timeout=60, check=True
        ).stdout
        assert f"xcsh-run {command}" in cli and text in cli, command


def test_the_annotations_of_every_struct_of_the_authoring_api_resolve() -> None:
    """msgspec (and typing) resolve a record's postponed annotations in the module its ``__module__`` names."""
    import typing

    import msgspec

    from xcsh_run import pi

    structs = [
        obj for name in pi.__all__ if isinstance(obj := getattr(pi, name), type) and issubclass(obj, msgspec.Struct)
    ]
    assert pi.ToolResult in structs and pi.TextContent in structs
    for struct in structs:
        typing.get_type_hints(struct)  # a NameError here is what msgspec would raise too
    assert msgspec.convert({"type": "text", "text": "hi"}, pi.TextContent) == pi.TextContent(text="hi")
