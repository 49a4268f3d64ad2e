"""The trio host: discovery through workers, calls, timeouts and the cancellation ladder.

Every call ends in exactly one :class:`ToolResult`. Tool failures, crashes,
timeouts, protocol violations and cancellation requests all become results
with ``is_error=True``; :meth:`Runner.call_tool` raises only ``trio.Cancelled``
(after the worker's tree is gone) when the *caller's* scope is cancelled.

The ladder, used for timeouts and cancellation alike:

1. send ``$/cancel`` with the reason, then SIGTERM to the worker: the tool's
   ``signal`` fires; a sync tool gets ``ToolCancelled`` raised, an async one
   has its task cancelled;
2. wait up to ``grace`` seconds for the worker to answer or exit;
3. kill the worker's whole boundary (cgroup) and wait until it is empty.

The result's ``error.rung`` says whether step 2 (``"cooperative"``) or step 3
(``"killed"``) ended it. A worker that went through the ladder is never reused.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import msgspec
import trio

from worker import _protocol as p

from ._boundary import Boundary, CgroupRoot
from ._cache import CachedLoad, ModuleCache, default_dir, fingerprint
from ._discovery import Candidate, ToolSource, discover
from ._errors import ConfigError, RemoteProtocolError, WorkerDied, WorkerError, WorkerStartupError, describe_exit
from ._faults import fault_point
from ._hostapi import (
    RESOLVE_SCHEMA,
    UI_DEFAULTS,
    NoOpUI,
    PendingActionRecord,
    call_ui,
    default_render_call,
    default_render_result,
    log,
    tool_log,
    validate_event,
)
from ._proc import RemoteError, RemoteRequestRefused, TeardownStats, WorkerProcess, WorkerState, _Pending
from ._results import ErrorKind, ToolResult, error_result
from ._sandbox import (
    MiB,
    Probe,
    SandboxPolicy,
    build_env,
    check,
    make_workdir,
    probe,
    remove_workdir,
    sweep_stale_workdirs,
    worker_config,
)
from ._validate import ArgumentValidator, SchemaProblem

DEFAULT_TIMEOUT: Final = 60.0
DEFAULT_GRACE: Final = 1.0
DEFAULT_LOAD_TIMEOUT: Final = 10.0
# How long aclose waits for spare refills and the reaper to stop once
# cancelled: each of their own waits is bounded well below this.
_HOUSEKEEPING_BOUND: Final = 15.0

UpdateCallback = Callable[[dict[str, Any]], object]

# What a worker may report, by JSON-RPC error code. The code decides the kind,
# never the worker's free-form error.data: a worker cannot claim that its call
# "timed out" or "crashed"; those kinds are the host's own observations.
_KIND_BY_CODE: Final = {
    p.ErrorCode.TOOL_ERROR: ErrorKind.TOOL_ERROR,
    p.ErrorCode.INVALID_ARGUMENTS: ErrorKind.INVALID_ARGUMENTS,
    p.ErrorCode.NOT_FOUND: ErrorKind.NOT_FOUND,
    p.ErrorCode.LOAD_ERROR: ErrorKind.LOAD_ERROR,
    p.ErrorCode.CANCELLED: ErrorKind.CANCELLED,
    p.ErrorCode.LIMIT_EXCEEDED: ErrorKind.LIMIT_EXCEEDED,
}
_call_ids = itertools.count(1)


class ToolInfo(msgspec.Struct, frozen=True):
    """A loaded tool as the host sees it: what a model needs, and where it lives."""

    name: str
    label: str
    description: str
    parameters: dict[str, Any]
    module: str
    source: ToolSource
    hidden: bool = False
    deferrable: bool = False
    concurrency: str = "shared"
    timeout: float | None = None
    params_kind: str = "json_schema"
    has_on_session: bool = False
    has_render_call: bool = False
    has_render_result: bool = False


class LoadError(msgspec.Struct, frozen=True):
    """A module (or one entry of its factory) that did not become a tool, and why.

    ``shadowed_by`` is set when the module was not loaded at all because a
    higher-precedence place has a module of the same name.
    """

    path: str
    message: str
    source: ToolSource
    stderr_tail: str | None = None
    shadowed_by: str | None = None


class RunnerStatistics(msgspec.Struct, frozen=True):
    """A snapshot of the runner's workers and calls."""

    idle_workers: int
    busy_workers: int
    starting_workers: int
    running_calls: int
    queued_calls: int
    spare_workers: int
    workers_started: int
    reliable_boundary: bool
    pinned_workers: int = 0
    """Workers kept alive because they hold a pending action (a preview waiting for ``resolve``)."""
    teardown_overruns: int = 0
    """Bounded teardown waits that expired (a worker not reaped after SIGKILL, a cgroup or
    workdir that could not be removed); each one is also logged. 0 on a healthy host."""


class _LoadFailed(Exception):
    def __init__(
        self, message: str, stderr_tail: str | None = None, *, deterministic: bool = False, startup: bool = False
    ) -> None:
        self.stderr_tail = stderr_tail
        self.deterministic = deterministic  # worth caching: not a timeout or a crash
        # The worker never got to the module: a host-side failure (fds, disk,
        # cgroups) or a worker that died starting. Reported as `crashed`.
        self.startup = startup
        super().__init__(message)


class _Call:
    __slots__ = ("call_id", "scope", "reason", "tool", "operation", "ui_scopes", "stopping", "worker_unenforced")

    def __init__(self, call_id: str, tool: str = "", operation: str | None = None) -> None:
        self.call_id = call_id
        self.scope: trio.CancelScope | None = None
        self.reason: str | None = None
        self.tool = tool
        self.operation = operation
        # UI prompts this call is waiting on: cancelled with the call, so they
        # are answered (with the no-op value) instead of left hanging.
        self.ui_scopes: set[trio.CancelScope] = set()
        self.stopping = False
        self.worker_unenforced: list[str] = []

    def stop_ui(self) -> None:
        for scope in self.ui_scopes:
            scope.cancel()


