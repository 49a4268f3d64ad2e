"""Finding tool modules on disk, without importing any of them.

This module only lists candidate paths and where they came from. Importing a
module and calling its factory always happen in a worker (see ``_host``).

Sources, in precedence order:

1. ``<cwd>/.xcsh/tools`` (provider ``native``, level ``project``);
2. explicitly configured paths: the CLI's ``--tools`` or the API's
   ``tool_paths`` (provider ``config``), relative to ``cwd``, ``~`` expanded.

Candidates are ``*.py`` files and package folders (with ``__init__.py``).
Hidden entries and ``_private`` ones are skipped; ``.md`` and ``.json`` files
are metadata and never candidates. A file reached twice (after resolving
symlinks) is listed once, at its first place.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec


class ToolSource(msgspec.Struct, frozen=True):
    """Where a candidate module was found."""

    provider: str
    provider_name: str
    level: str


NATIVE_PROJECT = ToolSource("native", "xcsh", "project")
CONFIG = ToolSource("config", "Config", "project")


class Candidate(msgspec.Struct, frozen=True):
    """A module to load: its path as found, its resolved path, and its source."""

    path: str
    resolved: str
    source: ToolSource


def _is_candidate(entry: Path) -> bool:
    name = entry.name
    if name.startswith((".", "_")):
        return False
    if entry.is_dir():
        return (entry / "__init__.py").is_file()
    return name.endswith(".py") and entry.is_file()


def modules_in(folder: Path) -> list[Path]:
    """Candidate modules directly inside ``folder``, sorted by name."""
    try:
        entries = sorted(folder.iterdir(), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [e for e in entries if _is_candidate(e)]


def expand(path: str, cwd: str) -> Path:
    """Resolve a configured path: ``~`` expanded, relative to ``cwd``."""
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else Path(cwd) / p


def discover_custom_tool_paths(configured_paths: Sequence[str], cwd: str) -> list[Candidate]:
    """List every candidate module in precedence order, each resolved file once."""
    seen: set[str] = set()
    out: list[Candidate] = []

    def add(paths: Iterable[Path], source: ToolSource) -> None:
        for path in paths:
            resolved = os.path.realpath(path)
            if resolved in seen:
                continue
            seen.add(resolved)
            out.append(Candidate(path=str(path), resolved=resolved, source=source))

    add(modules_in(Path(cwd) / ".xcsh" / "tools"), NATIVE_PROJECT)
    for configured in configured_paths:
        path = expand(configured, cwd)
        if path.is_dir() and not (path / "__init__.py").is_file():
            add(modules_in(path), CONFIG)
        else:
            # A named file is taken as asked, even if it is not a .py file, so
            # that the user gets a precise load error instead of silence.
            add([path], CONFIG)
    return out
