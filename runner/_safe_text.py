"""Text a tool produced, made safe to show on a terminal or to write to a log a person reads there.

A terminal obeys the bytes it is sent: an escape sequence in a tool's result
can write the user's clipboard (OSC 52), retitle the window, clear the screen,
move the cursor over what the host printed, or forge a prompt. So every text
that came from a tool (its results, partial updates, log records, error
messages, stderr, UI prompts, names and descriptions, render hooks' text)
passes through :func:`visible` before the host prints it or logs it:

1. C0 controls (0x00-0x1f) but ``\\n`` and ``\\t``, DEL (0x7f) and C1 controls
   (U+0080-U+009F, which a terminal may read as ESC-sequences: U+009B is CSI)
   are shown as ``\\xNN``: ESC as the four characters ``\\x1b``. Nothing is
   dropped, so what the tool sent can still be read.
2. CR is shown as ``\\x0d`` (a bare CR moves back over the line: a forged line
   could be drawn over a real one), except in a CRLF line end, which is an
   LF: text written with Windows line ends reads as it should.
3. Bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069, the
   marks U+200E, U+200F, U+061C) are shown as ``\\uNNNN``: they reorder what
   is displayed, so that the text read is not the text sent.
4. A backslash is left alone: ``\\x1b`` in the output is either a neutralised
   ESC or the tool's own four characters, and neither does anything.

Output for programs stays exact: :func:`json_text` is :func:`json.dumps`
(``ensure_ascii=False``) whose output additionally escapes, as ``\\uNNNN``,
the characters of rules 1 and 3 that JSON allows raw (DEL, C1, bidi). JSON
has no other place for them than inside a string, where the escape decodes to
the very same character: a parser reads the same value, and a terminal shown
the JSON sees no control character at all.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

_UNSAFE: Final = re.compile("\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# What json.dumps(ensure_ascii=False) leaves raw of the above (it escapes every C0 control itself).
_JSON_RAW: Final = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _shown(match: re.Match[str]) -> str:
    char = match[0]
    if char == "\r\n":
        return "\n"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character and reordering mark shown, not obeyed (see the module docstring)."""
    if _UNSAFE.search(text) is None:  # the common case: nothing to change, no copy
        return text
    return _UNSAFE.sub(_shown, text)


def json_text(value: Any, **options: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **options)``, with DEL, C1 and bidi marks escaped too (exact JSON)."""
    text = json.dumps(value, ensure_ascii=False, **options)
    if _JSON_RAW.search(text) is None:
        return text
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
