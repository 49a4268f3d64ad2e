"""The driver's side of calls over Ray: routing, waiting, cancelling, and what a dead node means.

Results come back through each Ray object's ``concurrent.futures.Future``: its
done-callback (on a Ray thread) wakes the waiting trio task through the trio
token, so no thread is held per call in flight.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from xcsh_run._calls import check_traceparent
from xcsh_run._discovery import LoadError, ToolInfo
from xcsh_run._embed import runner_doc
from xcsh_run._errors import ConfigError, runner_closed
from xcsh_run._results import ErrorInfo, ErrorKind, ToolResult
from xcsh_run._sandbox import SandboxPolicy

# Beyond the grace: how long a cancelled caller waits for its node to confirm
# the ladder ran (the node's kill rung ends it within grace + its own bounds).
CANCEL_MARGIN: Final = 10.0
_ids: Final = itertools.count(1)
# The block a Ray runner belongs to, as a closed one's error names it.
_BLOCK: Final = "async with open_ray_runner(...)"
# Starts actors on the alive nodes not among the given ids: (the new nodes, warnings).
AddNodes = Callable[[frozenset[str]], Awaitable[tuple[list["RayNode"], list[str]]]]


@dataclass
class RayNode:
    """One node's actor, as the driver tracks it."""

    node_id: str
    node_ip: str
    handle: Any
    alive: bool = True
    in_flight: int = 0
    calls: int = 0
    death: str | None = None  # what Ray said when the actor was found dead
    max_workers: int = 0  # calls the node's runner runs at once (its max_workers, or the node's default)

    def describe(self) -> str:
        return f"{self.node_id} ({self.node_ip})"


@dataclass
class _Flight:
    node: RayNode
    ref: Any
    done: trio.Event = field(default_factory=trio.Event)
    cancelled: bool = False


