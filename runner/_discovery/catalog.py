"""The catalog: what discovery found, the tools it defines, and every reason something did not load.

Rules:

1. **Precedence decides, not speed.** Modules load in parallel (``xcsh_run._pool``'s
   ``Loader``), but are merged here in precedence order: the first definition
   of a name wins, and a later one is a conflict with the reason spelled out.
2. **The cache may settle a run alone.** For a run of one tool, discovery
   stops at the first module that defines the name if every module before it
   has a cache entry whose fingerprint is its content now: the answer a full
   load would give, with no worker started.
3. **No worker here.** This module records and decides; getting a worker with
   a module loaded is the pool's (``xcsh_run._pool.Loader``), so there is one
   route to a worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, NamedTuple

import msgspec
import trio

from xcsh_run._config import RunnerConfig
from xcsh_run._discovery.cache import CachedLoad, ModuleCache, fingerprint
from xcsh_run._discovery.finder import Candidate, Discovery, Shadowed, ToolSource, collect, walk
from xcsh_run._discovery.schemas import ArgumentValidator, SchemaProblem
from xcsh_run._discovery.unknown_tool import unknown_tool
from xcsh_run._project import locate_project
from xcsh_run._results import ToolResult
from xcsh_run._sandbox import SandboxPolicy, reaches, ungranted_note, withheld_note
from xcsh_run._version import __version__
from xcsh_run.worker import protocol as p
from xcsh_run.worker.protocol import Requires

RESOLVE_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["apply", "discard"], "description": "apply or discard the preview"},
        "reason": {"type": "string", "description": "why"},
        "id": {"type": "string", "description": "which pending action (its id); the newest if absent"},
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
    keeps_processes: bool = False
    """What its calls leave running lives until the session (the runner) ends, listed in each result."""
    task_support: str = "forbidden"
    """``forbidden``/``optional``/``required``: whether an MCP client may run a call as a task."""
    task_after_input: bool = False
    """Its calls ask their first prompts in the request, and become a task once those are answered."""
    approval: str | None = None
    """``read``/``write``/``exec``, or ``dynamic`` (decided per call): a call above ``read`` asks first."""
    ignored_fields: list[str] = []
    """Fields of the other contracts (``strict``, ``loadMode``, ...) it set that mean nothing here."""


RESOLVE_TOOL: Final = ToolInfo(
    name="resolve",
    label="Resolve",
    description="Apply or discard a pending preview: the one with the given id, else the newest.",
    parameters=RESOLVE_SCHEMA,
    module=BUILTIN_MODULE,
    source=ToolSource("builtin", "xcsh-run", "user"),
    hidden=True,
)
"""The built-in ``resolve``: it applies or discards a pending action (``id``'s, else the newest), in its worker."""


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


Outcome = tuple[list[ToolInfo], list[LoadError]]
"""What one module registers: its tools, and its problems."""


class Found(NamedTuple):
    """What discovery found: the modules to load, unless the cache settled the run (rule 2)."""

    candidates: Sequence[Candidate]
    settled: list[Outcome | None] | None


class Catalog:
    """The tools, load problems and warnings of one runner."""

    def __init__(self, config: RunnerConfig, cache: ModuleCache | None, warnings: list[str]) -> None:
        assert config.cwd is not None
        self._config = config
        self._cwd = config.cwd
        self._cache = cache
        self._warnings = warnings
        warnings.extend(config.grant_warnings)  # a project's config file that was not read, and why
        self._builtins = config.builtin_tool_names
        self.tools: dict[str, ToolInfo] = {}
        self._policies: dict[str, SandboxPolicy] = {}
        self.errors: list[LoadError] = []
        # Of `errors`, the modules, factory entries and schemas that failed (not conflicts, not shadowing).
        self.failures: list[LoadError] = []
        self.project_root = config.cwd  # until discover() has looked for it
        self.candidates: dict[str, Candidate] = {}

    @property
    def warnings(self) -> list[str]:
        return list(self._warnings)

    def warn(self, warning: str) -> None:
        """Record a problem that changed nothing but deserves a look."""
        self._warnings.append(warning)

    async def discover(
        self, configured_paths: Sequence[str] = (), *, discover_sources: bool = True, wanted_tool: str | None = None
    ) -> Found:
        """Find the modules, and what the cache alone can say of them (rule 2); nothing is imported."""
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
            found = settled[0]
        else:
            found = await trio.to_thread.run_sync(discover_all)
        self._warnings.extend(found.warnings)
        for shadow in found.shadowed:
            message = (
                f"{shadow.path}: not loaded, shadowed by {shadow.shadowed_by} (a higher-precedence module "
                "of the same name); rename one of them to load both"
            )
            self.errors.append(LoadError(shadow.path, message, shadow.source, shadowed_by=shadow.shadowed_by))
        self.candidates.update((c.resolved, c) for c in found.candidates)
        return Found(found.candidates, None if settled is None else settled[1])

    def merge(self, outcomes: Sequence[Outcome | None]) -> None:
        """Register what each module defines, in precedence order: the first definition of a name wins."""
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
        # The hidden built-in `resolve` is listed with the tools when some tool
        # can defer its effect (as in the original design); it is callable
        # whatever they declare (see lookup).
        if any(t.deferrable for t in self.tools.values()) and "resolve" not in self.tools:
            self.tools["resolve"] = RESOLVE_TOOL

    def lookup(self, name: str) -> ToolInfo | None:
        """The tool a call of ``name`` reaches: a loaded one, else the built-in ``resolve``, else None.

        Any call may leave a pending action (``deferrable`` is a hint, not a
        gate: tools written for the original push previews without it), and
        one that cannot be resolved is a change that silently never happens;
        so ``resolve`` answers whatever the tools declare. A loaded tool of
        that name takes its place.
        """
        info = self.tools.get(name)
        if info is None and name == RESOLVE_TOOL.name:
            return RESOLVE_TOOL
        return info

    def _settle_from_cache(
        self, walk_sources: Callable[[list[str]], Iterator[Candidate | Shadowed]], wanted_tool: str
    ) -> tuple[Discovery, list[Outcome | None]] | None:
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
        outcomes: list[Outcome | None] = []
        for found in walk_sources(warnings):
            walked.append(found)
            if isinstance(found, Shadowed):
                continue
            outcome = metadata_file(found)
            if outcome is None:
                fp = fingerprint(found, __version__)
                cached = self._cache.get(found, fp) if fp is not None else None
                if cached is None:
                    return None
                outcome = from_load(found, cached)
            outcomes.append(outcome)
            if any(info.name == wanted_tool for info in outcome[0]):
                return collect(walked, warnings), outcomes
        return None  # not defined anywhere: the full load reports why, with every source's problems

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
            if info.ignored_fields:
                self._warnings.append(ignored_note(info))

    def policy_for(self, name: str) -> SandboxPolicy:
        """The policy of a registered tool, chosen once by where its module comes from (see ``_register``)."""
        return self._policies.get(name) or self._config.policy_for(name)

    def update(self, real: ToolInfo, result: p.LoadResult) -> None:
        """Take a worker's load of ``real.module`` as the truth for the tools it defines (see ``Loader.heal``)."""
        planned = self.tools.get(real.name)
        log.warning(
            "the module cache described tool %r of %s differently from what the module defines now (%s); "
            "the call runs as the module defines it, and the cache entry is rewritten",
            real.name, real.module, ", ".join(differences(planned, real)) if planned is not None else "unknown",
        )  # fmt: skip
        for d in result.tools:
            known = self.tools.get(d.name)
            if known is not None and known.module == real.module:
                self.tools[d.name] = describe(d, known.module, known.source)

    def not_found(self, name: str) -> ToolResult:
        """The result of calling ``name``, which no loaded tool has: ``load_error`` if a failed module may define it."""
        return unknown_tool(name, (t.name for t in self.tools.values() if not t.hidden), self.failures)


def ignored_note(info: ToolInfo) -> str:
    """The load warning for fields of the other contracts a tool set that this runner does not use."""
    fields = ", ".join(info.ignored_fields)
    return (
        f"tool {info.name!r} ({info.module}) sets {fields}, which xcsh-run does not use: ignored "
        "(see docs/typescript.md, tool fields)"
    )


def metadata_file(candidate: Candidate) -> Outcome | None:
    """The outcome of a candidate that is tool metadata, never a module; None for a module."""
    if not candidate.resolved.endswith((".md", ".json")):
        return None
    message = f"{candidate.path}: .md and .json files are tool metadata and cannot be loaded as modules"
    return [], [LoadError(candidate.path, message, candidate.source)]


def from_load(candidate: Candidate, entry: CachedLoad) -> Outcome:
    """What a module's load (a worker's, or the cache's record of one) registers: its tools and its problems."""
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
        infos.append(describe(d, candidate.resolved, candidate.source))
    return infos, errors


def describe(d: p.ToolDescription, module: str, source: ToolSource) -> ToolInfo:
    """The host's record of a tool a worker described."""
    # Every field of ToolInfo but where it lives is the worker's description of the tool.
    return ToolInfo(module=module, source=source, **{f: getattr(d, f) for f in _DESCRIBED})


_DESCRIBED: Final = tuple(f for f in ToolInfo.__struct_fields__ if f not in ("module", "source"))


def differences(planned: ToolInfo, real: ToolInfo) -> list[str]:
    """The fields in which two records of one tool differ."""
    return [f for f in ToolInfo.__struct_fields__ if getattr(planned, f) != getattr(real, f)]


def check_schemas(result: p.LoadResult) -> dict[str, str]:
    """Each tool of a load whose schema is not a valid JSON Schema, and why (this imports jsonschema)."""
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


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
