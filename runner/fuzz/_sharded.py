"""Fuzz campaigns sharded over a Ray cluster: ``xcsh-run fuzz TOOL --ray ADDRESS`` and :func:`fuzz_tool_ray`.

A campaign of ``examples`` per property is split into shards (:func:`plan`):
shard ``i`` gets ``examples // shards`` examples (the first ``examples %
shards`` one more) and a seed of its own derived from the campaign's
(:func:`shard_seed`; shard 0 uses the campaign seed itself, so its search is
the local run's). Each shard is one Ray task, pinned to a node (shard ``i``
on the ``i % nodes``-th alive node, in node-id order), that runs the ordinary
local fuzz (:func:`xcsh_run.fuzz._campaign.fuzz_tool`) against a runner of that node's
own: generation, the calls and the shrinking all happen there. The tool
files travel as ``open_ray_runner``'s do (a staged folder as the runtime
environment's ``working_dir``).

The driver merges the shard reports in shard order: a failure is the same
one when the fuzz judge's key says so (problem, near-miss rule, exception
type and place, or how it crashed); of each, the smallest reproducer is kept,
the first in shard order among equals. The merged report is an ordinary
:class:`FuzzReport` (one summary, one JUnit file). The same seed, shard count
and options replay the same campaign.

Nothing is run twice: a shard task is never retried (``max_retries=0``). A
shard whose node died (or whose task failed) is an error of each of its
properties, naming the shard, its seed and the node.
"""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import trio

from xcsh_run._errors import ConfigError, RunnerError
from xcsh_run._sandbox import SandboxPolicy
from xcsh_run.fuzz._campaign import DEFAULT_EXAMPLES, DEFAULT_MAX_TIMEOUTS, require_hypothesis
from xcsh_run.fuzz._report import CLEANUP, NEAR_MISSES, VALID, FuzzFailure, FuzzReport, PropertyReport
from xcsh_run.ray import connect_and_ship, import_ray, stage_tools

PROPERTIES: Final = (VALID, NEAR_MISSES, CLEANUP)


def shard_seed(seed: int, index: int) -> int:
    """Shard ``index``'s seed: the campaign's own for shard 0, a derived one for the others."""
    return seed if index == 0 else random.Random(f"xcsh-run-shard/{seed}/{index}").randrange(2**32)


def plan(examples: int, shards: int) -> list[int]:
    """Examples per shard: ``shards`` near-equal parts of ``examples`` (never an empty shard)."""
    shards = max(1, min(shards, examples))
    base, extra = divmod(examples, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]


@dataclass(frozen=True)
class Shard:
    """One shard of a campaign: where it ran and how it went (``error`` when its task failed)."""

    index: int
    seed: int
    examples: int
    node_id: str
    seconds: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class Campaign:
    """A sharded campaign's merged report and its shards."""

    report: FuzzReport
    shards: list[Shard]

    @property
    def nodes(self) -> list[str]:
        """The nodes that ran a shard, in first-use order."""
        return list(dict.fromkeys(s.node_id for s in self.shards))

    def summary(self) -> str:
        """The merged report's summary, after a line on the shards."""
        spread = f"{len(self.shards)} shard{'s' * (len(self.shards) != 1)} on {len(self.nodes)} Ray node(s)"
        return f"campaign: {spread} (seed {self.report.seed}, --shards {len(self.shards)})\n" + self.report.summary()


def _run_shard(tool: str, node_paths: list[str], options: dict[str, Any], worker_env: dict[str, str]) -> FuzzReport:
    """The Ray task: the local fuzz on this node, shrinking included; its report travels back pickled."""
    from xcsh_run.fuzz._campaign import fuzz_tool_sync

    # The workers' environment only: the task's own process is one of Ray's pooled workers.
    env = {**os.environ, **worker_env}
    return fuzz_tool_sync(tool, tool_paths=node_paths, discover_sources=False, env=env, **options)