class Runner:
    """Owns tool workers. Get one from :func:`open_runner`; it has no public constructor."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        cwd: str,
        env: Mapping[str, str],
        default_timeout: float,
        grace: float,
        load_timeout: float,
        max_frame_bytes: int,
        builtin_tool_names: Iterable[str],
        home: str | None,
        cache: ModuleCache | None,
        warnings: list[str],
        sandbox: SandboxPolicy,
        tool_policies: Mapping[str, SandboxPolicy],
        probe: Probe,
        cgroups: CgroupRoot | None,
        unenforced: list[str],
        max_workers: int,
        max_calls_per_worker: int | None,
        idle_timeout: float | None,
        max_worker_rss_mb: int | None,
        spare_workers: int,
    ) -> None:
        self._nursery = nursery
        self._home = home
        self._cache = cache
        self._warnings = warnings
        self.cwd = cwd
        self._env = dict(env)
        self.default_timeout = default_timeout
        self.grace = grace
        self.load_timeout = load_timeout
        self.max_frame_bytes = max_frame_bytes
        self._builtins = frozenset(builtin_tool_names)
        self._cgroup_root = cgroups
        self.sandbox = sandbox
        self._tool_policies = dict(tool_policies)
        self._probe = probe
        self.unenforced = unenforced
        self._tools: dict[str, ToolInfo] = {}
        self._errors: list[LoadError] = []
        # Idle workers by (module, policy): a worker's sandbox is fixed at spawn.
        self._idle: dict[tuple[str, SandboxPolicy], list[WorkerProcess]] = {}
        self._policies: dict[WorkerProcess, SandboxPolicy] = {}
        self._workers: set[WorkerProcess] = set()
        self._starting = 0
        self._started = 0
        self._candidates: dict[str, Candidate] = {}
        self._calls: dict[str, _Call] = {}
        self._calls_changed = trio.Event()
        self._validators: dict[str, ArgumentValidator] = {}
        # What each policy in use could not enforce (best effort), from the probe.
        self._checked: dict[SandboxPolicy, list[str]] = {sandbox: list(unenforced)}
        self._ui: Any = NoOpUI()
        self._has_ui = False
        self.context: dict[str, Any] = {}
        self._pending_actions: list[PendingActionRecord] = []
        # Calls past max_workers wait here, first come first served (trio's
        # CapacityLimiter is FIFO); exclusive tools also queue on their lock.
        self._limiter = trio.CapacityLimiter(max_workers)
        self._exclusive: dict[str, trio.Lock] = {}
        self.max_calls_per_worker = max_calls_per_worker
        self.idle_timeout = idle_timeout
        self.max_worker_rss_mb = max_worker_rss_mb
        self.spare_count = spare_workers
        # Started and sandboxed workers with no module yet, by policy: a cold
        # call takes one and only pays for importing its module.
        self._spares: dict[SandboxPolicy, list[WorkerProcess]] = {}
        self._spawning_spares: set[SandboxPolicy] = set()
        self._spare_events: dict[SandboxPolicy, trio.Event] = {}
        # Policies for which a call had to start a worker from scratch: only
        # then is a taken spare replaced. A one-shot run (the CLI) takes the
        # spare started with the runner and starts nothing more.
        self._spare_demand: set[SandboxPolicy] = set()
        # Workers holding pending actions, with how many: never reaped or
        # retired while pinned; `_parked` ones are retired when unpinned.
        self._pins: dict[WorkerProcess, int] = {}
        self._parked: set[WorkerProcess] = set()
        self._teardown = TeardownStats()
        self._housekeeping: trio.Nursery | None = None  # set by open_runner
        self._housekeeping_ready = trio.Event()
        self._housekeeping_done = trio.Event()
        self._closed = False

    # --- discovery -------------------------------------------------------------

    @property
    def tools(self) -> list[ToolInfo]:
        """Every loaded tool, in discovery order (hidden ones included)."""
        return list(self._tools.values())

    @property
    def errors(self) -> list[LoadError]:
        """Every module or factory entry that failed to load (or was shadowed), with the reason."""
        return list(self._errors)

    @property
    def warnings(self) -> list[str]:
        """Problems that changed nothing but deserve a look (a corrupt cache, a bad registry)."""
        return list(self._warnings)

    def get_tool(self, name: str) -> ToolInfo | None:
        return self._tools.get(name)

    async def load(
        self, configured_paths: Sequence[str] = (), *, discover_sources: bool = True, wanted_tool: str | None = None
    ) -> None:
        """Discover modules and describe them, each in its own worker, in parallel.

        A module the cache knows, unchanged, is not imported at all: its tools
        are registered from the cache and a worker starts only when one is
        called. Modules load in parallel (bounded by the core count) but are
        merged in precedence order, so the first definition of a name wins.
        With ``wanted_tool``, loading stops once that name's definition is
        settled (see :func:`open_runner`).
        """
        found = await trio.to_thread.run_sync(
            lambda: discover(
                configured_paths,
                self.cwd,
                home=self._home,
                include_sources=discover_sources,
                cache_dir=self._cache.directory.parent if self._cache is not None else None,
            )
        )
        self._warnings.extend(found.warnings)
        for shadow in found.shadowed:
            self._errors.append(
                LoadError(
                    shadow.path,
                    f"{shadow.path}: not loaded, shadowed by {shadow.shadowed_by} (a higher-precedence module "
                    "of the same name); rename one of them to load both",
                    shadow.source,
                    shadowed_by=shadow.shadowed_by,
                )
            )
        candidates = found.candidates
        outcomes: list[tuple[list[ToolInfo], list[LoadError]] | None] = [None] * len(candidates)
        limiter = trio.CapacityLimiter(max(1, os.cpu_count() or 1))
        settled = trio.Event()

        def decided() -> bool:
            # The first settled module (in precedence order) that defines the
            # name decides it, provided every module before it is settled.
            for outcome in outcomes:
                if outcome is None:
                    return False
                if any(info.name == wanted_tool for info in outcome[0]):
                    return True
            return False

        left = len(candidates)

        async def one(index: int, candidate: Candidate) -> None:
            nonlocal left
            try:
                async with limiter:
                    outcomes[index] = await self._load_candidate(candidate)
            finally:
                left -= 1
            if left == 0 or (wanted_tool is not None and decided()):
                settled.set()

        if not candidates:
            settled.set()

        async with trio.open_nursery() as nursery:
            for index, candidate in enumerate(candidates):
                self._candidates[candidate.resolved] = candidate
                nursery.start_soon(one, index, candidate)
            if wanted_tool is not None:
                await settled.wait()  # or every load finished: the nursery's own end
                nursery.cancel_scope.cancel()  # the rest cannot change what the name means
        for outcome in outcomes:
            if outcome is None:
                # Cancelled once wanted_tool was decided. Nothing after it is
                # registered either: it might claim a name this one defines.
                break
            infos, errors = outcome
            self._errors.extend(errors)
            for info in infos:
                self._register(info)
        # The hidden built-in `resolve` exists only when some tool can defer its
        # effect (as in the original design, where it names a pending action).
        if any(t.deferrable for t in self._tools.values()) and "resolve" not in self._tools:
            self._tools["resolve"] = ToolInfo(
                name="resolve",
                label="Resolve",
                description="Apply or discard the newest pending preview.",
                parameters=RESOLVE_SCHEMA,
                module="<built-in>",
                source=ToolSource("builtin", "xcsh-run", "user"),
                hidden=True,
            )

    def _register(self, info: ToolInfo) -> None:
        if info.name in self._builtins:
            self._errors.append(
                LoadError(
                    info.module, f"tool name {info.name!r} conflicts with a built-in tool; rename it", info.source
                )
            )
        elif (first := self._tools.get(info.name)) is not None:
            self._errors.append(
                LoadError(
                    info.module,
                    f"tool name {info.name!r} conflicts with the tool already loaded from {first.module} "
                    f"({first.source.provider}); the first one wins, rename this one",
                    info.source,
                )
            )
        else:
            self._tools[info.name] = info

    async def _load_candidate(self, candidate: Candidate) -> tuple[list[ToolInfo], list[LoadError]]:
        path = candidate.resolved
        if path.endswith((".md", ".json")):
            message = f"{candidate.path}: .md and .json files are tool metadata and cannot be loaded as modules"
            return [], [LoadError(candidate.path, message, candidate.source)]
        fp = None
        if self._cache is not None:
            fp = await trio.to_thread.run_sync(fingerprint, candidate, _version())
            cached = self._cache.get(candidate, fp) if fp is not None else None
            if cached is not None:
                return self._from_load(candidate, cached)
        if not os.path.exists(path):  # noqa: ASYNC240 - one stat, cheaper than a thread hop
            message = f"{candidate.path}: no such file or folder; check the path given to --tools"
            return [], [LoadError(candidate.path, message, candidate.source)]
        try:
            worker, result = await self._spawn_loaded(candidate, self.load_timeout)
        except _LoadFailed as exc:
            if exc.deterministic and self._cache is not None and fp is not None:
                self._cache.put(candidate, CachedLoad(fingerprint=fp, load_error=str(exc)))
            return [], [LoadError(candidate.path, str(exc), candidate.source, exc.stderr_tail)]
        self._release(worker)
        schema_errors: dict[str, str] = {}
        if any(d.params_kind == "json_schema" for d in result.tools):
            # Checking a schema imports jsonschema: do it once, here, where a
            # worker was started anyway, and remember the verdict in the cache.
            schema_errors = await trio.to_thread.run_sync(_check_schemas, result)
        entry = CachedLoad(fingerprint=fp or "", result=result, schema_errors=schema_errors)
        if self._cache is not None and fp is not None:
            self._cache.put(candidate, entry)
        return self._from_load(candidate, entry)

    def _from_load(self, candidate: Candidate, entry: CachedLoad) -> tuple[list[ToolInfo], list[LoadError]]:
        if entry.load_error is not None or entry.result is None:
            return [], [LoadError(candidate.path, entry.load_error or "load failed", candidate.source)]
        result = entry.result
        errors = [
            LoadError(candidate.path, f"entry {e.index} of {candidate.factory}(api): {e.message}", candidate.source)
            for e in result.entry_errors
        ]
        infos: list[ToolInfo] = []
        for d in result.tools:
            problem = entry.schema_errors.get(d.name)
            if problem is not None:
                errors.append(LoadError(candidate.path, f"tool {d.name!r}: {problem}", candidate.source))
                continue
            infos.append(
                ToolInfo(
                    name=d.name,
                    label=d.label,
                    description=d.description,
                    parameters=d.parameters,
                    module=candidate.resolved,
                    source=candidate.source,
                    hidden=d.hidden,
                    deferrable=d.deferrable,
                    concurrency=d.concurrency,
                    timeout=d.timeout,
                    params_kind=d.params_kind,
                    has_on_session=d.has_on_session,
                    has_render_call=d.has_render_call,
                    has_render_result=d.has_render_result,
                )
            )
        return infos, errors

    # --- workers -----------------------------------------------------------------

    def policy_for(self, name: str) -> SandboxPolicy:
        """The sandbox policy a tool runs under (its own, else the runner's)."""
        return self._tool_policies.get(name, self.sandbox)

    def _new_boundary(self, policy: SandboxPolicy) -> Boundary:
        if self._cgroup_root is None:
            return Boundary(None)
        contained = policy.level != "none"
        return self._cgroup_root.new_boundary(
            memory_bytes=policy.memory_mb * MiB if contained and policy.memory_mb is not None else None,
            max_procs=policy.max_procs if contained else None,
        )

    async def _spawn_loaded(
        self, candidate: Candidate, timeout: float, policy: SandboxPolicy | None = None
    ) -> tuple[WorkerProcess, p.LoadResult]:
        """Start a worker under ``policy`` and load ``candidate`` in it, within ``timeout``; raises _LoadFailed.

        Cancellation: the worker is gone (bounded) before ``Cancelled`` leaves.
        """
        policy = policy or self.sandbox
        module = candidate.resolved
        worker: WorkerProcess | None = None
        ok = False
        self._starting += 1
        try:
            with trio.move_on_after(timeout) as scope:
                worker = self._take_spare(policy)
                if worker is None and policy in self._spawning_spares:
                    # A spare is already on its way (started with the runner,
                    # overlapping discovery): waiting for it is never slower
                    # than starting another worker from scratch.
                    await self._spare_event(policy).wait()
                    worker = self._take_spare(policy)
                if worker is None:
                    self._note_spare_demand(policy)
                    worker = await self._start_worker(policy, module)
                worker.module = module
                fault_point("load", worker.pid)
                raw = await worker.request(p.M_LOAD, self._load_params(candidate))
                result = msgspec.json.decode(raw, type=p.LoadResult)
                ok = True
                return worker, result
            assert scope.cancelled_caught
            raise _LoadFailed(
                f"{module}: the module did not finish loading within {timeout:g} s (load timeout); "
                "it may loop or block at import time",
                _tail(worker),
            )
        except RemoteError as exc:
            # The module itself refused to load: the same file will fail the same way.
            raise _LoadFailed(exc.error.message, _tail(worker), deterministic=True) from None
        except ConfigError as exc:
            raise _LoadFailed(f"{module}: {exc}") from None
        except WorkerDied as exc:
            loading = worker is not None
            raise _LoadFailed(
                f"{module}: the worker {describe_exit(exc.returncode)} "
                + ("while loading the module" if loading else "while starting, before the module was imported")
                + (f"; last stderr: {_last_line(exc.stderr_tail)}" if exc.stderr_tail.strip() else ""),
                exc.stderr_tail or None,
                startup=not loading,
            ) from None
        except WorkerStartupError as exc:
            raise _LoadFailed(f"{module}: {exc}", _tail(worker), startup=True) from None
        except OSError as exc:
            # A host-side failure between steps (a fault while sending `load`):
            # a result with the errno, never a raw OSError out of a call.
            raise _LoadFailed(f"{module}: could not start a worker: {exc}", _tail(worker), startup=True) from None
        except (RemoteProtocolError, WorkerError, msgspec.DecodeError) as exc:
            raise _LoadFailed(f"{module}: {exc}", _tail(worker)) from None
        finally:
            self._starting -= 1
            if worker is not None and not ok:
                with trio.CancelScope(shield=True):
                    await self._retire(worker)

    @staticmethod
    def _load_params(candidate: Candidate) -> p.LoadParams:
        return p.LoadParams(
            path=candidate.resolved, module=candidate.module, sys_path=candidate.sys_path, factory=candidate.factory
        )

    def _take_spare(self, policy: SandboxPolicy) -> WorkerProcess | None:
        spares = self._spares.get(policy)
        while spares:
            worker = spares.pop()
            if worker.alive:
                if policy in self._spare_demand:
                    self._background(self._refill_spares, policy)
                return worker
            self._background(self._retire, worker)
        return None

    def _note_spare_demand(self, policy: SandboxPolicy) -> None:
        """A call had to start a worker from scratch: from now on keep spares for ``policy``."""
        if policy not in self._spare_demand:
            self._spare_demand.add(policy)
            self._background(self._refill_spares, policy)

    async def _refill_spares(self, policy: SandboxPolicy) -> None:
        """Keep ``spare_count`` started workers ready for ``policy`` (not for strict:
        its Landlock rules name the module's folder, unknown until a call)."""
        if self.spare_count <= 0 or policy.level == "strict" or self._closed or policy in self._spawning_spares:
            return
        self._spawning_spares.add(policy)
        try:
            spares = self._spares.setdefault(policy, [])
            while len(spares) < self.spare_count and not self._closed:
                worker = await self._start_blank(policy)
                if worker is None:
                    return
                if self.closed:  # closed while it started (mypy narrows the attribute)
                    with trio.CancelScope(shield=True):
                        await self._retire(worker)
                    return
                spares.append(worker)
                self._spare_event(policy).set()
                self._spare_events.pop(policy, None)
        finally:
            self._spawning_spares.discard(policy)
            # Wake anyone still waiting: they will find a spare, or start their own.
            event = self._spare_events.pop(policy, None)
            if event is not None:
                event.set()

    def _spare_event(self, policy: SandboxPolicy) -> trio.Event:
        return self._spare_events.setdefault(policy, trio.Event())

    async def _start_worker(self, policy: SandboxPolicy, module: str) -> WorkerProcess:
        """A started worker under ``policy``, in its own boundary and private workdir.

        ``module`` names the tool module for strict's Landlock rules (the
        project directory stands in for a spare). Raises what
        :meth:`WorkerProcess.start` raises, WorkerStartupError for a host-side
        failure (no disk for the workdir, no cgroup), or ConfigError for a bad policy.
        """
        workdir: Path | None = None
        try:
            if policy.level != "none":
                fault_point("workdir")
                workdir = make_workdir()
            env = build_env(policy, self._env, workdir) if workdir is not None else self._env
            config = worker_config(policy, self._probe, module=module, cwd=self.cwd, workdir=workdir, env=env)
            boundary = self._new_boundary(policy)
        except BaseException as exc:
            if workdir is not None:
                remove_workdir(workdir)
            if isinstance(exc, OSError):
                what = "its cgroup" if workdir is not None or policy.level == "none" else "its private workdir"
                raise WorkerStartupError(f"could not start a worker for {module} ({what}): {exc}") from exc
            raise
        # From here on the worker owns the workdir and the boundary.
        worker = await WorkerProcess.start(
            self._nursery,
            module=module,
            cwd=self.cwd,
            env=env,
            boundary=boundary,
            max_frame_bytes=self.max_frame_bytes,
            sandbox=config,
            workdir=workdir,
            output_limit=policy.output_mb * MiB if policy.output_mb is not None else None,
            has_ui=self._has_ui,
            on_request=self._on_worker_request,
            on_notification=self._on_worker_notification,
            teardown=self._teardown,
        )
        self._workers.add(worker)
        self._policies[worker] = policy
        self._started += 1
        return worker

    async def _start_blank(self, policy: SandboxPolicy) -> WorkerProcess | None:
        try:
            with trio.move_on_after(self.load_timeout):
                return await self._start_worker(policy, self.cwd)
        except (OSError, WorkerError, RemoteProtocolError, ConfigError) as exc:
            if not self._closed:
                log.warning("could not start a spare worker: %s", exc)
        return None

    def _background(self, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        """Run a housekeeping task that :meth:`aclose` cancels and waits for before it tears down."""
        if self._closed or self._housekeeping_done.is_set():
            return  # closing, or the runner's nursery is being cancelled: nothing more to keep
        # The housekeeping nursery closes to new tasks as soon as an outer
        # cancellation reaches it, before its task ends: then there is
        # nothing more to keep either.
        with contextlib.suppress(RuntimeError):
            (self._housekeeping or self._nursery).start_soon(fn, *args)

    async def _reap_idle(self) -> None:
        """Retire workers idle longer than ``idle_timeout`` (spares and pinned workers excepted)."""
        assert self.idle_timeout is not None
        while not self._closed:
            await trio.sleep(min(self.idle_timeout / 2, 5.0))
            now = trio.current_time()
            # Chosen and taken out of the idle lists in one synchronous step:
            # once we await, a call may take any worker still listed, and a
            # worker a call has taken must never be killed from here.
            expired: list[WorkerProcess] = []
            for idle in self._idle.values():
                for worker in list(idle):
                    if now - worker.idle_since > self.idle_timeout and worker not in self._pins:
                        idle.remove(worker)
                        expired.append(worker)
            for worker in expired:
                await self._retire(worker)

    async def _acquire(self, info: ToolInfo, timeout: float, policy: SandboxPolicy) -> WorkerProcess:
        module = info.module
        idle = self._idle.get((module, policy), [])
        while idle:
            worker = idle.pop()
            if worker.alive:
                worker.state = WorkerState.BUSY
                return worker
            await self._retire(worker)
        worker, result = await self._spawn_loaded(self._candidates[module], timeout, policy)
        if not any(d.name == info.name for d in result.tools):
            # The file changed since it was described (or the cache is stale
            # in a way its fingerprint missed): do not run something else.
            with trio.CancelScope(shield=True):
                await self._retire(worker)
            raise _LoadFailed(
                f"{module} no longer defines a tool named {info.name!r}; it changed since discovery, run again"
            )
        worker.state = WorkerState.BUSY
        return worker

    def _release(self, worker: WorkerProcess) -> None:
        worker.state = WorkerState.IDLE
        worker.idle_since = trio.current_time()
        if self._closed:
            # aclose is killing every worker anyway; its nursery may be gone already.
            with contextlib.suppress(RuntimeError):
                self._nursery.start_soon(self._retire, worker)
            return
        self._idle.setdefault((worker.module, self._policies[worker]), []).append(worker)

    async def _finish_with(self, worker: WorkerProcess, *, healthy: bool) -> None:
        """After a call or a render: back to the idle pool, parked for a pending action, or retired."""
        if healthy and not self._closed and self._healthy(worker):
            if self._within_budget(worker):
                self._release(worker)
                return
            if worker in self._pins and not self._closed:
                # Over its budget but holding a preview: retired once resolved.
                worker.state = WorkerState.IDLE
                self._parked.add(worker)
                return
        with trio.CancelScope(shield=True):
            await self._retire(worker)

    async def _retire(self, worker: WorkerProcess) -> None:
        idle = self._idle.get((worker.module, self._policies.get(worker, self.sandbox)))
        if idle and worker in idle:
            idle.remove(worker)
        self._parked.discard(worker)
        self._pins.pop(worker, None)
        await worker.kill()
        self._workers.discard(worker)
        self._policies.pop(worker, None)

    def _pin(self, worker: WorkerProcess) -> None:
        self._pins[worker] = self._pins.get(worker, 0) + 1

    def _unpin(self, worker: WorkerProcess) -> None:
        left = self._pins.get(worker, 0) - 1
        if left > 0:
            self._pins[worker] = left
            return
        self._pins.pop(worker, None)
        if worker in self._parked:
            self._parked.discard(worker)
            self._nursery.start_soon(self._retire, worker)

    def _healthy(self, worker: WorkerProcess) -> bool:
        # A call that left processes behind (a daemon, a background job)
        # retires its worker: nothing a call started may outlive the call.
        return worker.alive and worker.boundary.members() in ([], [worker.pid])

    def _within_budget(self, worker: WorkerProcess) -> bool:
        # RLIMIT_CPU counts a process's whole life: retire a warm worker well
        # before a later call could be killed for what earlier calls used.
        if self.max_calls_per_worker is not None and worker.calls_served >= self.max_calls_per_worker:
            return False
        if self.max_worker_rss_mb is not None and worker.rss_bytes() > self.max_worker_rss_mb * MiB:
            return False  # grown too big (a leak in the tool, or a cache): start afresh
        budget = self._policies[worker].cpu_seconds
        return budget is None or worker.cpu_seconds() < budget / 2

    # --- calls ---------------------------------------------------------------------

    def cancel(self, tool_call_id: str, reason: str = "cancelled") -> bool:
        """Cancel a running call; it ends with a ``cancelled`` result. False if no such call."""
        call = self._calls.get(tool_call_id)
        if call is None:
            return False
        if call.reason is None:
            call.reason = reason
        if call.scope is not None:
            call.scope.cancel()
        return True

    def cancel_all(self, reason: str = "cancelled") -> None:
        """Cancel every running call."""
        for call_id in list(self._calls):
            self.cancel(call_id, reason)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        on_update: UpdateCallback | None = None,
        timeout: float | None = None,
        tool_call_id: str | None = None,
        ctx: Mapping[str, Any] | None = None,
        sandbox: SandboxPolicy | None = None,
        operation_id: str | None = None,
    ) -> ToolResult:
        """Run one tool call to its single terminal result.

        Args:
            name: the tool's name.
            arguments: the JSON object of arguments.
            on_update: called with each partial result ``{"content", "details"}``,
                in order, before this returns. It runs on the host's event loop
                and must not block.
            timeout: seconds; defaults to the tool's own timeout, then the
                runner's default. Starting a worker counts against it.
            tool_call_id: an id for :meth:`cancel` and for the tool; generated if absent.
            ctx: read-only state shared with the tool as ``ctx``.
            sandbox: this call's policy, instead of the tool's or the runner's.
            operation_id: groups calls into one operation: a tool's
                ``ctx.abort()`` cancels every running call of its operation.

        Returns:
            The result; ``is_error`` is True for every failure.

        Cancellation: if the caller's scope is cancelled, the worker goes
        through the ladder and its tree is gone before ``Cancelled`` propagates.
        """
        if self._closed:
            raise ConfigError("this runner is closed; open a new one with open_runner()")
        call_id = tool_call_id or f"call-{next(_call_ids)}"
        info = self._tools.get(name)
        if info is None:
            return self._not_found(name)
        args: Any = {} if arguments is None else arguments
        if not isinstance(args, Mapping):
            return error_result(
                ErrorKind.INVALID_ARGUMENTS,
                f"arguments for {name!r} must be a JSON object, got {type(args).__name__}",
                path="$",
            )
        if info.module == "<built-in>":
            return await self._resolve(args)
        validator = self._validator(info)
        if validator is not None:
            try:
                validator.validate(args)
            except SchemaProblem as exc:
                return error_result(
                    ErrorKind.INVALID_ARGUMENTS, f"invalid arguments for {name!r}: {exc}", path=exc.path
                )
        try:
            raw_args = p.encode_value(args)
        except (TypeError, ValueError, RecursionError, msgspec.EncodeError) as exc:
            return error_result(ErrorKind.INVALID_ARGUMENTS, f"arguments are not JSON-serialisable: {exc}", path="$")
        policy = sandbox if sandbox is not None else self.policy_for(name)
        if policy not in self._checked:
            self._checked[policy] = check(policy, self._probe)  # fail closed before anything runs
        if timeout is None:
            timeout = info.timeout if info.timeout is not None else (policy.wall_seconds or self.default_timeout)
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if call_id in self._calls:
            raise ConfigError(f"tool_call_id {call_id!r} is already running; ids must be unique")
        call = _Call(call_id, name, operation_id)
        self._calls[call_id] = call
        state = {**self.context, **(ctx or {})}
        try:
            result = await self._run_call(info, call, raw_args, state, on_update, timeout, policy)
            # The host's probe, plus what the worker itself failed to apply.
            unenforced = [*self._checked[policy], *call.worker_unenforced]
            if unenforced:
                result = msgspec.structs.replace(result, unenforced=unenforced)
            return result
        finally:
            del self._calls[call_id]
            self._calls_changed.set()
            self._calls_changed = trio.Event()

    def _validator(self, info: ToolInfo) -> ArgumentValidator | None:
        if info.params_kind != "json_schema":
            return None
        validator = self._validators.get(info.name)
        if validator is None:
            # Compiled on first use: a cached run that calls a Struct tool
            # never pays for importing jsonschema.
            validator = self._validators[info.name] = ArgumentValidator(info.parameters)
        return validator

    def _not_found(self, name: str) -> ToolResult:
        names = [t.name for t in self._tools.values() if not t.hidden]
        close = difflib.get_close_matches(name, names, n=3)
        message = f"no tool named {name!r}"
        if close:
            message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
        elif names:
            message += f"; known tools: {', '.join(sorted(names))}"
        else:
            message += "; no tools are loaded (put modules in .xcsh/tools or pass --tools PATH)"
        if self._errors:
            message += f" ({len(self._errors)} module(s) failed to load; `xcsh-run list` shows why)"
        return error_result(ErrorKind.NOT_FOUND, message)

    async def _run_call(
        self,
        info: ToolInfo,
        call: _Call,
        raw_args: msgspec.Raw,
        ctx: dict[str, Any],
        on_update: UpdateCallback | None,
        timeout: float,
        policy: SandboxPolicy,
    ) -> ToolResult:
        worker: WorkerProcess | None = None
        pending: _Pending | None = None
        healthy = False

        def deliver(partial: p.CallResult) -> None:
            if on_update is None:
                return
            try:
                on_update({"content": partial.content, "details": partial.details})
            except Exception as exc:  # the caller's callback must not take the host down
                import logging

                logging.getLogger("xcsh_run").warning("on_update callback raised %r; update dropped", exc)

        lock = self._exclusive.setdefault(info.name, trio.Lock()) if info.concurrency == "exclusive" else None
        holds_lock = holds_slot = False
        try:
            with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
                call.scope = scope
                if call.reason is not None:
                    scope.cancel()
                # Queued time counts against the deadline: the caller asked for
                # an answer within `timeout`, whatever kept it waiting.
                if lock is not None:
                    await lock.acquire()
                    holds_lock = True
                await self._limiter.acquire_on_behalf_of(call)
                holds_slot = True
                try:
                    worker = await self._acquire(info, timeout, policy)
                except _LoadFailed as exc:
                    if exc.startup:
                        return error_result(
                            ErrorKind.CRASHED,
                            f"could not run {info.name!r}: {exc}",
                            stderr_tail=exc.stderr_tail,
                            module=info.module,
                        )
                    return error_result(ErrorKind.LOAD_ERROR, str(exc), stderr_tail=exc.stderr_tail, module=info.module)
                call.worker_unenforced = worker.unenforced
                await self._sync_ui(worker)
                params = p.CallParams(call_id=call.call_id, tool=info.name, arguments=raw_args, ctx=ctx)
                try:
                    pending = await worker.send_request(p.M_CALL, params, on_update=(call.call_id, deliver))
                except p.LocalProtocolError as exc:
                    healthy = True  # nothing was sent: the worker is as good as before
                    return error_result(
                        ErrorKind.INVALID_ARGUMENTS,
                        f"the call to {info.name!r} does not fit in one protocol message ({exc}); pass less data, "
                        "or open the runner with a larger max_frame_bytes",
                        path="$",
                        module=info.module,
                    )
                except (WorkerDied, RemoteProtocolError) as exc:
                    # It died (or broke the protocol) between being taken and
                    # being sent the call: reported like a death during the call.
                    pending = _Pending(0)
                    pending.error = exc
                    pending.event.set()
                await pending.event.wait()
            if scope.cancelled_caught:
                reason = call.reason or "timeout"
                kind = ErrorKind.CANCELLED if call.reason is not None else ErrorKind.TIMEOUT
                if worker is None:
                    what = "cancelled" if kind is ErrorKind.CANCELLED else f"timed out after {timeout:g} s"
                    return error_result(kind, f"{info.name!r} {what} before its worker was ready", module=info.module)
                rung = await self._ladder(worker, call.call_id, reason, pending)
                if kind is ErrorKind.TIMEOUT:
                    message = f"{info.name!r} timed out after {timeout:g} s"
                else:
                    message = f"{info.name!r} was cancelled ({reason})"
                how = (
                    "stopped within the grace period" if rung == "cooperative" else "was killed after the grace period"
                )
                return error_result(
                    kind,
                    f"{message}; the tool {how}",
                    rung=rung,
                    stderr_tail=worker.stderr_tail.text() or None,
                    module=info.module,
                )
            assert worker is not None and pending is not None
            result = _limits(self._interpret(info, worker, pending), worker, policy)
            healthy = result.kind in (None, "tool_error", "invalid_arguments")
            return result
        except BaseException:
            # The caller was cancelled (or something unexpected happened):
            # the worker still goes through the ladder before we let go.
            if worker is not None:
                with trio.CancelScope(shield=True):
                    await self._ladder(worker, call.call_id, call.reason or "cancelled", pending)
            raise
        finally:
            if pending is not None and worker is not None:
                worker.forget(pending)
            if worker is not None:
                worker.calls_served += 1
                await self._finish_with(worker, healthy=healthy)
            if holds_slot:
                self._limiter.release_on_behalf_of(call)
            if holds_lock and lock is not None:
                lock.release()

    async def _ladder(self, worker: WorkerProcess, call_id: str, reason: str, pending: _Pending | None) -> str:
        """Stop a call: $/cancel + SIGTERM, grace, then kill the tree. Returns the rung."""
        rung = "killed"
        call = self._calls.get(call_id)
        if call is not None:
            call.stopping = True  # timeouts too: no new UI prompt from here on
            call.stop_ui()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.grace):
                await worker.notify(p.N_CANCEL, p.CancelParams(call_id=call_id, reason=reason))
                worker.terminate()
                if pending is not None:
                    await pending.event.wait()
                else:
                    await worker.wait_exited()
                rung = "cooperative"
            await worker.kill()
        return rung

    def _interpret(self, info: ToolInfo, worker: WorkerProcess, pending: _Pending) -> ToolResult:
        try:
            raw = pending.outcome()
        except RemoteError as exc:
            data = exc.data
            kind = _KIND_BY_CODE.get(exc.error.code, ErrorKind.PROTOCOL_ERROR)  # type: ignore[call-overload]
            message = exc.error.message
            if kind is ErrorKind.PROTOCOL_ERROR:
                message = f"the worker answered with an unexpected error ({exc.error.code}): {message}"
            return error_result(
                kind,
                message,
                traceback=_str_or_none(data.get("traceback")),
                path=_str_or_none(data.get("path")),
                limit=_str_or_none(data.get("limit")),
                module=info.module,
            )
        except WorkerDied as exc:
            return error_result(
                ErrorKind.CRASHED,
                f"the worker running {info.name!r} {describe_exit(exc.returncode)}"
                + (f"; last stderr: {_last_line(exc.stderr_tail)}" if exc.stderr_tail.strip() else ""),
                exit_code=exc.exit_code,
                signal=exc.signal_name,
                stderr_tail=exc.stderr_tail or None,
                module=info.module,
            )
        except RemoteProtocolError as exc:
            return error_result(
                ErrorKind.PROTOCOL_ERROR, str(exc), stderr_tail=worker.stderr_tail.text() or None, module=info.module
            )
        try:
            result = msgspec.json.decode(raw, type=p.CallResult)
        except msgspec.DecodeError as exc:
            return error_result(
                ErrorKind.PROTOCOL_ERROR, f"the worker sent a malformed result: {exc}", module=info.module
            )
        return ToolResult(content=result.content, details=result.details)

    # --- the host API: UI, logs, abort, session events, renders, pending actions ---

    def set_ui_context(self, ui: Any | None, has_ui: bool = True) -> None:
        """Attach a UI (sync or async methods of SPEC §2's UI), or None for the no-op one.

        Takes effect at once, for live workers too: their ``api.has_ui`` changes.
        """
        self._ui = ui if ui is not None else NoOpUI()
        self._has_ui = has_ui and ui is not None
        for worker in list(self._workers):
            if worker.alive:
                # Now for calls already running; _sync_ui also runs before the
                # next request, so a call started right after this sees it.
                self._nursery.start_soon(self._sync_ui, worker)

    async def _sync_ui(self, worker: WorkerProcess) -> None:
        if worker.has_ui != self._has_ui:
            worker.has_ui = self._has_ui
            await worker.notify(p.N_UI_CHANGED, p.UiChangedParams(has_ui=self._has_ui))

    def set_context(self, state: Mapping[str, Any]) -> None:
        """The session/model state shared with tools as ``ctx`` (read-only on their side)."""
        self.context = dict(state)

    async def _on_worker_request(self, worker: WorkerProcess, request: p.Request) -> Any:
        if request.method != p.M_UI:
            raise RemoteRequestRefused(int(p.ErrorCode.METHOD_NOT_FOUND), f"unknown method {request.method!r}")
        params = msgspec.json.decode(request.params, type=p.UiParams)
        if params.method not in p.UI_METHODS:
            raise RemoteRequestRefused(int(p.ErrorCode.INVALID_PARAMS), f"unknown UI method {params.method!r}")
        default = UI_DEFAULTS[params.method]
        call = self._calls.get(params.call_id) if params.call_id else None
        if call is not None and (call.reason is not None or call.stopping):
            return default  # the call is being stopped: answer now, show nothing
        with trio.CancelScope() as scope:
            if call is not None:
                call.ui_scopes.add(scope)
            try:
                return await call_ui(self._ui, params.method, params.args)
            except Exception as exc:
                log.warning("UI method %s raised %r; answering %r", params.method, exc, default)
                return default
            finally:
                if call is not None:
                    call.ui_scopes.discard(scope)
        return default  # cancelled with its call

    def _on_worker_notification(self, worker: WorkerProcess, message: p.Notification) -> None:
        if message.method == p.N_LOG:
            record = msgspec.json.decode(message.params, type=p.LogParams)
            tool = self._calls[record.call_id].tool if record.call_id in self._calls else None
            tool_log.log(
                record.level,
                "%s",
                record.message,
                extra={"tool": tool or os.path.basename(worker.module), "call_id": record.call_id, "pid": worker.pid,
                       "tool_logger": record.logger},
            )  # fmt: skip
        elif message.method == p.N_ABORT:
            abort = msgspec.json.decode(message.params, type=p.AbortParams)
            self._abort(abort.call_id, abort.reason)
        elif message.method == p.N_PENDING:
            push = msgspec.json.decode(message.params, type=p.PendingPushParams)
            # The action's callables live in this worker: it stays until the
            # action is resolved or the runner closes. (A worker already being
            # retired may still deliver one: it is not pinned back to life.)
            if worker.alive and worker in self._workers and not self._closed:
                self._pin(worker)
            self._pending_actions.append(
                PendingActionRecord(push.action_id, worker, push.label, push.details, push.source_tool_name,
                                    push.call_id)
            )  # fmt: skip
        elif message.method == p.M_UI:
            ui = msgspec.json.decode(message.params, type=p.UiParams)
            if ui.method in ("notify", "set_status", "set_editor_text"):
                # Housekeeping: a UI whose notify never returns must not hold the runner open.
                self._background(self._fire_ui, ui.method, ui.args)

    async def _fire_ui(self, method: str, args: list[Any]) -> None:
        try:
            await call_ui(self._ui, method, args)
        except Exception as exc:
            log.warning("UI method %s raised %r", method, exc)

    def _abort(self, call_id: str | None, reason: str) -> None:
        call = self._calls.get(call_id) if call_id else None
        if call is None:
            return
        why = f"aborted by {call.tool}: {reason}"
        for other in list(self._calls.values()):
            if other is call or (call.operation is not None and other.operation == call.operation):
                self.cancel(other.call_id, why)

    def pending_actions(self) -> list[dict[str, Any]]:
        """Previews waiting for ``resolve``, newest last."""
        return [a.preview() for a in self._pending_actions]

    async def _resolve(self, args: Mapping[str, Any]) -> ToolResult:
        action, reason = args.get("action"), args.get("reason")
        if action not in ("apply", "discard") or not isinstance(reason, str):
            return error_result(
                ErrorKind.INVALID_ARGUMENTS, 'resolve takes {"action": "apply" | "discard", "reason": str}', path="$"
            )
        if not self._pending_actions:
            return error_result(ErrorKind.TOOL_ERROR, "No pending action to resolve. Nothing to apply or discard.")
        record = self._pending_actions.pop()  # the newest, as the original design serves previews
        details = {"action": action, "reason": reason, "sourceToolName": record.source_tool_name,
                   "label": record.label}  # fmt: skip
        if record.details is not None:
            details["sourceResultDetails"] = record.details
        worker: WorkerProcess = record.worker
        try:
            return await self._resolve_in(worker, record, action, reason, details)
        finally:
            if worker in self._pins:
                self._unpin(worker)

    async def _resolve_in(
        self, worker: WorkerProcess, record: PendingActionRecord, action: Any, reason: str, details: dict[str, Any]
    ) -> ToolResult:
        if not worker.alive:
            how = describe_exit(worker.returncode) if worker.returncode is not None else "was stopped"
            return error_result(
                ErrorKind.TOOL_ERROR,
                f"pending action {record.label!r} was lost: the worker that made it {how}, so it cannot be "
                f"{'applied' if action == 'apply' else 'discarded'}",
            )
        try:
            with trio.fail_after(self.default_timeout):
                raw = await worker.request(
                    p.M_RESOLVE, p.ResolveParams(action_id=record.action_id, action=action, reason=reason)
                )
        except RemoteError as exc:
            return error_result(
                ErrorKind.TOOL_ERROR, exc.error.message, traceback=_str_or_none(exc.data.get("traceback"))
            )
        except (WorkerDied, RemoteProtocolError, trio.TooSlowError) as exc:
            if isinstance(exc, trio.TooSlowError):
                # It may still be running apply(): that worker cannot be trusted with more work.
                with trio.CancelScope(shield=True):
                    await self._retire(worker)
            return error_result(ErrorKind.TOOL_ERROR, f"pending action {record.label!r} was lost: {exc}")
        try:
            outcome = msgspec.json.decode(raw, type=p.ResolveResult).result
        except msgspec.DecodeError as exc:
            with trio.CancelScope(shield=True):
                await self._retire(worker)  # it broke the protocol: not trusted with more work
            return error_result(ErrorKind.PROTOCOL_ERROR, f"the worker sent a malformed resolve result: {exc}")
        if outcome is None:
            verb = "Applied" if action == "apply" else "Discarded"
            text = f"{verb}: {record.label}. Reason: {reason}"
            return ToolResult(content=[{"type": "text", "text": text}], details=details)
        return ToolResult(content=outcome.content, details={**details, "result": outcome.details})

    async def emit_session_event(self, event: Mapping[str, Any], *, timeout: float = 5.0) -> list[str]:
        """Deliver a session event to every live worker with ``on_session`` tools.

        Waits at most ``timeout`` seconds; a hook that raises or takes longer
        becomes a warning (returned, and logged), never an error.
        """
        payload = validate_event(event)
        modules = {t.module for t in self._tools.values() if t.has_on_session}
        targets = [w for w in self._workers if w.alive and w.module in modules]
        warnings: list[str] = []

        async def deliver(worker: WorkerProcess) -> None:
            with trio.move_on_after(timeout) as scope:
                try:
                    raw = await worker.request(p.M_SESSION, p.SessionParams(event=payload, ctx=self.context))
                    warnings.extend(msgspec.json.decode(raw, type=p.SessionResult).warnings)
                except (RemoteError, WorkerDied, RemoteProtocolError) as exc:
                    warnings.append(f"{os.path.basename(worker.module)}: session event not delivered: {exc}")
            if scope.cancelled_caught:
                warnings.append(f"{os.path.basename(worker.module)}: on_session did not return within {timeout:g} s")

        async with trio.open_nursery() as nursery:
            for worker in targets:
                nursery.start_soon(deliver, worker)
        for warning in warnings:
            log.warning("session event %s: %s", payload["reason"], warning)
        return warnings

    async def render_call(self, name: str, args: Any, theme: Any = None, *, timeout: float = 2.0) -> str:
        """The tool's ``render_call(args, theme)``, run in its worker; the default rendering on any trouble."""
        info = self._tools.get(name)
        default = default_render_call(info.label if info else name, args)
        if info is None or not info.has_render_call:
            return default
        return await self._render(
            info, p.RenderParams(tool=name, kind="call", args=args, theme=theme), default, timeout
        )

    async def render_result(
        self,
        name: str,
        result: ToolResult,
        options: Mapping[str, Any] | None = None,
        theme: Any = None,
        args: Any = None,
        *,
        timeout: float = 2.0,
    ) -> str:
        """The tool's ``render_result(result, options, theme, args)`` in its worker, or the default.

        ``options`` is ``{expanded, is_partial, spinner_frame}``.
        """
        info = self._tools.get(name)
        default = default_render_result(result)
        if info is None or not info.has_render_result:
            return default
        opts = {"expanded": False, "is_partial": False, "spinner_frame": None, **(options or {})}
        params = p.RenderParams(tool=name, kind="result", args=args, result=result.to_json(), options=opts, theme=theme)
        return await self._render(info, params, default, timeout)

    async def _render(self, info: ToolInfo, params: p.RenderParams, default: str, timeout: float) -> str:
        if self._closed:
            return default  # no new worker for a closed runner
        policy = self.policy_for(info.name)
        try:
            worker = await self._acquire(info, self.load_timeout, policy)
        except _LoadFailed as exc:
            log.warning("render_%s of %s: no worker (%s); default rendering used", params.kind, info.name, exc)
            return default
        healthy = False
        try:
            with trio.move_on_after(timeout):
                raw = await worker.request(p.M_RENDER, params)
                healthy = True
                return msgspec.json.decode(raw, type=p.RenderResult).text
            log.warning("render_%s of %s did not return within %g s; default rendering used", params.kind,
                        info.name, timeout)  # fmt: skip
        except (RemoteError, WorkerDied, RemoteProtocolError, msgspec.DecodeError) as exc:
            healthy = isinstance(exc, RemoteError)
            log.warning("render_%s of %s failed (%s); default rendering used", params.kind, info.name, exc)
        finally:
            # A hook that hung has a worker stuck in it: that worker goes.
            await self._finish_with(worker, healthy=healthy)
        return default

    # --- lifecycle ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` began."""
        return self._closed

    def statistics(self) -> RunnerStatistics:
        spares = sum(len(v) for v in self._spares.values())
        states = [w.state for w in self._workers]
        limiter = self._limiter.statistics()
        return RunnerStatistics(
            idle_workers=states.count(WorkerState.IDLE) - spares,
            busy_workers=states.count(WorkerState.BUSY),
            starting_workers=self._starting,
            running_calls=len(self._calls),
            queued_calls=limiter.tasks_waiting
            + sum(lock.statistics().tasks_waiting for lock in self._exclusive.values()),
            spare_workers=spares,
            workers_started=self._started,
            reliable_boundary=self._cgroup_root is not None,
            pinned_workers=len(self._pins),
            teardown_overruns=self._teardown.overruns,
        )

    async def aclose(self) -> None:
        """Stop every worker (shutdown request, then the tree kill). Idempotent.

        Always leaves no worker process behind, even when cancelled: the
        teardown runs shielded.
        """
        self._closed = True
        with trio.CancelScope(shield=True):
            # First stop starting things, and wait until they have stopped: a
            # spare half-started kills its worker on the way out, and its
            # attach must be over before the cgroups are removed below.
            if self._housekeeping is not None:
                self._housekeeping.cancel_scope.cancel()
            # Also when the housekeeping task has not run yet: it sees `_closed` and ends.
            with trio.move_on_after(_HOUSEKEEPING_BOUND) as scope:
                await self._housekeeping_done.wait()
            if scope.cancelled_caught:
                self._teardown.overrun(f"housekeeping tasks did not stop within {_HOUSEKEEPING_BOUND:g} s")
            # Running calls (in their callers' tasks) stop through their own
            # ladder; give them that long before killing what is left, so that
            # a worker never gets `shutdown` before its call's `$/cancel`.
            self.cancel_all("runner closing")
            with trio.move_on_after(self.grace + 1.0):
                while self._calls:
                    await self._calls_changed.wait()
            # `shutdown` reaches every live worker before it is stopped, bounded.
            await self.emit_session_event({"reason": "shutdown", "previousSessionFile": None}, timeout=self.grace)
            async with trio.open_nursery() as nursery:
                for worker in list(self._workers):
                    nursery.start_soon(self._shutdown_worker, worker)
            self._pins.clear()
            self._parked.clear()
            if self._cgroup_root is not None:
                await trio.to_thread.run_sync(self._cgroup_root.remove)
            # Workdirs whose removal ran out of time while the runner lived get
            # one more bounded try: no later host would sweep a live pid's.
            left, self._teardown.leftover_workdirs = self._teardown.leftover_workdirs, []
            for workdir in left:
                if not await trio.to_thread.run_sync(remove_workdir, workdir):
                    log.warning("could not remove the worker workdir %s; remove it by hand", workdir)

    async def _run_housekeeping(self) -> None:
        """The nursery of spare refills and the idle reaper; :meth:`aclose` cancels it and waits for its end."""
        try:
            if self._closed:  # closed before this task got to run: nothing to keep
                return
            async with trio.open_nursery() as housekeeping:
                self._housekeeping = housekeeping
                self._housekeeping_ready.set()
                await trio.sleep_forever()
        finally:
            self._housekeeping = None
            self._housekeeping_ready.set()
            self._housekeeping_done.set()

    async def _shutdown_worker(self, worker: WorkerProcess) -> None:
        if worker.state is WorkerState.BUSY:
            await worker.kill()
        else:
            await worker.shutdown(self.grace)
        self._workers.discard(worker)


