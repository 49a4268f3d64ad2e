"""Flags made from a tool's schema: ``xcsh-run word_freq --top 3``, and ``xcsh-run TOOL --help``.

Each top-level property of the tool's parameters becomes ``--NAME`` (and
``--NA-ME`` for a name with ``_``), typed by its schema: integer, number,
string, an enum (checked, choices listed), boolean (``--NAME``/``--no-NAME``),
an array of scalars (the flag repeated), anything else a JSON value. A
property whose flag is already a run option (``--timeout``) is reachable only
through ``--args``. Given both ways, a field's flag wins over ``--args``.

The schema comes from discovery (the module cache answers without a worker
when nothing changed), before the flags are parsed. A value the tool's schema
then refuses is reported by the flag that carried it (:func:`name_flags`).

A tool file given as TOOL (``xcsh-run path/to/tool.py``) is found here
too (``tool_file``, ``pick_tool``): its numbered rules head that section.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final, NoReturn

import msgspec
import typer

from xcsh_run._cli.app import open_cli_runner, run_main
from xcsh_run._cli.options import ExitCode, fail, fail_arguments
from xcsh_run._cli.output import print_text, warn
from xcsh_run._cli.tool_schema import Field, fields_of, split_reserved
from xcsh_run._host import Signals
from xcsh_run._results import ToolResult
from xcsh_run._safe_text import json_text, visible
from xcsh_run._sandbox import SandboxPolicy


def _convert(field: Field, kind: str, flag: str, text: str, as_json: bool) -> Any:
    if kind == "enum":
        for choice in field.choices or ():
            if text == (choice if isinstance(choice, str) else json.dumps(choice)):
                return choice
        fail_arguments(f"{flag}: {text!r} is not one of the choices: {_choices(field.choices)}", as_json)
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)
        if kind == "boolean":
            lowered = text.lower()
            if lowered in ("true", "1", "yes", "on", "false", "0", "no", "off"):
                return lowered in ("true", "1", "yes", "on")
            raise ValueError(text)
        if kind == "json":
            return json.loads(text)
    except ValueError:
        what = {"integer": "an integer", "number": "a number", "boolean": "true or false"}.get(kind, "a JSON value")
        fail_arguments(f"{flag} expects {what}, got {text!r}", as_json)
    return text


def _choices(choices: Sequence[Any] | None) -> str:
    return ", ".join(c if isinstance(c, str) else json.dumps(c) for c in choices or ())


def _unknown(token: str, fields: Sequence[Field], run_options: Iterable[str], as_json: bool) -> NoReturn:
    flag = token.split("=", 1)[0]
    known = [f for field in fields for f in field.flags] + [f"--no-{f.flag[2:]}" for f in fields if f.kind == "boolean"]
    close = difflib.get_close_matches(flag, [*known, *run_options], n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    fail_arguments(f"No such option: {flag}{hint}; `xcsh-run TOOL --help` lists the tool's flags", as_json)


def parse_field_flags(
    tokens: Sequence[str], fields: Sequence[Field], run_options: Iterable[str], as_json: bool
) -> dict[str, Any]:
    """The arguments the flags in ``tokens`` (what the run options left) give."""
    by_flag = {flag: f for f in fields for flag in f.flags}
    negated = {f"--no-{f.flag[2:]}": f for f in fields if f.kind == "boolean"}
    negated.update({f"--no-{f.name}": f for f in fields if f.kind == "boolean"})
    options = list(run_options)
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token.startswith("-") and not token.startswith("--") and len(token) > 1:
            _unknown(token, fields, options, as_json)  # no short flags: say which long ones are near
        if not token.startswith("--"):
            fail_arguments(
                f"unexpected argument {token!r}; a tool's arguments are --FLAG VALUE or --args JSON", as_json
            )
        flag, eq, inline = token.partition("=")
        if flag in negated and not eq:
            out[negated[flag].name] = False
            continue
        field = by_flag.get(flag)
        if field is None:
            _unknown(token, fields, options, as_json)
        if field.kind == "boolean" and not eq:
            out[field.name] = True
            continue
        if eq:
            text = inline
        elif i < len(tokens) and not tokens[i].startswith("--"):
            text = tokens[i]
            i += 1
        else:
            fail_arguments(f"{flag} needs a value", as_json)
        if field.kind == "array":
            out.setdefault(field.name, []).append(_convert(field, field.item or "string", flag, text, as_json))
        else:
            out[field.name] = _convert(field, field.kind, flag, text, as_json)
    return out


_METAVARS: Final = {"integer": "INTEGER", "number": "NUMBER", "string": "TEXT", "json": "JSON", "boolean": ""}
_LONGEST_CHOICES: Final = 40  # a longer list of choices is shown as CHOICE, the choices in the flag's help


def _metavar(field: Field) -> str:
    """``TEXT``, ``INTEGER``, ``NUMBER``, ``JSON``, ``[fast|slow]`` (an array: its item's)."""
    kind = field.item if field.kind == "array" else field.kind
    if kind == "enum":
        listed = "[" + "|".join(_choices(field.choices).split(", ")) + "]"
        return listed if len(listed) <= _LONGEST_CHOICES else "CHOICE"
    return _METAVARS.get(kind or "json", "JSON")


def _flag_help(field: Field) -> str:
    notes = []
    if field.kind == "array":
        notes.append("repeatable")
    if (field.kind == "enum" or field.item == "enum") and _metavar(field) == "CHOICE":
        notes.append(f"one of: {_choices(field.choices)}")
    if field.default is not msgspec.UNSET and field.default not in (None, [], {}):  # "nothing" says nothing
        shown = field.default if isinstance(field.default, str) else json.dumps(field.default, ensure_ascii=False)
        notes.append(f"default: {shown}")
    if field.required:
        notes.append("required")
    return "  ".join(filter(None, [field.description, f"[{'; '.join(notes)}]" if notes else ""]))


# The run options shown in a tool's help, briefly; `xcsh-run run --help` has every one at length.
_RUN_BRIEF: Final = {
    "--args": "The arguments as one JSON object ('-' reads stdin).",
    "--args-file": "The same, read from a file.",
    "--json": "Print the result as JSON, for programs.",
    "--stream": "Print each partial result, then the result, as NDJSON.",
    "--timeout": "Seconds before the call is stopped.",
    "--traceback": "Print the tool's traceback when it raises (-v does too).",
    "--verbose": "Show the tool's log records and output as they come.",
    "--tools": "Add a tool file or folder (repeatable).",
    "--cwd": "Run as if started in DIR.",
    "--sandbox": "How contained the tool is [default: contained].",
}


def tool_help(
    ctx: typer.Context, usage: str, info: Mapping[str, Any], fields: Sequence[Field], reserved: Sequence[Field]
) -> str:
    """``xcsh-run TOOL --help``: the tool's usage, label, description and flags, then the common run options.

    ``usage`` is the command line that runs the tool (``xcsh-run word_freq``).
    Every text of the tool's is shown with :func:`visible` before it is laid
    out: a CR or a C1 NEL it put in would break a line where none is meant.
    """
    formatter = ctx.make_formatter()
    formatter.write_usage(usage, "[OPTIONS]", prefix="Usage: ")
    label = visible(info.get("label") or "")
    description = visible(info.get("description") or "").strip()
    same = label.casefold().replace(" ", "_") == info["name"].casefold()
    for text in filter(None, ["" if same else label, description]):
        formatter.write_paragraph()
        formatter.write("".join(f"  {line}".rstrip() + "\n" for line in text.splitlines()))
    rows = []
    for field in fields:
        flag = f"{field.flag} / --no-{field.flag[2:]}" if field.kind == "boolean" else field.flag
        rows.append((visible(f"{flag} {_metavar(field)}".rstrip()), visible(_flag_help(field))))
    for field in reserved:
        said = f"Only through --args ({field.flag} is a run option). {field.description}"
        rows.append((visible(field.name), visible(said.rstrip())))
    with formatter.section("Options (the tool's parameters; or all of them as one object: --args JSON)"):
        if rows:
            formatter.write_dl(rows)
        else:
            formatter.write_text("(none)")
    brief = []
    for param in ctx.command.params:
        opt = next((o for o in param.opts if o in _RUN_BRIEF), None)
        record = param.get_help_record(ctx) if opt is not None else None
        if opt is not None and record is not None:
            brief.append((record[0], _RUN_BRIEF[opt]))
    with formatter.section("Run options (every tool's; `xcsh-run run --help` lists them all, with the limits)"):
        formatter.write_dl(brief)
    return formatter.getvalue()


def lookup_tool(
    tool: str | None,
    tools: Sequence[str],
    load_timeout: float,
    sandbox: SandboxPolicy,
    *,
    as_json: bool = False,
    source: str | None = None,
    shown: str = "",
    missing_fails: bool = False,
) -> tuple[dict[str, Any] | None, list[str]]:
    """The tool's description as the runner has it, and the warnings; no worker when the cache knows it.

    With ``source`` (a tool file, ``shown`` as the command line gave it), only
    ``tools`` are loaded, and the tool is the file's named ``tool``, else its
    only one (``tool_file``, rule 3).

    A tool no module defines ends the command as a run of it would: a module
    that failed to load and could define it is a ``load_error`` (exit 1, with
    the reason), else ``not_found`` (exit 2). The ``not_found`` is the
    caller's to report (None), unless ``missing_fails``: then it is a usage
    error with the run's own message, which names the tools close to ``tool``
    (did you mean ...?) or the known ones.
    """

    async def main(_: Signals) -> tuple[dict[str, Any] | None, list[str], ToolResult | None, str | None]:
        async with open_cli_runner(
            tools, load_timeout=load_timeout, sandbox=sandbox, wanted_tool=tool, spare_workers=0,
            discover_sources=source is None,
        ) as runner:  # fmt: skip
            if source is not None:
                picked, problem = pick_tool(runner.tools, runner.errors, source, shown, tool)
                info = picked
            else:
                info, problem = runner.get_tool(tool or ""), None
            if info is not None or problem is not None:
                return msgspec.to_builtins(info), runner.warnings, None, problem
            # No worker starts for a name no tool has: this is the same
            # `not_found` or `load_error` answer a run would get.
            return None, runner.warnings, await runner.call_tool(tool or _stem(source or ""), {}), None

    info, warnings, missing, problem = run_main(main)
    if problem is not None:
        warn(warnings)
        fail_arguments(problem, as_json)
    if missing is not None and missing.kind == "load_error":
        warn(warnings)
        if as_json:
            typer.echo(json_text(missing.to_json()))
        else:
            print_text(missing)
        raise typer.Exit(int(ExitCode.TOOL_ERROR))
    if missing is not None and missing.error is not None and missing_fails:
        warn(warnings)
        fail(missing.error.message)
    return info, warnings


def _stem(path: str) -> str:
    return os.path.basename(path).partition(".")[0]


def run_options(ctx: typer.Context) -> list[str]:
    """The long options of the run command: a tool's field with one of these names gets no flag."""
    names = [opt for param in ctx.command.params for opt in (*param.opts, *param.secondary_opts)]
    return [opt for opt in names if opt.startswith("--") and opt != "--xcsh-run-tool-help"]


def tool_flags(
    ctx: typer.Context,
    extra: Sequence[str],
    tool: str | None,
    tools: Sequence[str],
    load_timeout: float,
    sandbox: SandboxPolicy,
    *,
    as_json: bool,
    help: bool,
    source: str | None = None,
    shown: str = "",
) -> tuple[str, dict[str, Any]]:
    """The tool's name and the arguments its own flags in ``extra`` give; with ``help``, print its help and exit 0.

    ``source`` and ``shown``: a tool file, as :func:`lookup_tool` takes it.
    """
    options = run_options(ctx)
    info, warnings = lookup_tool(tool, tools, load_timeout, sandbox, as_json=as_json, source=source, shown=shown)
    if help or info is None:
        warn(warnings)  # otherwise the run, about to discover again, says them once
    if info is None:
        if source is not None:
            fail_arguments(f"{shown} defines no tool", as_json)
        if help:
            fail(f"no tool named {tool!r}; `xcsh-run list` shows the tools found, and why a module failed to load")
        flags = " ".join(arg for arg in extra if arg.startswith("--"))
        fail_arguments(
            f"no tool named {tool!r} to take {flags or ' '.join(extra)}; `xcsh-run list` shows the tools found",
            as_json,
        )
    fields, reserved = split_reserved(fields_of(info["parameters"]), options)
    if help:
        typer.echo(
            tool_help(ctx, usage_of(info["name"], shown if source is not None else None), info, fields, reserved)
        )
        raise typer.Exit(0)
    return info["name"], parse_field_flags(extra, fields, options, as_json)


def usage_of(name: str, file: str | None) -> str:
    """The command line that runs a tool: ``xcsh-run NAME`` (``run NAME`` for a command's name), or the file's."""
    from xcsh_run.fuzz import COMMANDS

    if file is not None:
        return f"xcsh-run {file}"
    return f"xcsh-run run {name}" if name in COMMANDS else f"xcsh-run {name}"


_LOCATION: Final = re.compile(r"(?: - at `\$[^`]*`| \(at \$[^)]*\))$")
_TOP_FIELD: Final = re.compile(r"^\$\.(?P<name>[^.\[]+)(?P<rest>.*)$")


def name_flags(
    result: ToolResult,
    parameters: Mapping[str, Any],
    options: Iterable[str],
    arguments: Mapping[str, Any],
    flagged: Collection[str],
    from_json: bool,
) -> ToolResult:
    """``result``, with an ``invalid_arguments`` message that names the flag a refused value came from.

    The tool's checker (msgspec in the worker, jsonschema in the host) names a
    JSON path: ``$.n``. A top-level field given as a flag (``flagged``) is
    named by its flag instead (``--n: ...``); a required field missing is its
    flag (``--path is required``) unless the arguments came from ``--args``
    alone (``from_json``). A value from ``--args`` keeps its JSON path, and
    ``error.path`` stays the JSON path for programs.
    """
    error = result.error
    if error is None or error.kind != "invalid_arguments" or (from_json and not flagged):
        return result
    fields = {f.name: f for f in split_reserved(fields_of(parameters), options)[0]}
    head, sep, text = error.message.partition(": ")
    if not sep or not head.startswith("invalid arguments for "):
        return result
    path = error.path or "$"
    top = _TOP_FIELD.match(path)
    if top is not None and top["name"] in flagged and top["name"] in fields:
        said = _LOCATION.sub("", text)
        if said.startswith("Expected") and not top["rest"]:  # msgspec's says what it expected, not what it got
            said += f", got {json.dumps(arguments.get(top['name']), ensure_ascii=False)}"
        named = f"{fields[top['name']].flag}: {said}" + (f" (at {path})" if top["rest"] else "")
    elif path == "$" and "required" in text:
        missing = [f.flag for f in fields.values() if f.required and f.name not in arguments]
        if not missing:
            return result
        named = f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required"
    else:
        return result
    message = f"{head}: {named}"
    content = [{"type": "text", "text": message}]
    return msgspec.structs.replace(result, content=content, error=msgspec.structs.replace(error, message=message))


# ------------------------------------------------- a tool file as TOOL
# A tool file as the TOOL argument: ``xcsh-run path/to/tool.py``, loaded alone, as ``uv run script.py`` runs a script.
#
# Rules:
#
# 1. The TOOL argument is a tool file when it ends in a tool module's suffix
#    (``.py``, ``.ts``, ``.js``, ``.mjs``) or holds a path separator. No tool
#    name can (a name is letters, digits, ``_`` and ``-``), so nothing else
#    changes meaning; such an argument that is not an existing file is a usage
#    error naming it.
# 2. The file is loaded alone: no project, user or plugin tools (``--tools``
#    paths still load beside it). The current directory stays the caller's.
# 3. The file's only tool runs. A file with several names the one to run as
#    the next argument (``xcsh-run tool.py NAME``); without it, the usage error
#    lists them with that command line. A file that failed to load is the run's
#    ``load_error``, with why.

TOOL_SUFFIXES: Final = (".py", ".ts", ".js", ".mjs")


def tool_file(argument: str) -> str | None:
    """The absolute path ``argument`` names as a tool file (rule 1), or None for a tool name."""
    separators = {os.sep, os.altsep or os.sep}
    if not (argument.endswith(TOOL_SUFFIXES) or separators.intersection(argument)):
        return None
    if os.path.isdir(argument):
        fail(f"{argument!r} is a folder; give the tool's file, or add the folder with --tools {argument}")
    if not os.path.isfile(argument):
        where = os.path.abspath(argument)
        fail(
            f"no such file: {argument!r} ({where}); a TOOL argument that ends in "
            f"{', '.join(TOOL_SUFFIXES)} or holds a '/' is a tool file to run"
        )
    return os.path.abspath(argument)


def name_argument(extra: Sequence[str]) -> tuple[str | None, list[str]]:
    """The tool's name, when the first word after the file is one (``xcsh-run tool.py NAME``), and the rest."""
    if extra and not extra[0].startswith("-"):
        return extra[0], list(extra[1:])
    return None, list(extra)


def pick_tool(
    tools: Sequence[Any], errors: Sequence[Any], path: str, shown: str, name: str | None
) -> tuple[Any | None, str | None]:
    """The file's tool named ``name``, else its only one (rule 3), or why there is none to run.

    ``tools`` and ``errors`` are the runner's (``ToolInfo``, ``LoadError``);
    ``shown`` is the file as the command line gave it. The answer is
    ``(tool, None)``; ``(None, problem)`` for several tools and no name, a name
    the file does not define, or no tool at all (a usage error); ``(None,
    None)`` when the file failed to load (a call then says why).
    It is called inside a runner's block, which must end before the command
    fails, so the problem is returned rather than raised.
    """
    real = os.path.realpath(path)
    own = [t for t in tools if os.path.realpath(t.module) == real]
    candidates = [t for t in own if t.name == name] if name is not None else [t for t in own if not t.hidden] or own
    if len(candidates) == 1:
        return candidates[0], None
    names = [t.name for t in own if not t.hidden] or [t.name for t in own]
    if name is not None and own:
        return None, f"{shown} defines no tool named {name!r}; its tools: {', '.join(names)}"
    if len(candidates) > 1:
        return None, (
            f"{shown} defines {len(names)} tools: {', '.join(names)}; name the one to run: "
            f"xcsh-run {shown} {names[0]} [OPTIONS]"
        )
    if any(os.path.realpath(e.path) == real for e in errors):
        return None, None
    return None, f"{shown} defines no tool (its factory returned none)"