async def fuzz_tool_ray(
    tool: str,
    *,
    tool_paths: Sequence[str],
    address: str | None = "auto",
    examples: int = DEFAULT_EXAMPLES,
    seed: int | None = None,
    shards: int | None = None,
    timeout: float | None = None,
    max_timeouts: int = DEFAULT_MAX_TIMEOUTS,
    sandbox: SandboxPolicy | None = None,
    cwd: str | None = None,
    worker_env: dict[str, str] | None = None,
    init_options: dict[str, Any] | None = None,
    connect_timeout: float = 60.0,
    **fuzz_options: Any,
) -> Campaign:
    """Fuzz ``tool`` on a Ray cluster, ``examples`` per property split into deterministic shards.

    Args:
        tool: the tool's name.
        tool_paths: its files or folders (shipped to every node).
        address: the cluster (``"auto"``, ``"HOST:PORT"``, ``"ray://..."``); an
            existing connection of this process is used as it is.
        examples: examples per property for the whole campaign.
        seed: the campaign's seed (default: a random one, reported).
        shards: how many shards; default: the cluster's alive nodes. The same
            seed and shard count replay the same campaign.
        timeout, max_timeouts, sandbox, fuzz_options: as :func:`fuzz_tool`,
            per shard (``fail_on_tool_error``, ``allow_errors``, ``flag_errors``,
            ``load_timeout``, ``grace``, ...).
        worker_env: variables for the tools' workers on every node.

    Raises:
        RayMissing: Ray is not installed (the message says how to install it).
        ConfigError: bad arguments; RunnerError: the cluster cannot be reached.
    """
    if examples < 1:
        raise ConfigError(f"examples must be at least 1, got {examples}")
    if shards is not None and shards < 1:
        raise ConfigError(f"shards must be at least 1, got {shards}")
    ray = import_ray()
    require_hypothesis()  # the driver's: the nodes need it too, and say so if they lack it
    seed = random.randrange(2**32) if seed is None else seed
    staged = stage_tools(tool_paths, None, cwd or os.getcwd())  # from here on, connect_and_ship removes it
    connected = connect_and_ship(
        ray, staged, address=address, connect_timeout=connect_timeout, init_options=init_options
    )
    async with connected as working_dir:
        nodes = sorted(n["NodeID"] for n in await trio.to_thread.run_sync(ray.nodes) if n.get("Alive"))
        if not nodes:
            raise RunnerError("the Ray cluster has no alive node; start one (ray start) and try again")
        counts = plan(examples, shards if shards is not None else len(nodes))
        options = {"timeout": timeout, "max_timeouts": max_timeouts, "sandbox": sandbox, **fuzz_options}
        shipped = (tool, staged.node_paths, options, dict(worker_env or {}))
        task_env = {"working_dir": working_dir} if working_dir is not None else None
        done = await _run_shards(ray, shipped, seed, counts, nodes, task_env)
    mapping = dict(zip(staged.node_paths, tool_paths, strict=True))
    return Campaign(merge(tool, seed, examples, done, mapping), [s for s, _ in done])


async def _run_shards(
    ray: Any,
    shipped: tuple[str, list[str], dict[str, Any], dict[str, str]],
    seed: int,
    counts: list[int],
    nodes: list[str],
    runtime_env: dict[str, Any] | None,
) -> list[tuple[Shard, FuzzReport | None]]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # Never retried: a shard whose node died is reported, not silently run again.
    tool, node_paths, options, worker_env = shipped
    task = ray.remote(max_retries=0, retry_exceptions=False)(_run_shard)
    launched = []
    for index, count in enumerate(counts):
        node = nodes[index % len(nodes)]
        shard = Shard(index, shard_seed(seed, index), count, node)
        ref = task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False), runtime_env=runtime_env
        ).remote(tool, node_paths, {**options, "examples": count, "seed": shard.seed}, worker_env)
        launched.append((shard, ref, time.monotonic()))
    out: list[tuple[Shard, FuzzReport | None]] = []
    try:
        for shard, ref, started in launched:
            try:
                # (Not msgspec-decoded by type: the public classes say they live in `runner`,
                # where their annotations' names cannot be resolved; pickle finds them there.)
                report: FuzzReport = await trio.to_thread.run_sync(ray.get, ref, abandon_on_cancel=True)
                out.append((_done(shard, started), report))
            except Exception as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, ConfigError):
                    raise ConfigError(str(cause)) from None  # the same on every node: unknown tool, ...
                out.append((_done(shard, started, _why(exc, shard)), None))
    except BaseException:
        for _, ref, _ in launched:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    return out


