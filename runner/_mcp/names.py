"""MCP's rules for tool names, and the name served for a tool whose own name breaks them.

MCP (2025-11-25) says a tool name SHOULD be 1 to 128 characters of ASCII
letters, digits, ``_``, ``-`` and ``.``, compared case-sensitively. A tool
name here may hold any letter or digit (``résumé``, ``工具``) and be of any
length, and clients (and the model APIs behind them) reject what breaks the
rule, so such a tool is served under another name:

- its letters lose their accents (NFKD, combining marks dropped), every
  other character outside the rule becomes ``_``, the result is cut to fit,
  and ``-`` plus the first 8 hex digits of the SHA-256 of the tool's own
  name (UTF-8) follow: ``résumé`` is served as ``resume-<8 hex>``;
- the name depends only on the tool's own name, so it stays the same across
  reloads and restarts; should it equal a name already served, more digits
  of the hash are used, then a counter, so no two tools share a name;
- ``tools/call`` maps the served name back; any other name is passed on as
  it is (the tool's own name, or a hidden tool's, still works).

A warning names each such tool when it is loaded (once per server).
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, Final

logger = logging.getLogger("xcsh_run.mcp")

MAX_NAME: Final = 128
_VALID: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_OUTSIDE: Final = re.compile(r"[^A-Za-z0-9_.-]")


def valid_tool_name(name: str) -> bool:
    """True when ``name`` keeps MCP's rule for tool names (2025-11-25)."""
    return _VALID.fullmatch(name) is not None


def _base(name: str) -> str:
    decomposed = unicodedata.normalize("NFKD", name)
    kept = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _OUTSIDE.sub("_", kept)


def _candidates(name: str) -> Iterable[str]:
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    base = _base(name)
    for digits in (8, 16, 32, 64):
        yield f"{base[: MAX_NAME - 1 - digits]}-{digest[:digits]}"
    counter = 2
    while True:  # only if every digest-based name is taken
        suffix = f"-{digest[:8]}-{counter}"
        yield base[: MAX_NAME - len(suffix)] + suffix
        counter += 1


class ToolNames:
    """The MCP name of each tool, and back; built for one set of loaded tools."""

    __slots__ = ("_to_mcp", "_to_tool")

    def __init__(self, names: Iterable[str] = (), *, warned: set[str] | None = None) -> None:
        names = sorted(set(names))
        taken = {name for name in names if valid_tool_name(name)}
        self._to_mcp: dict[str, str] = {}
        for name in names:
            if name in taken:
                continue
            served = next(c for c in _candidates(name) if c not in taken)
            taken.add(served)
            self._to_mcp[name] = served
            if warned is None or name not in warned:
                logger.warning(
                    "tool %r breaks MCP's rule for tool names (1-128 characters of A-Z a-z 0-9 _ - .): served as %r",
                    name,
                    served,
                )
                if warned is not None:
                    warned.add(name)
        self._to_tool = {served: name for name, served in self._to_mcp.items()}

    def to_mcp(self, name: str) -> str:
        return self._to_mcp.get(name, name)

    def to_tool(self, served: str) -> str:
        return self._to_tool.get(served, served)


def rename_listed(listing: Sequence[dict[str, Any]], names: ToolNames) -> list[dict[str, Any]]:
    """A ``tools/list`` listing with each tool under its MCP name."""
    return [{**entry, "name": names.to_mcp(entry["name"])} for entry in listing]
