"""One tool call in the worker: its cancellation state, its ``ctx``, and running it to an outcome.

Cancellation reaches a call three ways, and each one is handled here or by the
state kept here: the reader thread's ``$/cancel`` marks the call's signal (and
cancels an async tool's task through :class:`AsyncBridge`), SIGTERM raises
:class:`ToolCancelled` in a synchronous tool while ``in_tool`` is set, and a
cancel that arrived before its call starts it already aborted.

An outcome is a result for ``send_result`` (a Struct, or Raw already encoded)
or an :class:`ErrorObject` for ``send_error_object``. A call's result is not
encoded here: ``send_reply`` encodes it once, into its frame, and words the
error if its details are not JSON.
"""

from __future__ import annotations

import re
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, TypeAlias

import msgspec

from xcsh_run.worker._runtime.channel import Channel
from xcsh_run.worker._runtime.expectation import describe
from xcsh_run.worker._runtime.tool_module import LoadedTool, ResultError, normalize_result
from xcsh_run.worker._sandbox import explain as _explain
from xcsh_run.worker._tool_api import AbortSignal, Ctx, HostLink, ToolCancelled
from xcsh_run.worker.pi import ToolError
from xcsh_run.worker.protocol import MAX_NESTING, ErrorCode, ErrorObject, encode_value, error_object
from xcsh_run.worker.protocol import methods as m

Outcome: TypeAlias = Any  # a result, or an ErrorObject

_PATH_RE = re.compile(r" - at `([^`]*)`$")


class Call:
    __slots__ = ("call_id", "signal", "in_tool", "task", "terminated")

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.signal = AbortSignal()
        self.in_tool = False  # True only while the main thread runs tool code: SIGTERM may raise there
        self.terminated = False  # SIGTERM arrived
        self.task: Any = None  # the asyncio.Task of an async tool


class AsyncBridge:
    """Runs async tools and hooks on one asyncio loop, created (and asyncio imported) on first use."""

    def __init__(self) -> None:
        self.loop: Any = None

    def run(self, awaitable: Any, call: Call | None) -> Any:
        import asyncio

        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)

        async def runner() -> Any:
            return await awaitable

        task = self.loop.create_task(runner())
        if call is not None:
            call.task = task
            if call.signal.aborted:
                task.cancel(call.signal.reason)
        try:
            return self.loop.run_until_complete(task)
        finally:
            if call is not None:
                call.task = None

    def cancel(self, call: Call, reason: str | None) -> None:
        """Cancel the call's task, from any thread (or the signal handler)."""
        loop, task = self.loop, call.task
        if task is not None and loop is not None:
            loop.call_soon_threadsafe(task.cancel, reason)

    def run_hook(self, fn: Callable[..., Any], *args: Any) -> Any:
        value = fn(*args)
        if hasattr(value, "__await__"):
            value = self.run(value, None)
        return value


def decode_arguments(loaded: LoadedTool, params: m.CallParams) -> Any:
    """The call's arguments in the tool's type, or the invalid_arguments error (with ``expected`` and ``got``)."""
    try:
        return loaded.decoder.decode(params.arguments)
    except msgspec.ValidationError as exc:
        text = str(exc)
        match = _PATH_RE.search(text)
        path = match.group(1) if match else "$"
        schema = loaded.description.parameters
        if text.startswith("Invalid enum value") and match:
            choices = enum_choices(schema, path)
            if choices:
                text += f" (the choices: {', '.join(msgspec.json.encode(c).decode() for c in choices)})"
        expected, got = describe(
            text,
            bytes(params.arguments),
            path,
            lambda at: enum_choices(schema, at),
            lambda at: list(schema_at(schema, at).get("properties", {})),
        )
        return error_object(
            ErrorCode.INVALID_ARGUMENTS,
            f"invalid arguments for {params.tool!r}: {text}",
            path=path,
            expected=expected,
            got=got,
        )
    except msgspec.DecodeError as exc:
        return error_object(ErrorCode.INVALID_ARGUMENTS, f"arguments are not JSON: {exc}", path="$")


def enum_choices(schema: dict[str, Any], path: str) -> list[Any] | None:
    """The ``enum`` of the value at ``path`` (``$.a.b[0]``) in a Struct's schema, following its ``$ref``s."""
    choices = schema_at(schema, path).get("enum")
    return choices if isinstance(choices, list) else None


