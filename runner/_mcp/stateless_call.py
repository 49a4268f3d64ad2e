"""One stateless-era call (MCP 2026-07-28) over its rounds of input requests, or as a task.

The server (``stateless``) starts a :class:`StatelessCall` for a ``tools/call``
without ``requestState`` and finds it again by that state (the call's token)
for each later round; a call run as a task is found by its task (``tasks``).
The call is the owner of its runner call (``call_link.CallOwner``): its
progress and log records go to the round being served, its prompts become
questions (:class:`Question`) that a round (or a task's ``tasks/update``) answers. The
numbered rules are ``stateless``'s.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from typing import Any, Final

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from xcsh_run._host import Runner
from xcsh_run._mcp.elicit import Answer, can_elicit, can_list_roots
from xcsh_run._mcp.log_records import LEVELS
from xcsh_run._mcp.methods import ELICIT, ROOTS, SAMPLE
from xcsh_run._mcp.render import META_ERROR
from xcsh_run._mcp.tasks import TASK_TTL, Task, TaskedCall
from xcsh_run.worker.protocol import Method, Notice, ResultReceived

# How long a round waits for more prompts after one came, and at most in all (``StatelessCall._gather_questions``).
GATHER_QUIET: Final = 0.05
GATHER_MAX: Final = 0.25
INPUT_REQUIRED: Final = "input_required"
# A dict result names its own type: the SDK fills it only into the models it builds.
COMPLETE: Final = "complete"
# Above every level: a request that asked for no log level is sent no records (rule 2).
_NO_RECORDS: Final = len(LEVELS)
# A task whose call ended so is ``failed``: the worker side failed, not the tool (``tasks`` rule 3).
_FAILED_KINDS: Final = frozenset({"crashed", "protocol_error", "limit_exceeded", "load_error"})


class Question:
    """One prompt of a call, waiting for the client's answer in a later round."""

    __slots__ = ("key", "method", "request", "answer", "answered")

    def __init__(self, key: str, method: Method[Any, Any], params: dict[str, Any]) -> None:
        self.key = key
        self.method = method
        self.request = {"method": method.name, "params": params}
        self.answer: Answer | None = None
        self.answered = trio.Event()


