"""The ``api`` object every factory receives (SPEC §2, "The API object").

Everything that reaches the host (UI, logging, ctx.abort, pending actions)
goes through :class:`HostLink` (``host_link``); ``api.ui`` and the calling
convention its methods share with :meth:`ToolAPI.exec` and
:meth:`ToolAPI.sample` (an awaitable inside a running asyncio loop, the value
elsewhere) are in ``_ui``.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, Final

import msgspec

from xcsh_run.worker._tool_api.abort_signal import AbortSignal
from xcsh_run.worker._tool_api.events import EventBus
from xcsh_run.worker._tool_api.exec import ExecResult, exec_async, exec_sync
from xcsh_run.worker._tool_api.host_link import HostLink
from xcsh_run.worker._tool_api.ui import UI, loop_running, ready
from xcsh_run.worker.protocol import methods as m

LOG_RECORDS_PER_CALL: Final = 1000
LOG_CHARS_PER_CALL: Final = 256 * 1024
# A worker's pending actions: the host keeps their previews, so it bounds them
# too (runner/_host/host_api.py has the same numbers); refused here first, where an
# honest tool gets the exception at its own push.
PENDING_MAX_BYTES: Final = 1 << 20
PENDING_PER_WORKER: Final = 16


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
    """``api``, given to ``factory(api)`` (``xcsh_run.pi.ToolAPI`` for annotations).

    One instance is shared by every factory of a worker and lives as long as
    the worker: tools keep it in their closures. It is built by the worker;
    tools never construct one.

    Example:
        ```python
        from xcsh_run.pi import CustomTool, ToolAPI

        def factory(api: ToolAPI) -> CustomTool:
            def execute(tool_call_id, params, on_update, ctx, signal):
                api.logger.info("listing %s", api.cwd)
                res = api.exec_sync("ls", ["-1"], cwd=api.cwd, timeout=5, signal=signal)
                return res.stdout

            return CustomTool(name="ls", description="Lists the project", parameters={"type": "object"},
                              execute=execute)
        ```
    """

    def __init__(self, cwd: str, link: HostLink | None = None, has_ui: bool = False, *, pi: ModuleType) -> None:
        self.cwd = cwd
        """The project directory (absolute) the host runs for; a tool's working directory is its own workdir."""
        self._link = link
        self.has_ui = has_ui
        """True when the host has a UI attached: `ui` asks a user then, instead of answering with empty values."""
        self.ui: UI = UI(self, lambda: self._link)
        """The user's interface (see `UI`)."""
        self.msgspec: ModuleType = msgspec
        """The msgspec module, for ``parameters`` Structs without an import."""
        # Given by the worker, not imported here: xcsh_run.pi names this class for annotations.
        self.pi: ModuleType = pi
        """The authoring API (``xcsh_run.pi``), for `CustomTool` and friends without an import."""
        self.pending_actions: dict[str, PendingAction] = {}
        """The actions pushed by this worker's tools and not yet resolved, by id (see `push_pending_action`)."""
        self._action_ids = itertools.count(1)
        self.logger = logging.getLogger("xcsh.tool")
        """A logger whose records reach the host's log (tagged with tool, call id and pid), at most 1000 records
        or 256 KiB of text per call; never the tool's stderr."""
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False  # to the host only, never to the tool's stderr
        self._log_handler = _HostLogHandler(self)
        self.logger.addHandler(self._log_handler)
        self.events = EventBus()
        """The event bus shared by this worker's tools (``on(name, handler)``, ``emit(name, data)``): ``pi.events``."""

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
        key: str | None = None,
    ) -> Any:
        """A completion from the host's model (MCP ``sampling/createMessage``), or None if it has none.

        Args:
            messages: a string (one user message), or MCP sampling messages
                (``{"role", "content"}``, where a string content is a text block).
            max_tokens: the most tokens the completion may have.
            system_prompt: the system prompt the client should use.
            temperature: the sampling temperature, if the tool cares.
            stop_sequences: sequences that end the completion.
            model_preferences: MCP's ``modelPreferences`` (``hints``, ``costPriority``, ...).
            include_context: MCP's ``includeContext``: ``"none"``, ``"thisServer"`` or ``"allServers"``.
            metadata: passed to the client as it is.
            key: the name of this request for an MCP 2026-07-28 client (an input
                request by that key), as for ``api.ui.elicit``.

        Returns:
            The client's result, ``{"role", "content", "model", "stopReason"}``,
            or None when the host cannot sample (no MCP client, or one without the
            ``sampling`` capability) or the client declined. An awaitable inside a
            running asyncio loop, like `exec`.
        """
        problem = m.input_key_problem(key) if key is not None else None
        if problem is not None:
            raise ValueError(f"api.sample: {problem}")
        listed = [{"role": "user", "content": messages}] if isinstance(messages, str) else list(messages)
        params: dict[str, Any] = {"messages": [_sampling_message(m) for m in listed], "maxTokens": max_tokens}
        optional = {"systemPrompt": system_prompt, "temperature": temperature, "includeContext": include_context,
                    "stopSequences": list(stop_sequences) if stop_sequences is not None else None,
                    "modelPreferences": model_preferences, "metadata": metadata}  # fmt: skip
        params.update({k: v for k, v in optional.items() if v is not None})
        link = self._link
        if link is None:
            return ready(None) if loop_running() else None
        request = m.UiParams(call_id=link.call_id, method="sample", args=[params], key=key)
        if loop_running():
            return link.request_async(m.UI, request)
        return link.request(m.UI, request)

    def roots(self, *, key: str | None = None) -> Any:
        """The folders the host's client works in (MCP ``roots/list``), or None if it does not say.

        Args:
            key: the name of this request for an MCP 2026-07-28 client (an input
                request by that key), as for ``api.ui.elicit``.

        Returns:
            A list of ``{"uri": "file:///...", "name"?: ...}``, or None when the
            host has no MCP client that offers roots (the CLI, an embedding
            program without a ``roots`` UI method). An awaitable inside a running
            asyncio loop, like `exec`.
        """
        problem = m.input_key_problem(key) if key is not None else None
        if problem is not None:
            raise ValueError(f"api.roots: {problem}")
        link = self._link
        if link is None:
            return ready(None) if loop_running() else None
        request = m.UiParams(call_id=link.call_id, method="roots", key=key)
        if loop_running():
            return link.request_async(m.UI, request)
        return link.request(m.UI, request)

    def exec(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        signal: AbortSignal | None = None,
        env: Mapping[str, str] | None = None,
        input: str | bytes | None = None,
    ) -> Any:
        """Run a program without a shell; `exec_sync` and `exec_async` are the explicit, typed forms.

        Inside a running asyncio loop (an ``async def`` tool) this returns an
        awaitable; elsewhere it blocks and returns the `ExecResult`. The
        parameters are `exec_sync`'s.
        """
        if loop_running():
            return exec_async(command, args, cwd=cwd, timeout=timeout, signal=signal, env=env, input=input)
        return exec_sync(command, args, cwd=cwd, timeout=timeout, signal=signal, env=env, input=input)

    def exec_sync(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        signal: AbortSignal | None = None,
        env: Mapping[str, str] | None = None,
        input: str | bytes | None = None,
    ) -> ExecResult:
        """Run ``command args...`` in a new process group and wait for it. A non-zero exit does not raise.

        A timeout or an abort of ``signal`` kills the program's whole process
        group (SIGTERM, then SIGKILL after a second). A program killed by a
        signal reports ``code = -signal``; ``killed`` is true only when this
        call killed it.

        Args:
            command: the program, found on ``PATH`` when it has no slash.
            args: its arguments (no shell: no quoting, no globbing).
            cwd: its working directory (default: the worker's own workdir; pass
                ``api.cwd`` for the project).
            timeout: seconds before it is killed (default: none; the call's own timeout still applies).
            signal: the call's `AbortSignal`: a cancelled call kills the program.
            env: its whole environment (default: the worker's).
            input: written to its stdin, then closed (default: stdin is ``/dev/null``).

        Returns:
            Its output (decoded as UTF-8, with replacement), exit code and whether it was killed.

        Raises:
            FileNotFoundError: no such program.
            PermissionError: the program may not be run (under ``strict``, the sandbox may be why).
        """
        return exec_sync(command, args, cwd=cwd, timeout=timeout, signal=signal, env=env, input=input)

    async def exec_async(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        signal: AbortSignal | None = None,
        env: Mapping[str, str] | None = None,
        input: str | bytes | None = None,
    ) -> ExecResult:
        """`exec_sync` for async tools: runs it in a thread so the event loop stays free.

        Cancelling the awaiting task kills the program's process group. The
        parameters, result and exceptions are `exec_sync`'s.
        """
        return await exec_async(command, args, cwd=cwd, timeout=timeout, signal=signal, env=env, input=input)

    def push_pending_action(self, action: Mapping[str, Any] | Any) -> str:
        """Record a preview the hidden ``resolve`` tool can later apply or discard.

        The callables stay in this worker (which the host keeps alive while
        the action waits); the host keeps the preview.

        Args:
            action: a mapping or an object with ``label`` (str), ``apply(reason)``,
                and optionally ``reject(reason)``, ``details`` (JSON) and
                ``source_tool_name``.

        Returns:
            The action's id.

        Raises:
            TypeError: a field has the wrong type, or ``details`` is not JSON.
            ValueError: the label and details are over 1 MiB of JSON, or this
                worker already holds 16 unresolved actions.
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


def log_handler(api: ToolAPI) -> _HostLogHandler:
    """The handler that sends ``api.logger``'s records to the host."""
    return api._log_handler