def _done(shard: Shard, started: float, error: str | None = None) -> Shard:
    return Shard(shard.index, shard.seed, shard.examples, shard.node_id, round(time.monotonic() - started, 3), error)


def _why(exc: BaseException, shard: Shard) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = lines[-1] if lines else type(exc).__name__
    return (
        f"shard {shard.index} (seed {shard.seed}, {shard.examples} examples) on Ray node {shard.node_id} did not "
        f"finish ({type(exc).__name__}: {said}); it was not run again: rerun the campaign with the same --seed"
    )


def _retarget(reproducer: str | None, mapping: dict[str, str]) -> str | None:
    """The node's tool paths in a reproducer, put back as the driver gave them."""
    if reproducer is None:
        return None
    argv = shlex.split(reproducer)
    for i in range(1, len(argv)):
        if argv[i - 1] == "--tools" and argv[i] in mapping:
            argv[i] = mapping[argv[i]]
    return " ".join(shlex.quote(arg) for arg in argv)


def _key(f: FuzzFailure) -> tuple[str, ...]:
    from xcsh_run._results import ErrorInfo, ToolResult
    from xcsh_run.fuzz._judge import failure_key

    error = (f.result or {}).get("error")
    result = None
    if f.result is not None:
        info = msgspec.convert(error, ErrorInfo) if error is not None else None
        result = ToolResult(content=[], details=None, is_error=info is not None, error=info)
    return (f.property, *failure_key(f.problem, f.near_miss, result))


def _size(f: FuzzFailure) -> int:
    return len(msgspec.json.encode(f.arguments)) if f.arguments is not None else 0


def merge(
    tool: str, seed: int, examples: int, done: list[tuple[Shard, FuzzReport | None]], mapping: dict[str, str]
) -> FuzzReport:
    """One report out of the shards', in shard order (see the module's docstring)."""
    properties = []
    for name in PROPERTIES:
        best: dict[tuple[str, ...], FuzzFailure] = {}
        calls, seconds, skipped = 0, 0.0, None
        errors: list[str] = []
        stopped: list[str] = []
        for shard, report in done:
            if report is None:
                errors.append(shard.error or f"shard {shard.index} failed")
                continue
            for prop in report.properties:
                if prop.name != name:
                    continue
                calls += prop.calls
                seconds = max(seconds, prop.seconds)
                skipped = prop.skipped
                if prop.error is not None:
                    errors.append(f"shard {shard.index} (seed {shard.seed}): {prop.error}")
                if prop.stopped is not None:
                    stopped.append(f"shard {shard.index}: {prop.stopped}")
                for f in prop.failures:
                    f = msgspec.structs.replace(f, reproducer=_retarget(f.reproducer, mapping))
                    key = _key(f)
                    if key not in best or _size(f) < _size(best[key]):
                        best[key] = f
        failures = sorted(best.values(), key=lambda f: (f.problem, f.reproducer or "", f.message))
        properties.append(
            PropertyReport(
                tool,
                name,
                calls=calls,
                failures=failures,
                skipped=skipped if not errors and not calls else None,
                error="; ".join(errors) or None,
                stopped="; ".join(stopped) or None,
                seconds=seconds,
            )
        )
    return FuzzReport(seed=seed, examples=examples, properties=properties)
