"""MCP elicitation and sampling: a tool's prompts and ``api.sample`` as requests to the client of its call.

``api.ui.confirm/select/input/elicit`` become ``elicitation/create``;
``api.sample`` becomes ``sampling/createMessage`` (rule 5).

Rules:

1. Only a client that declared the ``elicitation`` capability (form mode) in
   ``initialize`` is asked; for any other, and for a prompt that belongs to no
   MCP call, the answer is the no-op UI's (``UI_DEFAULTS``: ``False``,
   ``None``). Tools see ``api.has_ui`` true while every initialized session
   can be asked (over stdio: the one client's capability), so a tool that
   checks it before prompting never waits on a prompt nobody sees.
2. A prompt goes to the session whose ``tools/call`` runs the tool, through
   that request's reply outbox (over HTTP, the stream of its ``POST``).
3. ``confirm`` asks for a boolean, ``select`` for one of its options,
   ``input`` for a string. ``accept`` with a value of that kind is the
   answer; ``decline``, ``cancel``, an error response, anything malformed and
   a timeout are the no-op value.
4. Bounded: by :data:`ELICIT_TIMEOUT`, and by the call: a call that is
   cancelled or times out cancels its prompt (the bridge cancels its UI
   scopes). The server then stops waiting, tells the client with
   ``notifications/cancelled``, and drops a late answer.
5. ``api.ui.elicit(message, schema)`` sends the tool's own form as is; the
   answer is ``{"action", "content"}`` when the client gave one of the three
   actions (``content`` only with ``accept``), else ``cancel``. ``api.sample``
   reaches only a client that declared ``sampling``, needs no ``has_ui``, and
   gets the client's result object, or None (no capability, an error, a
   malformed answer, the timeout).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeGuard

import trio

from xcsh_run._host import UI_DEFAULTS
from xcsh_run._mcp.methods import CANCELLED, ELICIT
from xcsh_run.worker.protocol import (
    Connection,
    ErrorReceived,
    ErrorResponse,
    Message,
    Method,
    Notification,
    Response,
    ResultReceived,
    encode_line,
)

logger = logging.getLogger("xcsh_run.mcp")

ELICIT_TIMEOUT: Final = 600.0
# What a cancelled prompt may take to tell the client so (its outbox may be full).
_CANCEL_NOTICE_TIMEOUT: Final = 1.0

Answer = ResultReceived | ErrorReceived


def is_answer(message: Message) -> TypeGuard[Response | ErrorResponse]:
    """A response from the client: only ever to a request of the server's, a prompt."""
    return isinstance(message, Response | ErrorResponse)


def can_elicit(capabilities: object) -> bool:
    """Whether ``initialize``'s client capabilities offer form elicitation.

    ``{"elicitation": {}}`` (2025-06-18) means forms; from 2025-11-25 a client
    may list its modes, and one that lists only ``url`` cannot take a form.
    """
    if not isinstance(capabilities, dict):
        return False
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    return "form" in elicitation or "url" not in elicitation


class Form:
    """One prompt as ``elicitation/create`` params, and how to read the client's answer to it."""

    __slots__ = ("method", "params", "field", "options")

    def __init__(self, method: str, message: str, field: str, schema: dict[str, Any], options: Sequence[str] = ()):
        self.method = method
        self.field = field
        self.options = tuple(options)
        requested = {"type": "object", "properties": {field: schema}, "required": [field]}
        self.params: dict[str, Any] = {"message": message, "requestedSchema": requested}

    def answer(self, answer: Answer | None) -> Any:
        """The value for the tool (rule 3)."""
        default = UI_DEFAULTS[self.method]
        if self.method == "elicit":
            return _whole_answer(answer, default)
        if not isinstance(answer, ResultReceived) or not isinstance(answer.result, dict):
            return default
        result: dict[str, Any] = answer.result
        content = result.get("content")
        if result.get("action") != "accept" or not isinstance(content, dict):
            return default
        value = content.get(self.field)
        if self.method == "confirm":
            return value if isinstance(value, bool) else default
        if not isinstance(value, str) or (self.options and value not in self.options):
            return default
        return value


def _whole_answer(answer: Answer | None, default: Any) -> Any:
    """An ``elicit`` form's answer as the tool sees it (rule 5)."""
    if not isinstance(answer, ResultReceived) or not isinstance(answer.result, dict):
        return default
    action, content = answer.result.get("action"), answer.result.get("content")
    if action not in ("accept", "decline", "cancel"):
        return default
    return {"action": action, "content": content if action == "accept" and isinstance(content, dict) else None}


