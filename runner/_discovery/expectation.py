"""What a JSON Schema expected of a refused argument, in words, from ``jsonschema``'s error.

``jsonschema`` says ``3 is not of type 'string'``; a model is better served by
``at $.glob: expected a string, got 3``, the same words a Struct tool's worker
uses for msgspec's errors (``xcsh_run.worker._runtime.expectation``), so the
two kinds of tool read alike.

1. ``expected`` is worded from the failed keyword and its value: ``type``
   (``"a string or null"``), ``enum`` and ``const``, the bounds (``"an integer
   >= 0"``, ``"a string of length >= 1"``), ``pattern``, ``format``,
   ``multipleOf``, ``uniqueItems``, ``required`` and ``additionalProperties``;
   an ``anyOf`` or ``oneOf`` joins its branches' words with "or".
2. ``got`` is the refused value as compact JSON, cut to 80 characters; for a
   missing or an unknown property, what was wrong with the object.
3. Any other keyword (``not``, ``if``, a custom one) gives no expectation
   (None): the message is then ``jsonschema``'s own.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

MAX_GOT: Final = 80

_TYPES: Final = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
    "array": "an array",
    "object": "an object",
}
_BOUNDS: Final = {
    "minimum": ">=",
    "maximum": "<=",
    "exclusiveMinimum": ">",
    "exclusiveMaximum": "<",
}
_LENGTHS: Final = {
    "minLength": ("a string", ">="),
    "maxLength": ("a string", "<="),
    "minItems": ("an array", ">="),
    "maxItems": ("an array", "<="),
}


def snippet(value: Any) -> str:
    """``value`` as compact JSON, cut to :data:`MAX_GOT` characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)
    return text if len(text) <= MAX_GOT else text[: MAX_GOT - 3] + "..."


def expectation(error: Any) -> tuple[str | None, str | None]:
    """``(expected, got)`` for a ``jsonschema.ValidationError``; ``(None, None)`` for a keyword not worded here."""
    expected = _expected(error)
    if expected is None:
        return None, None
    got = snippet(error.instance)
    if error.validator == "required":
        missing = _missing(error)
        expected = f'the required property "{missing}"' if missing else "its required properties"
    elif error.validator == "additionalProperties":
        extra = _extra(error)
        got = f'the unknown property "{extra}"' if extra else got
    return expected, got


def _expected(error: Any) -> str | None:
    keyword, value, schema = error.validator, error.validator_value, error.schema
    if keyword == "type":
        return _type_words(value)
    if keyword == "enum" and isinstance(value, list):
        return "one of " + ", ".join(snippet(choice) for choice in value)
    if keyword == "const":
        return f"exactly {snippet(value)}"
    if keyword in _BOUNDS:
        kind = schema.get("type") if isinstance(schema, dict) else None
        return f"{_type_words(kind) if kind in ('integer', 'number') else 'a number'} {_BOUNDS[keyword]} {value}"
    if keyword in _LENGTHS:
        noun, sign = _LENGTHS[keyword]
        return f"{noun} of length {sign} {value}"
    if keyword == "pattern":
        return f"a string matching regex {value!r}"
    if keyword == "format":
        return f"a string in the {value} format"
    if keyword == "multipleOf":
        return f"a multiple of {value}"
    if keyword == "uniqueItems" and value:
        return "an array of unique items"
    if keyword == "required":
        return "its required properties"
    if keyword == "additionalProperties" and value is False:
        known = ", ".join(f'"{name}"' for name in schema.get("properties", {}))
        return f"only the properties {known}" if known else "no properties"
    if keyword in ("anyOf", "oneOf"):
        # The branches' errors about the value itself, not about its parts.
        words = [w for e in error.context or () if not e.relative_path and (w := _expected(e)) is not None]
        return " or ".join(dict.fromkeys(words)) or None
    return None


def _type_words(value: Any) -> str:
    names = value if isinstance(value, list) else [value]
    return " or ".join(_TYPES.get(str(name), f"`{name}`") for name in names)


def _missing(error: Any) -> str | None:
    instance = error.instance
    if not isinstance(instance, dict) or not isinstance(error.validator_value, list):
        return None
    return next((str(name) for name in error.validator_value if name not in instance), None)


def _extra(error: Any) -> str | None:
    instance, schema = error.instance, error.schema
    if not isinstance(instance, dict) or not isinstance(schema, dict):
        return None
    patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
    known = schema.get("properties", {})
    return next((key for key in instance if key not in known and not any(p.search(key) for p in patterns)), None)
