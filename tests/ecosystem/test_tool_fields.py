"""Tool fields of pi-mono and oh-my-pi tools: the 3-argument ``renderCall``, ``approval``, and fields reported unused.

Each tool is written in oh-my-pi's custom-tool style (``tests/fixtures/ecosystem/fields``)
and runs unchanged at ``contained`` and ``strict`` from the CLI, the embedding API and MCP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp.types as mcp_types
import pytest
import trio

from tests._support.faces import FACES, LEVELS, open_face
from tests.conftest import XCSH_RUN

FIELDS = Path(__file__).resolve().parents[1] / "fixtures" / "ecosystem" / "fields"
RENDER, FIELDED, GUARDED = (str(FIELDS / name) for name in ("render.ts", "fielded.ts", "guarded.ts"))
DEADLINE = 120


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The tools' working directory, writable under strict, and empty but for what they write."""
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.mark.parametrize("level", LEVELS)
async def test_render_call_takes_either_signature(level: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_face("embed", level, RENDER) as f:
            three = await f._runner.render_call("shout", {"text": "hi"})
            two = await f._runner.render_call("whisper", {"text": "HI"})
            called = await f.call("shout", {"text": "hi"})
    assert three == "shout hi (collapsed, partial=false, theme=object)"
    assert two == "whisper HI (theme=object)"
    assert (called.is_error, called.text) == (False, "HI")


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_tools_with_render_hooks_run_on_every_face(face: str, level: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_face(face, level, RENDER) as f:
            loud = await f.call("shout", {"text": "abc"})
            quiet = await f.call("whisper", {"text": "ABC"})
    assert (loud.is_error, loud.text, quiet.is_error, quiet.text) == (False, "ABC", False, "abc")


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_fields_of_other_hosts_are_reported_and_the_tool_runs(face: str, level: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_face(face, level, FIELDED) as f:
            found = await f.call("lookup", {"word": "pipe"})
            missing = await f.call("lookup", {"word": "spoon"})
            warnings = f._runner.warnings if face == "embed" else None
    assert (found.is_error, found.text) == (False, "a channel for data")
    assert missing.is_error and "no entry for spoon" in missing.text
    if warnings is not None:
        notes = [w for w in warnings if "lookup" in w]
        assert len(notes) == 1, warnings
        assert "strict, loadMode, mcpServerName, mcpToolName" in notes[0] and "ignored" in notes[0]


@pytest.mark.parametrize("level", LEVELS)
async def test_list_shows_the_unused_fields_once(level: str) -> None:
    with trio.fail_after(DEADLINE):
        done = await trio.run_process(
            [XCSH_RUN, "list", "--tools", FIELDED, "--sandbox", level], capture_stdout=True, capture_stderr=True,
            check=False, stdin=b"",
        )  # fmt: skip
    output = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, output
    assert "lookup" in done.stdout.decode()
    assert output.count("sets strict, loadMode, mcpServerName, mcpToolName") == 1, output


class ScriptedUI:
    """An embedding host's UI: answers ``confirm`` as told and records what it was shown."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[tuple[str, str]] = []

    async def confirm(self, title: str, message: str) -> bool:
        self.asked.append((title, message))
        return self.answer


@pytest.mark.parametrize("level", LEVELS)
async def test_embedding_ui_confirm_approves_or_refuses(level: str, project: Path) -> None:
    yes, no = ScriptedUI(True), ScriptedUI(False)
    with trio.fail_after(DEADLINE):
        async with open_face("embed", level, GUARDED, cwd=str(project), allow_write=[str(project)]) as f:
            headless = await f.call("note_write", {"file": "a.txt", "text": "one"})
            f._runner.set_ui_context(no)
            refused = await f.call("note_write", {"file": "b.txt", "text": "two"})
            f._runner.set_ui_context(yes)
            approved = await f.call("note_write", {"file": "c.txt", "text": "three"})
            counted = await f.call("note_count", {"action": "count", "text": "abcd"})
            reset = await f.call("note_count", {"action": "reset", "text": ""})
    assert headless.is_error and headless.text.startswith("approval denied") and "no UI" in headless.text
    assert refused.is_error and refused.text.startswith("approval denied")
    assert no.asked == [("Allow Write note (write)?", "Path: b.txt\nContent: two")]
    assert (approved.is_error, approved.text) == (False, "wrote c.txt")
    assert sorted(p.name for p in project.glob("*.txt")) == ["c.txt"]
    # A per-call tier: "read" asks nothing, "exec" asks with the tool's reason.
    assert (counted.is_error, counted.text, reset.is_error, reset.text) == (False, "count:4", False, "reset:0")
    assert yes.asked == [
        ("Allow Write note (write)?", "Path: c.txt\nContent: three"),
        ("Allow Count notes (exec)?", "resets the counter"),
    ]


@pytest.mark.parametrize("level", LEVELS)
async def test_embedding_approve_option_runs_without_asking(level: str, project: Path) -> None:
    ui = ScriptedUI(False)
    with trio.fail_after(DEADLINE):
        async with open_face("embed", level, GUARDED, cwd=str(project), allow_write=[str(project)], approve=True) as f:
            f._runner.set_ui_context(ui)
            done = await f.call("note_write", {"file": "a.txt", "text": "one"})
    assert (done.is_error, done.text, ui.asked) == (False, "wrote a.txt", [])
    assert (project / "a.txt").read_text() == "one"


@pytest.mark.parametrize("level", LEVELS)
async def test_mcp_elicitation_accepts_and_declines(level: str, project: Path) -> None:
    asked: list[mcp_types.ElicitRequestParams] = []
    script = [
        mcp_types.ElicitResult(action="accept", content={"confirm": True}),
        mcp_types.ElicitResult(action="decline"),
    ]

    async def on_elicit(ctx: Any, params: mcp_types.ElicitRequestParams) -> Any:
        asked.append(params)
        return script.pop(0)

    callbacks = {"elicitation_callback": on_elicit}
    with trio.fail_after(DEADLINE):
        async with open_face(
            "mcp", level, GUARDED, cwd=str(project), allow_write=[str(project)], mcp_callbacks=callbacks
        ) as f:
            accepted = await f.call("note_write", {"file": "a.txt", "text": "one"})
            declined = await f.call("note_write", {"file": "b.txt", "text": "two"})
    assert (accepted.is_error, accepted.text) == (False, "wrote a.txt")
    assert declined.is_error and declined.text.startswith(("approval denied", "note_write: approval denied"))
    assert [a.message for a in asked] == ["Path: a.txt\nContent: one", "Path: b.txt\nContent: two"]
    assert sorted(p.name for p in project.glob("*.txt")) == ["a.txt"]


@pytest.mark.parametrize("level", LEVELS)
async def test_mcp_without_elicitation_refuses_unless_approve(level: str, project: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with open_face("mcp", level, GUARDED, cwd=str(project), allow_write=[str(project)]) as f:
            refused = await f.call("note_write", {"file": "a.txt", "text": "one"})
        async with open_face(
            "mcp", level, GUARDED, cwd=str(project), allow_write=[str(project)], cli_options=("--approve",)
        ) as f:
            approved = await f.call("note_write", {"file": "b.txt", "text": "two"})
    assert refused.is_error and refused.text.startswith("note_write: approval denied")
    assert (approved.is_error, approved.text) == (False, "wrote b.txt")
    assert sorted(p.name for p in project.glob("*.txt")) == ["b.txt"]


@pytest.mark.parametrize("level", LEVELS)
async def test_cli_refuses_headless_and_runs_with_approve(level: str, project: Path) -> None:
    write = {"file": "a.txt", "text": "one"}
    with trio.fail_after(DEADLINE):
        async with open_face("cli", level, GUARDED, cwd=str(project), allow_write=[str(project)]) as f:
            refused = await f.call("note_write", write)
            read_only = await f.call("note_count", {"action": "count", "text": "abc"})
            reset = await f.call("note_count", {"action": "reset", "text": ""})
            assert not (project / "a.txt").exists()
        async with open_face(
            "cli", level, GUARDED, cwd=str(project), allow_write=[str(project)], cli_options=("--approve",)
        ) as f:
            approved = await f.call("note_write", write)
    assert refused.is_error and refused.exit_code != 0 and refused.text.startswith("approval denied"), refused
    assert (read_only.is_error, read_only.text, read_only.exit_code) == (False, "count:3", 0)
    assert reset.is_error and reset.exit_code != 0
    assert (approved.is_error, approved.text, approved.exit_code) == (False, "wrote a.txt", 0)
    assert (project / "a.txt").read_text() == "one"


GUARDED_PY = str(FIELDS / "guarded_py.py")


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_python_tools_declare_approval_alike(face: str, level: str, project: Path) -> None:
    ui = ScriptedUI(True)

    async def on_elicit(ctx: Any, params: mcp_types.ElicitRequestParams) -> Any:
        ui.asked.append(("", params.message))
        return mcp_types.ElicitResult(action="accept", content={"confirm": True})

    write = {"file": "p.txt", "text": "py"}
    with trio.fail_after(DEADLINE):
        async with open_face(
            face, level, GUARDED_PY, cwd=str(project), allow_write=[str(project)],
            mcp_callbacks={"elicitation_callback": on_elicit},
        ) as f:  # fmt: skip
            if face == "embed":
                f._runner.set_ui_context(ui)
            first = await f.call("py_note_write", write)
    if face == "cli":  # headless: refused, nothing written
        assert first.is_error and first.exit_code != 0 and first.text.startswith("approval denied"), first
        assert not (project / "p.txt").exists()
        return
    assert (first.is_error, first.text) == (False, "wrote p.txt")
    assert [message for _, message in ui.asked] == ["Path: p.txt\nContent: py"]
    assert (project / "p.txt").read_text() == "py"


async def test_serve_logs_the_unused_fields(project: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with open_face("mcp", "contained", FIELDED, cwd=str(project)) as f:
            found = await f.call("lookup", {"word": "fork"})
    assert (found.is_error, found.text) == (False, "a copy of a process")
    log = (project / "serve.log").read_text()
    assert log.count("sets strict, loadMode, mcpServerName, mcpToolName, which xcsh-run does not use") == 1, log


@pytest.mark.parametrize("level", LEVELS)
async def test_a_read_tier_with_a_prompt_policy_still_asks(level: str) -> None:
    no, yes = ScriptedUI(False), ScriptedUI(True)
    with trio.fail_after(DEADLINE):
        async with open_face("embed", level, str(FIELDS / "prompted.ts")) as f:
            f._runner.set_ui_context(no)
            refused = await f.call("peek", {"what": "notes"})
            f._runner.set_ui_context(yes)
            approved = await f.call("peek", {"what": "notes"})
    assert refused.is_error and refused.text.startswith("approval denied"), refused
    assert no.asked == [("Allow Peek (read)?", "reads private notes")]
    assert (approved.is_error, approved.text) == (False, "peeked at notes")
