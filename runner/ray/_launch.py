"""Calls over a Ray cluster: :func:`open_ray_runner` and its :class:`RayRunner`.

One long-lived actor per alive node (``xcsh_run.ray._actor.NodeHost``, pinned
there with a hard node affinity) hosts an ordinary runner; the driver only
routes. Each call goes to the actor with the fewest calls in flight, counted
here, on the driver. Tool files travel in the actors' runtime environment
(``working_dir``), so Ray's own packaging puts them on every node; each
node's runner keeps its module cache in that node's own cache directory.

What the driver promises:

- every call ends in exactly one :class:`ToolResult`, also when its node dies:
  a Ray error (the actor died, the node left) becomes a ``crashed`` result
  naming the node, that actor is marked dead, and later calls go elsewhere;
- nothing runs twice: actors are neither restarted nor retried
  (``max_restarts=0``, ``max_task_retries=0``); a call that was running on a
  dead node reports that it may have run in part;
- a cancel (``cancel(call_id)`` or the caller's cancel scope) reaches the
  call's node, where the runner's ladder stops it.

Ray is imported when a runner opens, never with ``runner`` itself.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import trio

from xcsh_run._config import RunnerConfig
from xcsh_run._errors import ConfigError, RunnerError
from xcsh_run._version import __version__
from xcsh_run.ray._driver import RayNode, RayRunner

INSTALL_HINT: Final = "pip install 'xcsh-run[ray]'"
# Options of open_runner that mean the same on every node; the others (cwd, env, home,
# discovery of the driver's config files) are about the driver's machine.
NODE_OPTIONS: Final = frozenset(
    {
        "builtin_tool_names",
        "default_timeout",
        "grace",
        "load_timeout",
        "max_frame_bytes",
        "discover_sources",
        "cache",
        "cache_dir",
        "sandbox",
        "tool_policies",
        "max_workers",
        "queue_timeout",
        "max_calls_per_worker",
        "idle_timeout",
        "max_worker_rss_mb",
        "spare_workers",
        "forkserver",
    }
)
_STAGE_IGNORE: Final = shutil.ignore_patterns("__pycache__", ".git", ".mypy_cache", ".pytest_cache")
_ids: Final = itertools.count(1)
_log: Final = logging.getLogger("xcsh_run")


class RayMissing(ConfigError):
    """Ray is not installed, so calls cannot run on a Ray cluster; the message says how to install it."""


def import_ray() -> Any:
    """The ``ray`` module, or :class:`RayMissing` saying how to get it."""
    try:
        import ray
    except ImportError as exc:
        raise RayMissing(
            f"running tools on a Ray cluster needs Ray, which is not installed ({exc}); install it with: {INSTALL_HINT}"
        ) from None
    return ray


@dataclass(frozen=True)
class _Staged:
    """What the actors' runtime environment ships, and the tool paths as the nodes see them."""

    working_dir: str
    node_paths: list[str]
    temporary: str | None  # a staging folder of ours, removed on close


def stage_tools(tool_paths: Sequence[str], working_dir: str | os.PathLike[str] | None, cwd: str) -> _Staged:
    """Where the tool files come from: the given ``working_dir`` as it is, or a folder of copies of ``tool_paths``.

    Raises ConfigError for a path that does not exist or lies outside ``working_dir``.
    """
    sources = [Path(cwd, p).resolve() for p in tool_paths]
    for given, source in zip(tool_paths, sources, strict=True):
        if not source.exists():
            raise ConfigError(
                f"tool path {given!r} does not exist (relative to {cwd}); give an existing file or folder"
            )
    if working_dir is not None:
        root = Path(cwd, working_dir).resolve()
        if not root.is_dir():
            raise ConfigError(
                f"working_dir {os.fspath(working_dir)!r} is not a folder; give the project folder to ship"
            )
        node_paths = []
        for given, source in zip(tool_paths, sources, strict=True):
            if not source.is_relative_to(root):
                raise ConfigError(
                    f"tool path {given!r} is outside working_dir {str(root)!r}: only that folder reaches the nodes; "
                    "move the tool into it, or leave working_dir out to ship the tool paths alone"
                )
            node_paths.append(str(source.relative_to(root)))
        return _Staged(str(root), node_paths, None)
    if not tool_paths:
        raise ConfigError("give tool_paths, or a working_dir whose tools the nodes discover")
    # Each path in a folder of its own keeps its name (a module's name is its file's)
    # and keeps two paths with the same name apart.
    temporary = tempfile.mkdtemp(prefix="xcsh-ray-stage-")
    node_paths = []
    try:
        for index, source in enumerate(sources):
            target = Path(temporary, str(index), source.name)
            target.parent.mkdir()
            if source.is_dir():
                shutil.copytree(source, target, ignore=_STAGE_IGNORE, symlinks=False)
            else:
                shutil.copy2(source, target)
            node_paths.append(str(target.relative_to(temporary)))
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return _Staged(temporary, node_paths, temporary)


