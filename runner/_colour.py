"""Whether the CLI colours what it writes to a stream: ``NO_COLOR``, ``FORCE_COLOR``, else a terminal.

Rules:

1. ``NO_COLOR`` set and not empty (https://no-color.org): no colour at all,
   anywhere (labels, the progress line), whatever else is set.
2. Else ``FORCE_COLOR`` set and not empty (as rich, uv and pytest read it):
   colour, even on a pipe or a file. The progress line is still drawn only
   on a terminal (``_terminal``): forcing colour never makes a redrawn line
   of ``\\r`` and erase sequences land in a log or a pipe.
3. Else colour on a terminal whose ``TERM`` is not ``dumb``, none elsewhere.

There is no ``--color`` flag: ``xcsh-run TOOL --flag`` takes the tool's own
flags, generated from its schema, and a tool with a ``color`` parameter owns
``--color`` there.

Only the host's own words are coloured (the ``xcsh-run:`` of an error, the
``warning:`` of a warning, the spinner, bar and times of the progress line);
a tool's text never is, and never carries a colour of its own through
(``_safe_text``). Stdlib only: an error line pays for no import.
"""

from __future__ import annotations

import os
import sys
from typing import Final, TextIO

_STYLES: Final = {
    "error": "\x1b[1;31m",  # bold red
    "warning": "\x1b[33m",  # yellow
}
_RESET: Final = "\x1b[0m"


def colour_wanted(stream: TextIO | None = None) -> bool:
    """Whether text for ``stream`` (default ``sys.stderr``) is coloured, by the rules above."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    target = sys.stderr if stream is None else stream
    try:
        tty = target.isatty()
    except (AttributeError, OSError, ValueError):  # a closed or odd stream
        return False
    return tty and os.environ.get("TERM") != "dumb"


def tinted(text: str, role: str, stream: TextIO | None = None) -> str:
    """``text`` in the colour of ``role`` (``error``, ``warning``) when ``stream`` gets colour, else as it is."""
    return f"{_STYLES[role]}{text}{_RESET}" if colour_wanted(stream) else text
