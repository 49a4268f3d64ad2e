"""The ``api`` object every factory receives (SPEC §2, "The API object").

Everything that reaches the host (UI, logging, ctx.abort, pending actions)
goes through :class:`HostLink`, which sends worker-to-host requests and
notifications on the protocol pipe and waits for answers that the worker's
reader thread routes back. Methods that answer something are usable from sync
and async tools alike: inside a running asyncio loop they return an awaitable,
elsewhere they block and return the value. Methods that answer nothing return
:data:`DONE`, which is ``None``-like and may also be awaited.
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from types import ModuleType
from typing import Any, Final, TypeVar

import msgspec

from . import _methods as m
from . import pi as _pi
from ._channel import Channel
from ._connection import Connection, ErrorReceived, ResultReceived
from ._exec import ExecResult, exec_async, exec_sync
from ._methods import Method, Notice

P = TypeVar("P")
R = TypeVar("R")

LOG_RECORDS_PER_CALL: Final = 1000
LOG_CHARS_PER_CALL: Final = 256 * 1024
# A worker's pending actions: the host keeps their previews, so it bounds them
# too (runner/_bridge.py has the same numbers); refused here first, where an
# honest tool gets the exception at its own push.
PENDING_MAX_BYTES: Final = 1 << 20
PENDING_PER_WORKER: Final = 16


def loop_running() -> bool:
    """True inside a running asyncio loop on this thread (an ``async def`` tool)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:  # a sync tool never pays for importing asyncio
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Done:
    """The return value of fire-and-forget methods: falsy, and awaitable to None."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __await__(self) -> Generator[Any, None, None]:
        return None
        yield  # pragma: no cover - makes this a generator

    def __repr__(self) -> str:
        return "DONE"


DONE: Final = _Done()


class _Waiter:
    """One request of ours to the host, and the thread blocked on it."""

    __slots__ = ("event", "answer")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.answer: ResultReceived | ErrorReceived | None = None


class HostLink:
    """Worker-to-host requests and notifications. Thread-safe.

    The Connection owns the request ids and the outstanding table; this only
    maps an id to the thread waiting for its answer.
    """

    def __init__(self, channel: Channel, current_call: Callable[[], str | None]) -> None:
        self._channel = channel
        self._current_call = current_call
        self._lock = threading.Lock()
        self._waiting: dict[int, _Waiter] = {}

    @property
    def call_id(self) -> str | None:
        return self._current_call()

    def notify(self, notice: Notice[P], params: P) -> None:
        self._channel.send(lambda conn: conn.send_notification(notice, params))

    def request(self, method: Method[P, R], params: P) -> R:
        """Send a request and block until the host answers; returns its decoded result."""
        waiter = _Waiter()
        req_id = 0

        def make(conn: Connection) -> bytes:
            nonlocal req_id
            req_id, data = conn.send_request(method, params)
            # Registered before the bytes are written: the answer cannot come earlier.
            with self._lock:
                self._waiting[req_id] = waiter
            return data

        try:
            self._channel.send(make)
            waiter.event.wait()
        finally:
            with self._lock:
                self._waiting.pop(req_id, None)
            if waiter.answer is None and req_id:
                # Interrupted (a cancelled call): the host's answer, if it comes, is dropped.
                self._channel.locked(lambda conn: conn.abandon(req_id))
        answer = waiter.answer
        if isinstance(answer, ErrorReceived):
            raise RuntimeError(f"the host refused {method.name}: {answer.error.message}")
        assert answer is not None
        result: R = answer.result
        return result

    async def request_async(self, method: Method[P, R], params: P) -> R:
        import asyncio

        # A thread waits for the answer so that the event loop stays free.
        return await asyncio.get_running_loop().run_in_executor(None, self.request, method, params)

    def answer(self, event: ResultReceived | ErrorReceived) -> None:
        """Route the host's answer to the waiting thread (called by the reader thread)."""
        with self._lock:
            waiter = self._waiting.pop(event.id, None)
        if waiter is not None:
            waiter.answer = event
            waiter.event.set()


