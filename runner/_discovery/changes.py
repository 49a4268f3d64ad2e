"""Whether the tool files changed: a state of the candidate files, compared from one poll to the next.

The MCP server reloads its tools when it changes (``xcsh_run._mcp.reload``);
``xcsh-run watch`` runs its call again. Rules:

1. The state is every candidate module's path and stat (mtime, size, inode),
   and, for a package folder, the stat of its own sources (``.py``; a JS
   folder's ``.ts``/``.js``/``.json`` and the like, not what npm installed in
   ``node_modules``, nor hidden folders or ``__pycache__``), at most 2000 of
   them. A file added, removed, written or replaced changes it.
2. Polled, not notified: a stat per file per poll, on a thread, works the
   same on every file system (network mounts, containers' bind mounts) with
   no platform API and no dependency.
3. A folder that cannot be read is a state of its own (the error), so that
   it changes again once it can be read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

import trio

from xcsh_run._discovery.cache import default_dir
from xcsh_run._discovery.finder import discover

MAX_WATCHED_FILES: Final = 2000  # files looked at inside package folders, all of them together
_JS_WATCHED: Final = (".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs", ".json")

ToolFilesState = tuple[object, ...]


def tool_files_state(paths: Sequence[str], cwd: str) -> ToolFilesState:
    """The candidate tool files of ``paths`` (as ``--tools``) seen from ``cwd``, and their stat (rule 1)."""
    entries: list[object] = []
    try:
        # The scan of installed entry points is remembered in the module cache's folder, as a
        # runner's own discovery remembers it: a poll costs a stat per place, not a read of
        # every installed distribution's metadata (tens of milliseconds).
        candidates = discover(list(paths), cwd, cache_dir=default_dir()).candidates
    except OSError as exc:
        return (("error", str(exc)),)
    watched = 0
    for candidate in candidates:
        entries.append((candidate.resolved, _stat_key(candidate.resolved)))
        if not os.path.isdir(candidate.resolved):
            continue
        # A JS folder's own sources, as the module cache fingerprints them; not what npm installed.
        suffixes = _JS_WATCHED if candidate.kind == "js" else (".py",)
        for root, dirs, files in os.walk(candidate.resolved):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules"))
            for name in sorted(files):
                if name.endswith(suffixes) and watched < MAX_WATCHED_FILES:
                    path = os.path.join(root, name)
                    entries.append((path, _stat_key(path)))
                    watched += 1
    return tuple(entries)


async def read_tool_files_state(paths: Sequence[str], cwd: str) -> ToolFilesState:
    """:func:`tool_files_state` on a thread (a slow disk never blocks the event loop); cancellable."""
    return await trio.to_thread.run_sync(tool_files_state, paths, cwd, abandon_on_cancel=True)


async def wait_for_change(
    paths: Sequence[str], cwd: str, since: ToolFilesState | None, poll_interval: float
) -> ToolFilesState:
    """Poll every ``poll_interval`` seconds until the state differs from ``since``; the new state.

    ``since`` None differs from every state: the first poll returns.
    """
    while True:
        await trio.sleep(poll_interval)
        now = await read_tool_files_state(paths, cwd)
        if since is None or now != since:
            return now


def _stat_key(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)