def _limits(result: ToolResult, worker: WorkerProcess, policy: SandboxPolicy) -> ToolResult:
    """Name the sandbox limit behind a failure, when one was hit."""
    if result.kind not in ("crashed", "tool_error"):
        return result
    err = result.error
    assert err is not None
    limit, why = None, ""
    if worker.output_exceeded:
        limit, why = "output", f"the worker wrote more than {policy.output_mb} MiB to stdout and stderr"
    elif worker.boundary.oom_kills():
        limit, why = "memory", f"the tool's processes went over the {policy.memory_mb} MiB memory limit (OOM kill)"
    elif err.signal == "SIGXCPU" or (err.signal == "SIGKILL" and _near_cpu_limit(worker, policy)):
        limit, why = "cpu", f"the worker used its {policy.cpu_seconds} s of CPU time"
    elif worker.boundary.pids_limit_hits():
        limit, why = "processes", f"the tool tried to run more than {policy.max_procs} processes"
    if limit is None:
        return result
    return error_result(
        ErrorKind.LIMIT_EXCEEDED,
        f"{limit} limit exceeded: {why}; raise it in the sandbox policy if the tool needs more",
        limit=limit,
        exit_code=err.exit_code,
        signal=err.signal,
        stderr_tail=err.stderr_tail,
        traceback=err.traceback,
        module=err.module,
    )


