"""Where ``xcsh-run batch`` runs its calls: a local runner, or with ``--ray`` one runner per node of a Ray cluster.

Both are opened here so that the command itself only reads, writes and
counts; the batch over either is the same :func:`run_batch`. Ray is imported
only when ``--ray`` is given.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

from xcsh_run._cli.options import fail
from xcsh_run._discovery import ToolInfo
from xcsh_run._embed import CallsTools
from xcsh_run._host import open_runner
from xcsh_run._sandbox import SandboxPolicy


class BatchRunner(CallsTools, Protocol):
    """What the command needs of either runner: calls, cancels, its tools and warnings."""

    @property
    def warnings(self) -> list[str]: ...

    def get_tool(self, name: str) -> ToolInfo | None: ...

    def cancel(self, tool_call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool: ...


def check_ray(address: str | None) -> None:
    """Fail (usage, exit 2) at once if ``--ray`` was given and Ray is not installed: the message says how to get it."""
    if address is None:
        return
    if not address.strip():
        fail("--ray needs the cluster's address: auto (the cluster on this machine), HOST:PORT or ray://HOST:10001")
    from xcsh_run.ray import RayMissing, import_ray

    try:
        import_ray()
    except RayMissing as exc:
        fail(str(exc))


@contextlib.asynccontextmanager
async def open_batch_runner(
    ray: str | None,
    tools: Sequence[str],
    *,
    tool: str,
    concurrency: int | None,
    verbose: int,
    options: Mapping[str, Any],
    sandbox: SandboxPolicy,
) -> AsyncIterator[tuple[BatchRunner, int]]:
    """The runner and the batch's concurrency.

    Locally the runner gets ``concurrency`` workers (default: twice the cores,
    at least 4). Over Ray each node's runner keeps its own default
    ``max_workers`` (twice that node's cores, at least 4), and the default
    concurrency is their sum: every worker of every node busy, none queued.
    """
    if ray is None:
        from xcsh_run._config import default_max_workers

        workers = concurrency if concurrency is not None else default_max_workers()
        async with open_runner(
            tools, sandbox=sandbox, wanted_tool=tool, discover_sources=True, max_workers=workers, **options
        ) as runner:
            yield runner, workers
        return
    from xcsh_run.ray import open_ray_runner

    # With no --tools, the project folder travels (Ray honours its .gitignore) and each node discovers its tools.
    shipping: dict[str, Any] = {"working_dir": os.getcwd()} if not tools else {}
    init = {"logging_level": "INFO" if verbose else "WARNING"}
    async with open_ray_runner(
        list(tools), address=ray, sandbox=sandbox, init_options=init, **shipping, **options
    ) as ray_runner:
        yield ray_runner, concurrency if concurrency is not None else max(1, ray_runner.worker_limit)
