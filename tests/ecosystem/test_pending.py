"""A pending action pushed without ``deferrable`` is resolvable on every face and level.

Tools written for the original agent push previews without declaring
``deferrable``: the built-in ``resolve`` must exist all the same, apply or
discard the change in the worker that staged it, and the CLI (one call per
process) must settle it as ``--resolve`` says, failing (exit 3) when it cannot.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests._support.faces import FACES, LEVELS, Face, open_face

PENDING = Path(__file__).parents[1] / "fixtures" / "ecosystem" / "pending"
TOOLS = {"ts": ("stage_note", PENDING / "stage-note.ts"), "py": ("stage_line", PENDING / "stage_line.py")}
UNSETTLED = 3


def written(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


@pytest.mark.parametrize("kind", TOOLS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", ["embed", "mcp"])
async def test_resolve_applies_and_discards_a_preview_without_deferrable(
    face: str, level: str, kind: str, tmp_path: Path
) -> None:
    name, module = TOOLS[kind]
    kept, dropped = tmp_path / "kept.txt", tmp_path / "dropped.txt"
    with trio.fail_after(120):
        async with open_face(
            face, level, str(module), cli_options=("--allow-write", str(tmp_path)),
            policy={"extra_write_paths": (str(tmp_path),)},
        ) as f:  # fmt: skip
            if face == "mcp":
                assert "resolve" not in {t.name for t in (await f._session.list_tools()).tools}
            staged = await f.call(name, {"path": str(kept), "text": "hello"})
            assert not staged.is_error, staged.text
            assert written(kept) is None  # staged, not done
            if face == "mcp":  # listed while the action waits
                assert "resolve" in {t.name for t in (await f._session.list_tools()).tools}
            applied = await f.call("resolve", {"action": "apply", "reason": "approved"})
            assert not applied.is_error, applied.text
            assert "approved" in applied.text
            assert written(kept) is not None and written(kept).startswith("hello")  # type: ignore[union-attr]

            assert not (await f.call(name, {"path": str(dropped), "text": "no"})).is_error
            discarded = await f.call("resolve", {"action": "discard", "reason": "not now"})
            assert not discarded.is_error, discarded.text
            assert "not now" in discarded.text
            assert written(dropped) is None
            nothing = await f.call("resolve", {"action": "apply", "reason": "again"})
            assert nothing.is_error and "No pending action" in nothing.text


def cli(level: str, module: Path, tmp_path: Path, *options: str) -> Face:
    return Face("cli", level, (str(module),), ("--allow-write", str(tmp_path), *options))


@pytest.mark.parametrize("kind", TOOLS)
@pytest.mark.parametrize("level", LEVELS)
async def test_cli_settles_the_preview_as_told_and_fails_when_it_cannot(level: str, kind: str, tmp_path: Path) -> None:
    name, module = TOOLS[kind]
    paths = {mode: tmp_path / f"{mode}.txt" for mode in ("apply", "discard", "ask")}
    with trio.fail_after(180):
        answers = {
            mode: await cli(level, module, tmp_path, "--resolve", mode).call(name, {"path": str(path), "text": "x"})
            for mode, path in paths.items()
        }
    applied, discarded, asked = answers["apply"], answers["discard"], answers["ask"]
    assert (applied.exit_code, applied.is_error) == (0, False), applied.stderr
    assert "resolve (apply)" in applied.stderr
    assert written(paths["apply"]) is not None

    assert (discarded.exit_code, discarded.is_error) == (0, False), discarded.stderr
    assert "resolve (discard)" in discarded.stderr
    assert written(paths["discard"]) is None

    # stdin is not a terminal: nobody can be asked, so nothing is applied and the command fails.
    assert asked.exit_code == UNSETTLED, asked.stderr
    assert not asked.is_error  # the call itself worked; its change did not happen
    assert "--resolve ask needs a terminal" in asked.stderr
    assert "--resolve apply" in asked.stderr  # says how to settle it
    assert written(paths["ask"]) is None
    assert "no tool named" not in asked.stderr


async def test_cli_fails_when_applying_fails(tmp_path: Path) -> None:
    """``apply`` that raises (here: its folder is gone) leaves the change undone, and the command says so."""
    name, module = TOOLS["py"]
    target = tmp_path / "missing" / "x.txt"
    with trio.fail_after(60):
        answer = await cli("contained", module, tmp_path, "--resolve", "apply").call(
            name, {"path": str(target), "text": "x"}
        )
    assert answer.exit_code == UNSETTLED, answer.stderr
    assert "not settled: apply failed" in answer.stderr
    assert not target.exists()


@pytest.mark.parametrize("face", FACES)
async def test_resolve_exists_with_no_deferrable_tool(face: str) -> None:
    """Called with nothing waiting, ``resolve`` answers as itself, never as an unknown tool."""
    with trio.fail_after(60):
        async with open_face(face, "contained", str(TOOLS["py"][1])) as f:
            answer = await f.call("resolve", {"action": "apply", "reason": "r"})
    assert answer.is_error and "No pending action" in answer.text
    assert answer.exit_code in (None, 1)
