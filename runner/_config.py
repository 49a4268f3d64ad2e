"""The runner's configuration: one frozen, validated record and the one place for defaults.

:func:`open_runner` builds a :class:`RunnerConfig` from its keywords (or takes
one ready-made); everything below the facade reads the record, never a loose
option. Every duration anywhere in the runner goes through
:func:`check_seconds`, so they all refuse the same values with the same words.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from xcsh_run._errors import ConfigError
from xcsh_run._project import project_root
from xcsh_run._sandbox import SandboxPolicy, granted_policies
from xcsh_run.worker import protocol as p

DEFAULT_TIMEOUT: Final = 60.0
DEFAULT_GRACE: Final = 1.0
DEFAULT_LOAD_TIMEOUT: Final = 10.0
# The wall bound of a load, unless given: this many load timeouts, and never less than the floor
# (``xcsh_run._pool.load_deadline`` rule 2 says why).
LOAD_WALL_FACTOR: Final = 6
LOAD_WALL_FLOOR: Final = 60.0
DEFAULT_MAX_CALLS_PER_WORKER: Final = 1000
DEFAULT_IDLE_TIMEOUT: Final = 300.0
DEFAULT_MAX_WORKER_RSS_MB: Final = 1024
DEFAULT_SPARE_WORKERS: Final = 1
DEFAULT_QUEUE_TIMEOUT: Final = 120.0
# Off unless XCSH_RUN_FORKSERVER=1 (how the test suite runs every test with it on).
DEFAULT_FORKSERVER: Final = os.environ.get("XCSH_RUN_FORKSERVER") == "1"
DEFAULT_MAX_MESSAGE_BYTES: Final = 16 * 2**20  # the MCP server's longest message
MIN_FRAME_BYTES: Final = 1024
MAX_FRAME_BYTES: Final = 2**32 - 1


def check_seconds(label: str, value: object) -> float:
    """``value`` as a duration, or ConfigError naming ``label``: a positive, finite number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{label} must be a positive number of seconds, got {value!r}")
    return float(value)


def default_max_workers() -> int:
    """Twice the core count, at least 4: calls mostly wait on I/O or on their tool's own processes."""
    return max(4, 2 * (os.cpu_count() or 1))


def _path_or_none(value: str | os.PathLike[str] | None) -> str | None:
    return os.fspath(value) if value is not None else None