def _split_runtime_env(runtime_env: Mapping[str, Any] | None) -> dict[str, Any]:
    env = dict(runtime_env or {})
    if "working_dir" in env:
        raise ConfigError("give the folder to ship as working_dir=..., not inside runtime_env")
    return env


def upload(ray: Any, staged: _Staged) -> str:
    """The staged folder uploaded to the cluster for a connection this runner did not open: its ``gcs://`` URI.

    Ray accepts a local ``working_dir`` only in ``ray.init``; for an existing
    connection this is the step ``ray.init`` itself runs (Ray's packaging, its
    exclusions and cache), reached through Ray's private module for it.
    """
    try:
        from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

        scratch = ray._private.worker.global_worker.node.get_runtime_env_dir_path()
        uploaded = upload_working_dir_if_needed(
            {"working_dir": staged.working_dir}, include_gitignore=True, scratch_dir=scratch, logger=_log
        )
        uri: str = uploaded["working_dir"]
    except (ImportError, AttributeError, TypeError, KeyError) as exc:
        raise ConfigError(
            f"this Ray ({getattr(ray, '__version__', '?')}) cannot ship the tool files over a connection opened "
            f"before open_ray_runner ({type(exc).__name__}: {exc}); let open_ray_runner connect (do not call "
            "ray.init first), or call ray.init(runtime_env={'working_dir': FOLDER}) and give that folder as working_dir"
        ) from None
    return uri


@contextlib.asynccontextmanager
async def connect_and_ship(
    ray: Any,
    staged: _Staged,
    *,
    address: str | None,
    connect_timeout: float,
    init_options: Mapping[str, Any] | None = None,
) -> AsyncIterator[str | None]:
    """Connected to the Ray cluster with the staged tool files shipped to it, for the block.

    Connects (``ray.init``) unless this process already is, with the files as
    the job's ``working_dir``: Ray packs and uploads them once, and every
    node unpacks them for the job's tasks and actors, which inherit them; it
    then yields None. On a connection opened before, it uploads them
    (:func:`upload`) and yields their ``gcs://`` URI, for the tasks' and
    actors' own runtime environment. Leaving the block shuts Ray down if
    this connected, and removes the staging folder (``staged.temporary``)
    either way.

    Raises:
        RunnerError: the cluster could not be reached (the message says how to start one or name it).
        ConfigError: this Ray cannot ship files over a connection opened before (see :func:`upload`).
    """
    owned = False
    try:
        if ray.is_initialized():
            yield await trio.to_thread.run_sync(upload, ray, staged)
            return
        init = {"address": address, "log_to_driver": False, **(init_options or {})}
        init["runtime_env"] = {**dict(init.get("runtime_env") or {}), "working_dir": staged.working_dir}
        try:
            # Ray keeps trying an address where nothing answers for minutes; past
            # the timeout its thread is left to it (ray.init cannot be interrupted).
            with trio.fail_after(connect_timeout):
                await trio.to_thread.run_sync(lambda: ray.init(**init), abandon_on_cancel=True)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError, trio.TooSlowError) as exc:
            why = (
                f"nothing answered within connect_timeout={connect_timeout:g} s"
                if isinstance(exc, trio.TooSlowError)
                else _first_line(exc).rstrip(".")
            )
            raise RunnerError(
                f"could not connect to the Ray cluster at {address!r}: {why}; start one (ray start --head) "
                "or give its address (address='HOST:PORT' or 'ray://HOST:10001'; on the command line --ray HOST:PORT)"
            ) from exc
        owned = True
        yield None
    finally:
        with trio.CancelScope(shield=True):
            if owned:
                await trio.to_thread.run_sync(ray.shutdown)
            if staged.temporary is not None:
                shutil.rmtree(staged.temporary, ignore_errors=True)


