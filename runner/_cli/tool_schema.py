"""A tool's schema read as flags: each top-level property as a `Field` (name, kind, choices, flags).

Shared by the flags of a run (``tool_flags``) and by shell completion
(``complete``), which must not import the run's machinery: completion reads
the module cache only and never starts a worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

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
