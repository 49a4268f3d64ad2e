"""The methods of the worker protocol: each one's params and result types, declared once.

Every sender and receiver goes through the table at the bottom
(:data:`WORKER_PROTOCOL`): a method object pairs a name with its params type,
its result type, the side that sends it and the lifecycle states it is allowed
in, so no call site pairs a method name with a payload type by hand.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any, Final, Generic, Literal, TypeVar, cast

import msgspec

from xcsh_run.worker.protocol.frames import DEFAULT_MAX_FRAME_BYTES
from xcsh_run.worker.protocol.requires import Requires

PROTOCOL_VERSION: Final = 1
"""Bumped on any incompatible change; checked in the ``initialize`` handshake."""


class Role(enum.Enum):
    """Which end of the pipe a connection is. In MCP the client plays HOST (it sends ``initialize``)."""

    HOST = "host"
    WORKER = "worker"


class State(enum.IntEnum):
    """Where a connection is in its life. Transitions only ever move forward (ERROR aside)."""

    AWAITING_INIT = 0
    READY = 1  # initialize answered with a result
    LOADED = 2  # load answered with a result
    CLOSING = 3  # shutdown request sent or received
    CLOSED = 4  # end of stream received, or close()
    ERROR = 5  # the peer broke the protocol (sticky)


P = TypeVar("P")
R = TypeVar("R")


class Method(Generic[P, R]):
    """A request: its name, params and result types, who sends it, and when.

    ``on_request`` / ``on_result``: the state the connection moves to when the
    request is sent or received / when it is answered with a result (None: no change).
    """

    __slots__ = ("name", "params", "result", "sender", "allowed", "on_request", "on_result", "_struct_params")

    def __init__(
        self,
        name: str,
        params: type[P],
        result: type[R],
        *,
        sender: Role,
        allowed: Iterable[State],
        on_request: State | None = None,
        on_result: State | None = None,
    ) -> None:
        self.name = name
        self.params = params
        self.result = result
        self.sender = sender
        self.allowed = frozenset(allowed)
        self.on_request = on_request
        self.on_result = on_result
        self._struct_params = isinstance(params, type) and issubclass(params, msgspec.Struct)

    def __repr__(self) -> str:
        return f"<Method {self.name!r}>"


class Notice(Generic[P]):
    """A notification: its name, params type, who sends it, and when.

    ``lenient``: params that do not decode are the peer's slip, not a broken
    protocol: the notification is dropped (``NotificationDropped``) instead of
    failing the connection (MCP: a malformed notification is never fatal).
    """

    __slots__ = ("name", "params", "sender", "allowed", "on_receive", "lenient", "_struct_params")

    def __init__(
        self,
        name: str,
        params: type[P],
        *,
        sender: Role,
        allowed: Iterable[State],
        on_receive: State | None = None,
        lenient: bool = False,
    ) -> None:
        self.name = name
        self.params = params
        self.sender = sender
        self.allowed = frozenset(allowed)
        self.on_receive = on_receive  # the state a sent or received notice moves the connection to
        self.lenient = lenient
        self._struct_params = isinstance(params, type) and issubclass(params, msgspec.Struct)

    def __repr__(self) -> str:
        return f"<Notice {self.name!r}>"


class MethodTable:
    """Every method and notification of one protocol, by name, with the lifecycle's first state.

    Requests and notifications have separate names (``ui`` is both).
    """

    __slots__ = ("requests", "notices", "initial")

    def __init__(
        self,
        methods: Iterable[Method[Any, Any]],
        notices: Iterable[Notice[Any]],
        *,
        initial: State = State.AWAITING_INIT,
    ) -> None:
        self.requests: Mapping[str, Method[Any, Any]] = {m.name: m for m in methods}
        self.notices: Mapping[str, Notice[Any]] = {n.name: n for n in notices}
        self.initial = initial


# --- method payloads -----------------------------------------------------------
# One Struct per method's params and result.


class SandboxConfig(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the worker must apply to itself before it imports tool code (see worker/_sandbox/apply.py)."""

    level: Literal["none", "contained", "strict"]
    cpu_seconds: int | None = None
    open_files: int | None = None
    file_size_bytes: int | None = None
    data_bytes: int | None = None
    network: Literal["off", "netns"] = "off"
    read_paths: list[str] = []
    write_paths: list[str] = []
    exec_paths: list[str] = []
    connect_ports: list[int] = []  # strict: outbound TCP to these ports only (Landlock ABI 4)
    drop_uid: int | None = None
    drop_gid: int | None = None
    best_effort: bool = False


