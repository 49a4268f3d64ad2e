"""Tasks, the ``io.modelcontextprotocol/tasks`` extension of MCP 2026-07-28: calls that a client polls.

A task is a stateless-era call (``stateless``) that answers its request at
once with a ``CreateTaskResult`` and runs on; the client reads it with
``tasks/get``, answers its prompts with ``tasks/update`` and stops it with
``tasks/cancel``, from any connection, so a dropped connection loses nothing.

Rules:

1. The extension is advertised in ``server/discover`` (``capabilities
   .extensions``). A request uses it only when its ``_meta`` client
   capabilities declare it: ``tasks/get``, ``tasks/update`` and
   ``tasks/cancel`` from a request that does not get ``-32021`` naming the
   extension, and a call from one is never a task.
2. The server decides which call is a task, by the tool's ``task_support``:
   ``optional`` and ``required`` tools' calls are tasks from their start
   for a request that declared the extension; a ``required`` tool called
   without it gets ``-32021`` before it runs. A ``task_after_input`` tool's
   call asks its first prompts in the request (``input_required`` rounds)
   and becomes a task in the round that answers them. A ``task`` parameter
   of a client's (the earlier revision's hint) changes nothing.
3. A task is in the store before its ``CreateTaskResult`` leaves, so a
   ``tasks/get`` sent at once finds it. Its ``tasks/get`` status is
   ``working``; ``input_required`` with ``inputRequests`` (its open
   prompts); ``completed`` with the call's ``result`` (an error of the tool's
   own, a timeout or bad arguments included, with ``isError``); ``failed``
   with a JSON-RPC ``error`` when the worker side failed (it crashed, broke
   the protocol, hit a limit or could not load) or the client could not
   answer a prompt it needed; ``cancelled`` once stopped, with the reason.
4. ``tasks/update`` hands answers to open prompts, some or all (unknown keys
   are ignored); ``tasks/cancel`` stops the call through the ladder. Both
   answer the empty acknowledgement, also for a task that is over.
5. Bounds: a task is kept :data:`TASK_TTL` from its creation (``ttlMs``),
   and :data:`KEPT_AFTER_END` at least after it ended; one still running at
   its ttl is stopped, and so is one whose prompt waits unanswered for
   ``ELICIT_TIMEOUT``, as every prompt. At most :data:`MAX_TASKS` are kept: a
   new task forgets the oldest that is over; when every one is still running,
   an ``optional`` tool's call is answered in its request and a ``required``
   one's is refused, saying why (a ``task_after_input`` one's is stopped then).
   A task stopped before it ended (``tasks/cancel``, the ttl, the server's
   end) is ``cancelled``, also when the stop came while its approval prompt
   was open and it ended as that prompt's refusal.
6. Tasks live in this process. A task id names the server's run, so an id
   of an earlier run gets ``-32602`` saying that the server restarted and
   the task is lost; when the server winds down, its running tasks are
   stopped and say so until it is gone.
7. Over HTTP, an ``Mcp-Name`` header on a ``tasks/*`` request must be its
   ``taskId`` (``-32020`` otherwise), as for a tool's name on ``tools/call``.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import decode_header_value

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
TASK_TTL: Final = 3600.0
KEPT_AFTER_END: Final = 300.0
MAX_TASKS: Final = 128
POLL_INTERVAL_MS: Final = 500
_MCP_NAME: Final = "mcp-name"


class TaskParams(types.RequestParams):
    """``tasks/get`` and ``tasks/cancel``: the task's id."""

    taskId: str


class TaskUpdateParams(TaskParams):
    """``tasks/update``: answers to some of the task's input requests, by key."""

    inputResponses: dict[str, Any] | None = None


class TaskedCall(Protocol):
    """What the store asks of a call that runs as a task (``stateless_call.StatelessCall``)."""

    @property
    def over(self) -> bool: ...

    def view(self) -> dict[str, Any]:
        """Its status, and the ``result``, ``error`` or ``inputRequests`` that go with it (rule 3)."""
        ...

    def stop(self, why: str) -> None: ...

    def answer(self, responses: Any) -> bool: ...


