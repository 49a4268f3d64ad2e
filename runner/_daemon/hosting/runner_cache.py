"""A host's runners, kept open between calls: one per cwd, environment and options; reloaded on change, closed idle.

1. **The key is everything the runner pins**: the cwd, the umask and the whole
   environment of the client (its workers were started with them), the path
   its installed tools' entry points were read on (the client's), the tool
   paths, and every option but ``wanted_tool`` (the runner loads every module,
   so that the next call may want another tool) and ``spare_workers`` (the
   default: a warm runner keeps one spare). A call never gets a runner opened
   for another key, so its sandbox, grants, limits and environment are its own.
2. **Fresh**: before each use the candidate tool files' state
   (``xcsh_run._discovery.changes``, the MCP server's) and the stat of the
   config files the runner read its grants from (the user's and the
   project's ``.xcsh/config.toml``) are compared with those read before the
   runner was opened; a change closes the runner and opens a new one, as a
   cold CLI call would see the files. A grant taken out of a config file is
   taken from the next call.
3. **Outlives the call**: a runner is opened by a task of the cache's own
   nursery, which holds it open until the cache closes it.
4. **Idle runners close**: one unused for ``idle_seconds`` is closed (its own
   ``idle_timeout`` stops its idle workers well before that), and so is the
   one least recently used once a host keeps :data:`MAX_RUNNERS`: a client
   whose environment changes on every call (a counter, a fresh temporary
   folder) costs one runner, not one per call.
5. **A call's leftovers are undone** when it ends: the UI context it set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import trio

from xcsh_run._discovery import ToolFilesState, read_tool_files_state, search_path
from xcsh_run._host import open_runner
from xcsh_run._project import project_root
from xcsh_run._sandbox import config_paths

if TYPE_CHECKING:
    from xcsh_run._host import Runner

logger = logging.getLogger("xcsh_run.daemon")

IDLE_SECONDS: Final = 600.0
MAX_RUNNERS: Final = 8
_IGNORED: Final = ("wanted_tool", "spare_workers")

Key = tuple[str, tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, ...], str]


def _config_state(cwd: str, env: dict[str, str]) -> tuple[object, ...]:
    """The stat of each config file a runner opened here would read its grants from (rule 2)."""
    home = env.get("HOME")
    entries: list[object] = []
    for path in config_paths(project_root(cwd, home), home):
        try:
            st = os.stat(path)
            entries.append((str(path), st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError as exc:
            entries.append((str(path), exc.errno))
    return tuple(entries)


State = tuple[ToolFilesState, tuple[object, ...]]


class _Entry:
    def __init__(self, state: State) -> None:
        self.state = state
        self.runner: Runner | None = None
        self.users = 0
        self.last_used = trio.current_time()
        self.closing = trio.Event()
        self.closed = trio.Event()


class RunnerCache:
    """The runners of one host (the module docstring's rules)."""

    def __init__(self, nursery: trio.Nursery, idle_seconds: float = IDLE_SECONDS) -> None:
        self._nursery = nursery
        self._idle = idle_seconds
        self._entries: dict[Key, _Entry] = {}
        self._retiring: set[_Entry] = set()  # closing in the background

    def __len__(self) -> int:
        return len(self._entries)

    @asynccontextmanager
    async def open(self, tool_paths: Sequence[str], **options: Any) -> AsyncIterator[Runner]:
        """The runner for the current cwd and environment and these options (rules 1-3, 5)."""
        for name in _IGNORED:
            options.pop(name, None)
        cwd = os.getcwd()
        env = dict(os.environ)
        umask = os.umask(0)
        os.umask(umask)  # the client's, for the call (a worker inherits it)
        settings = repr((umask, sorted(options.items())))
        key: Key = (cwd, tuple(sorted(env.items())), tuple(search_path()), tuple(tool_paths), settings)
        state = (await read_tool_files_state(tool_paths, cwd), _config_state(cwd, env))
        entry = self._entries.get(key)
        if entry is not None and (entry.state != state or entry.closing.is_set()) and entry.users == 0:
            self._retire(key)
            entry = None
        if entry is None:
            self._make_room()
            entry = _Entry(state)
            await self._nursery.start(self._hold, entry, list(tool_paths), cwd, env, options)
            self._entries[key] = entry
        runner = entry.runner
        assert runner is not None
        entry.users += 1
        try:
            yield runner
        finally:
            entry.users -= 1
            entry.last_used = trio.current_time()
            runner.set_ui_context(None)

    async def _hold(
        self,
        entry: _Entry,
        tool_paths: list[str],
        cwd: str,
        env: dict[str, str],
        options: dict[str, Any],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        started = False
        try:
            async with open_runner(tool_paths, cwd=cwd, env=env, **options) as runner:
                entry.runner = runner
                started = True
                task_status.started()
                await entry.closing.wait()
        except Exception:
            if not started:
                raise  # to the call that asked for it, as open_runner's own error
            # Not the host's end: the next call that wants this key opens another.
            logger.exception("a kept runner failed after it opened; it is dropped")
            entry.closing.set()
        finally:
            entry.closed.set()

    def _retire(self, key: Key) -> None:
        """Close the runner of ``key`` in the background: the call that needs another does not wait for it."""
        entry = self._entries.pop(key)
        entry.closing.set()
        self._retiring.add(entry)
        self._retiring = {e for e in self._retiring if not e.closed.is_set()}

    def _make_room(self) -> None:
        unused = sorted((e.last_used, key) for key, e in self._entries.items() if e.users == 0)
        for _last_used, key in unused[: max(0, len(self._entries) - MAX_RUNNERS + 1)]:
            self._retire(key)

    async def evict_idle(self) -> None:
        """Close the runners idle for ``idle_seconds``, checking every few seconds (rule 4); runs until cancelled."""
        while True:
            await trio.sleep(min(5.0, self._idle))
            now = trio.current_time()
            for key, entry in list(self._entries.items()):
                if entry.users == 0 and now - entry.last_used >= self._idle:
                    self._retire(key)

    async def aclose(self) -> None:
        """Close every runner (each bounded by its own teardown)."""
        entries = [*self._entries.values(), *self._retiring]
        self._entries.clear()
        for entry in entries:
            entry.closing.set()
        for entry in entries:
            await entry.closed.wait()