def schema_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The subschema for the value at ``path`` (``$.a.b[0]``), its ``$ref``s followed; ``{}`` if there is none."""
    node: Any = schema
    for key, index in _PART_RE.findall(path.removeprefix("$")):
        node = _deref(schema, node)
        node = node.get("items") if index else node.get("properties", {}).get(key)
    return _deref(schema, node)


_PART_RE = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _deref(schema: dict[str, Any], node: Any) -> dict[str, Any]:
    for _ in range(8):
        if not isinstance(node, dict):
            return {}
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            node = schema.get("$defs", {}).get(ref.removeprefix("#/$defs/"))
            continue
        options = [o for o in node.get("anyOf", ()) if isinstance(o, dict) and ("enum" in o or "$ref" in o)]
        if len(options) == 1:
            node = options[0]
            continue
        return node
    return {}


def execute(
    loaded: LoadedTool,
    params: m.CallParams,
    args: Any,
    call: Call,
    channel: Channel,
    link: HostLink,
    bridge: AsyncBridge,
) -> Outcome:
    """Run the tool to its outcome. The caller has made ``call`` the current one."""

    def on_update(partial: object) -> None:
        update = normalize_result(partial, "on_update()'s partial result")
        try:
            body = encode_value(m.UpdateParams(call_id=params.call_id, partial=update))
        except (TypeError, msgspec.EncodeError) as exc:
            raise TypeError(f"on_update()'s details are not JSON-serialisable: {exc}") from None
        except RecursionError:
            raise TypeError(
                "on_update()'s details are not JSON-serialisable: they contain themselves, or nest arrays and "
                f"objects too deep to send (they may nest {MAX_NESTING} levels deep)"
            ) from None

        def send() -> None:
            channel.send(lambda conn: conn.send_notification(m.UPDATE, body))

        if not (call.in_tool and threading.current_thread() is threading.main_thread()):
            send()
            return
        # SIGTERM must not raise inside our own frame write: hold it off
        # while sending, and deliver it as soon as control returns to the tool.
        call.in_tool = False
        try:
            send()
        finally:
            call.in_tool = True
        if call.terminated:
            raise ToolCancelled(call.signal.reason)

    _explain.reset()
    try:
        try:
            call.in_tool = True
            if call.signal.aborted:
                raise ToolCancelled(call.signal.reason)
            value = loaded.tool.execute(
                params.call_id, args, on_update, Ctx(params.ctx, link, call.call_id), call.signal
            )
            call.in_tool = False
            if type(value) is not dict and hasattr(value, "__await__"):
                value = bridge.run(value, call)
        finally:
            call.in_tool = False
        # Encoded by send_reply, once, straight into its frame (a large result is never copied whole).
        return normalize_result(value)
    except ResultError as exc:
        return error_object(ErrorCode.TOOL_ERROR, str(exc), **exception_evidence(exc, ()))
    except BaseException as exc:
        return _failure(exc, call, getattr(loaded.tool, "expected_errors", ()))


def exception_evidence(exc: BaseException, expected: tuple[type[BaseException], ...]) -> dict[str, Any]:
    """``error.data``'s account of an exception: its type, every base, where it was raised, and whether deliberate.

    Deliberate means a :class:`ToolError` or one of the tool's ``expected_errors``
    (subclasses included): the worker decides, since only it has the classes;
    the host (``xcsh-run fuzz``) reads the names.
    """
    names = [_type_name(cls) for cls in type(exc).__mro__ if cls is not object]
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:  # to the innermost frame, without reading any source
        tb = tb.tb_next
    return {
        "exception": names[0],
        "exception_mro": names,
        "raised_at": f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else None,
        "deliberate": True if isinstance(exc, (ToolError, *expected)) else None,
    }


def _type_name(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _failure(exc: BaseException, call: Call, expected: tuple[type[BaseException], ...]) -> ErrorObject:
    if call.signal.aborted and _is_cancellation(exc):
        return error_object(ErrorCode.CANCELLED, f"cancelled: {call.signal.reason}")
    if isinstance(exc, SystemExit):
        message = f"the tool called sys.exit({exc.code!r})"
    else:
        message = str(exc) or type(exc).__name__
    denial = _explain.explain(exc)
    if denial is not None:
        message += f" [{denial}]"
    limit = _limit_hit(exc)
    if limit is not None:
        return error_object(
            ErrorCode.LIMIT_EXCEEDED,
            f"{limit} limit exceeded: {type(exc).__name__}: {message}",
            limit=limit,
            traceback=traceback.format_exc(),
        )
    return error_object(
        ErrorCode.TOOL_ERROR, message, traceback=traceback.format_exc(), **exception_evidence(exc, expected)
    )


def _limit_hit(exc: BaseException) -> str | None:
    """Which sandbox limit an uncaught exception comes from, if any."""
    import errno

    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, OSError):
        return {errno.EFBIG: "file_size", errno.EMFILE: "open_files"}.get(exc.errno or 0)
    return None


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, ToolCancelled):
        return True
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)
