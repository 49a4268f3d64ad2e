"""The trio host: the :class:`Runner` facade and :func:`open_runner`.

A runner is a few parts, each in its own module, wired together here:

- ``_config``: the frozen, validated :class:`RunnerConfig`;
- ``_discovery``: what was found, the tools, conflicts and load problems
  (the ``Catalog``);
- ``_pool``: every worker's pool state and the rules that decide over it
  (``ProcessFactory`` starts the real worker processes), and the ``Loader``:
  the one route to a worker with a module loaded;
- ``_calls``: the call table, one call's lifecycle, the cancellation ladder
  and what a worker's answer means (every call ends in exactly one result);
- ``host_api``: the host's half of the tool API (UI, logs, abort, pending
  actions, session events, renders).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import trio

from xcsh_run._calls import (
    Calls,
    CallTable,
    CancelLadder,
    DeadlineKeeper,
    TraceContext,
    UpdateCallback,
    check_traceparent,
)
from xcsh_run._config import (
    DEFAULT_FORKSERVER,
    DEFAULT_GRACE,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_LOAD_TIMEOUT,
    DEFAULT_MAX_CALLS_PER_WORKER,
    DEFAULT_MAX_WORKER_RSS_MB,
    DEFAULT_QUEUE_TIMEOUT,
    DEFAULT_SPARE_WORKERS,
    DEFAULT_TIMEOUT,
    RunnerConfig,
    RunnerSettings,
)
from xcsh_run._discovery import BUILTIN_MODULE, Catalog, LoadError, ModuleCache, ToolInfo, default_dir, snippet
from xcsh_run._errors import ConfigError, runner_closed
from xcsh_run._host import approval
from xcsh_run._host.host_api import HostBridge, UIContext, log
from xcsh_run._host.host_limits import HostLimits, host_limits, watch_host_limits
from xcsh_run._host.session_history import DEFAULT_SESSION, WIRE_KEY, SessionHistories
from xcsh_run._host.statistics import RunnerStatistics
from xcsh_run._platform import require_linux
from xcsh_run._pool import Housekeeping, Loader, PoolRules, ProcessFactory, WorkerFactory, WorkerPool
from xcsh_run._process import CgroupRoot, TeardownStats, sweep_stale_workdirs
from xcsh_run._results import ErrorKind, PendingAction, ToolResult, error_result, named
from xcsh_run._sandbox import Probe, SandboxPolicy, check, probe, protect_host
from xcsh_run.worker import protocol as p

# How long aclose waits for spare refills and the reaper to stop once
# cancelled: each of their own waits is bounded well below this.
_HOUSEKEEPING_BOUND: Final = 15.0
# The block a Runner belongs to, as a closed one's error names it.
_BLOCK: Final = "async with open_runner(...)"


class Runner(RunnerSettings):
    """Owns tool workers. Get one from [`open_runner`][xcsh_run.open_runner]; it has no public constructor.

    Every call ends in exactly one [`ToolResult`][xcsh_run.ToolResult]; [`call_tool`][xcsh_run.Runner.call_tool]
    raises only ``trio.Cancelled`` (after the worker's tree is gone) when the
    *caller's* scope is cancelled. See ``xcsh_run._calls.lifecycle`` for the ladder.

    Once closed (from the start of [`aclose`][xcsh_run.Runner.aclose]), what would run in a worker
    (``call_tool``, ``load``, ``emit_session_event``, the renders)
    raises [`RunnerClosedError`][xcsh_run.RunnerClosedError]; what the runner knew stays readable
    (``tools``, ``statistics()``, ``session_history()``, ...), and ``cancel`` and
    the setters change nothing, so that closing code may call them at any time.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        config: RunnerConfig,
        *,
        cache: ModuleCache | None,
        warnings: list[str],
        probe: Probe,
        cgroups: CgroupRoot | None,
        unenforced: list[str],
        factory: WorkerFactory | None = None,
    ) -> None:
        assert config.cwd is not None  # resolved by open_runner
        self.config = config
        self.unenforced = unenforced
        self._teardown = TeardownStats()
        self._reliable = cgroups is not None
        self._host_limits: HostLimits | None = host_limits() if factory is None else None
        self._housekeeping = Housekeeping(nursery)
        process_factory = ProcessFactory(
            nursery, cwd=config.cwd, env=os.environ if config.env is None else config.env, probe=probe,
            cgroups=cgroups, max_frame_bytes=config.max_frame_bytes, teardown=self._teardown,
            forkserver_policies=(config.sandbox, *config.tool_policies.values(), *config.tool_grants.values())
            if config.forkserver else None,
        )  # fmt: skip
        self._process_factory = process_factory
        self._factory: WorkerFactory = factory or process_factory
        rules = PoolRules(
            max_calls_per_worker=config.max_calls_per_worker, idle_timeout=config.idle_timeout,
            max_worker_rss_mb=config.max_worker_rss_mb, spare_count=config.spare_workers,
        )  # fmt: skip
        # A spare's start is the first part of the load that takes it (``load_deadline``): the same wall bound.
        self._pool = WorkerPool(
            self._factory, rules, nursery=nursery, housekeeping=self._housekeeping, start_timeout=config.load_wall_bound
        )
        self._catalog = Catalog(config, cache, warnings)
        self._loader = Loader(config, self._pool, self._catalog, cache)
        table = CallTable()
        self._bridge = HostBridge(
            config, self._pool, self._catalog, self._loader, table, nursery=nursery, housekeeping=self._housekeeping
        )
        self._histories = SessionHistories(str(config.cwd))
        process_factory.on_request = self._bridge.on_request
        process_factory.on_notification = self._bridge.on_notification
        self._calls = Calls(
            self._loader, table=table, max_workers=config.worker_limit, probe=probe,
            checked={config.sandbox: list(unenforced)}, deliver_cancel=CancelLadder(config.grace),
            before_call=self._bridge.sync_ui, ready=self._bridge.ui_synced,
            deadlines=DeadlineKeeper(self._housekeeping), queue_timeout=config.queue_timeout,
        )  # fmt: skip

    # --- configuration (the rest: RunnerSettings) ---------------------------------

    @property
    def project_root(self) -> str:
        """The project root, whose ``.xcsh/tools``, ``.claude/tools`` and ``.codex/tools`` are read.

        The nearest folder from ``cwd`` up with ``.xcsh/``, else with ``.git``,
        else ``cwd`` itself; tools still see ``cwd`` as ``api.cwd``.
        """
        return self._catalog.project_root

    # --- the registry --------------------------------------------------------------------

    @property
    def tools(self) -> list[ToolInfo]:
        """Every loaded tool, in discovery order (hidden ones included)."""
        return list(self._catalog.tools.values())

    @property
    def errors(self) -> list[LoadError]:
        """Every module or factory entry that failed to load (or was shadowed), with the reason."""
        return list(self._catalog.errors)

    @property
    def warnings(self) -> list[str]:
        """Problems that changed nothing but deserve a look (a corrupt cache, a bad registry)."""
        return self._catalog.warnings

    def get_tool(self, name: str) -> ToolInfo | None:
        """The loaded tool called ``name``, or None."""
        return self._catalog.tools.get(name)

    def policy_for(self, name: str) -> SandboxPolicy:
        """The sandbox policy a tool runs under: its own, else the runner's; for a loaded tool, as its source allows."""
        return self._catalog.policy_for(name)

    async def load(
        self,
        configured_paths: Sequence[str] = (),
        *,
        discover_sources: bool | None = None,
        wanted_tool: str | None = None,
    ) -> None:
        """Discover modules and describe them, each in its own worker, in parallel.

        A module the cache knows, unchanged, is not imported at all: its tools
        are registered from the cache and a worker starts only when one is
        called. Modules load in parallel (bounded by the core count) but are
        merged in precedence order, so the first definition of a name wins.
        With ``wanted_tool``, loading stops once that name's definition is
        settled (see [`open_runner`][xcsh_run.open_runner]). ``discover_sources`` None: as the
        runner was opened (``config.discover_sources``, which also decided
        whether the config files' grants were read).
        """
        self._check_open()
        if discover_sources is None:
            discover_sources = self.config.discover_sources if self.config.discover_sources is not None else True
        await self._loader.load(configured_paths, discover_sources=discover_sources, wanted_tool=wanted_tool)

    # --- calls ----------------------------------------------------------------------------

    def cancel(self, tool_call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool:
        """Cancel a running call; it ends ``cancelled``. ``force``: kill it now, even in its grace. False if none."""
        return self._calls.table.cancel(tool_call_id, reason, force=force)

    def cancel_all(self, reason: str = "cancelled") -> None:
        """Cancel every running call."""
        self._calls.table.cancel_all(reason)

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
        session_id: str | None = None,
        traceparent: str | None = None,
    ) -> ToolResult:
        """Run one tool call to its single terminal result.

        Args:
            name: the tool's name.
            arguments: the JSON object of arguments.
            on_update: called with each partial result ``{"content", "details"}``,
                in order, before this returns. It runs on the host's event loop
                and must not block.
            timeout: seconds; the smallest of this, the policy's ``wall_seconds``
                and the tool's own timeout wins (``default_timeout`` when neither
                this nor the policy gives one). It starts when the call leaves the queue
                (see ``queue_timeout``); starting a worker counts against it.
            tool_call_id: an id for [`cancel`][xcsh_run.Runner.cancel] and for the tool; generated if absent.
            ctx: read-only state shared with the tool as ``ctx``.
            sandbox: this call's policy, instead of the tool's or the runner's.
            operation_id: groups calls into one operation: a tool's
                ``ctx.abort()`` cancels every running call of its operation.
            session_id: the session the call belongs to (``ctx.sessionManager``
                shows its history, and the result is recorded there); the
                runner's own ``"default"`` session if None.
            traceparent: the W3C ``traceparent`` of the caller's span this call
                belongs to; the host's records of the call name its trace id.

        Returns:
            The result; ``is_error`` is True for every failure.

        Raises:
            RunnerClosedError: the runner is closed.
            ValueError: ``traceparent`` is not a W3C traceparent.

        Cancellation: if the caller's scope is cancelled, the worker goes
        through the ladder and its tree is gone before ``Cancelled`` propagates.
        """
        self._check_open()
        trace = check_traceparent(traceparent)
        result = await self._call_tool(
            name, arguments, on_update=on_update, timeout=timeout, tool_call_id=tool_call_id,
            ctx=ctx, sandbox=sandbox, operation_id=operation_id, session_id=session_id, trace=trace,
        )  # fmt: skip
        return named(result, name)

    async def _call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        on_update: UpdateCallback | None,
        timeout: float | None,
        tool_call_id: str | None,
        ctx: Mapping[str, Any] | None,
        sandbox: SandboxPolicy | None,
        operation_id: str | None,
        session_id: str | None,
        trace: TraceContext | None,
    ) -> ToolResult:
        info = self._catalog.lookup(name)
        if info is None:
            return self._catalog.not_found(name)
        args: Any = {} if arguments is None else arguments
        if not isinstance(args, Mapping):
            message = f"arguments for {name!r} must be a JSON object, got {type(args).__name__}"
            return error_result(ErrorKind.INVALID_ARGUMENTS, message, path="$", expected="an object", got=snippet(args))
        if info.module == BUILTIN_MODULE:
            return await self._bridge.resolve(args)
        session = session_id if session_id is not None else DEFAULT_SESSION
        tool_call_id = tool_call_id if tool_call_id is not None else f"call-{uuid.uuid4().hex[:12]}"
        # Asked before anything runs; the prompt is routed by the call's id.
        refused = None
        if info.approval is not None:
            refused = await approval.gate(self._bridge, info, args, tool_call_id, approve=self.config.approve)
        if refused is not None:
            self._histories.record(session, tool_call_id, name, refused)
            return refused
        shared = {**self._bridge.context, **(ctx or {}), WIRE_KEY: self._histories.view(session)}
        result = await self._calls.call(
            info, args, timeout=timeout, policy=sandbox if sandbox is not None else self.policy_for(name),
            default_timeout=self.config.default_timeout, ctx=shared,
            on_update=on_update, tool_call_id=tool_call_id, operation_id=operation_id, trace=trace,
        )  # fmt: skip
        self._histories.record(session, tool_call_id, name, result)
        return result

    # --- the host API ----------------------------------------------------------------------

    @property
    def context(self) -> dict[str, Any]:
        """The state shared with tools as ``ctx`` (see [`set_context`][xcsh_run.Runner.set_context])."""
        return self._bridge.context

    @context.setter
    def context(self, state: Mapping[str, Any]) -> None:
        self.set_context(state)

    def set_context(self, state: Mapping[str, Any]) -> None:
        """The session/model state shared with tools as ``ctx`` (read-only on their side), from the next call on."""
        self._bridge.context = dict(state)

    def set_ui_context(self, ui: UIContext | None, has_ui: bool = True) -> None:
        """Attach a UI (sync or async methods of SPEC §2's UI), or None for the no-op one.

        Takes effect at once, for live workers too: their ``api.has_ui`` changes.
        """
        self._bridge.set_ui_context(ui, has_ui)

    def set_log_listener(self, listener: Callable[[p.LogParams], None] | None) -> None:
        """Also give every record a tool logs (``api.log``) to ``listener``, whatever the logging levels.

        It runs on the runner's trio thread, as each record arrives, and must not
        block (the MCP server queues each record for the client whose call made it).
        None removes it.
        """
        self._bridge.log_listener = listener

    def pending_actions(self) -> list[PendingAction]:
        """Previews waiting for ``resolve``, newest last; ``resolve`` with one's ``id`` settles that one."""
        return [a.preview() for a in self._bridge.pending]

    async def emit_session_event(
        self, event: Mapping[str, Any], *, timeout: float = 5.0, session_id: str | None = None
    ) -> list[str]:
        """Deliver a session event to every live worker with ``on_session`` tools.

        Waits at most ``timeout`` seconds; a hook that raises or takes longer
        becomes a warning (returned, and logged), never an error. The hooks'
        ``ctx.sessionManager`` shows ``session_id``'s history (the runner's
        ``"default"`` session if None): for ``switch``/``branch``/``tree``, call
        [`set_session_history`][xcsh_run.Runner.set_session_history] first with the branch now current.
        """
        self._check_open()
        return await self._emit(event, timeout, session_id)

    async def _emit(self, event: Mapping[str, Any], timeout: float, session_id: str | None) -> list[str]:
        view = self._histories.view(session_id if session_id is not None else DEFAULT_SESSION)
        return await self._bridge.emit_session_event(event, timeout=timeout, ctx={WIRE_KEY: view})

    def set_session_history(self, session_id: str | None, entries: Iterable[Mapping[str, Any]]) -> None:
        """Make ``entries`` (session entries in the original design's shape, oldest first) a session's history.

        For a host that keeps its own conversation (a resumed session, a new
        branch): tools see them through ``ctx.sessionManager`` from the next
        call or session event on, and the calls made afterwards are appended.
        ``None`` names the runner's ``"default"`` session.
        """
        self._histories.replace(session_id if session_id is not None else DEFAULT_SESSION, entries)

    def session_history(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """A copy of a session's recorded entries, oldest first (``"default"`` if None)."""
        return self._histories.entries(session_id if session_id is not None else DEFAULT_SESSION)

    async def render_call(self, name: str, args: Any, theme: Any = None, *, timeout: float = 2.0) -> str:
        """The tool's ``render_call(args, theme)``, run in its worker; the default rendering on any trouble."""
        self._check_open()
        return await self._bridge.render_call(name, args, theme, timeout)

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
        self._check_open()
        return await self._bridge.render_result(name, result, options, theme, args, timeout)

    # --- lifecycle -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the runner began closing."""
        return self._pool.closed

    def _check_open(self) -> None:
        if self.closed:
            raise runner_closed(_BLOCK)

    def statistics(self) -> RunnerStatistics:
        """A snapshot of the runner's workers and calls."""
        counts = self._pool.counts()
        return RunnerStatistics(
            idle_workers=counts["idle"],
            busy_workers=counts["busy"],
            starting_workers=self._pool.starting,
            running_calls=len(self._calls.table),
            queued_calls=self._calls.queued(),
            spare_workers=counts["spare"],
            workers_started=self._pool.started,
            reliable_boundary=self._reliable,
            pinned_workers=counts["pinned"],
            teardown_overruns=self._teardown.overruns,
            workers_forked=self._process_factory.workers_forked,
        )

    async def _start_housekeeping(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._housekeeping.run)
        await self._housekeeping.ready.wait()
        self._pool.want_spares(self.config.sandbox)  # the spare starts while discovery runs: they overlap
        if self.config.idle_timeout is not None:
            self._housekeeping.start_soon(self._pool.reap_idle)
        if self._host_limits is not None:
            self._housekeeping.start_soon(watch_host_limits, self._host_limits, self._calls.table)

    async def aclose(self) -> None:
        """Stop every worker (shutdown request, then the tree kill). Idempotent.

        Always leaves no worker process behind, even when cancelled: the
        teardown runs shielded.
        """
        self._pool.closed = True
        with trio.CancelScope(shield=True):
            # First stop starting things, and wait until they have stopped: a
            # spare half-started kills its worker on the way out, and its
            # attach must be over before the cgroups are removed below.
            if not await self._housekeeping.stop(_HOUSEKEEPING_BOUND):
                self._teardown.overrun(f"housekeeping tasks did not stop within {_HOUSEKEEPING_BOUND:g} s")
            # Running calls (in their callers' tasks) stop through their own
            # ladder; give them that long before killing what is left, so that
            # a worker never gets `shutdown` before its call's `$/cancel`.
            self.cancel_all("runner closing")
            await self._calls.table.wait_empty(self.config.grace + 1.0)
            # `shutdown` reaches every live worker before it is stopped, bounded.
            # Each step runs even if the one before failed: an error here must
            # never leave a worker (and the supervisors holding the nursery) alive.
            try:
                await self._emit({"reason": "shutdown", "previousSessionFile": None}, self.grace, None)
            except Exception:
                log.exception("the shutdown session event failed; stopping the workers all the same")
            finally:
                try:
                    await self._pool.shutdown_all(self.config.grace)
                finally:
                    await self._factory.aclose()


@asynccontextmanager
async def open_runner(
    tool_paths: Sequence[str] = (),
    *,
    cwd: str | os.PathLike[str] | None = None,
    builtin_tool_names: Iterable[str] = (),
    default_timeout: float = DEFAULT_TIMEOUT,
    grace: float = DEFAULT_GRACE,
    load_timeout: float = DEFAULT_LOAD_TIMEOUT,
    load_wall_timeout: float | None = None,
    max_frame_bytes: int = p.DEFAULT_MAX_FRAME_BYTES,
    env: Mapping[str, str] | None = None,
    discover_sources: bool | None = None,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    home: str | os.PathLike[str] | None = None,
    sandbox: SandboxPolicy | None = None,
    tool_policies: Mapping[str, SandboxPolicy] | None = None,
    max_workers: int | None = None,
    queue_timeout: float | None = DEFAULT_QUEUE_TIMEOUT,
    max_calls_per_worker: int | None = DEFAULT_MAX_CALLS_PER_WORKER,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    max_worker_rss_mb: int | None = DEFAULT_MAX_WORKER_RSS_MB,
    spare_workers: int = DEFAULT_SPARE_WORKERS,
    wanted_tool: str | None = None,
    forkserver: bool = DEFAULT_FORKSERVER,
    approve: bool = False,
    config: RunnerConfig | None = None,
) -> AsyncIterator[Runner]:
    """Discover tools and own their workers for the duration of the block.

    Args:
        tool_paths: tool files or folders (like the CLI's ``--tools``), relative
            to ``cwd``. Given paths are all that is loaded, unless
            ``discover_sources=True`` adds the six sources of discovery (they
            then come first); with no paths, discovery is the default.
        cwd: and every other keyword: a field of `RunnerConfig`, which documents
            them all (``default_timeout``, ``grace``, ``load_timeout``, ``sandbox``,
            ``max_workers``, ``spare_workers``, ``wanted_tool``, ...).
        config: the same options as one [`RunnerConfig`][xcsh_run.RunnerConfig], instead of the
            keywords (which must then be left at their defaults).

    Raises:
        UnsupportedPlatform: this is not Linux (the message says how to run xcsh-run from here).
        ConfigError: an option out of range (see [`RunnerConfig`][xcsh_run.RunnerConfig]).
        SandboxUnavailable: a policy asks for what this machine cannot
            enforce (the message names the missing kernel feature).

    Cancellation: leaving the block (normally, by exception or by
    cancellation) stops every worker and waits until none is left.
    """
    require_linux()  # before anything is probed: elsewhere, one sentence instead of a failure deep inside
    keywords = RunnerConfig(
        cwd=cwd,  # type: ignore[arg-type]  # normalised to a str by RunnerConfig
        builtin_tool_names=frozenset(builtin_tool_names),
        default_timeout=default_timeout,
        grace=grace,
        load_timeout=load_timeout,
        load_wall_timeout=load_wall_timeout,
        max_frame_bytes=max_frame_bytes,
        env=env,
        discover_sources=discover_sources,
        cache=cache,
        cache_dir=cache_dir,  # type: ignore[arg-type]
        home=home,  # type: ignore[arg-type]
        sandbox=sandbox if sandbox is not None else SandboxPolicy(),
        tool_policies=tool_policies or {},
        max_workers=max_workers,
        queue_timeout=queue_timeout,
        max_calls_per_worker=max_calls_per_worker,
        idle_timeout=idle_timeout,
        max_worker_rss_mb=max_worker_rss_mb,
        spare_workers=spare_workers,
        wanted_tool=wanted_tool,
        forkserver=forkserver,
        approve=approve,
    )
    if config is None:
        config = keywords
    elif keywords != RunnerConfig():
        raise ConfigError("pass either config= or the options as keywords, not both")
    work_dir = config.cwd if config.cwd is not None else os.getcwd()
    if not Path(work_dir).is_dir():  # noqa: ASYNC240 - once per runner
        raise ConfigError(f"cwd {work_dir!r} is not a directory")
    # None resolved once, here where the paths are known, so that discovery and the config files' grants agree.
    discover = config.discover_sources if config.discover_sources is not None else not tool_paths
    config = dataclasses.replace(config, cwd=os.path.abspath(work_dir), discover_sources=discover)  # noqa: ASYNC240
    warnings: list[str] = []
    cache_root = Path(config.cache_dir) if config.cache_dir is not None else default_dir()
    module_cache = ModuleCache(cache_root, warnings) if config.cache else None
    protect_host()
    cgroups = CgroupRoot.create()
    try:

        def prepare() -> Probe:
            # Dead hosts' workdirs are swept here, their cgroups in CgroupRoot.create.
            for left in sweep_stale_workdirs():
                log.warning("could not remove all of the stale worker workdir %s", left)
            return probe(
                cache_root if config.cache else None,
                cgroup_v2=cgroups is not None,
                memory_cgroup=cgroups is not None and cgroups.memory is not None,
                pids_cgroup=cgroups is not None and cgroups.pids is not None,
                warnings=warnings,
            )

        found = await trio.to_thread.run_sync(prepare)
        # Fail closed, before any worker exists.
        unenforced = check(config.sandbox, found)
        for tool_policy in (*config.tool_policies.values(), *config.tool_grants.values()):
            check(tool_policy, found)
    except BaseException:
        if cgroups is not None:
            with trio.CancelScope(shield=True):  # also when the probe was cancelled
                await trio.to_thread.run_sync(cgroups.remove)
        raise
    async with trio.open_nursery() as nursery:
        runner = Runner(
            nursery, config, cache=module_cache, warnings=warnings, probe=found, cgroups=cgroups, unenforced=unenforced
        )
        if runner._host_limits is not None:
            runner._host_limits.acquire()
        try:
            await runner._start_housekeeping(nursery)
            await runner.load(tool_paths, discover_sources=discover, wanted_tool=config.wanted_tool)
            yield runner
        finally:
            try:
                await runner.aclose()  # stops the housekeeping tasks first, and waits for them
            finally:
                if runner._host_limits is not None:
                    runner._host_limits.release()
