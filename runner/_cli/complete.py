"""Shell completion of tool names, from the module cache alone: completing never starts a worker.

A module the cache does not know (new, or edited since it was last loaded)
is left out; any command that loads it (``xcsh-run list``) fills the cache.
"""

from __future__ import annotations

import os
from typing import Any

from typer.core import TyperGroup


def cached_tool_names() -> list[str]:
    """The visible tools of every module discovered from here whose cache entry is current."""
    from xcsh_run._discovery import Candidate, ModuleCache, default_dir, fingerprint, walk
    from xcsh_run._version import __version__

    warnings: list[str] = []
    cache = ModuleCache(default_dir(), warnings)
    names: dict[str, None] = {}
    for found in walk((), os.getcwd(), warnings, cache_dir=default_dir()):
        if not isinstance(found, Candidate):
            continue
        fp = fingerprint(found, __version__)
        entry = cache.get(found, fp) if fp is not None else None
        if entry is not None and entry.result is not None:
            names.update((tool.name, None) for tool in entry.result.tools if not tool.hidden)
    return list(names)


def complete_tool(incomplete: str) -> list[str]:
    """Tool names starting with ``incomplete`` (the ``autocompletion`` of a TOOL argument)."""
    try:
        return [name for name in cached_tool_names() if name.startswith(incomplete)]
    except Exception:  # completion must never print a traceback into the user's shell
        return []


class CompletingGroup(TyperGroup):
    """The top level completes tool names beside the commands (``xcsh-run TOOL`` runs TOOL)."""

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        results: list[Any] = super().shell_complete(ctx, incomplete)
        if incomplete.startswith("-"):
            return results
        from typer._click.shell_completion import CompletionItem

        commands = {item.value for item in results}
        results.extend(CompletionItem(name, help="tool") for name in complete_tool(incomplete) if name not in commands)
        return results