@contextlib.asynccontextmanager
async def open_ray_runner(
    tool_paths: Sequence[str] = (),
    *,
    address: str | None = "auto",
    working_dir: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    worker_env: Mapping[str, str] | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    max_calls_per_node: int = 256,
    connect_timeout: float = 60.0,
    start_timeout: float = 300.0,
    close_timeout: float = 60.0,
    init_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> AsyncIterator[RayRunner]:
    """A runner whose calls run on the nodes of a Ray cluster, one ordinary runner per node.

    Example:
        ```python
        from xcsh_run import open_ray_runner

        async with open_ray_runner(["tools/"], address="auto", max_workers=8) as runner:
            result = await runner.call_tool("hello", {"name": "Ada"}, timeout=10)
        ```

    xcsh-run (the same version) must be installed on every node; the tool
    files travel with the runner.

    Args:
        tool_paths: tool files or folders, relative to ``cwd`` (like ``open_runner``'s).
            Without ``working_dir`` they are copied into a staging folder that
            becomes every node's working directory.
        address: the cluster to connect to (``"auto"``: the one running on this
            machine; ``"ray://host:10001"``; an IP:port; None: start a Ray
            instance of this process's own, ended on close). Ignored when this
            process is already connected (``ray.init`` was called): that
            connection is used and left open.
        working_dir: instead of a staging folder, ship this folder (a project):
            ``tool_paths`` must lie inside it, and with no ``tool_paths`` each
            node discovers the project's tools there (``.xcsh/tools``, ...).
            It is each node's ``cwd`` (the tools' ``api.cwd``).
        cwd: what relative ``tool_paths`` and ``working_dir`` are relative to; default: the current directory.
        worker_env: variables set for every worker on every node, on top of the node's own environment.
        runtime_env: more of the actors' Ray runtime environment (``env_vars``,
            ``pip``, ``excludes``, ...), merged with the ``working_dir``.
        max_calls_per_node: calls one node's actor accepts at once (it queues
            the rest); the node's runner runs ``max_workers`` of them at a time.
        connect_timeout: seconds to connect to the cluster when this opens the connection.
        start_timeout: seconds for every node to start its runner (shipping the files included).
        close_timeout: seconds for the nodes to stop their workers on close.
        init_options: more keywords for ``ray.init`` when this opens the connection.
        options: the options of [`open_runner`][xcsh_run.open_runner] that apply on every node:
            ``default_timeout``, ``grace``, ``load_timeout``, ``sandbox``,
            ``tool_policies``, ``max_workers``, ``queue_timeout``, ``cache``, ``cache_dir``, ...

    Raises:
        RayMissing: Ray is not installed (the message says ``pip install 'xcsh-run[ray]'``).
        ConfigError: an option is out of range, unknown, or means nothing on another machine.
        RunnerError: no node could start its runner (the message quotes a node's error).

    Leaving the block closes every node's runner (running calls end
    ``cancelled``, their workers stopped through the ladder) and ends the actors.
    """
    unknown = sorted(set(options) - NODE_OPTIONS)
    if unknown:
        raise ConfigError(
            f"open_ray_runner does not take {', '.join(unknown)}: each node runs in its own working "
            f"directory and environment (use working_dir and worker_env); it takes {', '.join(sorted(NODE_OPTIONS))}"
        )
    # Checked here, so a bad value fails at once rather than on every node.
    RunnerConfig(**{k: v for k, v in options.items() if k != "discover_sources"})
    if isinstance(max_calls_per_node, bool) or not isinstance(max_calls_per_node, int) or max_calls_per_node < 1:
        raise ConfigError(f"max_calls_per_node must be a positive integer, got {max_calls_per_node!r}")
    ray = import_ray()
    actor_env = _split_runtime_env(runtime_env)
    base = os.fspath(cwd) if cwd is not None else os.getcwd()
    staged = stage_tools(tool_paths, working_dir, base)  # from here on, connect_and_ship removes it
    connected = connect_and_ship(
        ray, staged, address=address, connect_timeout=connect_timeout, init_options=init_options
    )
    async with connected as shipped:
        if shipped is not None:
            actor_env["working_dir"] = shipped
        launcher = _Launcher(ray, staged, options, worker_env, actor_env, max_calls_per_node, start_timeout)
        runner = await _start(launcher, float(options.get("grace", RunnerConfig().grace)))
        try:
            yield runner
        finally:
            with trio.CancelScope(shield=True):
                await runner.aclose(close_timeout)


class _Launcher:
    """Starts the node actors: every alive node's at open, and those of nodes that joined later (``add_nodes``)."""

    def __init__(
        self,
        ray: Any,
        staged: _Staged,
        options: Mapping[str, Any],
        worker_env: Mapping[str, str] | None,
        actor_env: Mapping[str, Any],
        max_calls_per_node: int,
        start_timeout: float,
    ) -> None:
        from xcsh_run.ray._actor import NodeHost

        self._ray = ray
        self._args = (staged.node_paths, dict(options), dict(worker_env or {}))
        self._env = dict(actor_env) or None
        self._max_calls = max_calls_per_node
        self.start_timeout = start_timeout
        # Cancels and close have a group of their own: they never queue behind calls.
        self._class = ray.remote(concurrency_groups={"control": 4})(NodeHost)
        self._run = f"{os.getpid()}-{next(_ids)}-{uuid.uuid4().hex[:8]}"

    def _launch(self, known: frozenset[str]) -> list[tuple[str, Any]]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        handles = []
        for node in self._ray.nodes():
            node_id = node["NodeID"]
            if not node.get("Alive") or node_id in known:
                continue
            handle = self._class.options(
                name=f"xcsh-run-{self._run}-{node_id[:12]}",
                num_cpus=0,
                # Never run anything twice: a dead actor stays dead, its calls are not retried.
                max_restarts=0,
                max_task_retries=0,
                max_concurrency=self._max_calls,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                runtime_env=self._env,
            ).remote(*self._args)
            handles.append((node_id, handle))
        return handles

    async def start(self, known: frozenset[str] = frozenset()) -> tuple[list[RayNode], list[dict[str, Any]], list[str]]:
        """Actors on the alive nodes not in ``known``: (started nodes, their descriptions, failures)."""
        ray = self._ray
        handles = await trio.to_thread.run_sync(self._launch, known)
        refs = [handle.describe.remote() for _, handle in handles]
        timeout = self.start_timeout
        try:
            ready, _ = await trio.to_thread.run_sync(
                lambda: ray.wait(refs, num_returns=len(refs), timeout=timeout), abandon_on_cancel=True
            )
        except BaseException:
            # Cancelled while the nodes start: no runner was handed out, so
            # nothing else would ever end these actors.
            for _, handle in handles:
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=True)
            raise
        nodes: list[RayNode] = []
        failures: list[str] = []
        descriptions: list[dict[str, Any]] = []
        for (node_id, handle), ref in zip(handles, refs, strict=True):
            try:
                if ref not in ready:
                    raise TimeoutError(f"its runner did not start within start_timeout={timeout:g} s")
                described = ray.get(ref)  # ready: no wait
            except Exception as exc:
                failures.append(f"node {node_id}: {_first_line(exc)}")
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=True)
                continue
            descriptions.append(described)
            nodes.append(
                RayNode(
                    node_id=described["node_id"],
                    node_ip=described["node_ip"],
                    handle=handle,
                    max_workers=described.get("max_workers", 0),
                )
            )
        return nodes, descriptions, failures


