"""What runs on each Ray node: :class:`NodeHost`, an ordinary blocking runner inside one long-lived actor.

This module imports no Ray at import time: ``xcsh_run.ray._launch`` wraps the class
with ``ray.remote`` once Ray is known to be installed, and the class itself
only asks Ray where it runs. Everything a call does on the node (the worker,
its sandbox, the cancellation ladder, the boundary's kill) is the local
runner's; the actor only carries calls in and results out.

The actor is an asyncio actor: a call waits on its job's future from the
actor's event loop, so a node serves as many calls at once as its runner
allows without a thread per call. Cancels arrive in a concurrency group of
their own, so they never queue behind the calls they are meant to stop.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

from xcsh_run._embed import BlockingRunner, Job, open_blocking_runner
from xcsh_run._errors import RunnerClosedError
from xcsh_run._results import ErrorKind, ToolResult, error_result
from xcsh_run._version import __version__

# Workers see which Ray node they run on (a tool may report it; the tests check routing with it).
NODE_ENV: Final = "XCSH_RUN_RAY_NODE"
# Cancels that arrived before their call did (the two travel in different
# concurrency groups, so a cancel can overtake its call). Bounded: a cancel
# whose call had already ended when it arrived is never claimed.
_EARLY_CANCELS: Final = 4096


def node_identity() -> tuple[str, str]:
    """(node id, node IP) of the Ray node this process runs on."""
    import ray

    return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()


class NodeHost:
    """One node's runner, opened when the actor starts and closed by :meth:`close`.

    ``tool_paths`` are relative to the actor's working directory, which is
    the runtime environment's ``working_dir`` as unpacked on this node; that
    directory is also the runner's ``cwd``. ``worker_env`` is added to the
    node's own environment for every worker.
    """

    def __init__(self, tool_paths: Sequence[str], options: Mapping[str, Any], worker_env: Mapping[str, str]) -> None:
        self.node_id, self.node_ip = node_identity()
        env = {**os.environ, **worker_env, NODE_ENV: self.node_id}
        self._stack = contextlib.ExitStack()
        self._runner: BlockingRunner = self._stack.enter_context(
            open_blocking_runner(list(tool_paths), env=env, **options)
        )
        self._lock = threading.Lock()
        self._jobs: dict[str, Job[ToolResult]] = {}
        self._early: collections.OrderedDict[str, tuple[str, bool]] = collections.OrderedDict()
        self._closed = False

    async def describe(self) -> dict[str, Any]:
        """Where this actor runs and what its runner loaded."""
        return {
            "node_id": self.node_id,
            "node_ip": self.node_ip,
            "pid": os.getpid(),
            "version": __version__,
            "cwd": self._runner.cwd,
            "max_workers": self._runner.config.worker_limit,
            "tools": self._runner.tools,
            "errors": self._runner.errors,
            "warnings": self._runner.warnings,
        }

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        call_id: str,
        options: Mapping[str, Any],
    ) -> ToolResult:
        """Run one call on this node's runner to its single result."""
        with self._lock:
            early = self._early.pop(call_id, None)
            if early is not None:
                return _cancelled_before_start(name, early[0])
            if self._closed:
                return _cancelled_before_start(name, "the node's runner is closing")
            # The portal's job, not BlockingRunner.call_tool: that would hold one
            # of the actor's threads per call, and its sticky cancel closes the
            # race between a call being submitted and its id being known.
            job = self._runner.portal.submit_call(name, arguments, call_id, **options)
            self._jobs[call_id] = job
        try:
            return await asyncio.wrap_future(job.future)
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            if not job.future.cancelled():
                raise  # this task itself was cancelled (not by us)
            # The job was cancelled before its call began (sticky cancel): no
            # worker ever ran, so nothing on this node needs stopping. (Awaited
            # through asyncio, a cancelled future raises asyncio's CancelledError.)
            return _cancelled_before_start(name, job.reason or "cancelled")
        except RunnerClosedError as exc:  # the runner closed under the call
            return _cancelled_before_start(name, str(exc))
        finally:
            with self._lock:
                self._jobs.pop(call_id, None)

    async def cancel(self, call_id: str, reason: str, force: bool) -> bool:
        """Cancel a call on this node through the runner's ladder. True if it was running or not yet begun."""
        with self._lock:
            job = self._jobs.get(call_id)
            if job is None:
                self._early[call_id] = (reason, force)
                while len(self._early) > _EARLY_CANCELS:
                    self._early.popitem(last=False)
                return False
        job.cancel(reason)
        if force:
            with contextlib.suppress(RunnerClosedError):
                self._runner.cancel(call_id, reason, force=True)
        return True

    async def running(self) -> list[str]:
        """The ids of the calls this node is running."""
        with self._lock:
            return list(self._jobs)

    async def close(self) -> None:
        """Close the runner: running calls end ``cancelled`` through the ladder, and every worker is stopped."""
        with self._lock:
            self._closed = True
        await asyncio.to_thread(self._stack.close)


def _cancelled_before_start(name: str, reason: str) -> ToolResult:
    return error_result(ErrorKind.CANCELLED, f"{name!r} was cancelled before it started ({reason})")
