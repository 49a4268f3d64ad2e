"""Tools written against the agent's packages run unchanged: the packages resolve to what xcsh-run provides.

Each tool runs at every level from every face; the listing and rendering checks
use the embedding API, where the tool descriptions and render hooks are reachable.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests._support.faces import FACES, LEVELS, open_face
from xcsh_run import SandboxPolicy, open_runner

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "ecosystem" / "agent_packages"
WEATHER = str(HERE / "weather.ts")
COUNTER = str(HERE / "omp_counter.ts")
MISSING = str(HERE / "missing_name.ts")


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_a_pi_mono_factory_with_typebox_pi_ai_and_pi_tui(face: str, level: str, bun: str) -> None:
    with trio.fail_after(90):
        async with open_face(face, level, WEATHER) as f:
            good = await f.call("forecast", {"city": "Oslo", "unit": "celsius"})
            bad = await f.call("forecast", {"city": "Oslo", "unit": "kelvin"})
    assert (good.is_error, good.text, good.details) == (False, "Oslo: 21 celsius", {"city": "Oslo", "degrees": 21})
    assert bad.is_error and "kelvin" not in good.text


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_zod_and_arktype_schemas_validate_and_events_pass_between_tools(face: str, level: str, bun: str) -> None:
    with trio.fail_after(90):
        async with open_face(face, level, COUNTER) as f:
            counted = await f.call("count_words", {"text": "one two three", "mode": "words"})
            refused = await f.call("count_words", {"text": "x", "mode": "lines"})
            empty = await f.call("count_words", {"text": "", "mode": "words"})
            tally = await f.call("tally", {"label": "so far"})
            wrong = await f.call("tally", {"label": 3})
    assert (counted.is_error, counted.text) == (False, "3"), counted
    assert refused.is_error and empty.is_error and wrong.is_error, (refused, empty, wrong)
    # One worker holds the bus: the CLI starts one per call, the others keep it.
    assert tally.text == ("so far=0" if face == "cli" else "so far=3"), tally


async def test_the_listing_has_the_json_schemas_and_the_renderers_give_text(bun: str) -> None:
    with trio.fail_after(90):
        async with open_runner([WEATHER, COUNTER], sandbox=SandboxPolicy(level="strict")) as runner:
            tools = {t.name: t for t in runner.tools}
            call_text = await runner.render_call("forecast", {"city": "Rome", "unit": "fahrenheit"})
            result = await runner.call_tool("count_words", {"text": "a b", "mode": "words"})
            result_text = await runner.render_result("count_words", result, {})
    assert not runner.errors, runner.errors
    params = json.loads(json.dumps(tools["forecast"].parameters))
    assert params["properties"]["unit"] == {
        "type": "string",
        "enum": ["celsius", "fahrenheit"],
        "description": "Temperature unit",
    }
    zod = tools["count_words"].parameters
    assert zod["properties"]["mode"]["enum"] == ["words", "chars"] and zod["properties"]["text"]["minLength"] == 1
    assert sorted(zod["required"]) == ["mode", "text"] and "$schema" not in zod
    ark = tools["tally"].parameters
    assert ark["type"] == "object" and ark["properties"]["label"]["type"] == "string" and not ark.get("required")
    assert call_text == "forecast Rome\n\nunit fahrenheit", call_text
    assert result_text == "counted 2", result_text


@pytest.mark.parametrize("level", LEVELS)
async def test_a_name_the_stand_ins_lack_fails_with_what_they_provide(level: str, bun: str) -> None:
    with trio.fail_after(60):
        async with open_runner([MISSING], sandbox=SandboxPolicy(level=level)) as runner:
            errors = [e.message for e in runner.errors]
    assert len(errors) == 1, errors
    message = errors[0]
    assert "createAgentSession" in message and "@mariozechner/pi-coding-agent" in message, message
    assert "provided by xcsh-run as a stand-in" in message and "StringEnum" in message and "Text" in message, message


def _project_with_a_package(tmp_path: Path) -> tuple[Path, Path]:
    """A project (``.git`` marks it) with a tiny package in its node_modules and a tool two folders below."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    package = project / "node_modules" / "shout"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "shout", "version": "1.0.0", "main": "index.js"}))
    (package / "index.js").write_text("module.exports = { shout: (s) => s.toUpperCase() + '!' };\n")
    tool = project / "tools" / "loud" / "loud.ts"
    tool.parent.mkdir(parents=True)
    tool.write_text(
        'import { Type } from "@sinclair/typebox";\n'
        'import { shout } from "shout";\n'
        "export default () => ({\n"
        '  name: "loud", label: "Loud", description: "Shout a word",\n'
        "  parameters: Type.Object({ word: Type.String() }),\n"
        '  async execute(_id, p) { return { content: [{ type: "text", text: shout(p.word) }] }; },\n'
        "});\n"
    )
    return project, tool


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_a_tool_uses_its_own_node_modules_from_a_parent_folder(
    face: str, level: str, bun: str, tmp_path: Path
) -> None:
    project, tool = _project_with_a_package(tmp_path)
    with trio.fail_after(90):
        async with open_face(face, level, str(tool), cwd=str(project)) as f:
            answer = await f.call("loud", {"word": "hey"})
    assert (answer.is_error, answer.text) == (False, "HEY!"), answer


def test_a_tool_outside_the_project_reads_only_its_own_node_modules(tmp_path: Path) -> None:
    from xcsh_run._sandbox import tool_node_modules

    project, user = tmp_path / "project", tmp_path / "user" / "tools"
    for folder in (project, user / "greet" / "node_modules", user / "node_modules", project / "node_modules"):
        folder.mkdir(parents=True, exist_ok=True)
    (user / "greet" / "index.ts").write_text("export default () => []\n")
    inside = project / "tool.ts"
    inside.write_text("export default () => []\n")
    assert tool_node_modules(str(user / "greet"), str(project)) == [str(user / "greet" / "node_modules")]
    assert tool_node_modules(str(user / "greet" / "index.ts"), str(project)) == [str(user / "greet" / "node_modules")]
    assert tool_node_modules(str(inside), str(project)) == [str(project / "node_modules")]