class StatelessCall:
    """One stateless ``tools/call`` over its rounds, or as a task; the owner of its call (``call_link.CallOwner``)."""

    def __init__(self, name: str, meta: Any) -> None:
        self.name = name
        self.token = uuid.uuid4().hex  # the plaintext of its requestState (the SDK seals it, rule 4)
        self.call_id: str | None = None
        self.task: Task | None = None  # set when it runs as a task (rule 9), by run_as
        self._tasked = trio.Event()
        # Set for a task_after_input tool's call: makes it a task in the round that answers its prompts.
        self.become_task: Callable[[TaskedCall], Task | None] | None = None
        self._runner: Runner | None = None
        self._ctx: ServerRequestContext[Any, Any] | None = None  # the round being served, if any
        self._last_meta: dict[str, Any] = meta if isinstance(meta, dict) else {}  # a task's prompts read it
        self._questions: dict[str, Question] = {}
        self._keys = itertools.count(1)
        self._result: dict[str, Any] | None = None
        self._refusal: MCPError | None = None
        self._over = False
        self._changed = trio.Event()  # a question came, or the call is over: the round looks again
        self._stop_reason: str | None = None

    @property
    def serving(self) -> bool:
        """A round of the call is being served (one at a time)."""
        return self._ctx is not None

    @property
    def waiting(self) -> bool:
        """Parked: a call (not a task) with no round being served and a prompt waiting for its answer (rule 6)."""
        return self.task is None and self._ctx is None and bool(self._open_questions())

    @property
    def over(self) -> bool:
        return self._over

    def run_as(self, task: Task | None) -> None:
        """From now on, the call is ``task`` (if not None)."""
        if task is not None:
            self.task = task
            self._tasked.set()

    def _open_questions(self) -> dict[str, Any]:
        return {q.key: q.request for q in self._questions.values() if not q.answered.is_set()}

    def _touched(self) -> None:
        self._changed.set()
        if self.task is not None:
            self.task.changed()

    # --- the call's side -----------------------------------------------------------

    def started(self, runner: Runner, call_id: str) -> None:
        self._runner, self.call_id = runner, call_id
        if self._stop_reason is not None:
            runner.cancel(call_id, self._stop_reason)

    def finish(self, result: dict[str, Any] | None) -> None:
        if not self._over:
            self._over = True
            self._result = result
            self._touched()

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def stop(self, why: str) -> None:
        """Stop the call through the ladder (or as soon as it starts).

        Its open prompts are answered with nothing, and it asks no more: a stop may come while the
        call is not yet the runner's to cancel (an approval prompt comes first), and it must not
        wait for an answer then.
        """
        self._stop_reason = self._stop_reason or why
        for question in self._questions.values():
            question.answered.set()
        if self._runner is not None and self.call_id is not None:
            self._runner.cancel(self.call_id, why)

    async def outlive_ttl(self) -> None:
        """Beside the call: a task still running at its ttl is stopped (``tasks`` rule 5)."""
        await self._tasked.wait()
        await trio.sleep(TASK_TTL)
        self.stop(f"it was still running at its ttl ({TASK_TTL:g} s)")

    # --- the owner of its call (call_link.CallOwner) ----------------------------------

    def _meta(self) -> dict[str, Any]:
        meta = (self._ctx.params or {}).get("_meta") if self._ctx is not None else None
        return meta if isinstance(meta, dict) else self._last_meta

    def _capabilities(self) -> dict[str, Any]:
        caps = self._meta().get(types.CLIENT_CAPABILITIES_META_KEY)
        return caps if isinstance(caps, dict) else {}

    @property
    def log_level(self) -> int:
        asked = self._meta().get(types.LOG_LEVEL_META_KEY)
        return LEVELS.index(asked) if isinstance(asked, str) and asked in LEVELS else _NO_RECORDS

    @property
    def can_elicit(self) -> bool:
        return can_elicit(self._capabilities())

    # Always asked: a sample without the capability is the request's refusal (rule 5), not a quiet None.
    can_sample: Final = True
    can_list_roots: Final = True  # asked, and answered None when the request's client declared no roots

    async def notify_for(self, request: Any, notice: Notice[Any], params: dict[str, Any]) -> None:
        """A log record of the call, on the stream of the round being served (none between rounds)."""
        ctx = self._ctx
        if ctx is not None:
            record = types.LoggingMessageNotificationParams.model_validate(params)
            message = types.LoggingMessageNotification(params=record)
            await ctx.session.send_notification(message, related_request_id=ctx.request_id)

    async def progress(self, params: dict[str, Any]) -> None:
        ctx = self._ctx
        if ctx is not None:
            await ctx.session.report_progress(params["progress"], params.get("total"), params.get("message"))

    async def ask(
        self,
        request: Any,
        params: dict[str, Any],
        timeout: float,
        *,
        method: Method[Any, Any] = ELICIT,
        key: str | None = None,
    ) -> Answer | None:
        """Put a prompt to the client as an input request of the next answer (rule 3); its answer, or None.

        The input request is named by ``key``, the tool's name for it, unless the call has an open one of
        that name; else the server names it (``input-N``).
        """
        if self._stop_reason is not None:
            await trio.lowlevel.checkpoint()
            return None  # stopped: nobody is asked any more
        if method is ROOTS and not can_list_roots(self._capabilities()):
            await trio.lowlevel.checkpoint()
            return None  # the tool learns that no roots are known
        if method is SAMPLE and not isinstance(self._capabilities().get("sampling"), dict):
            # Rule 5: the tool needs what this client did not declare.
            self._refusal = MCPError(
                code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"{self.name!r} asks for sampling (api.sample), which this request's client did not "
                "declare; declare the sampling capability in _meta to call it",
                data={"requiredCapabilities": {"sampling": {}}},
            )
            self.stop("its client offers no sampling")
            self._touched()
            await trio.lowlevel.checkpoint()
            return None
        if key is None or key in self._questions:
            # A tool may name a prompt `input-1` itself: the server's names skip what is taken.
            key = next(k for k in (f"input-{n}" for n in self._keys) if k not in self._questions)
        question = Question(key, method, params)
        self._questions[question.key] = question
        self._touched()
        try:
            with trio.move_on_after(timeout):
                await question.answered.wait()
        finally:
            if self._questions.get(question.key) is question:
                del self._questions[question.key]
        if not question.answered.is_set():
            self.stop(f"its input request was not answered within {timeout:g} s")
        return question.answer

    # --- the client's side: rounds, or a task's updates ------------------------------------

    def answer(self, responses: Any) -> bool:
        """Hand the client's answers to their prompts; whether one was answered (rule 4).

        A malformed response leaves its question open: it is asked again.
        """
        answered = False
        if isinstance(responses, dict):
            for key, value in responses.items():
                question = self._questions.get(key)
                if question is not None and isinstance(value, dict) and not question.answered.is_set():
                    question.answer = ResultReceived(id=0, method=question.method, result=value)
                    question.answered.set()
                    answered = True
        if answered and self.task is not None:
            self.task.changed()
        return answered

    def view(self) -> dict[str, Any]:
        """The task's status and what goes with it (``tasks`` rule 3)."""
        if self._refusal is not None:
            refusal = self._refusal.error
            return {
                "status": "failed",
                "error": refusal.model_dump(exclude_none=True),
                "statusMessage": refusal.message,
            }
        if not self._over:
            open_questions = self._open_questions()
            if open_questions and self._stop_reason is None:
                return {"status": INPUT_REQUIRED, "inputRequests": open_questions}
            if self._stop_reason is not None:
                return {"status": "working", "statusMessage": f"stopping: {self._stop_reason}"}
            return {"status": "working"}
        result = self._result
        if result is None:
            return {
                "status": "failed",
                "error": {"code": types.INTERNAL_ERROR, "message": f"{self.name!r} ended without a result"},
            }
        error = result.get("_meta", {}).get(META_ERROR) if result.get("isError") else None
        kind = error.get("kind") if isinstance(error, dict) else None
        text = next((b.get("text") for b in result.get("content", []) if b.get("type") == "text"), str(kind))
        if kind == "cancelled" or (self._stop_reason is not None and result.get("isError")):
            # Also an error after a stop: one that came before the runner had the call (its approval
            # prompt) ends it as that prompt's refusal, not through the ladder.
            return {"status": "cancelled", "statusMessage": self._stop_reason or text}
        if kind in _FAILED_KINDS:
            failure = {"code": types.INTERNAL_ERROR, "message": text, "data": error}
            return {"status": "failed", "error": failure, "statusMessage": text}
        return {"status": "completed", "result": result}

    async def _gather_questions(self) -> bool:
        """Wait while more prompts come (rule 3): a tool's prompts asked together leave in one result.

        A tool that asks several at once (``asyncio.gather``) sends them in one go, but each reaches
        the call on its own: the round waits until none came for :data:`GATHER_QUIET` (at most
        :data:`GATHER_MAX` in all). The answers it returns are right either way: a prompt that came
        too late is asked in the next round. False if the call ended or was refused meanwhile.
        """
        deadline = trio.current_time() + GATHER_MAX
        while not self._over and self._refusal is None:
            self._changed = trio.Event()
            with trio.move_on_at(min(deadline, trio.current_time() + GATHER_QUIET)) as waited:
                await self._changed.wait()
            if waited.cancelled_caught:
                return True
        return False

    async def serve_round(self, ctx: ServerRequestContext[Any, Any], responses: Any) -> dict[str, Any]:
        """Serve one round: hand over the answers, then wait for the result or the next questions."""
        self._ctx = ctx
        meta = (ctx.params or {}).get("_meta")
        self._last_meta = meta if isinstance(meta, dict) else self._last_meta
        try:
            if self.answer(responses) and self.become_task is not None and not self._open_questions():
                # A task_after_input tool's prompts are answered: from here on the call is a task.
                self.run_as(self.become_task(self))
                self.become_task = None
                if self.task is not None:
                    self._touched()
                    return self.task.created_result()
            while True:
                if self._refusal is not None:
                    raise self._refusal
                if self._over:
                    if self._result is None:
                        raise MCPError(code=types.INTERNAL_ERROR, message=f"{self.name!r} ended without a result")
                    return {**self._result, "resultType": COMPLETE}
                if self._open_questions() and not await self._gather_questions():
                    continue  # the call ended or was refused meanwhile: that is the answer
                if open_questions := self._open_questions():
                    return {
                        "resultType": INPUT_REQUIRED,
                        "inputRequests": open_questions,
                        "requestState": self.token,
                    }
                self._changed = trio.Event()
                await self._changed.wait()
        except trio.Cancelled:
            # Rule 6: the client closed the round's stream.
            self.stop("the MCP client closed the request's stream")
            raise
        finally:
            self._ctx = None