class RayRunner:
    """Calls on a Ray cluster with the contract of [`Runner`][xcsh_run.Runner]: its registry, calls and closing.

    Get one from [`open_ray_runner`][xcsh_run.open_ray_runner]. Every method is for the trio thread
    that opened it. The members it shares with `Runner` have its parameters
    and docstrings, with a note on what differs over Ray; the settings and the
    host API stay with each node's runner. ``nodes``, ``add_nodes``,
    ``worker_limit`` and ``in_flight`` are the cluster's own.
    """

    def __init__(
        self,
        ray: Any,
        nodes: list[RayNode],
        *,
        tools: list[ToolInfo],
        errors: list[LoadError],
        warnings: list[str],
        grace: float,
        add: AddNodes | None = None,
    ) -> None:
        self._ray = ray
        self._nodes = nodes
        self._tools = tools
        self._errors = errors
        self._warnings = warnings
        self._grace = grace
        self._token = trio.lowlevel.current_trio_token()
        self._flights: dict[str, _Flight] = {}
        self._turn = itertools.count()
        self._idle = trio.Event()
        self._idle.set()
        self._closed = False
        self._add = add

    @property
    @runner_doc(note="Over Ray: as the first node loaded them.")
    def tools(self) -> list[ToolInfo]:
        return list(self._tools)

    @property
    @runner_doc(note="Over Ray: the first node's.")
    def errors(self) -> list[LoadError]:
        return list(self._errors)

    @property
    @runner_doc(note="Over Ray: the first node's runner's, and the nodes that did not start their runner or differ.")
    def warnings(self) -> list[str]:
        return list(self._warnings)

    @property
    def nodes(self) -> list[RayNode]:
        """The nodes with an actor: alive or found dead, with their calls in flight."""
        return list(self._nodes)

    @property
    @runner_doc
    def closed(self) -> bool:
        return self._closed

    @runner_doc
    def get_tool(self, name: str) -> ToolInfo | None:
        return next((t for t in self._tools if t.name == name), None)

    def _pick(self) -> RayNode | None:
        alive = [n for n in self._nodes if n.alive]
        if not alive:
            return None
        # The least loaded; among equals, the next in turn, so an idle cluster spreads calls too.
        start = next(self._turn) % len(alive)
        order = alive[start:] + alive[:start]
        return min(order, key=lambda n: n.in_flight)

    @runner_doc(
        note="""
        Over Ray: the call runs on the least-loaded node. A node that dies
        during the call makes it ``crashed`` (the message and ``details`` name
        the node); it is not run again anywhere. If the caller's scope is
        cancelled, the cancel goes to the call's node and this waits
        (shielded, bounded) for that node's ladder to end it.

        Raises:
            RunnerClosedError: the runner is closed.
            ConfigError: ``on_update`` was given (partial results do not
                cross the cluster), or the id is already running.
        """
    )
    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        on_update: Any = None,
        timeout: float | None = None,
        tool_call_id: str | None = None,
        ctx: Mapping[str, Any] | None = None,
        sandbox: SandboxPolicy | None = None,
        operation_id: str | None = None,
        session_id: str | None = None,
        traceparent: str | None = None,
    ) -> ToolResult:
        if self._closed:
            raise runner_closed(_BLOCK)
        if on_update is not None:
            raise ConfigError("on_update is not supported over Ray: partial results stay on the node")
        check_traceparent(traceparent)  # a ValueError here, as locally, not a failure on the node
        call_id = tool_call_id or f"ray-{next(_ids)}"
        if call_id in self._flights:
            raise ConfigError(f"a call with id {call_id!r} is already running; give each call its own id")
        node = self._pick()
        if node is None:
            return _no_node(self._nodes)
        options: dict[str, Any] = {
            "timeout": timeout,
            "ctx": ctx,
            "sandbox": sandbox,
            "operation_id": operation_id,
            "session_id": session_id,
            "traceparent": traceparent,
        }
        ref = node.handle.call.remote(name, dict(arguments) if arguments is not None else None, call_id, options)
        flight = _Flight(node, ref)
        self._flights[call_id] = flight
        node.in_flight += 1
        node.calls += 1
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        future = ref.future()
        future.add_done_callback(lambda _: self._wake(flight))
        try:
            try:
                await flight.done.wait()
            except trio.Cancelled:
                self._send_cancel(call_id, flight, "the caller was cancelled", force=False)
                with trio.move_on_after(self._grace + CANCEL_MARGIN) as scope:
                    scope.shield = True
                    await flight.done.wait()
                raise
            return self._outcome(future, node)
        finally:
            del self._flights[call_id]
            node.in_flight -= 1
            if not self._flights:
                self._idle.set()

    def _wake(self, flight: _Flight) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(flight.done.set)

    def _outcome(self, future: Any, node: RayNode) -> ToolResult:
        error = future.exception()
        if error is None:
            result: ToolResult = future.result()
            return result
        if isinstance(error, self._ray.exceptions.RayActorError):
            # The actor is gone (its process or its whole node): it takes no more calls.
            node.alive = False
            node.death = _last_line(error)
            message = (
                f"the xcsh-run host on Ray node {node.describe()} died before this call ended (its node died or "
                f"left the cluster, or its process was killed); the call was not run again and may have run in "
                f"part: {node.death}"
            )
        else:
            message = f"the xcsh-run actor on Ray node {node.describe()} failed this call: {_last_line(error)}"
        return ToolResult(
            content=[{"type": "text", "text": message}],
            details={"node_id": node.node_id, "node_ip": node.node_ip},
            is_error=True,
            error=ErrorInfo(kind=ErrorKind.CRASHED.value, message=message),
        )

    @runner_doc(note="Over Ray: the cancel goes to the call's node, whose ladder ends the call.")
    def cancel(self, tool_call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool:
        flight = self._flights.get(tool_call_id)
        if flight is None or flight.done.is_set():
            return False
        self._send_cancel(tool_call_id, flight, reason, force=force)
        return True

    @runner_doc
    def cancel_all(self, reason: str = "cancelled") -> None:
        for call_id, flight in list(self._flights.items()):
            self._send_cancel(call_id, flight, reason, force=False)

    def _send_cancel(self, call_id: str, flight: _Flight, reason: str, *, force: bool) -> None:
        if flight.cancelled and not force:
            return
        flight.cancelled = True
        if flight.node.alive:
            with contextlib.suppress(Exception):  # a dead actor: the call ends crashed anyway
                flight.node.handle.cancel.options(concurrency_group="control").remote(call_id, reason, force)

    async def add_nodes(self) -> list[RayNode]:
        """Start a runner on every alive node that has none yet (nodes that joined the cluster); returns them.

        A node that fails to start its runner is left out and named in ``warnings``.
        A node found dead is not started again: its id stays taken.
        """
        if self._closed:
            raise runner_closed(_BLOCK)
        if self._add is None:
            return []
        added, warnings = await self._add(frozenset(n.node_id for n in self._nodes))
        self._nodes.extend(added)
        self._warnings.extend(warnings)
        return added

    @property
    def worker_limit(self) -> int:
        """Calls the cluster runs at once: the alive nodes' ``max_workers`` (each node's own default if not given)."""
        return sum(n.max_workers for n in self._nodes if n.alive)

    def in_flight(self) -> dict[str, int]:
        """Calls in flight per node id."""
        return {n.node_id: n.in_flight for n in self._nodes}

    @runner_doc(
        note="""
        Over Ray: every node's runner closes (its running calls end
        ``cancelled``), waited for at most ``timeout`` seconds, then the
        actors end.
        """
    )
    async def aclose(self, timeout: float = 60.0) -> None:
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        # Shielded and bounded (by ``timeout``): once closed, no later aclose would end the actors.
        with trio.CancelScope(shield=True):
            alive = [n for n in self._nodes if n.alive]
            refs = []
            for node in alive:
                with contextlib.suppress(Exception):
                    refs.append(node.handle.close.options(concurrency_group="control").remote())
            if refs:
                await trio.to_thread.run_sync(lambda: ray.wait(refs, num_returns=len(refs), timeout=timeout))
            # The calls the closing runners ended are on their way back: let them land before the kill.
            with trio.move_on_after(min(timeout, 10.0)):
                await self._idle.wait()
            for node in self._nodes:
                with contextlib.suppress(Exception):
                    ray.kill(node.handle, no_restart=True)


def _no_node(nodes: list[RayNode]) -> ToolResult:
    dead = "; ".join(f"{n.describe()}: {n.death}" for n in nodes) or "none started"
    message = f"no Ray node with a live xcsh-run actor is left to run this call (each one died: {dead})"
    return ToolResult(
        content=[{"type": "text", "text": message}],
        is_error=True,
        error=ErrorInfo(kind=ErrorKind.CRASHED.value, message=message),
    )


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
