"""The registry: what discovery found, the tools it defines, and every reason something did not load.

Modules load in parallel, each in its own worker taken from the pool (or
from the module cache, without a worker at all), but they are merged in
precedence order: the first definition of a name wins, and a later one is a
conflict with the reason spelled out. A worker that loaded a module goes back
to the pool's idle lists, ready for the first call of that module.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import msgspec
import trio

from worker import _protocol as p
from worker._requires import Requires

from . import _envs as envs
from ._cache import CachedLoad, ModuleCache, fingerprint
from ._config import RunnerConfig
from ._discovery import Candidate, Discovery, Shadowed, ToolSource, collect, locate_project, walk
from ._errors import ConfigError, RemoteProtocolError, WorkerDied, WorkerError, WorkerStartupError, describe_exit
from ._faults import fault_point
from ._grants import reaches, ungranted_note, withheld_note
from ._load_deadline import LoadDeadline
from ._pool import Slot, WorkerPool
from ._proc import RemoteError
from ._results import ToolResult
from ._sandbox import SandboxPolicy
from ._unknown_tool import unknown_tool
from ._validate import ArgumentValidator, SchemaProblem
from ._version import __version__
from ._worker_api import PoolWorker

RESOLVE_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["apply", "discard"], "description": "apply or discard the preview"},
        "reason": {"type": "string", "description": "why"},
    },
    "required": ["action", "reason"],
    "additionalProperties": False,
}
BUILTIN_MODULE: Final = "<built-in>"
# How a message about a dead worker ends with its last stderr line: people
# read it there, and the MCP server cuts it off what a model reads.
LAST_STDERR: Final = "; last stderr: "
log: Final = logging.getLogger("xcsh_run")


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
    output_schema: dict[str, Any] | None = None
    """The JSON Schema its ``details`` match (an object); checked on every result."""
    annotations: dict[str, Any] | None = None
    """MCP ToolAnnotations: ``title`` and the ``readOnlyHint``/``destructiveHint``/... hints."""
    icons: list[dict[str, Any]] | None = None
    """MCP icons: ``{"src", "mimeType"?, "sizes"?, "theme"?}``."""
    requires: Requires | None = None
    """What it declares it needs under ``strict`` (programs, paths, network); granted only by the user."""


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


_Outcome = tuple[list[ToolInfo], list[LoadError]]


class ToolRegistry:
    """The tools, load problems and warnings of one runner, and the loading that produces them."""

    def __init__(self, config: RunnerConfig, pool: WorkerPool, cache: ModuleCache | None, warnings: list[str]) -> None:
        assert config.cwd is not None
        self._config = config
        self._cwd = config.cwd
        self._pool = pool
        self._cache = cache
        self._warnings = warnings
        warnings.extend(config.grant_warnings)  # a project's config file that was not read, and why
        self._builtins = config.builtin_tool_names
        self.tools: dict[str, ToolInfo] = {}
        self._policies: dict[str, SandboxPolicy] = {}
        self.errors: list[LoadError] = []
        # Of `errors`, the modules, factory entries and schemas that failed (not conflicts, not shadowing).
        self.failures: list[LoadError] = []
        self.project_root = config.cwd  # until load() has looked for it
        self.candidates: dict[str, Candidate] = {}

    @property
    def warnings(self) -> list[str]:
        return list(self._warnings)

    async def load(
        self, configured_paths: Sequence[str] = (), *, discover_sources: bool = True, wanted_tool: str | None = None
    ) -> None:
        """Discover modules and describe them (see ``Runner.load``)."""
        cache_dir = self._cache.directory.parent if self._cache is not None else None
        root = await trio.to_thread.run_sync(locate_project, self._cwd, self._config.home)
        self.project_root = str(root.path)

        def walk_sources(warnings: list[str]) -> Iterator[Candidate | Shadowed]:
            return walk(
                configured_paths, self._cwd, warnings, home=self._config.home, include_sources=discover_sources,
                cache_dir=cache_dir, root=root,
            )  # fmt: skip

        def discover_all() -> Discovery:
            warnings: list[str] = []
            return collect(walk_sources(warnings), warnings)

        settled = None
        if wanted_tool is not None and self._cache is not None:
            # A run whose tool the cache settles reads nothing after its module.
            settled = await trio.to_thread.run_sync(self._settle_from_cache, walk_sources, wanted_tool)
        if settled is not None:
            found, outcomes = settled
        else:
            found = await trio.to_thread.run_sync(discover_all)
        self._warnings.extend(found.warnings)
        for shadow in found.shadowed:
            message = (
                f"{shadow.path}: not loaded, shadowed by {shadow.shadowed_by} (a higher-precedence module "
                "of the same name); rename one of them to load both"
            )
            self.errors.append(LoadError(shadow.path, message, shadow.source, shadowed_by=shadow.shadowed_by))
        if settled is None:
            outcomes = await self._load_all(found.candidates, wanted_tool)
        else:
            self.candidates.update((c.resolved, c) for c in found.candidates)
        for outcome in outcomes:
            if outcome is None:
                # Cancelled once wanted_tool was decided. Nothing after it is
                # registered either: it might claim a name this one defines.
                break
            infos, errors = outcome
            self.errors.extend(errors)
            self.failures.extend(errors)
            for info in infos:
                self._register(info)
        # The hidden built-in `resolve` exists only when some tool can defer its
        # effect (as in the original design, where it names a pending action).
        if any(t.deferrable for t in self.tools.values()) and "resolve" not in self.tools:
            self.tools["resolve"] = ToolInfo(
                name="resolve",
                label="Resolve",
                description="Apply or discard the newest pending preview.",
                parameters=RESOLVE_SCHEMA,
                module=BUILTIN_MODULE,
                source=ToolSource("builtin", "xcsh-run", "user"),
                hidden=True,
            )

    def _settle_from_cache(
        self, walk_sources: Callable[[list[str]], Iterator[Candidate | Shadowed]], wanted_tool: str
    ) -> tuple[Discovery, list[_Outcome | None]] | None:
        """Which module defines ``wanted_tool``, from the cache alone; None if that takes a worker.

        Discovery is walked in precedence order and stops at the first module
        that defines the name: the sources after it (the entry-point scan, the
        configured paths) are not read, since nothing there can take the name.
        Everything before it is read exactly as a full discovery reads it (each
        folder listed, each path resolved), and every module on the way must
        have a cache entry whose fingerprint is its content now; one that has
        none (new, edited, unreadable) might define the name, and only a worker
        can say: then None, and the caller loads as usual. So a cached answer is
        the answer a full load would give.
        """
        assert self._cache is not None
        warnings: list[str] = []
        walked: list[Candidate | Shadowed] = []
        outcomes: list[_Outcome | None] = []
        for found in walk_sources(warnings):
            walked.append(found)
            if isinstance(found, Shadowed):
                continue
            outcome = _metadata_file(found)
            if outcome is None:
                fp = fingerprint(found, __version__)
                cached = self._cache.get(found, fp) if fp is not None else None
                if cached is None:
                    return None
                outcome = _from_load(found, cached)
            outcomes.append(outcome)
            if any(info.name == wanted_tool for info in outcome[0]):
                return collect(walked, warnings), outcomes
        return None  # not defined anywhere: the full load reports why, with every source's problems

    async def _load_all(self, candidates: Sequence[Candidate], wanted_tool: str | None) -> list[_Outcome | None]:
        outcomes: list[_Outcome | None] = [None] * len(candidates)
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
                self.candidates[candidate.resolved] = candidate
                nursery.start_soon(one, index, candidate)
            if wanted_tool is not None:
                await settled.wait()  # or every load finished: the nursery's own end
                nursery.cancel_scope.cancel()  # the rest cannot change what the name means
        return outcomes

    def _register(self, info: ToolInfo) -> None:
        if info.name in self._builtins:
            message = f"tool name {info.name!r} conflicts with a built-in tool; rename it"
            self.errors.append(LoadError(info.module, message, info.source))
        elif (first := self.tools.get(info.name)) is not None:
            message = (
                f"tool name {info.name!r} conflicts with the tool already loaded from {first.module} "
                f"({first.source.provider}); the first one wins, rename this one"
            )
            self.errors.append(LoadError(info.module, message, info.source))
        else:
            self.tools[info.name] = info
            granted = reaches(info.source.level, info.source.provider, self._config.project_trusted)
            policy = self._policies[info.name] = self._config.policy_for(info.name, granted=granted)
            if not granted and info.name in self._config.tool_grants:
                self._warnings.append(withheld_note(info.name, info.module, self.project_root))
            if (note := ungranted_note(info, policy, self._cwd)) is not None:
                self._warnings.append(note)

    def policy_for(self, name: str) -> SandboxPolicy:
        """The policy of a registered tool, chosen once by where its module comes from (see ``_register``)."""
        return self._policies.get(name) or self._config.policy_for(name)

    async def _load_candidate(self, candidate: Candidate) -> _Outcome:
        path = candidate.resolved
        refused = _metadata_file(candidate)
        if refused is not None:
            return refused
        fp = None
        if self._cache is not None:
            fp = await trio.to_thread.run_sync(fingerprint, candidate, __version__)
            cached = self._cache.get(candidate, fp) if fp is not None else None
            if cached is not None:
                return _from_load(candidate, cached)
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
            schema_errors = await trio.to_thread.run_sync(_check_schemas, result)
        entry = CachedLoad(fingerprint=fp or "", result=result, schema_errors=schema_errors)
        if self._cache is not None and fp is not None:
            self._cache.put(candidate, entry)
        return _from_load(candidate, entry)

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
            tool_env = await envs.runtime_for(candidate, self._config.cache_dir)
            with deadline.bounds():
                slot, result = await self._pool.start_loaded(module, policy, load, tool_env)
                slot.loaded = result
                return slot, result
            raise LoadFailed(deadline.message(module), _tail(worker))
        except envs.EnvError as exc:  # its `# /// script` block, or an installer's failure (not cached)
            raise LoadFailed(str(exc), deterministic=exc.deterministic) from None
        except RemoteError as exc:
            # The module itself refused to load: the same file will fail the same way.
            message = exc.error.message + envs.js_hint(candidate, policy.level)
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

    async def acquire(self, info: ToolInfo, timeout: float, policy: SandboxPolicy) -> Slot:
        """A busy worker with ``info``'s module loaded under ``policy``: an idle one, else a new one."""
        slot = await self._pool.take_idle(info.module, policy)
        if slot is not None:
            return slot
        slot, result = await self.spawn_loaded(self.candidates[info.module], timeout, policy)
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
                real = _describe(d, info.module, info.source)
                return real if real != info else None
        return None  # gone from the module: acquire() refuses such a worker, a warm one serves its last load

    async def heal(self, real: ToolInfo, result: p.LoadResult) -> None:
        """Take a worker's load of ``real.module`` as the truth: the registry's tools and its cache entry."""
        planned = self.tools.get(real.name)
        log.warning(
            "the module cache described tool %r of %s differently from what the module defines now (%s); "
            "the call runs as the module defines it, and the cache entry is rewritten",
            real.name, real.module, ", ".join(_differences(planned, real)) if planned is not None else "unknown",
        )  # fmt: skip
        for d in result.tools:
            known = self.tools.get(d.name)
            if known is not None and known.module == real.module:
                self.tools[d.name] = _describe(d, known.module, known.source)
        candidate = self.candidates.get(real.module)
        if self._cache is None or candidate is None:
            return
        fp = await trio.to_thread.run_sync(fingerprint, candidate, __version__)
        if fp is None:
            return
        schema_errors = await trio.to_thread.run_sync(_check_schemas, result)
        self._cache.put(candidate, CachedLoad(fingerprint=fp, result=result, schema_errors=schema_errors))

    def not_found(self, name: str) -> ToolResult:
        """The result of calling ``name``, which no loaded tool has: ``load_error`` if a failed module may define it."""
        return unknown_tool(name, (t.name for t in self.tools.values() if not t.hidden), self.failures)


