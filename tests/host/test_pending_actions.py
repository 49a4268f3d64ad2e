"""``pending_actions()`` gives typed previews with ids, and ``resolve`` settles the one a host chooses.

Two tools, each in a module (so a worker) of its own, leave one preview
each. The host sees them as ``PendingAction`` records: the name each tool
gave (``source_tool_name``, as it spelt it), the call that pushed it, and an
id that stays the same while it waits and differs between the two, although
each worker numbers its own actions from one. ``resolve`` with an id applies
that one and leaves the other waiting, unchanged; an id that waits no more
is an error that lists what does. The CLI settles each preview by its id.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import trio

from tests.conftest import XCSH_RUN, make_runner
from xcsh_run import PendingAction, open_blocking_runner

STAGER = """
from xcsh_run.pi import CustomTool


def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        path = params["path"]

        def apply(reason):
            with open(path, "a") as out:
                out.write(f"{NAME}: {{reason}}\\n")
            return f"{NAME} applied ({{reason}})"

        for n in range(params.get("count", 1)):
            api.push_pending_action(
                {{"label": f"{NAME} #{{n}} writes {{path}}", "apply": apply, "details": {{"n": n}},
                 "source_tool_name": "{SOURCE}"}}
            )
        return "staged"

    return [CustomTool(name="{NAME}", description="stages a write", parameters={{"type": "object"}}, execute=execute)]
"""


def stagers(tmp_path: Path) -> list[Path]:
    modules = []
    for name, source in (("stage_note", "notes_editor"), ("stage_line", "line_editor")):
        module = tmp_path / f"{name}.py"
        module.write_text(STAGER.format(NAME=name, SOURCE=source))
        modules.append(module)
    return modules


async def test_a_host_resolves_the_preview_it_chooses_by_id(tmp_path: Path) -> None:
    notes, lines = tmp_path / "notes.txt", tmp_path / "lines.txt"
    with trio.fail_after(60):
        async with make_runner(*stagers(tmp_path)) as runner:
            assert (await runner.call_tool("stage_note", {"path": str(notes)}, tool_call_id="c-note")).text == "staged"
            assert (await runner.call_tool("stage_line", {"path": str(lines)}, tool_call_id="c-line")).text == "staged"
            first, second = runner.pending_actions()
            assert all(isinstance(action, PendingAction) for action in (first, second))
            assert (first.label, first.source_tool_name, first.details, first.call_id) == (
                f"stage_note #0 writes {notes}", "notes_editor", {"n": 0}, "c-note",
            )  # fmt: skip
            assert (second.source_tool_name, second.call_id) == ("line_editor", "c-line")
            assert first.id != second.id  # both workers call theirs "a1"
            assert runner.pending_actions() == [first, second]  # the same ids, asked again

            # The older one, which `resolve` without an id would not take.
            applied = await runner.call_tool("resolve", {"action": "apply", "reason": "chosen", "id": first.id})
            assert not applied.is_error, applied.text
            assert applied.text == "stage_note applied (chosen)"
            assert applied.details["id"] == first.id and applied.details["sourceToolName"] == "notes_editor"
            assert notes.read_text() == "stage_note: chosen\n" and not lines.exists()
            assert runner.pending_actions() == [second]

            gone = await runner.call_tool("resolve", {"action": "apply", "reason": "again", "id": first.id})
            assert gone.kind == "tool_error"
            assert f"No pending action has the id {first.id!r}" in gone.text and repr(second.id) in gone.text
            wrong = await runner.call_tool("resolve", {"action": "apply", "reason": "?", "id": 7})
            assert wrong.kind == "invalid_arguments" and '"id"?: str' in wrong.text

            # The second by its id.
            discarded = await runner.call_tool("resolve", {"action": "discard", "reason": "later", "id": second.id})
            assert not discarded.is_error, discarded.text
            assert discarded.text == f"Discarded: stage_line #0 writes {lines}. Reason: later"
            assert runner.pending_actions() == [] and not lines.exists()


def test_the_blocking_face_lists_the_same_records(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    with open_blocking_runner([str(p) for p in stagers(tmp_path)], grace=0.5, spare_workers=0) as runner:
        runner.call_tool("stage_note", {"path": str(notes), "count": 2}, timeout=30)
        older, newer = runner.pending_actions()
        assert isinstance(older, PendingAction) and older.id != newer.id
        settled = runner.call_tool("resolve", {"action": "apply", "reason": "ok", "id": older.id}, timeout=30)
        assert settled.details["label"] == older.label
        assert runner.pending_actions() == [newer]
        assert runner.call_tool("resolve", {"action": "discard", "reason": "no"}, timeout=30).details["id"] == newer.id


def test_the_cli_settles_each_preview_a_call_left_by_its_id(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    note, _ = stagers(tmp_path)
    run = subprocess.run(
        [XCSH_RUN, "run", "stage_note", "--tools", str(note), "--args", f'{{"path": "{notes}", "count": 2}}',
         "--resolve", "apply", "--allow-write", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("resolve (apply): stage_note applied (xcsh-run --resolve)") == 2, run.stderr
    assert notes.read_text() == "stage_note: xcsh-run --resolve\n" * 2
