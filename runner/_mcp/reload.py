"""The MCP server's runners: one generation per load of the tool files, reloaded when they change.

Rules:

1. A reload opens the new runner beside the old one. Runners in one process
   never collide: each has a cgroup root of its own (``xcsh-run.<pid>.<n>``,
   see ``_boundary``), so closing one never touches another's workers.
2. Calls that arrive while a load runs wait for that load only, never for
   the calls in flight; once it succeeds they go to the new runner.
3. Calls in flight finish on the runner they started on. A replaced
   generation is retired: its runner closes (and its workers end) as soon as
   its last call ends.
4. A reload that fails outright (the runner cannot be opened at all) keeps
   the old generation serving and says so in the log; the first load failing
   leaves no runner, and calls get a ``load_error`` result. Either way the
   next poll tries again. Modules that fail to load are not an outright
   failure: they are logged and left out, as on the CLI.
5. Between taking the current generation and counting a call on it there is
   no checkpoint (:meth:`Runners.current` then :meth:`Generation.in_use`), so
   a retirement either sees the call or happens before the call picks a
   generation.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import trio

from xcsh_run._discovery import ToolFilesState, ToolInfo, read_tool_files_state, wait_for_change
from xcsh_run._host import Runner, open_runner
from xcsh_run._mcp.render import ToolNames
from xcsh_run._sandbox import SandboxPolicy

logger = logging.getLogger("xcsh_run.mcp")


class Generation:
    """One loaded runner, and the calls running on it."""

    __slots__ = ("runner", "calls", "retired", "done")

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.calls = 0
        self.retired = False
        self.done = trio.Event()  # set once retired with no call left: the runner may close

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        self.calls += 1
        try:
            yield
        finally:
            self.calls -= 1
            if self.retired and self.calls == 0:
                self.done.set()

    def retire(self) -> None:
        self.retired = True
        if self.calls == 0:
            self.done.set()


class Runners:
    """Loads the tools, reloads them when the candidate files change, and hands out the runner to call.

    ``on_reloaded(before, after)`` is awaited after every reload with the
    tools shown before and after it; ``prepare(runner)`` is called with each
    new runner before it serves (and before it starts a worker for a call).
    """

    def __init__(
        self,
        paths: Sequence[str],
        *,
        cwd: str,
        grace: float,
        load_timeout: float,
        sandbox: SandboxPolicy | None,
        poll_interval: float,
        on_reloaded: Callable[[list[ToolInfo], list[ToolInfo]], Awaitable[None]],
        options: Mapping[str, Any] | None = None,
        prepare: Callable[[Runner], None] | None = None,
    ) -> None:
        self._paths = list(paths)
        self._prepare = prepare
        self._cwd = cwd
        # `options`: more of open_runner's keywords (max_workers, queue_timeout).
        self._options: dict[str, Any] = {
            **(options or {}), "cwd": cwd, "grace": grace, "load_timeout": load_timeout, "sandbox": sandbox,
        }  # fmt: skip
        self._poll_interval = poll_interval
        self._on_reloaded = on_reloaded
        self._generations: set[Generation] = set()
        self._current: Generation | None = None  # None before the first load, or after it failed
        self._ready = trio.Event()  # set while no load is running
        self._scope = trio.CancelScope()
        self._stopped = False
        self.failure: str | None = None  # why the first load failed, while no runner exists
        self._last_error: str | None = None
        # What tools/list shows: the last tools loaded. A reload does not
        # make it wait, only calls do.
        self.tools: list[ToolInfo] = []
        # Their MCP names (`names`), computed at each load, which warns once per name.
        self.names = ToolNames()
        self._warned_names: set[str] = set()
        self.first_load = trio.Event()

    @property
    def poll_interval(self) -> float:
        """Seconds between checks of the tool files for changes."""
        return self._poll_interval

    async def current(self) -> Generation | None:
        """The generation to call, once no load runs; None if none could be loaded or after :meth:`stop`."""
        while not self._stopped:
            await self._ready.wait()
            # Re-checked: a reload may have begun between the set and this task's wake-up.
            if self._ready.is_set():
                return self._current
        return None

    @property
    def serving(self) -> Runner | None:
        """The runner new calls go to (None before the first load, or when it failed)."""
        return self._current.runner if self._current is not None else None

    def live(self) -> list[Runner]:
        """Every runner still open: the serving one, and retired ones with calls left."""
        return [g.runner for g in self._generations]

    def stop(self) -> None:
        """No more (re)loads; callers waiting for one are let through to find the server stopping."""
        self._stopped = True
        self._scope.cancel()
        self._ready.set()
        self.first_load.set()

    def retire_all(self) -> None:
        for generation in list(self._generations):
            generation.retire()

    async def run(self, nursery: trio.Nursery) -> None:
        """Load, then poll the tool files (``xcsh_run._discovery.changes``), reloading on a change.

        The runners live in ``nursery``, which must outlast every call.
        """
        with self._scope:
            # Taken before loading, so that a change during the load reloads again.
            fingerprint: ToolFilesState | None = await read_tool_files_state(self._paths, self._cwd)
            if not await self._load(nursery):
                fingerprint = None  # retry at the next poll
            while True:
                # After a failed load (None), the next poll reloads whatever the files say.
                fingerprint = await wait_for_change(self._paths, self._cwd, fingerprint, self._poll_interval)
                logger.info("tool files changed; reloading")
                before = self.tools
                if not await self._load(nursery):
                    fingerprint = None
                await self._on_reloaded(before, self.tools)

    async def _load(self, nursery: trio.Nursery) -> bool:
        """Open a new generation; True once it serves."""
        if self._ready.is_set():
            self._ready = trio.Event()  # new calls wait for this load (rule 2)
        old = self._current
        try:
            new: Generation = await nursery.start(self._run_generation)
        except Exception as exc:
            # The same failure at every poll is logged once in full.
            repeated, self._last_error = self._last_error == repr(exc), repr(exc)
            if old is None:
                self.failure = repr(exc)
                what = "loading the tools failed: %r"
            else:
                what = "reloading the tools failed (%r); still serving the tools loaded before"
            logger.log(logging.DEBUG if repeated else logging.ERROR, what, exc, exc_info=not repeated)
            loaded = False
        else:
            self._current, self.failure, self._last_error = new, None, None
            self.tools = new.runner.tools
            self.names = ToolNames((tool.name for tool in self.tools), warned=self._warned_names)
            if old is not None:
                old.retire()  # rule 3
            loaded = True
        self._ready.set()
        self.first_load.set()
        return loaded

    async def _run_generation(self, *, task_status: trio.TaskStatus[Generation] = trio.TASK_STATUS_IGNORED) -> None:
        async with open_runner(self._paths, discover_sources=True, **self._options) as runner:
            if self._prepare is not None:
                self._prepare(runner)
            generation = Generation(runner)
            self._generations.add(generation)
            try:
                for error in runner.errors:
                    logger.warning("not loaded: %s: %s", error.path, error.message)
                for warning in runner.warnings:  # tools that loaded with something to look at (unused fields, ...)
                    logger.warning("%s", warning)
                task_status.started(generation)
                await generation.done.wait()
            finally:
                self._generations.discard(generation)
                if self._current is generation:
                    self._current = None
