"""``xcsh-run new NAME``: a working tool and its test, in the project's ``.xcsh/tools``.

The project is the nearest folder, from the current one up, holding ``.xcsh``
(else ``.git``), as discovery finds it; with neither, the current folder.
Nothing is overwritten: an existing tool or test file is a usage error.
"""

from __future__ import annotations

import keyword
import os
from pathlib import Path
from typing import Annotated

import typer

from xcsh_run._cli.app import app
from xcsh_run._cli.options import CwdOpt, fail
from xcsh_run._project import project_root

PY_TOOL = '''"""{name}: a tool for xcsh-run.

Run it: xcsh-run {name} --text hello --repeat 2; its flags: xcsh-run {name} --help.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from xcsh_run.pi import CustomTool, ToolResult


class Params(msgspec.Struct, forbid_unknown_fields=True):
    """The arguments, checked in the worker before execute runs; flags and --help come from them."""

    text: Annotated[str, msgspec.Meta(description="The text to echo.")]
    repeat: Annotated[int, msgspec.Meta(ge=1, le=10, description="How many times.")] = 1


def factory(api: object) -> CustomTool:
    def execute(tool_call_id: str, params: Params, on_update: object, ctx: object, signal: object) -> ToolResult:
        text = " ".join([params.text] * params.repeat)
        return ToolResult(content=[{{"type": "text", "text": text}}], details={{"length": len(text)}})

    return CustomTool(
        name="{name}",
        label="{label}",
        description="Echo a text, repeated. (Say here what the tool does: this is what the model reads.)",
        parameters=Params,
        execute=execute,
    )
'''

PY_TEST = '''"""Tests of the {name} tool: a call through a real worker, then fuzzing with arguments from its schema."""

from pathlib import Path

from xcsh_run import assert_fuzz_clean, run_tool_sync

TOOL = str(Path(__file__).resolve().parent.parent / ".xcsh" / "tools" / "{name}.py")


def test_{name}_echoes() -> None:
    result = run_tool_sync("{name}", {{"text": "hi", "repeat": 2}}, tool_paths=[TOOL], timeout=30)
    assert not result.is_error, result.error
    assert result.text == "hi hi"
    assert result.details == {{"length": 5}}


def test_{name}_survives_fuzzing() -> None:
    assert_fuzz_clean("{name}", tool_paths=[TOOL], examples=30, seed=0)
'''

TS_TOOL = """// {name}: a TypeScript tool, run by Bun in its own sandboxed worker (docs/typescript.md).
// The factory gets the tool API (`pi`); the schema is TypeBox, validated by the host as JSON Schema.
// The type-only import below is erased when Bun loads the file: nothing needs to be installed for it.
import type {{ CustomToolFactory }} from "@f5-sales-demo/xcsh";

const factory: CustomToolFactory = (pi) => ({{
  name: "{name}",
  label: "{label}",
  description: "Echo a text, repeated. (Say here what the tool does: this is what the model reads.)",
  parameters: pi.typebox.Type.Object({{
    text: pi.typebox.Type.String({{ description: "The text to echo." }}),
    repeat: pi.typebox.Type.Optional(pi.typebox.Type.Integer({{ minimum: 1, maximum: 10, default: 1 }})),
  }}),
  async execute(toolCallId, params, onUpdate, ctx, signal) {{
    const text = Array(params.repeat ?? 1).fill(params.text).join(" ");
    return {{ content: [{{ type: "text", text }}], details: {{ length: text.length }} }};
  }},
}});

export default factory;
"""

TS_TEST = PY_TEST.replace('"{name}.py"', '"{name}.ts"')
"""The Python test runs the TypeScript tool as users will: through xcsh-run, its worker and its sandbox."""


@app.command("new")
def new_command(
    name: Annotated[str, typer.Argument(help="The tool's name: a Python identifier, e.g. word_freq.")],
    ts: Annotated[bool, typer.Option("--ts", help="A TypeScript tool, run by Bun (docs/typescript.md).")] = False,
    cwd: CwdOpt = None,
) -> None:
    """Create a working tool in the project's .xcsh/tools, with a test that passes as generated."""
    if not name.isidentifier() or keyword.iskeyword(name):
        fail(f"tool name {name!r} is not a Python identifier (letters, digits and _, not starting with a digit)")
    root = Path(project_root(os.getcwd()))
    suffix = ".ts" if ts else ".py"
    tool = root / ".xcsh" / "tools" / f"{name}{suffix}"
    test = root / "tests" / f"test_{name}.py"
    existing = [str(path) for path in (tool, test) if path.exists()]
    if existing:
        fail(f"{' and '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; nothing was written")
    label = name.replace("_", " ").capitalize()
    texts = (TS_TOOL, TS_TEST) if ts else (PY_TOOL, PY_TEST)
    for path, text in zip((tool, test), texts, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        # "x": never clobber a file that appeared since the check above.
        with open(path, "x", encoding="utf-8") as f:
            f.write(text.format(name=name, label=label))
        typer.echo(f"created {path}")
    from xcsh_run.fuzz import COMMANDS

    run = f"xcsh-run run {name}" if name in COMMANDS else f"xcsh-run {name}"
    typer.echo(f"try: {run} --text hello --repeat 2    (and: {run} --help)")
    typer.echo(f"test: python -m pytest {test.relative_to(root)}")
