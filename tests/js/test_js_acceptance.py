"""The original TypeScript ``repo_stats`` tool, unchanged, through every face of xcsh-run.

``tests/fixtures/js_tools/repo_stats.ts`` is the example of the original system's
documentation ("Contrato del módulo"), copied character for character: the
first test checks that against the document when it is at hand. The module
goes into ``.xcsh/tools/`` of a git repository and runs through the CLI
(`xcsh-run repo_stats --args '{"glob":"*.py"}'`), the embedding API and
`xcsh-run serve` (MCP, on both transports), in a real Bun worker.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import trio

from tests._support.js import JS_TOOLS, copy_tool, require_bun
from tests._support.mcp_clients import DEADLINE, open_session
from tests.conftest import ROOT, XCSH_RUN, make_runner, needs_strict
from xcsh_run import SandboxPolicy, open_blocking_runner, run_tool_sync

require_bun()

REPO_STATS = JS_TOOLS / "repo_stats.ts"
# The original document, where a checkout keeps it beside the project (absent elsewhere: that test skips).
SEED_DOCS = [ROOT.parent / "shared" / "seed" / "custom-tools.es.txt", Path("/work/shared/seed/custom-tools.es.txt")]
FIRST_LINE = 'import type { CustomToolFactory } from "@f5-sales-demo/xcsh";'
LAST_LINE = "export default factory;"
TRACKED = ("a.py", "b.py", "notes.txt", "pkg/c.py")
SCANNING = {"content": [{"type": "text", "text": "Scanning files..."}], "details": {"phase": "scan"}}


def module_contract_example(document: str) -> str:
    """The example of the document's "Contrato del módulo" section: its first import to its default export."""
    section = document.index("Contrato del módulo")
    start = document.index(FIRST_LINE, section)
    end = document.index(LAST_LINE, start) + len(LAST_LINE)
    return document[start:end]


@pytest.fixture
def ts_repo(tmp_path: Path) -> Path:
    """A git repository with the original repo_stats.ts in .xcsh/tools and a few tracked files."""
    repo = tmp_path / "repo"
    copy_tool("repo_stats.ts", repo / ".xcsh" / "tools")
    copy_tool("session_probe.ts", repo / ".xcsh" / "tools")
    (repo / "pkg").mkdir()
    for name in TRACKED:
        (repo / name).write_text("x = 1\n")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env, timeout=30)
    subprocess.run(["git", "add", *TRACKED], cwd=repo, check=True, env=env, timeout=30)
    return repo


def xcsh_run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def text_of(result: mcp_types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


# --- the fixture is the original, character for character ---------------------------------------


def test_the_fixture_is_the_documents_example_character_for_character() -> None:
    document = next((p for p in SEED_DOCS if p.is_file()), None)
    if document is None:
        pytest.skip(f"the original document is not at hand here (looked at {', '.join(map(str, SEED_DOCS))})")
    example = module_contract_example(document.read_text(encoding="utf-8"))
    assert REPO_STATS.read_text(encoding="utf-8") == example + "\n"
    # What the rest of this file relies on: the untouched original, type-only import included.
    assert example.startswith(FIRST_LINE) and 'pi.exec("git", ["ls-files"' in example


def test_the_guide_shows_the_same_example() -> None:
    guide = (ROOT / "docs" / "typescript.md").read_text(encoding="utf-8")
    start = guide.index("```ts\n") + len("```ts\n")
    assert guide[start : guide.index("```", start)] == REPO_STATS.read_text(encoding="utf-8")


# --- the CLI -------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_the_cli_runs_it_as_its_documentation_writes_it(ts_repo: Path) -> None:
    proc = xcsh_run("repo_stats", "--args", '{"glob":"*.py"}', cwd=ts_repo)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Found 3 files\n"


@pytest.mark.timeout(90)
def test_the_cli_json_and_stream_outputs(ts_repo: Path) -> None:
    proc = xcsh_run("repo_stats", "--args", '{"glob":"*.py"}', "--json", cwd=ts_repo)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "content": [{"type": "text", "text": "Found 3 files"}],
        "details": {"count": 3, "sample": ["a.py", "b.py", "pkg/c.py"]},
        "is_error": False,
        "error": None,
    }
    proc = xcsh_run("repo_stats", "--args", '{"glob":"*.txt"}', "--stream", cwd=ts_repo)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["update", "result"]
    assert lines[0]["details"] == {"phase": "scan"}
    assert lines[1]["details"] == {"count": 1, "sample": ["notes.txt"]}


@pytest.mark.timeout(90)
def test_the_cli_lists_and_describes_it_from_its_typebox_schema(ts_repo: Path) -> None:
    listed = xcsh_run("list", cwd=ts_repo)
    assert listed.returncode == 0, listed.stderr
    assert "repo_stats" in listed.stdout and "repo_stats.ts" in listed.stdout
    described = xcsh_run("describe", "repo_stats", cwd=ts_repo)
    assert described.returncode == 0, described.stderr
    out = json.loads(described.stdout)
    assert out["parameters"]["properties"]["glob"] == {"type": "string", "default": "**/*.ts"}


@pytest.mark.timeout(90)
def test_schema_violations_are_refused_in_the_host(ts_repo: Path) -> None:
    proc = xcsh_run("repo_stats", "--args", '{"glob": 5}', "--json", cwd=ts_repo)
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["kind"] == "invalid_arguments", error
    assert "glob" in error["message"]