def sample_answer(answer: Answer | None) -> dict[str, Any] | None:
    """What ``api.sample`` returns: the client's result object, or None (rule 5)."""
    if isinstance(answer, ResultReceived) and isinstance(answer.result, dict) and "content" in answer.result:
        return answer.result
    return None


def can_sample(capabilities: object) -> bool:
    """Whether ``initialize``'s client capabilities offer ``sampling``."""
    return isinstance(capabilities, dict) and isinstance(capabilities.get("sampling"), dict)


def can_list_roots(capabilities: object) -> bool:
    """Whether a client's capabilities offer ``roots``."""
    return isinstance(capabilities, dict) and isinstance(capabilities.get("roots"), dict)


def roots_answer(answer: Answer | None) -> list[dict[str, Any]] | None:
    """What ``api.roots`` returns: the client's roots (each with a string ``uri``), or None."""
    result = answer.result if isinstance(answer, ResultReceived) else None
    roots = result.get("roots") if isinstance(result, dict) else None
    if not isinstance(roots, list):
        return None
    return [r for r in roots if isinstance(r, dict) and isinstance(r.get("uri"), str)]


def form_for(method: str, args: Sequence[Any]) -> Form | None:
    """The form of a UI prompt; None for one that is not a form (``editor``) or has nothing to offer."""
    title = str(args[0]) if args else ""
    if method == "elicit":
        own = args[1] if len(args) > 1 else None
        if not isinstance(own, dict) or own.get("type") != "object":
            return None
        form = Form(method, title, "", {})
        form.params = {"message": title, "requestedSchema": own}  # the tool's own form, as it is
        return form
    if method == "confirm":
        message = str(args[1]) if len(args) > 1 and args[1] else title
        return Form(method, message, "confirm", {"type": "boolean", "title": title or "Confirm", "default": False})
    if method == "select":
        options = args[1] if len(args) > 1 else None
        if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
            return None
        return Form(method, title, "choice", {"type": "string", "title": title or "Choose", "enum": options}, options)
    if method == "input":
        schema: dict[str, Any] = {"type": "string", "title": title or "Answer"}
        if len(args) > 1 and isinstance(args[1], str) and args[1]:
            schema["description"] = args[1]  # the placeholder: a hint, not a default value
        return Form(method, title, "text", schema)
    return None


class _Waiter:
    __slots__ = ("done", "answer")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.answer: Answer | None = None


class Asker:
    """One session's requests to its client (prompts) and the answers they wait for.

    Only answers to a request of ours still waiting reach the connection: any
    other response (a late one, a made-up id) is dropped here, so a client
    cannot break the session by answering what was not asked.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._waiting: dict[int, _Waiter] = {}

    async def ask(
        self,
        params: dict[str, Any],
        send: Callable[[bytes], Awaitable[None]],
        timeout: float,
        *,
        method: Method[Any, Any] = ELICIT,
    ) -> Answer | None:
        """Send ``method`` (``elicitation/create``, ``sampling/createMessage``, ``roots/list``) through ``send``;
        its answer, or None in time."""
        request_id, data = self._conn.send_request(method, params)
        waiter = self._waiting[request_id] = _Waiter()
        sent = False
        try:
            with trio.move_on_after(timeout):
                await send(data)
                sent = True
                await waiter.done.wait()
        finally:
            del self._waiting[request_id]
            if waiter.answer is None:
                self._conn.abandon(request_id)  # a late answer is dropped
                if sent:
                    await _tell_cancelled(request_id, send)
        return waiter.answer

    def answered(self, message: Response | ErrorResponse) -> bool:
        """Hand a client's response to the prompt waiting for it; False if none waits (it is then ignored)."""
        waiter = self._waiting.get(message.id) if isinstance(message.id, int) else None
        if waiter is None or waiter.done.is_set():
            logger.debug("ignored a response to %r: no request of the server's waits for it", message.id)
            return False
        self._conn.receive_message(message)
        event = self._conn.next_event()
        assert isinstance(event, ResultReceived | ErrorReceived)  # an answer to an outstanding id, any JSON result
        waiter.answer = event
        waiter.done.set()
        return True


async def _tell_cancelled(request_id: int, send: Callable[[bytes], Awaitable[None]]) -> None:
    # The prompt's own scope may be cancelled already: the notice goes out
    # shielded, for a bounded time. The table declares notifications/cancelled
    # as the client's (the one the server receives), so this one is encoded here.
    notice = Notification(method=CANCELLED.name, params={"requestId": request_id, "reason": "the tool call ended"})
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + _CANCEL_NOTICE_TIMEOUT
        await send(encode_line(notice))
    if scope.cancelled_caught:
        logger.debug("could not tell the client that prompt %d was withdrawn", request_id)