@dataclass(frozen=True, kw_only=True)
class RunnerConfig:
    """Every option of [`open_runner`][xcsh_run.open_runner], checked once.

    Immutable: a runner reads its configuration and never changes it. Raises
    ConfigError on construction for any value out of range.

    Attributes:
        cwd: the directory tools see as ``api.cwd``; default: the current one. The
            project's sources are read from its project root (``Runner.project_root``).
        builtin_tool_names: names tools may not take.
        default_timeout: seconds a call may take when neither the call nor its policy's
            ``wall_seconds`` says; a tool's own timeout may only shorten it.
        grace: seconds between SIGTERM and the tree kill in the ladder.
        load_timeout: CPU seconds a module's worker may use to start, import the
            module and run its factory (its whole tree: a module that loops burns
            CPU, a starved machine does not; see ``xcsh_run._pool.load_deadline``).
        load_wall_timeout: wall-clock seconds the same may take, however little CPU
            it uses: what catches a module that blocks at import (stdin, a socket,
            ``time.sleep``). None (the default): ``max(6 * load_timeout, 60)``.
            At least ``load_timeout``.
        max_frame_bytes: the largest protocol message accepted either way.
        env: the workers' environment; default: the host's.
        discover_sources: True reads every source of discovery (``.xcsh``,
            Claude, Claude marketplace plugins, Codex, installed plugins) and
            then ``tool_paths``; False loads only ``tool_paths``. None (the
            default): discovery when ``tool_paths`` is empty, else only
            ``tool_paths``. Pass False to load exactly a list that may be empty.
            Discovery also reads the config files' sandbox grants (``_grants``);
            ``open_runner`` resolves None before reading them.
        cache: remember what unchanged modules define, so they are not imported
            again on the next run (see ``xcsh_run._discovery.cache``).
        cache_dir: where; default ``$XDG_CACHE_HOME/xcsh-run`` or ``~/.cache/xcsh-run``.
        home: the user's home for discovery; default ``$HOME``.
        sandbox: the policy of every worker (default: ``SandboxPolicy()``,
            the ``contained`` level). See [`SandboxPolicy`][xcsh_run.SandboxPolicy].
        tool_policies: per-tool policies by tool name, instead of ``sandbox``
            (kept by name, whatever module defines it: the caller chose them).
        max_workers: calls running at once (each in its own worker); more wait
            their turn, first come first served. Default: twice the core count, at least 4.
        queue_timeout: seconds a call may wait for its turn (``max_workers``,
            or the running call of an exclusive tool) before it ends ``busy``
            without having started; None waits as long as it takes. Time in
            the queue is not the call's: its own timeout starts when it leaves
            the queue.
        max_calls_per_worker: a warm worker is retired after this many calls.
        idle_timeout: seconds an idle warm worker is kept.
        max_worker_rss_mb: a warm worker grown past this is retired after its call.
        spare_workers: workers kept started (sandboxed, no module yet) so that a
            call needing a new worker only pays for importing its module. One
            starts with the runner; a taken spare is replaced only once some
            call has had to start a worker from scratch, so a one-shot run
            starts one worker, not two.
        approve: run tools that declare ``approval`` without asking (the CLI's
            ``--approve``); otherwise each such call asks the UI's ``confirm``
            first and a call nobody approves does not run (``runner/_host/approval.py``).
        forkserver: start new workers by forking a zygote that has the worker
            already imported (one per sandbox policy, started with the runner),
            instead of starting an interpreter: a few milliseconds instead of
            tens. Each child still enters its own cgroup and applies its own
            sandbox. Used only with a cgroup v2 boundary on Linux 6.15+ (it
            reads a worker's exit status from its pidfd); elsewhere, and if a
            zygote fails, workers start as usual. Default: off (or the
            ``XCSH_RUN_FORKSERVER=1`` environment variable).
        wanted_tool: the one tool this runner is opened to call (the CLI's
            ``xcsh-run TOOL``): discovery stops as soon as the module that
            defines it is known and every module before it in precedence is
            settled. Modules after it cannot change which tool the name
            means, so a slow or looping one costs nothing; they are not
            loaded and ``tools``/``errors`` leave them out. When the module
            cache answers for every module up to the defining one (each
            one's content unchanged), the sources after it are not even
            read: no entry-point scan, no configured path, and no warning
            about them; ``list`` still reads them all.
    """

    cwd: str | None = None
    builtin_tool_names: frozenset[str] = frozenset()
    default_timeout: float = DEFAULT_TIMEOUT
    grace: float = DEFAULT_GRACE
    load_timeout: float = DEFAULT_LOAD_TIMEOUT
    load_wall_timeout: float | None = None
    max_frame_bytes: int = p.DEFAULT_MAX_FRAME_BYTES
    env: Mapping[str, str] | None = None
    discover_sources: bool | None = None
    cache: bool = True
    cache_dir: str | None = None
    home: str | None = None
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    tool_policies: Mapping[str, SandboxPolicy] = field(default_factory=lambda: MappingProxyType({}))
    max_workers: int | None = None
    queue_timeout: float | None = DEFAULT_QUEUE_TIMEOUT
    max_calls_per_worker: int | None = DEFAULT_MAX_CALLS_PER_WORKER
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    max_worker_rss_mb: int | None = DEFAULT_MAX_WORKER_RSS_MB
    spare_workers: int = DEFAULT_SPARE_WORKERS
    wanted_tool: str | None = None
    forkserver: bool = DEFAULT_FORKSERVER
    approve: bool = False
    # Not an option: what reading the config files had to say (``_grants``), for the runner's warnings.
    grant_warnings: tuple[str, ...] = field(default=(), init=False, compare=False, repr=False)
    # Also not options: the config files' ``[tools.NAME]`` policies, kept apart from ``tool_policies``
    # because they follow a name only from a source ``_grants.reaches`` allows (the registry decides).
    tool_grants: Mapping[str, SandboxPolicy] = field(
        default_factory=lambda: MappingProxyType({}), init=False, compare=False, repr=False
    )
    project_trusted: bool = field(default=True, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Normalised in place (frozen: through object.__setattr__) so that two
        # configs saying the same thing compare equal.
        fix = object.__setattr__
        fix(self, "cwd", _path_or_none(self.cwd))
        fix(self, "cache_dir", _path_or_none(self.cache_dir))
        fix(self, "home", _path_or_none(self.home))
        fix(self, "builtin_tool_names", frozenset(self.builtin_tool_names))
        policies = dict(self.tool_policies)
        grants: dict[str, SandboxPolicy] = {}
        trusted = True
        if self.discover_sources:
            # The user's grants from config files, as the CLI and serve discover every source (``_grants``).
            # A project's config file is the one at its root, found as discovery finds it.
            home = self.home or os.environ.get("HOME")
            root = project_root(self.cwd or os.getcwd(), home)
            granted = granted_policies(self.sandbox, policies, root, home)
            policies, grants, trusted = granted.tool_policies, granted.tool_grants, granted.project_trusted
            fix(self, "sandbox", granted.sandbox)
            fix(self, "grant_warnings", tuple(granted.warnings))
        fix(self, "tool_policies", MappingProxyType(policies))
        fix(self, "tool_grants", MappingProxyType(grants))
        fix(self, "project_trusted", trusted)
        if self.env is not None:
            fix(self, "env", MappingProxyType(dict(self.env)))
        for label in ("default_timeout", "grace", "load_timeout"):
            fix(self, label, check_seconds(label, getattr(self, label)))
        for label in ("idle_timeout", "queue_timeout", "load_wall_timeout"):
            if getattr(self, label) is not None:
                fix(self, label, check_seconds(label, getattr(self, label)))
        if self.load_wall_timeout is not None and self.load_wall_timeout < self.load_timeout:
            raise ConfigError(
                f"load_wall_timeout ({self.load_wall_timeout:g} s of wall time) must be at least load_timeout "
                f"({self.load_timeout:g} s of CPU): no load can use more CPU than wall time on one core"
            )
        if not MIN_FRAME_BYTES <= self.max_frame_bytes <= MAX_FRAME_BYTES:
            raise ConfigError(f"max_frame_bytes must be between 1 KiB and 4 GiB, got {self.max_frame_bytes}")
        if self.max_workers is not None and self.max_workers < 1:
            raise ConfigError(f"max_workers must be at least 1, got {self.max_workers}")
        if self.spare_workers < 0:
            raise ConfigError(f"spare_workers must be 0 or more, got {self.spare_workers}")
        if self.max_calls_per_worker is not None and self.max_calls_per_worker < 1:
            raise ConfigError(f"max_calls_per_worker must be at least 1 (or None), got {self.max_calls_per_worker}")
        if self.max_worker_rss_mb is not None and self.max_worker_rss_mb < 1:
            raise ConfigError(f"max_worker_rss_mb must be at least 1 (or None), got {self.max_worker_rss_mb}")

    @property
    def load_wall_bound(self) -> float:
        """Wall-clock seconds a load may take: ``load_wall_timeout``, or its default."""
        if self.load_wall_timeout is not None:
            return self.load_wall_timeout
        return max(self.load_timeout * LOAD_WALL_FACTOR, LOAD_WALL_FLOOR)

    @property
    def worker_limit(self) -> int:
        """Calls running at once: ``max_workers``, or its default."""
        return self.max_workers if self.max_workers is not None else default_max_workers()

    def policy_for(self, tool: str, *, granted: bool = False) -> SandboxPolicy:
        """The sandbox policy a tool runs under (its own, else the runner's).

        ``granted``: the tool's module comes from a source the config files'
        ``[tools.NAME]`` grants may reach (``_grants.reaches``); the registry
        says so for each tool it registers.
        """
        if granted and tool in self.tool_grants:
            return self.tool_grants[tool]
        return self.tool_policies.get(tool, self.sandbox)


class RunnerSettings:
    """What a runner was opened with, read-only: the part of the surface every face shares as it is.

    :class:`Runner` and its blocking and asyncio faces all inherit it, so each
    of these members is written and documented once: they read only
    ``config`` and ``unenforced``, which are fixed when the runner opens, so a
    face needs no hop to the runner's thread to answer them.
    """

    config: RunnerConfig
    """The runner's options (see `RunnerConfig`)."""
    unenforced: list[str]
    """The parts of the runner's sandbox policy this machine cannot enforce (best effort)."""

    @property
    def cwd(self) -> str:
        """The project directory (absolute), which tools see as ``api.cwd``."""
        assert self.config.cwd is not None
        return self.config.cwd

    @property
    def sandbox(self) -> SandboxPolicy:
        """The runner's default sandbox policy."""
        return self.config.sandbox

    @property
    def default_timeout(self) -> float:
        """Seconds a call may run when neither the caller, the policy nor the tool gives a timeout."""
        return self.config.default_timeout

    @property
    def grace(self) -> float:
        """Seconds a cancelled worker gets between ``$/cancel`` and the kill."""
        return self.config.grace

    @property
    def load_timeout(self) -> float:
        """CPU seconds a module's worker may use to load it (``RunnerConfig.load_timeout``)."""
        return self.config.load_timeout

    @property
    def max_frame_bytes(self) -> int:
        """The largest protocol frame either side accepts."""
        return self.config.max_frame_bytes
