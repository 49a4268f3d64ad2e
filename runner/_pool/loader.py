"""The loader: a worker with a module loaded, for discovery and for calls alike.

Rules:

1. **One route to a worker.** Discovery's loads, a cold call and a render all
   get their worker here: an idle one with the module loaded under the
   policy, else a new one (``spawn_loaded``). A warm call takes an idle one
   without a checkpoint (``peek`` then ``take``), from the same pool.
2. **A load's time is the worker's CPU time** (``load_deadline``), with a
   longer wall bound, counted from the ``load`` request.
3. **The worker's load is the truth.** What a call is planned with may come
   from the module cache, which any process of this user can write:
   ``as_loaded`` compares it with what the worker loaded, on every call, and
   ``heal`` rewrites the catalog and the cache entry when they differ.
4. **Cancellation reaps.** A load that is cancelled leaves no worker behind
   before ``Cancelled`` leaves.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import msgspec
import trio

from xcsh_run._config import RunnerConfig
from xcsh_run._discovery import (
    LAST_STDERR,
    CachedLoad,
    Candidate,
    Catalog,
    EnvError,
    LoadError,
    ModuleCache,
    Outcome,
    ToolInfo,
    check_schemas,
    describe,
    fingerprint,
    from_load,
    js_hint,
    last_line,
    metadata_file,
    runtime_for,
)
from xcsh_run._errors import (
    ConfigError,
    RemoteError,
    RemoteProtocolError,
    WorkerDied,
    WorkerError,
    WorkerStartupError,
    describe_exit,
)
from xcsh_run._pool.interface import PoolWorker
from xcsh_run._pool.load_deadline import LoadDeadline
from xcsh_run._pool.worker_pool import Slot, WorkerPool
from xcsh_run._process import fault_point
from xcsh_run._sandbox import SandboxPolicy
from xcsh_run._version import __version__
from xcsh_run.worker import protocol as p


class LoadFailed(Exception):
    """A worker could not be given its module; the message says why."""

    def __init__(
        self, message: str, stderr_tail: str | None = None, *, deterministic: bool = False, startup: bool = False
    ) -> None:
        self.stderr_tail = stderr_tail
        self.deterministic = deterministic  # worth caching: not a timeout or a crash
        # The worker never got to the module: a host-side failure (fds, disk,
        # cgroups) or a worker that died starting. Reported as `crashed`.
        self.startup = startup
        super().__init__(message)


class Loader:
    """Workers with modules loaded, from one runner's pool, for what its catalog found."""

    def __init__(self, config: RunnerConfig, pool: WorkerPool, catalog: Catalog, cache: ModuleCache | None) -> None:
        self._config = config
        self._pool = pool
        self._catalog = catalog
        self._cache = cache

    async def load(
        self, configured_paths: Sequence[str] = (), *, discover_sources: bool = True, wanted_tool: str | None = None
    ) -> None:
        """Discover modules and describe them (see ``Runner.load``)."""
        found = await self._catalog.discover(
            configured_paths, discover_sources=discover_sources, wanted_tool=wanted_tool
        )
        outcomes = found.settled
        if outcomes is None:
            outcomes = await self._load_all(found.candidates, wanted_tool)
        self._catalog.merge(outcomes)

    async def _load_all(self, candidates: Sequence[Candidate], wanted_tool: str | None) -> list[Outcome | None]:
        outcomes: list[Outcome | None] = [None] * len(candidates)
        limiter = trio.CapacityLimiter(max(1, os.cpu_count() or 1))
        settled = trio.Event()
        left = len(candidates)

        def decided() -> bool:
            # The first settled module (in precedence order) that defines the
            # name decides it, provided every module before it is settled.
            for outcome in outcomes:
                if outcome is None:
                    return False
                if any(info.name == wanted_tool for info in outcome[0]):
                    return True
            return False

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
                nursery.start_soon(one, index, candidate)
            if wanted_tool is not None:
                await settled.wait()  # or every load finished: the nursery's own end
                nursery.cancel_scope.cancel()  # the rest cannot change what the name means
        return outcomes

    async def _load_candidate(self, candidate: Candidate) -> Outcome:
        path = candidate.resolved
        refused = metadata_file(candidate)
        if refused is not None:
            return refused
        fp = None
        if self._cache is not None:
            fp = await trio.to_thread.run_sync(fingerprint, candidate, __version__)
            cached = self._cache.get(candidate, fp) if fp is not None else None
            if cached is not None:
                return from_load(candidate, cached)
        if not os.path.exists(path):  # noqa: ASYNC240 - one stat, cheaper than a thread hop
            message = f"{candidate.path}: no such file or folder; check the path given to --tools"
            return [], [LoadError(candidate.path, message, candidate.source)]
        try:
            slot, result = await self.spawn_loaded(candidate, self._config.load_timeout, self._config.sandbox)
        except LoadFailed as exc:
            if exc.deterministic and self._cache is not None and fp is not None:
                self._cache.put(candidate, CachedLoad(fingerprint=fp, load_error=str(exc)))
            return [], [LoadError(candidate.path, str(exc), candidate.source, exc.stderr_tail)]
        self._pool.release(slot)
        schema_errors: dict[str, str] = {}
        if any(d.params_kind == "json_schema" or d.output_schema is not None for d in result.tools):
            # Checking a schema imports jsonschema: do it once, here, where a
            # worker was started anyway, and remember the verdict in the cache.
            schema_errors = await trio.to_thread.run_sync(check_schemas, result)
        entry = CachedLoad(fingerprint=fp or "", result=result, schema_errors=schema_errors)
        if self._cache is not None and fp is not None:
            self._cache.put(candidate, entry)
        return from_load(candidate, entry)

    async def spawn_loaded(
        self, candidate: Candidate, timeout: float, policy: SandboxPolicy
    ) -> tuple[Slot, p.LoadResult]:
        """A worker under ``policy`` with ``candidate`` loaded, within ``timeout`` CPU seconds; raises LoadFailed.

        Cancellation: the worker is gone (bounded) before ``Cancelled`` leaves.
        """
        module = candidate.resolved
        worker: PoolWorker | None = None  # set once the module is being loaded
        # CPU seconds of the worker's tree, and a longer wall bound, never shorter than ``timeout`` (a call's own).
        deadline = LoadDeadline(timeout, self._config.load_wall_bound)

        async def load(started: PoolWorker) -> p.LoadResult:
            nonlocal worker
            worker = started
            fault_point("load", started.pid)
            return await deadline.answer(started, p.LOAD, _load_params(candidate))

        try:
            # Before the load's deadline: a first build of the module's own environment takes a while.
            tool_env = await runtime_for(candidate, self._config.cache_dir)
            with deadline.bounds():
                slot, result = await self._pool.start_loaded(module, policy, load, tool_env)
                slot.loaded = result
                return slot, result
            raise LoadFailed(deadline.message(module), _tail(worker))
        except EnvError as exc:  # its `# /// script` block, or an installer's failure (not cached)
            raise LoadFailed(str(exc), deterministic=exc.deterministic) from None
        except RemoteError as exc:
            # The module itself refused to load: the same file will fail the same way.
            message = exc.error.message + js_hint(candidate, policy.level)
            raise LoadFailed(message, _tail(worker), deterministic=True) from None
        except ConfigError as exc:
            raise LoadFailed(f"{module}: {exc}") from None
        except WorkerDied as exc:
            loading = worker is not None
            raise LoadFailed(
                f"{module}: the worker {describe_exit(exc.returncode)} "
                + ("while loading the module" if loading else "while starting, before the module was imported")
                + (f"{LAST_STDERR}{last_line(exc.stderr_tail)}" if exc.stderr_tail.strip() else ""),
                exc.stderr_tail or None,
                startup=not loading,
            ) from None
        except WorkerStartupError as exc:
            raise LoadFailed(f"{module}: {exc}", _tail(worker), startup=True) from None
        except OSError as exc:
            # A host-side failure between steps (a fault while sending `load`):
            # a result with the errno, never a raw OSError out of a call.
            raise LoadFailed(f"{module}: could not start a worker: {exc}", _tail(worker), startup=True) from None
        except (RemoteProtocolError, WorkerError, msgspec.DecodeError) as exc:
            raise LoadFailed(f"{module}: {exc}", _tail(worker)) from None

    def peek(self, module: str, policy: SandboxPolicy) -> Slot | None:
        """An idle worker with ``module`` loaded under ``policy``, left idle (the warm path takes it, rule 1)."""
        return self._pool.peek_idle(module, policy)

    def take(self, slot: Slot) -> None:
        """Take the idle ``slot`` that ``peek`` found, without a checkpoint."""
        self._pool.take(slot)

    async def finish(self, slot: Slot, *, healthy: bool) -> None:
        """A call is done with ``slot``'s worker: back to idle, or retired."""
        await self._pool.finish(slot, healthy=healthy)

    async def acquire(self, info: ToolInfo, timeout: float, policy: SandboxPolicy) -> Slot:
        """A busy worker with ``info``'s module loaded under ``policy``: an idle one, else a new one."""
        slot = await self._pool.take_idle(info.module, policy)
        if slot is not None:
            return slot
        slot, result = await self.spawn_loaded(self._catalog.candidates[info.module], timeout, policy)
        if not any(d.name == info.name for d in result.tools):
            # The file changed since it was described (or the cache is stale
            # in a way its fingerprint missed): do not run something else.
            with trio.CancelScope(shield=True):
                await self._pool.retire(slot)
            raise LoadFailed(
                f"{info.module} no longer defines a tool named {info.name!r}; it changed since discovery, run again"
            )
        self._pool.occupy(slot)
        return slot

    def as_loaded(self, info: ToolInfo, slot: Slot) -> ToolInfo | None:
        """``info`` as the module in ``slot``'s worker really defines it, if that differs; else None.

        What a call is planned with (schema, timeout, concurrency) may come from
        the module cache, which any process of this user can write, the tools
        included: the worker's own load is the truth, checked on every call.
        """
        if slot.loaded is None:
            return None
        for d in slot.loaded.tools:
            if d.name == info.name:
                real = describe(d, info.module, info.source)
                return real if real != info else None
        return None  # gone from the module: acquire() refuses such a worker, a warm one serves its last load

    async def heal(self, real: ToolInfo, result: p.LoadResult) -> None:
        """Take a worker's load of ``real.module`` as the truth: the catalog's tools and its cache entry."""
        self._catalog.update(real, result)
        candidate = self._catalog.candidates.get(real.module)
        if self._cache is None or candidate is None:
            return
        fp = await trio.to_thread.run_sync(fingerprint, candidate, __version__)
        if fp is None:
            return
        schema_errors = await trio.to_thread.run_sync(check_schemas, result)
        self._cache.put(candidate, CachedLoad(fingerprint=fp, result=result, schema_errors=schema_errors))


def _load_params(candidate: Candidate) -> p.LoadParams:
    if candidate.kind == "js":  # the JS loader imports the file or folder; the rest is Python's
        return p.LoadParams(path=candidate.resolved)
    return p.LoadParams(
        path=candidate.resolved, module=candidate.module, sys_path=candidate.sys_path, factory=candidate.factory
    )


def _tail(worker: PoolWorker | None) -> str | None:
    return (worker.stderr_tail.text() or None) if worker is not None else None