class InitializeParams(msgspec.Struct, frozen=True, omit_defaults=True):
    protocol_version: int
    host_pid: int
    cwd: str
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    cgroup_kill_path: str | None = None
    sandbox: SandboxConfig = SandboxConfig(level="none")
    has_ui: bool = False


class InitializeResult(msgspec.Struct, frozen=True):
    protocol_version: int
    pid: int
    python: str = ""
    unenforced: list[str] = []
    supervisor: int = 0  # the pid of the worker's supervisor (xcsh_run.worker._runtime.supervisor), 0 without one


class LoadParams(msgspec.Struct, frozen=True, omit_defaults=True):
    """Load by file path, or (entry-point plugins) by dotted module name from ``sys_path``."""

    path: str
    module: str | None = None
    sys_path: str | None = None
    factory: str = "factory"


class ToolDescription(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    label: str
    description: str
    parameters: dict[str, Any]
    params_kind: Literal["struct", "json_schema"]
    hidden: bool = False
    deferrable: bool = False
    concurrency: Literal["shared", "exclusive"] = "shared"
    timeout: float | None = None
    has_on_session: bool = False
    has_render_call: bool = False
    has_render_result: bool = False
    # MCP's view of the tool, checked by the worker at load: the JSON Schema of
    # its details, ToolAnnotations (camelCase keys) and icons.
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None
    icons: list[dict[str, Any]] | None = None
    requires: Requires | None = None  # needs under strict, shown to the user, never granted by themselves
    keeps_processes: bool = False  # what a call starts in the background lives until the session ends
    # Whether an MCP client may run a call as a task (the tasks extension), and whether its first prompts
    # come before the task, in the request.
    task_support: Literal["forbidden", "optional", "required"] = "forbidden"
    task_after_input: bool = False
    approval: Literal["read", "write", "exec", "dynamic"] | None = None  # "dynamic": a function of the arguments
    ignored_fields: list[str] = []  # fields of the other contracts this runner does not use, reported at load


class EntryError(msgspec.Struct, frozen=True):
    """One entry of a factory's return value that is not a valid tool."""

    index: int
    message: str


class LoadResult(msgspec.Struct, frozen=True):
    tools: list[ToolDescription]
    entry_errors: list[EntryError] = []


class CallParams(msgspec.Struct, frozen=True, omit_defaults=True):
    call_id: str
    tool: str
    arguments: msgspec.Raw
    ctx: dict[str, Any] = {}


class CallResult(msgspec.Struct, frozen=True):
    content: list[dict[str, Any]]
    details: Any = None


class UpdateParams(msgspec.Struct, frozen=True):
    call_id: str
    partial: CallResult


class CancelParams(msgspec.Struct, frozen=True):
    call_id: str
    reason: str


class ShutdownParams(msgspec.Struct, frozen=True):
    """``shutdown`` takes no params: ``{}`` on the wire."""


# --- the host API across the boundary (SPEC §2): worker -> host ---------------------


class UiParams(msgspec.Struct, frozen=True):
    """A UI method call from a tool: ``method`` is one of UI_METHODS, ``args`` its arguments."""

    call_id: str | None
    method: str
    args: list[Any] = []
    # The tool's name for a prompt (``elicit``, ``sample``): an input request's key for a stateless MCP client.
    key: str | None = None


# The key a tool may give a prompt (``elicit``, ``sample``): MCP 2026-07-28 names each input request of
# an ``input_required`` result by a key, which the client's answer repeats.
INPUT_KEY_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
INPUT_KEY_MAX: Final = 64


def input_key_problem(key: object) -> str | None:
    """What is wrong with a prompt's ``key``, or None for a good one (1 to 64 of ``A-Za-z0-9_.-``)."""
    if not isinstance(key, str) or not key or len(key) > INPUT_KEY_MAX or not set(key) <= INPUT_KEY_CHARS:
        return f"key must be 1 to {INPUT_KEY_MAX} letters, digits, '_', '.' or '-', got {key!r}"
    return None


UI_METHODS: Final = ("select", "confirm", "input", "notify", "set_status", "editor", "get_editor_text",
                     "set_editor_text", "elicit", "sample", "roots")  # fmt: skip
# ``elicit``: a form (a JSON Schema) for the user; ``sample``: a completion from the
# host's model (MCP ``sampling/createMessage``) and ``roots``: the folders the host's client
# works in (MCP ``roots/list``), which are not a UI and need no ``has_ui``.


class LogParams(msgspec.Struct, frozen=True):
    call_id: str | None
    level: int
    logger: str
    message: str


class AbortParams(msgspec.Struct, frozen=True):
    call_id: str | None
    reason: str


class PendingPushParams(msgspec.Struct, frozen=True, omit_defaults=True):
    call_id: str | None
    action_id: str
    label: str
    source_tool_name: str
    details: Any = None


# --- host -> worker -----------------------------------------------------------------


class UiChangedParams(msgspec.Struct, frozen=True):
    has_ui: bool


class SessionParams(msgspec.Struct, frozen=True):
    event: dict[str, Any]
    ctx: dict[str, Any] = {}


class SessionResult(msgspec.Struct, frozen=True):
    warnings: list[str] = []


class RenderParams(msgspec.Struct, frozen=True, omit_defaults=True):
    tool: str
    kind: Literal["call", "result", "approval"]  # "approval": the tool's tier and approval details, as JSON text
    args: Any = None
    result: Any = None
    options: dict[str, Any] = {}
    theme: Any = None


class RenderResult(msgspec.Struct, frozen=True):
    text: str


class ResolveParams(msgspec.Struct, frozen=True):
    action_id: str
    action: Literal["apply", "discard"]
    reason: str


class ResolveResult(msgspec.Struct, frozen=True):
    """``result`` is None when a discard had no ``reject`` (or it returned nothing)."""

    result: CallResult | None


# --- the table ---------------------------------------------------------------------

_H, _W = Role.HOST, Role.WORKER
_S = State
# Permissive on purpose where the documented behaviour needs it: a `call` before
# `load` is answered not_found and a second `load` load_error by the worker itself;
# a tool may still log or prompt while a `shutdown` is on its way.
_SERVING: Final = (_S.READY, _S.LOADED)
_LIVE: Final = (_S.READY, _S.LOADED, _S.CLOSING)
_ANY_JSON: Final = cast("type[Any]", Any)

INITIALIZE: Final = Method(
    "initialize", InitializeParams, InitializeResult, sender=_H, allowed=(_S.AWAITING_INIT,), on_result=_S.READY
)
LOAD: Final = Method("load", LoadParams, LoadResult, sender=_H, allowed=_SERVING, on_result=_S.LOADED)
CALL: Final = Method("call", CallParams, CallResult, sender=_H, allowed=_SERVING)
SHUTDOWN: Final = Method("shutdown", ShutdownParams, type(None), sender=_H, allowed=_SERVING, on_request=_S.CLOSING)
SESSION: Final = Method("session", SessionParams, SessionResult, sender=_H, allowed=_SERVING)
RENDER: Final = Method("render", RenderParams, RenderResult, sender=_H, allowed=_SERVING)
RESOLVE: Final = Method("pending/resolve", ResolveParams, ResolveResult, sender=_H, allowed=_SERVING)
UI: Final = Method("ui", UiParams, _ANY_JSON, sender=_W, allowed=_LIVE)
"""A UI prompt (``select``, ``confirm``, ...): the result is the UI's answer, any JSON."""

UPDATE: Final = Notice("update", UpdateParams, sender=_W, allowed=_LIVE)
CANCEL: Final = Notice("$/cancel", CancelParams, sender=_H, allowed=_LIVE)
UI_CHANGED: Final = Notice("ui/changed", UiChangedParams, sender=_H, allowed=_LIVE)
UI_NOTICE: Final = Notice("ui", UiParams, sender=_W, allowed=_LIVE)
"""A UI call that answers nothing (``notify``, ``set_status``, ``set_editor_text``)."""
LOG: Final = Notice("log", LogParams, sender=_W, allowed=_LIVE)
ABORT: Final = Notice("abort", AbortParams, sender=_W, allowed=_LIVE)
PENDING: Final = Notice("pending/push", PendingPushParams, sender=_W, allowed=_LIVE)

WORKER_PROTOCOL: Final = MethodTable(
    (INITIALIZE, LOAD, CALL, SHUTDOWN, SESSION, RENDER, RESOLVE, UI),
    (UPDATE, CANCEL, UI_CHANGED, UI_NOTICE, LOG, ABORT, PENDING),
)
"""The host <-> worker protocol (docs/protocol.md)."""

# Method names, as the older call sites spell them.
M_INITIALIZE: Final = INITIALIZE.name
M_LOAD: Final = LOAD.name
M_CALL: Final = CALL.name
M_SHUTDOWN: Final = SHUTDOWN.name
M_SESSION: Final = SESSION.name
M_RENDER: Final = RENDER.name
M_RESOLVE: Final = RESOLVE.name
N_UPDATE: Final = UPDATE.name
N_CANCEL: Final = CANCEL.name
N_UI_CHANGED: Final = UI_CHANGED.name
M_UI: Final = UI.name
N_LOG: Final = LOG.name
N_ABORT: Final = ABORT.name
N_PENDING: Final = PENDING.name
