"""Flags made from a tool's schema: ``xcsh-run word_freq --top 3``, and ``xcsh-run TOOL --help``.

Each top-level property of the tool's parameters becomes ``--NAME`` (and
``--NA-ME`` for a name with ``_``), typed by its schema: integer, number,
string, an enum (checked, choices listed), boolean (``--NAME``/``--no-NAME``),
an array of scalars (the flag repeated), anything else a JSON value. A
property whose flag is already a run option (``--timeout``) is reachable only
through ``--args``. Given both ways, a field's flag wins over ``--args``.

The schema comes from discovery (the module cache answers without a worker
when nothing changed), before the flags are parsed.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NoReturn

import msgspec
import typer

from xcsh_run._cli.app import run_main
from xcsh_run._cli.options import ExitCode, fail, fail_arguments
from xcsh_run._cli.output import print_text, warn
from xcsh_run._host import Signals, open_runner
from xcsh_run._results import ToolResult
from xcsh_run._safe_text import json_text, visible
from xcsh_run._sandbox import SandboxPolicy

_SCALARS: Final = ("integer", "number", "string", "boolean")


class Field(msgspec.Struct, frozen=True):
    """One top-level property as a flag."""

    name: str  # the property's own name, the key in the arguments
    kind: str  # integer, number, string, boolean, enum, array, json
    item: str | None = None  # an array's item kind
    choices: list[Any] | None = None
    required: bool = False
    default: Any = msgspec.UNSET
    description: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.flag, "--" + self.name)))


def _resolve(schema: Any, root: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with a local ``$ref`` followed and an ``Optional``'s null alternative dropped."""
    for _ in range(8):  # a chain of refs, never a cycle
        if not isinstance(schema, dict):
            return {}
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part, {}) if isinstance(target, dict) else {}
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            continue
        alternatives = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(alternatives, list):
            real = [a for a in alternatives if not (isinstance(a, dict) and a.get("type") == "null")]
            if len(real) == 1:
                rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                schema = {**rest, **real[0]} if isinstance(real[0], dict) else rest
                continue
        return schema
    return {}


def _kind(schema: dict[str, Any]) -> str:
    if isinstance(schema.get("enum"), list):
        return "enum"
    if "const" in schema:
        return "enum"
    kind = schema.get("type")
    if isinstance(kind, list):
        real = [k for k in kind if k != "null"]
        kind = real[0] if len(real) == 1 else None
    return kind if kind in (*_SCALARS, "array") else "json"


def fields_of(parameters: Mapping[str, Any]) -> list[Field]:
    """The flags a tool's parameters schema gives, in its property order."""
    root = _resolve(parameters, parameters)
    properties = root.get("properties")
    if not isinstance(properties, dict):
        return []
    required = set(root.get("required") or ())
    out: list[Field] = []
    for name, raw in properties.items():
        schema = _resolve(raw, parameters)
        kind = _kind(schema)
        item = None
        choices = schema.get("enum") if kind == "enum" else None
        if kind == "enum" and choices is None:
            choices = [schema["const"]]
        if kind == "array":
            items = _resolve(schema.get("items"), parameters)
            item = _kind(items)
            if item == "enum":
                choices = items.get("enum") or [items.get("const")]
            elif item not in _SCALARS:
                kind, item = "json", None
        default = raw.get("default", schema.get("default", msgspec.UNSET)) if isinstance(raw, dict) else msgspec.UNSET
        description = str(schema.get("description") or (raw.get("description") if isinstance(raw, dict) else "") or "")
        out.append(Field(name, kind, item, choices, name in required, default, description))
    return out


def split_reserved(fields: Sequence[Field], run_options: Iterable[str]) -> tuple[list[Field], list[Field]]:
    """The fields that get flags, and those whose flag a run option already has (``--args`` only)."""
    taken = set(run_options)
    free = [f for f in fields if not taken.intersection(f.flags)]
    return free, [f for f in fields if taken.intersection(f.flags)]


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


def _type_label(field: Field) -> str:
    if field.kind == "enum":
        return "{" + "|".join(_choices(field.choices).split(", ")) + "}"
    if field.kind == "array":
        item = "{" + "|".join(_choices(field.choices).split(", ")) + "}" if field.item == "enum" else field.item
        return f"{item} (repeatable)"
    return {"json": "JSON", "boolean": ""}.get(field.kind, field.kind)


