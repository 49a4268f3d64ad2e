"""The real worker factory: a ``WorkerLink`` in its own boundary and private workdir.

The pool asks it for workers through the :class:`~xcsh_run._pool.worker_pool.WorkerFactory`
seam; it owns what outlives single workers: the runner's cgroup root and the
workdirs whose removal ran out of time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import trio

from xcsh_run._discovery import JsRuntime, ToolEnv, js_env, readable_for_drop
from xcsh_run._errors import WorkerStartupError
from xcsh_run._pool.link import NotificationHandler, RequestHandler, WorkerLink
from xcsh_run._process import (
    Boundary,
    CgroupRoot,
    ForkServer,
    TeardownStats,
    fault_point,
    forkserver_supported,
    hand_over_workdir,
    make_workdir,
    remove_workdir,
)
from xcsh_run._project import project_root
from xcsh_run._sandbox import (
    DROPPED_ENV,
    MiB,
    Probe,
    SandboxPolicy,
    build_env,
    dropped_env,
    for_javascript,
    tool_node_modules,
    worker_config,
)

log: Final = logging.getLogger("xcsh_run")


class ProcessFactory:
    """Starts real workers. ``on_request``/``on_notification`` are set by the runner before the first start."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        cwd: str,
        env: Mapping[str, str],
        probe: Probe,
        cgroups: CgroupRoot | None,
        max_frame_bytes: int,
        teardown: TeardownStats,
        forkserver_policies: Iterable[SandboxPolicy] | None = None,
    ) -> None:
        self._nursery = nursery
        self._cwd = cwd
        self._env = dict(env)
        self._probe = probe
        self._cgroups = cgroups
        self._max_frame_bytes = max_frame_bytes
        self.teardown = teardown
        self.on_request: RequestHandler | None = None
        self.on_notification: NotificationHandler | None = None
        # A zygote per policy (xcsh_run._process.forkserver, rule 1), when asked for and
        # where it can report exit statuses exactly; None: Popen only.
        usable = forkserver_policies is not None and cgroups is not None and forkserver_supported()
        self._forkservers: dict[SandboxPolicy, ForkServer] | None = {} if usable else None
        for policy in forkserver_policies or () if usable else ():
            server = self._forkserver(policy)  # started now: they import while the runner opens
            if server is not None:
                nursery.start_soon(server.ready)  # and attach the zygote to its cgroup before the first fork

    def _forkserver(self, policy: SandboxPolicy) -> ForkServer | None:
        if self._forkservers is None or self._cgroups is None:
            return None
        server = self._forkservers.get(policy)
        # A retired zygote is not replaced: it stays here for aclose to reap,
        # and workers of its policy start with Popen from then on.
        if server is None:
            try:
                server = self._forkservers[policy] = ForkServer(self._env, self._cgroups.new_boundary())
                server.start()
            except OSError as exc:
                log.warning("could not start a fork server (%s); workers start with Popen", exc)
                return None
        return None if server.dead else server

    @property
    def workers_forked(self) -> int:
        """Workers its fork servers forked (the rest were started with Popen)."""
        return sum(server.forks for server in (self._forkservers or {}).values())

    @property
    def reliable_boundary(self) -> bool:
        return self._cgroups is not None

    def _new_boundary(self, policy: SandboxPolicy) -> Boundary:
        if self._cgroups is None:
            return Boundary(None)
        contained = policy.level != "none"
        return self._cgroups.new_boundary(
            memory_bytes=policy.memory_mb * MiB if contained and policy.memory_mb is not None else None,
            # Two over the tool's own: its worker's supervisor, and the middle
            # process that exists while the supervisor starts (xcsh_run.worker._runtime.supervisor),
            # without which max_procs=1 could never start a worker.
            max_procs=policy.max_procs + 2 if contained and policy.max_procs is not None else None,
            cpu_seconds=policy.cpu_seconds if contained else None,
        )

    async def start(
        self,
        policy: SandboxPolicy,
        module: str | None,
        *,
        has_ui: bool,
        tool_env: ToolEnv | JsRuntime | None = None,
    ) -> WorkerLink:
        """A started worker under ``policy``, in its own boundary and private workdir.

        ``module`` names the tool module for strict's Landlock rules (the
        project directory stands in for a spare, ``module`` None). With
        ``tool_env`` the worker runs on that environment's interpreter, started
        anew (a zygote runs the host's), and strict lets it read the environment.
        With a ``JsRuntime`` the worker hands over to Bun after its sandbox (``xcsh_run.worker._runtime.handoff``).
        Raises what :meth:`WorkerLink.start` raises, WorkerStartupError for a
        host-side failure (no disk for the workdir, no cgroup), or ConfigError for a bad policy.
        """
        module = module if module is not None else self._cwd
        # Before anything is made for the worker: this waits (bounded) for a zygote still importing.
        # The zygote forks Python workers on the host's interpreter: neither a tool env's nor Bun.
        server = self._forkserver(policy) if tool_env is None else None
        js = tool_env if isinstance(tool_env, JsRuntime) else None
        if isinstance(tool_env, ToolEnv):
            policy = policy.replace(extra_read_paths=(*policy.extra_read_paths, tool_env.path))
        if server is not None and not await server.ready():
            server = None
        workdir: Path | None = None
        try:
            if policy.level != "none":
                fault_point("workdir")
                workdir = make_workdir()
            env = build_env(policy, self._env, workdir)
            config = worker_config(policy, self._probe, module=module, cwd=self._cwd, workdir=workdir, env=env)
            if isinstance(tool_env, ToolEnv):
                config = readable_for_drop(config, tool_env)
            if js is not None:
                env = js_env(env)
                # The tool's own packages, read-only, as Bun resolves them (beside it, or up to the project root).
                packages = tool_node_modules(str(module), project_root(self._cwd))
                config = for_javascript(config, js.bun, [*js.read_paths(), *packages])
            if workdir is not None and config.drop_uid is not None and config.drop_gid is not None:
                try:
                    hand_over_workdir(workdir, config.drop_uid, config.drop_gid)
                except OSError as exc:
                    raise WorkerStartupError(
                        f"could not start a worker for {module} (handing its private workdir {workdir} to "
                        f"uid {config.drop_uid}, which strict runs it as): {exc}"
                    ) from exc
            if policy.level != "none":
                # In the environment, not in `initialize`: a long list of names
                # must not push that message over a small max_frame_bytes.
                dropped = dropped_env(self._env, env)
                if dropped:
                    env[DROPPED_ENV] = ",".join(dropped)
            boundary = self._new_boundary(policy)
        except BaseException as exc:
            if workdir is not None:
                remove_workdir(workdir)
            if isinstance(exc, OSError):
                what = "its cgroup" if workdir is not None or policy.level == "none" else "its private workdir"
                raise WorkerStartupError(f"could not start a worker for {module} ({what}): {exc}") from exc
            raise
        # From here on the worker owns the workdir and the boundary.
        return await WorkerLink.start(
            self._nursery,
            module=module,
            cwd=self._cwd,
            env=env,
            boundary=boundary,
            max_frame_bytes=self._max_frame_bytes,
            sandbox=config,
            workdir=workdir,
            output_limit=policy.output_mb * MiB if policy.output_mb is not None else None,
            has_ui=has_ui,
            on_request=self.on_request,
            on_notification=self.on_notification,
            teardown=self.teardown,
            forkserver=server,
            python=tool_env.python if isinstance(tool_env, ToolEnv) else None,
            worker_args=js.worker_args() if js is not None else (),
        )

    async def aclose(self) -> None:
        """Stop the fork servers, remove the cgroup root, retry the workdirs left over. Shield it."""
        for server in (self._forkservers or {}).values():
            await server.aclose()
        if self._cgroups is not None:
            await trio.to_thread.run_sync(self._cgroups.remove)
        # One more bounded try: no later host would sweep a live pid's workdirs.
        left, self.teardown.leftover_workdirs = self.teardown.leftover_workdirs, []
        for workdir in left:
            if not await trio.to_thread.run_sync(remove_workdir, workdir):
                log.warning("could not remove the worker workdir %s; remove it by hand", workdir)