def _metadata_file(candidate: Candidate) -> _Outcome | None:
    if not candidate.resolved.endswith((".md", ".json")):
        return None
    message = f"{candidate.path}: .md and .json files are tool metadata and cannot be loaded as modules"
    return [], [LoadError(candidate.path, message, candidate.source)]


def _from_load(candidate: Candidate, entry: CachedLoad) -> _Outcome:
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
        infos.append(_describe(d, candidate.resolved, candidate.source))
    return infos, errors


def _describe(d: p.ToolDescription, module: str, source: ToolSource) -> ToolInfo:
    # Every field of ToolInfo but where it lives is the worker's description of the tool.
    return ToolInfo(module=module, source=source, **{f: getattr(d, f) for f in _DESCRIBED})


_DESCRIBED: Final = tuple(f for f in ToolInfo.__struct_fields__ if f not in ("module", "source"))


def _differences(planned: ToolInfo, real: ToolInfo) -> list[str]:
    return [f for f in ToolInfo.__struct_fields__ if getattr(planned, f) != getattr(real, f)]


def _load_params(candidate: Candidate) -> p.LoadParams:
    if candidate.kind == "js":  # the JS loader imports the file or folder; the rest is Python's
        return p.LoadParams(path=candidate.resolved)
    return p.LoadParams(
        path=candidate.resolved, module=candidate.module, sys_path=candidate.sys_path, factory=candidate.factory
    )


def _check_schemas(result: p.LoadResult) -> dict[str, str]:
    problems: dict[str, str] = {}
    for d in result.tools:
        try:
            if d.params_kind == "json_schema":
                ArgumentValidator(d.parameters)
            if d.output_schema is not None:
                ArgumentValidator(d.output_schema, what="output_schema")
        except SchemaProblem as exc:
            problems[d.name] = str(exc)
    return problems


def _tail(worker: PoolWorker | None) -> str | None:
    return (worker.stderr_tail.text() or None) if worker is not None else None


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