@needs_strict
@pytest.mark.timeout(90)
def test_it_runs_under_strict_with_git_allowed(ts_repo: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    args = ("repo_stats", "--args", '{"glob": "*.py"}', "--sandbox", "strict")
    allowed = xcsh_run(*args, "--allow-exec", "git", "--allow-env", "GIT_CONFIG_NOSYSTEM", cwd=ts_repo, env=env)
    assert allowed.stdout == "Found 3 files\n", allowed.stderr
    # Without the grant git may not run: exec rejects, and the tool's own message says so.
    refused = xcsh_run(*args, "--json", cwd=ts_repo, env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["kind"] == "tool_error", error
    assert "git" in error["message"], error


# --- the embedding API ---------------------------------------------------------------------------


async def test_the_embedding_api_runs_it_with_its_updates(ts_repo: Path) -> None:
    seen: list[Any] = []
    with trio.fail_after(60):
        async with make_runner(cwd=ts_repo) as runner:
            info = runner.get_tool("repo_stats")
            result = await runner.call_tool("repo_stats", {"glob": "*.py"}, on_update=seen.append)
            default = await runner.call_tool("repo_stats")
            invalid = await runner.call_tool("repo_stats", {"glob": ["*.py"]})
    assert info is not None
    assert (info.label, info.description) == ("Repo Stats", "Counts tracked TypeScript files")
    assert info.module == str(ts_repo / ".xcsh" / "tools" / "repo_stats.ts")
    assert info.source.provider == "native"
    assert info.params_kind == "json_schema" and info.has_on_session
    assert info.parameters["properties"]["glob"] == {"type": "string", "default": "**/*.ts"}
    assert seen == [SCANNING]
    assert not result.is_error, result
    assert result.text == "Found 3 files"
    assert result.details == {"count": 3, "sample": ["a.py", "b.py", "pkg/c.py"]}
    assert default.text == "Found 0 files"  # the schema's default glob, **/*.ts: nothing of that kind is tracked
    assert invalid.kind == "invalid_arguments" and "glob" in invalid.text


@pytest.mark.timeout(60)
def test_the_blocking_faces_run_it(ts_repo: Path) -> None:
    """The blocking runner and run_tool_sync, as a non-async host uses them."""
    seen: list[Any] = []
    with open_blocking_runner(cwd=str(ts_repo), spare_workers=0) as runner:
        result = runner.call_tool("repo_stats", {"glob": "*.py"}, on_update=seen.append)
    assert result.text == "Found 3 files" and seen == [SCANNING]
    one = run_tool_sync("repo_stats", {"glob": "*.txt"}, cwd=str(ts_repo), spare_workers=0)
    assert one.text == "Found 1 files" and one.details == {"count": 1, "sample": ["notes.txt"]}


async def test_the_shutdown_session_event_reaches_on_session(ts_repo: Path) -> None:
    log = ts_repo / "session-events.log"
    with trio.fail_after(60):
        async with make_runner(cwd=ts_repo) as runner:
            first = await runner.call_tool("session_probe")
            warnings = await runner.emit_session_event({"reason": "start", "previousSessionFile": None})
            again = await runner.call_tool("session_probe")
            # repo_stats has an onSession hook too: its live worker is owed `shutdown` as well.
            assert (await runner.call_tool("repo_stats", {"glob": "*.py"})).text == "Found 3 files"
        # Closing the runner delivered `shutdown` to the live worker before ending it.
    assert warnings == []
    pid = first.text.removeprefix("pid ")
    assert again.text == first.text, "the idle worker is reused"
    # The worker's own `start` before its first call of the session, the host's, then `shutdown`.
    assert log.read_text().splitlines() == [f"start {pid}", f"start {pid}", f"shutdown {pid}"]


async def test_a_sandbox_level_applies_to_the_bun_worker(ts_repo: Path) -> None:
    """`none` and `contained` run the same tool with the same result (strict: the CLI test above)."""
    with trio.fail_after(60):
        for level in ("none", "contained"):
            async with make_runner(cwd=ts_repo, sandbox=SandboxPolicy(level=level)) as runner:
                result = await runner.call_tool("repo_stats", {"glob": "*.py"})
            assert result.text == "Found 3 files", (level, result)


# --- xcsh-run serve ------------------------------------------------------------------------------


async def test_serve_lists_and_calls_it(ts_repo: Path, transport: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ts_repo)  # the server's cwd: the tool's pi.cwd, where git runs
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if message is not None:
            messages.append(message)

    with trio.fail_after(DEADLINE * 2):
        async with open_session(transport, str(ts_repo / ".xcsh" / "tools" / "repo_stats.ts")) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            result = await s.call_tool("repo_stats", {"glob": "*.py"}, progress_callback=on_progress)
            refused = await s.call_tool("repo_stats", {"glob": 7})
    listed = tools["repo_stats"]
    assert listed.title == "Repo Stats"
    assert listed.description == "Counts tracked TypeScript files"
    schema = listed.input_schema
    assert schema["type"] == "object"
    assert schema["properties"]["glob"] == {"type": "string", "default": "**/*.ts"}
    assert "required" not in schema or schema["required"] == []
    assert not result.is_error, result
    assert text_of(result) == "Found 3 files"
    assert result.structured_content == {"count": 3, "sample": ["a.py", "b.py", "pkg/c.py"]}
    assert messages == ["Scanning files..."]
    assert refused.is_error
    assert refused.meta is not None and refused.meta["xcsh-run/error"]["kind"] == "invalid_arguments"
    assert text_of(refused) == "repo_stats: invalid arguments: at $.glob: expected a string, got 7"