def declares_tasks(meta: Any) -> bool:
    """Whether a request's ``_meta`` declares the tasks extension (rule 1)."""
    caps = meta.get(types.CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    extensions = caps.get("extensions") if isinstance(caps, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def missing_tasks_capability(what: str) -> MCPError:
    return MCPError(
        code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"{what} needs the {TASKS_EXTENSION} extension, which this request's client did not declare; "
        f"declare it in _meta's clientCapabilities.extensions",
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Task:
    """One call run as a task: its id and times (the call keeps its own state)."""

    def __init__(self, task_id: str, call: TaskedCall) -> None:
        self.id = task_id
        self.call = call
        self.created = self.updated = _now()
        self.ended: float | None = None

    def envelope(self) -> dict[str, Any]:
        return {
            "taskId": self.id,
            "createdAt": _stamp(self.created),
            "lastUpdatedAt": _stamp(self.updated),
            "ttlMs": int(TASK_TTL * 1000),
            "pollIntervalMs": POLL_INTERVAL_MS,
        }

    def created_result(self) -> dict[str, Any]:
        """The ``CreateTaskResult``: flat, with no result, error or requestState (rule 3)."""
        return {"resultType": "task", **self.envelope(), "status": "working"}

    def detailed(self) -> dict[str, Any]:
        return {"resultType": "complete", **self.envelope(), **self.call.view()}

    def changed(self) -> None:
        self.updated = _now()
        if self.call.over and self.ended is None:
            self.ended = self.updated

    def expired(self, now: float) -> bool:
        if now < self.created + TASK_TTL:
            return False
        return self.ended is not None and now >= self.ended + KEPT_AFTER_END


def _now() -> float:
    return datetime.now(UTC).timestamp()


class TaskStore:
    """The tasks of one server run, bounded in count and time (rules 5 and 6)."""

    def __init__(self) -> None:
        self.run = uuid.uuid4().hex[:8]
        self._tasks: OrderedDict[str, Task] = OrderedDict()

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    def create(self, call: TaskedCall) -> Task | None:
        """A new task for ``call``, or None when every kept task is still running (rule 5)."""
        self._forget_expired()
        if len(self._tasks) >= MAX_TASKS:
            ended = next((t for t in self._tasks.values() if t.call.over), None)
            if ended is None:
                return None
            del self._tasks[ended.id]
        task = Task(f"{self.run}-{uuid.uuid4().hex}", call)
        self._tasks[task.id] = task
        return task

    def find(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> Task:
        """The task a ``tasks/*`` request names, after the checks of rules 1, 6 and 7."""
        if not declares_tasks(ctx.params.get("_meta") if ctx.params else None):
            raise missing_tasks_capability(ctx.method)
        headers = getattr(ctx.request, "headers", None)
        named = decode_header_value(headers.get(_MCP_NAME)) if headers is not None else None
        if named is not None and named.strip() != params.taskId:
            raise MCPError(
                code=types.HEADER_MISMATCH, message=f"the Mcp-Name header does not match taskId ({ctx.method})"
            )
        self._forget_expired()
        task = self._tasks.get(params.taskId)
        if task is not None:
            return task
        run, _, rest = params.taskId.partition("-")
        if rest and len(run) == len(self.run) and run != self.run:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"task {params.taskId!r} belonged to an earlier run of this server, which ended: tasks live "
                "in the server's memory, so it was lost; call the tool again",
            )
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"unknown task {params.taskId!r}: it never existed here, or it ended and was forgotten "
            f"(tasks are kept {TASK_TTL:g} s from their creation)",
        )

    def _forget_expired(self) -> None:
        now = _now()
        for task in [t for t in self._tasks.values() if t.expired(now)]:
            del self._tasks[task.id]
