"""Host-side argument validation for tools whose parameters are a JSON Schema dict.

Tools with a ``msgspec.Struct`` are validated by msgspec inside the worker,
before tool code runs. Tools with a JSON Schema dict are validated here with
``jsonschema`` (a maintained, spec-complete validator), so invalid arguments
are rejected before a worker is even involved. ``jsonschema`` is imported on
first use only: it costs more start-up time than the rest of the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SchemaProblem(Exception):
    """The arguments (or the schema itself) failed validation.

    Attributes:
        path: JSON path of the offending value, like ``$.items[2]``.
    """

    def __init__(self, message: str, path: str) -> None:
        self.path = path
        super().__init__(message)


def json_path(parts: Any) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


class ArgumentValidator:
    """A compiled validator for one tool's JSON Schema."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema)
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise SchemaProblem(f"parameters is not a valid JSON Schema: {exc.message}", json_path(exc.path)) from None
        self._validator = cls(schema)

    def validate(self, arguments: Any) -> None:
        """Raise :class:`SchemaProblem` for the most relevant error, if any."""
        import jsonschema

        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if error is not None:
            path = json_path(error.absolute_path)
            raise SchemaProblem(f"{error.message} (at {path})", path)