def _near_cpu_limit(worker: WorkerProcess, policy: SandboxPolicy) -> bool:
    # SIGKILL at the hard limit (soft + 5 s), for a tool that ignored SIGXCPU.
    return policy.cpu_seconds is not None and worker.cpu_seconds() >= policy.cpu_seconds


def _version() -> str:
    from ._version import __version__

    return __version__


def _check_schemas(result: p.LoadResult) -> dict[str, str]:
    problems: dict[str, str] = {}
    for d in result.tools:
        if d.params_kind == "json_schema":
            try:
                ArgumentValidator(d.parameters)
            except SchemaProblem as exc:
                problems[d.name] = str(exc)
    return problems


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _tail(worker: WorkerProcess | None) -> str | None:
    return (worker.stderr_tail.text() or None) if worker is not None else None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


@asynccontextmanager
async def open_runner(
    tool_paths: Sequence[str] = (),
    *,
    cwd: str | os.PathLike[str] | None = None,
    builtin_tool_names: Iterable[str] = (),
    default_timeout: float = DEFAULT_TIMEOUT,
    grace: float = DEFAULT_GRACE,
    load_timeout: float = DEFAULT_LOAD_TIMEOUT,
    max_frame_bytes: int = p.DEFAULT_MAX_FRAME_BYTES,
    env: Mapping[str, str] | None = None,
    discover_sources: bool = True,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    home: str | os.PathLike[str] | None = None,
    sandbox: SandboxPolicy | None = None,
    tool_policies: Mapping[str, SandboxPolicy] | None = None,
    max_workers: int | None = None,
    max_calls_per_worker: int | None = 1000,
    idle_timeout: float | None = 300.0,
    max_worker_rss_mb: int | None = 1024,
    spare_workers: int = 1,
    wanted_tool: str | None = None,
) -> AsyncIterator[Runner]:
    """Discover tools and own their workers for the duration of the block.

    Args:
        tool_paths: extra tool files or folders (like the CLI's ``--tools``),
            relative to ``cwd``; they come after every discovered source.
        cwd: the project directory, which tools see as ``api.cwd``; default: the current one.
        builtin_tool_names: names tools may not take.
        default_timeout: seconds a call may take unless the tool or the call says otherwise.
        grace: seconds between SIGTERM and the tree kill in the ladder.
        load_timeout: seconds a module may take to import and run its factory.
        max_frame_bytes: the largest protocol message accepted either way.
        env: the workers' environment; default: the host's.
        discover_sources: False loads only ``tool_paths`` (no .xcsh, Claude,
            Codex, plugin sources).
        cache: remember what unchanged modules define, so they are not imported
            again on the next run (see ``runner._cache``).
        cache_dir: where; default ``$XDG_CACHE_HOME/xcsh-run`` or ``~/.cache/xcsh-run``.
        home: the user's home for discovery; default ``$HOME``.
        sandbox: the policy of every worker (default: ``SandboxPolicy()``,
            the ``contained`` level). See :class:`SandboxPolicy`.
        tool_policies: per-tool policies by tool name, instead of ``sandbox``.
        max_workers: calls running at once (each in its own worker); more wait
            their turn, first come first served. Default: twice the core count, at least 4.
        max_calls_per_worker: a warm worker is retired after this many calls.
        idle_timeout: seconds an idle warm worker is kept.
        max_worker_rss_mb: a warm worker grown past this is retired after its call.
        spare_workers: workers kept started (sandboxed, no module yet) so that a
            call needing a new worker only pays for importing its module. One
            starts with the runner; a taken spare is replaced only once some
            call has had to start a worker from scratch, so a one-shot run
            starts one worker, not two.
        wanted_tool: the one tool this runner is opened to call (the CLI's
            ``xcsh-run TOOL``): discovery stops as soon as the module that
            defines it is known and every module before it in precedence is
            settled. Modules after it cannot change which tool the name
            means, so a slow or looping one costs nothing; they are not
            loaded and ``tools``/``errors`` leave them out.

    Raises:
        SandboxUnavailable: a policy asks for what this machine cannot
            enforce (the message names the missing kernel feature).

    Cancellation: leaving the block (normally, by exception or by
    cancellation) stops every worker and waits until none is left.
    """
    for label, value in (("default_timeout", default_timeout), ("grace", grace), ("load_timeout", load_timeout)):
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"{label} must be a positive number of seconds, got {value!r}")
    if not 1024 <= max_frame_bytes <= 2**32 - 1:
        raise ConfigError(f"max_frame_bytes must be between 1 KiB and 4 GiB, got {max_frame_bytes}")
    if max_workers is not None and max_workers < 1:
        raise ConfigError(f"max_workers must be at least 1, got {max_workers}")
    if spare_workers < 0:
        raise ConfigError(f"spare_workers must be 0 or more, got {spare_workers}")
    work_dir = os.fspath(cwd) if cwd is not None else os.getcwd()
    if not Path(work_dir).is_dir():  # noqa: ASYNC240 - once per runner
        raise ConfigError(f"cwd {work_dir!r} is not a directory")
    warnings: list[str] = []
    module_cache = None
    cache_root = Path(cache_dir) if cache_dir is not None else default_dir()
    if cache:
        module_cache = ModuleCache(cache_root, warnings)
    policy = sandbox if sandbox is not None else SandboxPolicy()
    cgroups = CgroupRoot.create()
    try:

        def prepare() -> Probe:
            # Workdirs of hosts that died (SIGKILL, power loss) are swept here,
            # as their cgroups are in CgroupRoot.create: nothing else would.
            for left in sweep_stale_workdirs():
                log.warning("could not remove all of the stale worker workdir %s", left)
            return probe(
                cache_root if cache else None,
                cgroup_v2=cgroups is not None,
                memory_cgroup=cgroups is not None and cgroups.memory is not None,
                pids_cgroup=cgroups is not None and cgroups.pids is not None,
            )

        found = await trio.to_thread.run_sync(prepare)
        # Fail closed, before any worker exists.
        unenforced = check(policy, found)
        for tool_policy in (tool_policies or {}).values():
            check(tool_policy, found)
    except BaseException:
        if cgroups is not None:
            with trio.CancelScope(shield=True):  # also when the probe was cancelled
                await trio.to_thread.run_sync(cgroups.remove)
        raise
    async with trio.open_nursery() as nursery:
        runner = Runner(
            nursery,
            cwd=os.path.abspath(work_dir),  # noqa: ASYNC240
            env=os.environ if env is None else env,
            default_timeout=default_timeout,
            grace=grace,
            load_timeout=load_timeout,
            max_frame_bytes=max_frame_bytes,
            builtin_tool_names=builtin_tool_names,
            home=os.fspath(home) if home is not None else None,
            cache=module_cache,
            warnings=warnings,
            sandbox=policy,
            tool_policies=tool_policies or {},
            probe=found,
            cgroups=cgroups,
            unenforced=unenforced,
            max_workers=max_workers or max(4, 2 * (os.cpu_count() or 1)),
            max_calls_per_worker=max_calls_per_worker,
            idle_timeout=idle_timeout,
            max_worker_rss_mb=max_worker_rss_mb,
            spare_workers=spare_workers,
        )
        try:
            nursery.start_soon(runner._run_housekeeping)
            await runner._housekeeping_ready.wait()
            # The spare starts while discovery runs: they overlap.
            runner._background(runner._refill_spares, policy)
            if idle_timeout is not None:
                runner._background(runner._reap_idle)
            await runner.load(tool_paths, discover_sources=discover_sources, wanted_tool=wanted_tool)
            yield runner
        finally:
            await runner.aclose()  # stops the housekeeping tasks first, and waits for them


