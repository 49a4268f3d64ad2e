"""What a Struct tool's arguments were expected to be, in words, from msgspec's validation error.

msgspec says ``Expected `int` >= 0 - at `$.n```: right, but in Python's type
names and without the value it refused. The host shows a model
``at $.n: expected an integer >= 0, got -1``, so the worker sends the two
halves as ``error.data``'s ``expected`` and ``got`` (protocol.md, section 6).

1. ``expected`` speaks JSON: ``str`` is "a string", ``int`` "an integer",
   ``float`` "a number", ``str | null`` "a string or null"; msgspec's
   constraint (``>= 0``, ``of length >= 1``, ``matching regex '^a'``) follows.
2. ``got`` is the refused value as compact JSON, cut to :data:`MAX_GOT`
   characters; where the value is not at the path (a missing or an unknown
   field), it says what was wrong with the object instead.
3. A message this module does not know gives no expectation (None): the host
   then shows msgspec's own words.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

import msgspec

MAX_GOT: Final = 80

_TYPES: Final = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "null": "null",
    "array": "an array",
    "object": "an object",
}
_EXPECTED: Final = re.compile(r"^Expected `(?P<type>[^`]+)`(?:, got `[^`]+`| (?P<rule>.+?))?(?: - at `[^`]*`)?$")
_MISSING: Final = re.compile(r"^Object missing required field `(?P<name>[^`]+)`")
_UNKNOWN: Final = re.compile(r"^Object contains unknown field `(?P<name>[^`]+)`")
_ENUM: Final = re.compile(r"^Invalid enum value ")
_PART: Final = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def type_words(name: str) -> str:
    """``str | null`` as "a string or null"; an unknown name as itself, in backticks."""
    return " or ".join(_TYPES.get(part.strip(), f"`{part.strip()}`") for part in name.split("|"))


def snippet(value: Any) -> str:
    """``value`` as compact JSON, cut to :data:`MAX_GOT` characters."""
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= MAX_GOT else text[: MAX_GOT - 3] + "..."


def describe(
    text: str,
    arguments: bytes,
    path: str,
    choices: Callable[[str], list[Any] | None],
    fields: Callable[[str], list[str]],
) -> tuple[str | None, str | None]:
    """``(expected, got)`` for msgspec's ``text`` about ``arguments`` (the call's JSON) at ``path``.

    ``choices(path)`` is the enum of the value there; ``fields(path)`` the
    field names of the object there, from the tool's schema.
    """
    found, value = _at(arguments, path)
    got = snippet(value) if found else None
    if (match := _EXPECTED.match(text)) is not None:
        expected = type_words(match["type"])
        if match["rule"]:
            expected += f" {match['rule']}"
        return expected, got
    if (match := _MISSING.match(text)) is not None:
        return f'the required property "{match["name"]}"', got
    if (match := _UNKNOWN.match(text)) is not None:
        known = ", ".join(f'"{name}"' for name in fields(path))
        return (f"only the properties {known}" if known else "no properties"), f'the unknown property "{match["name"]}"'
    if _ENUM.match(text) is not None:
        options = choices(path)
        if options:
            return "one of " + ", ".join(snippet(option) for option in options), got
    return None, None


def _at(arguments: bytes, path: str) -> tuple[bool, Any]:
    """The value at ``path`` (``$.a.b[0]``) in the JSON ``arguments``: ``(found, value)``."""
    try:
        node: Any = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return False, None
    for key, index in _PART.findall(path.removeprefix("$")):
        if index and isinstance(node, list) and int(index) < len(node):
            node = node[int(index)]
        elif not index and isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return False, None
    return True, node
