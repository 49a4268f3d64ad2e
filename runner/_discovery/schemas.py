"""Host-side validation: arguments against a tool's JSON Schema dict, details against its output schema.

Tools with a ``msgspec.Struct`` are validated by msgspec inside the worker,
before tool code runs. Tools with a JSON Schema dict are validated here with
``jsonschema`` (a maintained, spec-complete validator), so invalid arguments
are rejected before a worker is even involved. ``jsonschema`` is imported on
first use only: it costs more start-up time than the rest of the host.

A tool's ``output_schema`` (whatever form it was declared in) is checked here
too, on every successful result: MCP requires the structured result of a tool
that declares one to conform, and the host is where ``jsonschema`` is.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import msgspec

from xcsh_run._discovery.expectation import expectation


class SchemaProblem(Exception):
    """The arguments (or the schema itself) failed validation.

    Attributes:
        path: JSON path of the offending value, like ``$.items[2]``.
        expected: what the schema expects there, in words (``"a string"``,
            ``"one of "a", "b""``), when the failed keyword is one
            ``xcsh_run._discovery.expectation`` words.
        got: what was there instead: the value as compact JSON, or what was
            wrong with the object (``the unknown field "x"``).
    """

    def __init__(self, message: str, path: str, expected: str | None = None, got: str | None = None) -> None:
        self.path = path
        self.expected = expected
        self.got = got
        super().__init__(message)


def json_path(parts: Any) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


class ArgumentValidator:
    """A compiled validator for one tool's JSON Schema."""

    def __init__(self, schema: Mapping[str, Any], what: str = "parameters") -> None:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema)
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise SchemaProblem(f"{what} is not a valid JSON Schema: {exc.message}", json_path(exc.path)) from None
        self._validator = cls(schema)

    def validate(self, arguments: Any) -> None:
        """Raise :class:`SchemaProblem` for the most relevant error, if any."""
        import jsonschema

        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if error is not None:
            path = json_path(error.absolute_path)
            expected, got = expectation(error)
            raise SchemaProblem(f"{_message(error)} (at {path})", path, expected, got)


def _message(error: Any) -> str:
    """jsonschema's message, with the allowed values spelled out where a value must be one of a set.

    ``best_match`` of an ``anyOf`` (an optional enum) says only "not valid under
    any of the given schemas": the choices are in its sub-errors.
    """
    choices: list[Any] = []
    for e in [error, *(error.context or ())]:
        if e.validator == "enum" and isinstance(e.validator_value, list):
            choices += e.validator_value
        elif e.validator == "const":
            choices.append(e.validator_value)
    if not choices:
        return str(error.message)
    listed = ", ".join(json.dumps(c, ensure_ascii=False) for c in choices)
    return f"{json.dumps(error.instance, ensure_ascii=False)} is not one of the choices: {listed}"


@functools.lru_cache(maxsize=256)
def _output_validator(schema: bytes) -> ArgumentValidator:
    # Keyed on the schema's JSON: compiling costs far more than validating,
    # and a reloaded tool with an edited schema gets a validator of its own.
    return ArgumentValidator(msgspec.json.decode(schema), what="output_schema")


def check_details(schema: Mapping[str, Any], details: Any) -> SchemaProblem | None:
    """Why ``details`` do not conform to the tool's output ``schema``, or None when they do."""
    if details is None:
        return SchemaProblem("the result has no details", "$")
    try:
        _output_validator(msgspec.json.encode(schema)).validate(details)
    except SchemaProblem as exc:
        return exc
    return None