class CustomToolsLoadResult(msgspec.Struct, frozen=True):
    """What :func:`discover_and_load_custom_tools` found: tools, and every error with its source."""

    tools: list[ToolInfo]
    errors: list[LoadError]


async def discover_and_load_custom_tools(
    configured_paths: Sequence[str], cwd: str, builtin_tool_names: Iterable[str] = (), **options: Any
) -> CustomToolsLoadResult:
    """Discover every source, load each module in a worker, and return ``{tools, errors}``.

    The workers are stopped before this returns; use :func:`open_runner` to
    keep them for calls. ``options`` are those of :func:`open_runner`.
    """
    async with open_runner(configured_paths, cwd=cwd, builtin_tool_names=builtin_tool_names, **options) as runner:
        return CustomToolsLoadResult(tools=runner.tools, errors=runner.errors)


async def load_custom_tools(
    paths: Sequence[str], cwd: str, builtin_tool_names: Iterable[str] = (), **options: Any
) -> CustomToolsLoadResult:
    """Load exactly ``paths`` (no discovery), each in a worker, and return ``{tools, errors}``."""
    async with open_runner(
        paths, cwd=cwd, builtin_tool_names=builtin_tool_names, discover_sources=False, **options
    ) as runner:
        return CustomToolsLoadResult(tools=runner.tools, errors=runner.errors)
