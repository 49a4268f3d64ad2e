"""``xcsh-run new NAME``: a working tool and its test, in the project's ``.xcsh/tools``.

Rules of the command:

1. **Where**: the project is the nearest folder, from the current one up,
   holding ``.xcsh`` (else ``.git``), as discovery finds it; with neither, the
   current folder.
2. **Nothing is overwritten**: an existing tool or test file is a usage error.
3. **A name discovery finds**: a Python identifier, not a keyword, not
   starting with ``_`` (discovery skips such files); anything else is a usage
   error that suggests a name that is (``my-tool``: ``my_tool``).
4. **What it prints works**: the command that tries the tool, unless the
   tool cannot run yet (a TypeScript tool without Bun): then a warning with
   the command that gets Bun, and the try for afterwards.
"""

from __future__ import annotations

import keyword
import os
import re
from pathlib import Path
from typing import Annotated

import typer

from xcsh_run._cli.app import app
from xcsh_run._cli.new_templates import TEMPLATES, TYPESCRIPT, render
from xcsh_run._cli.options import CwdOpt, fail
from xcsh_run._project import project_root


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a new tool's (rule 3), with a valid name to use instead; None if it can."""
    if not name:
        return "the tool name is empty; give one such as word_count"
    if name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_"):
        return None
    if keyword.iskeyword(name):
        why = "is a Python keyword"
    elif name.startswith("_") and name.isidentifier():
        why = "starts with _, and discovery skips the modules whose name does"
    else:
        why = "is not a Python identifier (letters, digits and _, starting with a letter)"
    suggestion = _suggest(name)
    hint = f"; did you mean {suggestion!r}?" if suggestion else "; give one such as word_count"
    return f"tool name {name!r} {why}{hint}"


def _suggest(name: str) -> str:
    """The nearest valid name: its runs of letters and digits joined by ``_``; ``tool_`` first if a digit leads."""
    suggestion = "_".join(re.findall(r"[^\W_]+", name))
    if suggestion[:1].isdigit():
        suggestion = f"tool_{suggestion}"
    if keyword.iskeyword(suggestion):
        suggestion = f"{suggestion}_tool"
    return suggestion if suggestion.isidentifier() else ""


@app.command("new")
def new_command(
    name: Annotated[str, typer.Argument(help="The tool's name: a Python identifier, e.g. word_freq.")],
    template: Annotated[
        str,
        typer.Option(
            "--template",
            "-t",
            help="What the tool shows: " + "; ".join(f"{key}: {t.about}" for key, t in TEMPLATES.items()) + ".",
        ),
    ] = "basic",
    ts: Annotated[
        bool, typer.Option("--ts", help="The basic tool in TypeScript, run by Bun (docs/typescript.md).")
    ] = False,
    cwd: CwdOpt = None,
) -> None:
    """Create a working tool in the project's .xcsh/tools, with a test that passes as generated.

    \b
    Exit codes:
      0  written (with a warning on stderr if the tool cannot run yet: a TypeScript tool without Bun)
      2  usage error: a name discovery would not find (a valid one is suggested), an unknown
         --template, or a tool or test file that already exists (nothing is written)
    """
    problem = name_problem(name)
    if problem is not None:
        fail(problem)
    if template not in TEMPLATES:
        fail(f"unknown --template {template!r}; the templates: {', '.join(TEMPLATES)}")
    if ts and template != "basic":
        fail(f"--ts writes the basic tool only; --template {template} is a Python template (drop --ts)")
    scaffold = TYPESCRIPT if ts else TEMPLATES[template]
    root = Path(project_root(os.getcwd()))
    tool = root / ".xcsh" / "tools" / f"{name}{'.ts' if ts else '.py'}"
    test = root / "tests" / f"test_{name}.py"
    existing = [str(path) for path in (tool, test) if path.exists()]
    if existing:
        fail(f"{' and '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; nothing was written")
    label = name.replace("_", " ").capitalize()
    for path, text in ((tool, scaffold.tool), (test, scaffold.test)):
        path.parent.mkdir(parents=True, exist_ok=True)
        # "x": never clobber a file that appeared since the check above.
        with open(path, "x", encoding="utf-8") as f:
            f.write(render(text, name=name, label=label))
        typer.echo(f"created {path}")
    from xcsh_run.fuzz import COMMANDS

    run = f"xcsh-run run {name}" if name in COMMANDS else f"xcsh-run {name}"
    flags = render(scaffold.try_flags, tool=os.path.relpath(tool))
    tried = f"{run} {flags}    (and: {run} --help)"
    tested = f"python -m pytest {os.path.relpath(test)}"
    blocker = _cannot_run_yet(tool) if ts else None
    if blocker is None:
        typer.echo(f"try: {tried}")
        typer.echo(f"test: {tested}")
        return
    typer.echo(f"xcsh-run: warning: {blocker}", err=True)
    typer.echo(f"then try: {tried}")
    typer.echo(f"and test: {tested}")


def _cannot_run_yet(tool: Path) -> str | None:
    """Why a TypeScript tool would fail to load here (no Bun is found), with how to get one; None if it loads."""
    from xcsh_run._discovery import locate, missing

    if locate() is not None:
        return None
    return f"{tool.name} cannot load yet: {missing()}"