def _differences(first: Mapping[str, Any], descriptions: list[dict[str, Any]], failures: list[str]) -> list[str]:
    warnings = [f"Ray {f} did not start its runner and takes no calls" for f in failures]
    for described in descriptions:
        if described["version"] != __version__:
            warnings.append(
                f"node {described['node_id']} runs xcsh-run {described['version']}, this driver {__version__}: "
                "install the same version on every node"
            )
        if [t.name for t in described["tools"]] != [t.name for t in first["tools"]]:
            warnings.append(
                f"node {described['node_id']} loaded other tools than node {first['node_id']}: "
                f"{sorted(t.name for t in described['tools'])}"
            )
    return warnings


async def _start(launcher: _Launcher, grace: float) -> RayRunner:
    nodes, descriptions, failures = await launcher.start()
    if not nodes:
        if not failures:
            raise RunnerError("the Ray cluster has no alive node; start one (ray start) and try again")
        raise RunnerError(
            f"no Ray node could start its runner: {failures[0]}"
            + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else "")
        )
    first = descriptions[0]

    async def more(known: frozenset[str]) -> tuple[list[RayNode], list[str]]:
        added, described, failed = await launcher.start(known)
        return added, _differences(first, described, failed)

    return RayRunner(
        launcher._ray,
        nodes,
        tools=first["tools"],
        errors=first["errors"],
        warnings=[*first["warnings"], *_differences(first, descriptions, failures)],
        grace=grace,
        add=more,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # A Ray task error starts with where it was raised; its last line says what went wrong.
    return lines[-1] if len(lines) > 1 and type(exc).__name__.startswith("Ray") else lines[0]