def tool_help(info: Mapping[str, Any], fields: Sequence[Field], reserved: Sequence[Field]) -> str:
    """A tool's description and its flags, for ``xcsh-run TOOL --help``."""
    lines = [f"xcsh-run {info['name']}: {info.get('label') or info['name']}", ""]
    # Shown before it is split: splitlines() would break it at a CR or a C1 NEL the tool put in.
    lines += [f"  {line}".rstrip() for line in visible(info.get("description") or "").strip().splitlines()]
    lines += ["", "Parameters (from the tool's schema; also given as one object with --args JSON):"]
    if not fields and not reserved:
        lines.append("  (none)")
    for field in fields:
        flag = f"{field.flag}/--no-{field.flag[2:]}" if field.kind == "boolean" else field.flag
        lines.append(f"  {flag} {_type_label(field)}".rstrip())
        notes = ["required"] if field.required else []
        if field.default is not msgspec.UNSET:
            notes.append(f"default: {json.dumps(field.default, ensure_ascii=False)}")
        if field.kind == "enum" or field.item == "enum":
            notes.append(f"one of: {_choices(field.choices)}")
        text = " ".join(filter(None, [field.description, f"[{'; '.join(notes)}]" if notes else ""]))
        if text:
            lines.append(f"      {text}")
    for field in reserved:
        lines.append(f"  {field.name}: only through --args ({field.flag} is a run option)")
        if field.description:
            lines.append(f"      {field.description}")
    return "\n".join(lines) + "\n"


def lookup_tool(
    tool: str,
    tools: Sequence[str],
    load_timeout: float,
    sandbox: SandboxPolicy,
    *,
    as_json: bool = False,
    missing_fails: bool = False,
) -> tuple[dict[str, Any] | None, list[str]]:
    """The tool's description as the runner has it, and the warnings; no worker when the cache knows it.

    A tool no module defines ends the command as a run of it would: a module
    that failed to load and could define it is a ``load_error`` (exit 1, with
    the reason), else ``not_found`` (exit 2). The ``not_found`` is the
    caller's to report (None), unless ``missing_fails``: then it is a usage
    error with the run's own message, which names the tools close to ``tool``
    (did you mean ...?) or the known ones.
    """

    async def main(_: Signals) -> tuple[dict[str, Any] | None, list[str], ToolResult | None]:
        async with open_runner(
            tools, load_timeout=load_timeout, sandbox=sandbox, wanted_tool=tool, spare_workers=0,
            discover_sources=True,
        ) as runner:  # fmt: skip
            info = runner.get_tool(tool)
            if info is not None:
                return msgspec.to_builtins(info), runner.warnings, None
            # No worker starts for a name no tool has: this is the same
            # `not_found` or `load_error` answer a run would get.
            return None, runner.warnings, await runner.call_tool(tool, {})

    info, warnings, missing = run_main(main)
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


def tool_flags(
    ctx: typer.Context,
    tool: str,
    tools: Sequence[str],
    load_timeout: float,
    sandbox: SandboxPolicy,
    *,
    as_json: bool,
    help: bool,
) -> dict[str, Any]:
    """The arguments the tool's own flags in ``ctx.args`` give; with ``help``, print the tool's help and exit 0."""
    run_options = [opt for param in ctx.command.params for opt in (*param.opts, *param.secondary_opts)]
    run_options = [opt for opt in run_options if opt.startswith("--") and opt != "--xcsh-run-tool-help"]
    info, warnings = lookup_tool(tool, tools, load_timeout, sandbox, as_json=as_json)
    if help or info is None:
        warn(warnings)  # otherwise the run, about to discover again, says them once
    if info is None:
        if help:
            typer.echo(ctx.get_help())
            fail(f"no tool named {tool!r}; `xcsh-run list` shows the tools found, and why a module failed to load")
        flags = " ".join(arg for arg in ctx.args if arg.startswith("--"))
        fail_arguments(
            f"no tool named {tool!r} to take {flags or ' '.join(ctx.args)}; `xcsh-run list` shows the tools found",
            as_json,
        )
    fields, reserved = split_reserved(fields_of(info["parameters"]), run_options)
    if help:
        typer.echo(visible(tool_help(info, fields, reserved)))  # its description is the tool's text
        typer.echo("Run options (for every tool):\n")
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    return parse_field_flags(ctx.args, fields, run_options, as_json)