class NoOpUI:
    """The UI with nothing attached: every method is harmless and returns an empty answer."""

    def select(self, title: str, options: Sequence[str]) -> str | None:
        return None

    def confirm(self, title: str, message: str) -> bool:
        return False

    def input(self, title: str, placeholder: str | None = None) -> str | None:
        return None

    def notify(self, message: str, type: str = "info") -> None:
        return None

    def set_status(self, key: str, text: str | None) -> None:
        return None

    def editor(self, title: str, prefill: str | None = None) -> str | None:
        return None

    def get_editor_text(self) -> str:
        return ""

    def set_editor_text(self, text: str) -> None:
        return None

    def elicit(self, message: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        return {"action": "cancel", "content": None}


_NO_UI: Final = NoOpUI()


class HostUI:
    """``api.ui``: each method is a request to the host's UI (a no-op when none is attached)."""

    def __init__(self, api: ToolAPI) -> None:
        self._api = api

    def _ask(self, method: str, *args: Any) -> Any:
        if not self._api.has_ui:
            value = getattr(_NO_UI, method)(*args)
            if loop_running():
                return _ready(value)
            return value
        link = self._api._link
        assert link is not None
        params = m.UiParams(call_id=link.call_id, method=method, args=list(args))
        if loop_running():
            return link.request_async(m.UI, params)
        return link.request(m.UI, params)

    def _tell(self, method: str, *args: Any) -> _Done:
        if self._api.has_ui and self._api._link is not None:
            link = self._api._link
            link.notify(m.UI_NOTICE, m.UiParams(call_id=link.call_id, method=method, args=list(args)))
        return DONE

    def select(self, title: str, options: Sequence[str]) -> Any:
        return self._ask("select", title, list(options))

    def confirm(self, title: str, message: str) -> Any:
        return self._ask("confirm", title, message)

    def input(self, title: str, placeholder: str | None = None) -> Any:
        return self._ask("input", title, placeholder)

    def editor(self, title: str, prefill: str | None = None) -> Any:
        return self._ask("editor", title, prefill)

    def get_editor_text(self) -> Any:
        return self._ask("get_editor_text")

    def elicit(self, message: str, schema: Mapping[str, Any]) -> Any:
        """Ask the user to fill in a form: ``schema`` is a flat JSON Schema object (MCP elicitation).

        Returns ``{"action": "accept" | "decline" | "cancel", "content": {...} | None}``;
        ``content`` (the form's values) only with ``accept``. Without a UI: ``cancel``.
        """
        return self._ask("elicit", message, dict(schema))

    def notify(self, message: str, type: str = "info") -> _Done:
        return self._tell("notify", message, type)

    def set_status(self, key: str, text: str | None) -> _Done:
        return self._tell("set_status", key, text)

    def set_editor_text(self, text: str) -> _Done:
        return self._tell("set_editor_text", text)


async def _ready(value: Any) -> Any:
    return value


def _sampling_message(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        content = {"type": "text", "text": content}
    return {**message, "role": message.get("role", "user"), "content": content}


class _HostLogHandler(logging.Handler):
    """Sends records to the host's log, at most so many per call (the rest are counted, then reported)."""

    def __init__(self, api: ToolAPI) -> None:
        super().__init__(logging.DEBUG)
        self._api = api
        self._call: str | None = None
        self._records = 0
        self._bytes = 0
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        link = self._api._link
        if link is None:
            return
        call_id = link.call_id
        if call_id != self._call:
            self._call, self._records, self._bytes = call_id, 0, 0
        try:
            message = self.format(record)
        except Exception:
            message = str(record.msg)
        self._records += 1
        self._bytes += len(message)
        if self._records > LOG_RECORDS_PER_CALL or self._bytes > LOG_CHARS_PER_CALL:
            self.dropped += 1
            return
        link.notify(m.LOG, m.LogParams(call_id=call_id, level=record.levelno, logger=record.name, message=message))

    def flush_dropped(self) -> None:
        """Report how many records the bound dropped for the call that just ended."""
        if self.dropped and self._api._link is not None:
            link = self._api._link
            text = (
                f"{self.dropped} log records dropped (a call may log {LOG_RECORDS_PER_CALL} records "
                f"or {LOG_CHARS_PER_CALL} characters)"
            )
            link.notify(m.LOG, m.LogParams(call_id=self._call, level=logging.WARNING, logger="xcsh", message=text))
        self.dropped = 0


class PendingAction:
    """A preview recorded in the host; ``apply``/``reject`` stay in this worker."""

    __slots__ = ("label", "apply", "reject", "details", "source_tool_name", "created")

    def __init__(self, label: str, apply: Callable[..., Any], reject: Callable[..., Any] | None, details: Any,
                 source_tool_name: str) -> None:  # fmt: skip
        self.label = label
        self.apply = apply
        self.reject = reject
        self.details = details
        self.source_tool_name = source_tool_name
        self.created = time.monotonic()


class ToolAPI:
    """Given to ``factory(api)``. One instance is shared by all factories in a worker."""

    def __init__(self, cwd: str, link: HostLink | None = None, has_ui: bool = False) -> None:
        self.cwd = cwd
        self._link = link
        self.has_ui = has_ui
        self.ui: Any = HostUI(self)
        self.msgspec: ModuleType = msgspec
        self.pi: ModuleType = _pi
        self.pending_actions: dict[str, PendingAction] = {}
        self._action_ids = itertools.count(1)
        self.logger = logging.getLogger("xcsh.tool")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False  # to the host only, never to the tool's stderr
        self._log_handler = _HostLogHandler(self)
        self.logger.addHandler(self._log_handler)

    def sample(
        self,
        messages: str | Sequence[Mapping[str, Any]],
        *,
        max_tokens: int = 1000,
        system_prompt: str | None = None,
        temperature: float | None = None,
        stop_sequences: Sequence[str] | None = None,
        model_preferences: Mapping[str, Any] | None = None,
        include_context: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Any:
        """A completion from the host's model (MCP ``sampling/createMessage``), or None if it has none.

        ``messages``: a string (one user message), or MCP sampling messages
        (``{"role", "content"}``, where a string content is a text block).
        Returns the client's result, ``{"role", "content", "model", "stopReason"}``,
        or None when the host cannot sample (no MCP client, or one without the
        ``sampling`` capability) or the client declined. An awaitable inside a
        running asyncio loop, like :meth:`exec`.
        """
        listed = [{"role": "user", "content": messages}] if isinstance(messages, str) else list(messages)
        params: dict[str, Any] = {"messages": [_sampling_message(m) for m in listed], "maxTokens": max_tokens}
        optional = {"systemPrompt": system_prompt, "temperature": temperature, "includeContext": include_context,
                    "stopSequences": list(stop_sequences) if stop_sequences is not None else None,
                    "modelPreferences": model_preferences, "metadata": metadata}  # fmt: skip
        params.update({k: v for k, v in optional.items() if v is not None})
        link = self._link
        if link is None:
            return _ready(None) if loop_running() else None
        request = m.UiParams(call_id=link.call_id, method="sample", args=[params])
        if loop_running():
            return link.request_async(m.UI, request)
        return link.request(m.UI, request)

    def exec(self, command: str, args: Sequence[str] = (), **kwargs: Any) -> Any:
        """Run a program without a shell.

        Inside a running asyncio loop (an ``async def`` tool) this returns an
        awaitable; elsewhere it blocks and returns the :class:`ExecResult`.
        ``exec_sync`` and ``exec_async`` are the explicit forms.
        """
        if loop_running():
            return exec_async(command, args, **kwargs)
        return exec_sync(command, args, **kwargs)

    def exec_sync(self, command: str, args: Sequence[str] = (), **kwargs: Any) -> ExecResult:
        return exec_sync(command, args, **kwargs)

    async def exec_async(self, command: str, args: Sequence[str] = (), **kwargs: Any) -> ExecResult:
        return await exec_async(command, args, **kwargs)

    def push_pending_action(self, action: Mapping[str, Any] | Any) -> str:
        """Record a preview the hidden ``resolve`` tool can later apply or discard.

        ``action`` has ``label`` (str), ``apply(reason)``, and optionally
        ``reject(reason)``, ``details`` (JSON) and ``source_tool_name``. The
        callables stay in this worker; the host keeps the preview. Returns the
        action's id. Raises ValueError when the label and details are over
        1 MiB of JSON, or when this worker already holds 16 unresolved actions.
        """

        def field(name: str, default: Any = None) -> Any:
            if isinstance(action, Mapping):
                return action.get(name, default)
            return getattr(action, name, default)

        label, apply, reject = field("label"), field("apply"), field("reject")
        if not isinstance(label, str) or not label:
            raise TypeError("push_pending_action: 'label' must be a non-empty string")
        if not callable(apply):
            raise TypeError("push_pending_action: 'apply' must be callable: apply(reason) -> result")
        if reject is not None and not callable(reject):
            raise TypeError("push_pending_action: 'reject' must be callable or absent")
        source = field("source_tool_name") or "custom_tool"
        details = field("details")
        try:
            size = len(msgspec.json.encode(details)) + len(label.encode("utf-8", "replace"))
        except (TypeError, msgspec.EncodeError) as exc:
            raise TypeError(f"push_pending_action: 'details' must be JSON-serialisable: {exc}") from None
        if size > PENDING_MAX_BYTES:
            raise ValueError(
                f"push_pending_action: the label and details are {size} bytes of JSON, over the "
                f"{PENDING_MAX_BYTES}-byte limit of a pending action; keep a preview small (a summary, a diff's "
                "first lines) and leave the data in the worker, with apply()"
            )
        if len(self.pending_actions) >= PENDING_PER_WORKER:
            raise ValueError(
                f"push_pending_action: this worker holds {len(self.pending_actions)} pending actions already, "
                f"the most it may; they are waiting for resolve (apply or discard them first)"
            )
        action_id = f"a{next(self._action_ids)}"
        self.pending_actions[action_id] = PendingAction(label, apply, reject, details, str(source))
        if self._link is not None:
            self._link.notify(
                m.PENDING,
                m.PendingPushParams(call_id=self._link.call_id, action_id=action_id, label=label,
                                    source_tool_name=str(source), details=details),
            )  # fmt: skip
        return action_id
