"""The xcsh-run wire protocol: JSON-RPC 2.0 messages in length-prefixed frames.

The package's face, so that ``from xcsh_run.worker import protocol as p``
reaches all of it: ``frames`` (framing, rules 1-2), ``messages`` (message
types, errors, codes, rule 3), ``methods`` (payload types and the method
table), ``requires`` (what a tool declares it needs under ``strict``) and
``connection`` (the sans-io connection and its lifecycle, its ``events``
and ``decoders``). All of
them are sans-io: they never read or write a file descriptor. Both the host
(``xcsh_run``) and the worker import them, and the fuzz suite drives them with
arbitrary bytes. ``docs/protocol.md`` describes the same rules for people who
want to write a worker in another language.


Each name is imported from its module on first use (PEP 562), so that
importing one module (``xcsh_run.pi`` imports ``requires``) loads no other.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xcsh_run.worker.protocol import connection as connection
    from xcsh_run.worker.protocol import decoders as decoders
    from xcsh_run.worker.protocol import events as events
    from xcsh_run.worker.protocol import frames as frames
    from xcsh_run.worker.protocol import messages as messages
    from xcsh_run.worker.protocol import methods as methods
    from xcsh_run.worker.protocol import requires as requires
    from xcsh_run.worker.protocol.connection import Connection as Connection
    from xcsh_run.worker.protocol.events import ConnectionClosed as ConnectionClosed
    from xcsh_run.worker.protocol.events import ErrorReceived as ErrorReceived
    from xcsh_run.worker.protocol.events import Event as Event
    from xcsh_run.worker.protocol.events import NotificationDropped as NotificationDropped
    from xcsh_run.worker.protocol.events import NotificationReceived as NotificationReceived
    from xcsh_run.worker.protocol.events import RequestReceived as RequestReceived
    from xcsh_run.worker.protocol.events import RequestRefused as RequestRefused
    from xcsh_run.worker.protocol.events import ResultReceived as ResultReceived
    from xcsh_run.worker.protocol.frames import DEFAULT_MAX_FRAME_BYTES as DEFAULT_MAX_FRAME_BYTES
    from xcsh_run.worker.protocol.frames import HEADER_BYTES as HEADER_BYTES
    from xcsh_run.worker.protocol.frames import MAX_NESTING as MAX_NESTING
    from xcsh_run.worker.protocol.frames import MAX_REPRESENTABLE as MAX_REPRESENTABLE
    from xcsh_run.worker.protocol.frames import NEED_DATA as NEED_DATA
    from xcsh_run.worker.protocol.frames import FrameDecoder as FrameDecoder
    from xcsh_run.worker.protocol.frames import FrameTooLarge as FrameTooLarge
    from xcsh_run.worker.protocol.frames import NeedData as NeedData
    from xcsh_run.worker.protocol.frames import NotSerialisable as NotSerialisable
    from xcsh_run.worker.protocol.frames import encode_line as encode_line
    from xcsh_run.worker.protocol.frames import encode_message as encode_message
    from xcsh_run.worker.protocol.frames import encode_value as encode_value
    from xcsh_run.worker.protocol.messages import KIND_BY_CODE as KIND_BY_CODE
    from xcsh_run.worker.protocol.messages import ErrorCode as ErrorCode
    from xcsh_run.worker.protocol.messages import ErrorData as ErrorData
    from xcsh_run.worker.protocol.messages import ErrorObject as ErrorObject
    from xcsh_run.worker.protocol.messages import ErrorResponse as ErrorResponse
    from xcsh_run.worker.protocol.messages import JsonRpcId as JsonRpcId
    from xcsh_run.worker.protocol.messages import LocalProtocolError as LocalProtocolError
    from xcsh_run.worker.protocol.messages import Message as Message
    from xcsh_run.worker.protocol.messages import Notification as Notification
    from xcsh_run.worker.protocol.messages import ProtocolError as ProtocolError
    from xcsh_run.worker.protocol.messages import RefusalReason as RefusalReason
    from xcsh_run.worker.protocol.messages import RemoteProtocolError as RemoteProtocolError
    from xcsh_run.worker.protocol.messages import Request as Request
    from xcsh_run.worker.protocol.messages import Response as Response
    from xcsh_run.worker.protocol.messages import decode_message as decode_message
    from xcsh_run.worker.protocol.messages import error_object as error_object
    from xcsh_run.worker.protocol.messages import kind_of as kind_of
    from xcsh_run.worker.protocol.methods import ABORT as ABORT
    from xcsh_run.worker.protocol.methods import CALL as CALL
    from xcsh_run.worker.protocol.methods import CANCEL as CANCEL
    from xcsh_run.worker.protocol.methods import INITIALIZE as INITIALIZE
    from xcsh_run.worker.protocol.methods import LOAD as LOAD
    from xcsh_run.worker.protocol.methods import LOG as LOG
    from xcsh_run.worker.protocol.methods import M_CALL as M_CALL
    from xcsh_run.worker.protocol.methods import M_INITIALIZE as M_INITIALIZE
    from xcsh_run.worker.protocol.methods import M_LOAD as M_LOAD
    from xcsh_run.worker.protocol.methods import M_RENDER as M_RENDER
    from xcsh_run.worker.protocol.methods import M_RESOLVE as M_RESOLVE
    from xcsh_run.worker.protocol.methods import M_SESSION as M_SESSION
    from xcsh_run.worker.protocol.methods import M_SHUTDOWN as M_SHUTDOWN
    from xcsh_run.worker.protocol.methods import M_UI as M_UI
    from xcsh_run.worker.protocol.methods import N_ABORT as N_ABORT
    from xcsh_run.worker.protocol.methods import N_CANCEL as N_CANCEL
    from xcsh_run.worker.protocol.methods import N_LOG as N_LOG
    from xcsh_run.worker.protocol.methods import N_PENDING as N_PENDING
    from xcsh_run.worker.protocol.methods import N_UI_CHANGED as N_UI_CHANGED
    from xcsh_run.worker.protocol.methods import N_UPDATE as N_UPDATE
    from xcsh_run.worker.protocol.methods import PENDING as PENDING
    from xcsh_run.worker.protocol.methods import PROTOCOL_VERSION as PROTOCOL_VERSION
    from xcsh_run.worker.protocol.methods import RENDER as RENDER
    from xcsh_run.worker.protocol.methods import RESOLVE as RESOLVE
    from xcsh_run.worker.protocol.methods import SESSION as SESSION
    from xcsh_run.worker.protocol.methods import SHUTDOWN as SHUTDOWN
    from xcsh_run.worker.protocol.methods import UI as UI
    from xcsh_run.worker.protocol.methods import UI_CHANGED as UI_CHANGED
    from xcsh_run.worker.protocol.methods import UI_METHODS as UI_METHODS
    from xcsh_run.worker.protocol.methods import UI_NOTICE as UI_NOTICE
    from xcsh_run.worker.protocol.methods import UPDATE as UPDATE
    from xcsh_run.worker.protocol.methods import WORKER_PROTOCOL as WORKER_PROTOCOL
    from xcsh_run.worker.protocol.methods import AbortParams as AbortParams
    from xcsh_run.worker.protocol.methods import CallParams as CallParams
    from xcsh_run.worker.protocol.methods import CallResult as CallResult
    from xcsh_run.worker.protocol.methods import CancelParams as CancelParams
    from xcsh_run.worker.protocol.methods import EntryError as EntryError
    from xcsh_run.worker.protocol.methods import InitializeParams as InitializeParams
    from xcsh_run.worker.protocol.methods import InitializeResult as InitializeResult
    from xcsh_run.worker.protocol.methods import LoadParams as LoadParams
    from xcsh_run.worker.protocol.methods import LoadResult as LoadResult
    from xcsh_run.worker.protocol.methods import LogParams as LogParams
    from xcsh_run.worker.protocol.methods import Method as Method
    from xcsh_run.worker.protocol.methods import MethodTable as MethodTable
    from xcsh_run.worker.protocol.methods import Notice as Notice
    from xcsh_run.worker.protocol.methods import PendingPushParams as PendingPushParams
    from xcsh_run.worker.protocol.methods import RenderParams as RenderParams
    from xcsh_run.worker.protocol.methods import RenderResult as RenderResult
    from xcsh_run.worker.protocol.methods import ResolveParams as ResolveParams
    from xcsh_run.worker.protocol.methods import ResolveResult as ResolveResult
    from xcsh_run.worker.protocol.methods import Role as Role
    from xcsh_run.worker.protocol.methods import SandboxConfig as SandboxConfig
    from xcsh_run.worker.protocol.methods import SessionParams as SessionParams
    from xcsh_run.worker.protocol.methods import SessionResult as SessionResult
    from xcsh_run.worker.protocol.methods import ShutdownParams as ShutdownParams
    from xcsh_run.worker.protocol.methods import State as State
    from xcsh_run.worker.protocol.methods import ToolDescription as ToolDescription
    from xcsh_run.worker.protocol.methods import UiChangedParams as UiChangedParams
    from xcsh_run.worker.protocol.methods import UiParams as UiParams
    from xcsh_run.worker.protocol.methods import UpdateParams as UpdateParams
    from xcsh_run.worker.protocol.requires import Requires as Requires

# The modules are part of the face too: some users take one whole (``methods as m``).
__all__ = [
    "connection",
    "decoders",
    "events",
    "frames",
    "messages",
    "methods",
    "requires",
    "ABORT",
    "AbortParams",
    "CALL",
    "CANCEL",
    "CallParams",
    "CallResult",
    "CancelParams",
    "Connection",
    "ConnectionClosed",
    "DEFAULT_MAX_FRAME_BYTES",
    "EntryError",
    "ErrorCode",
    "ErrorData",
    "ErrorObject",
    "ErrorReceived",
    "ErrorResponse",
    "Event",
    "FrameDecoder",
    "FrameTooLarge",
    "HEADER_BYTES",
    "INITIALIZE",
    "InitializeParams",
    "InitializeResult",
    "JsonRpcId",
    "KIND_BY_CODE",
    "LOAD",
    "LOG",
    "LoadParams",
    "LoadResult",
    "LocalProtocolError",
    "LogParams",
    "MAX_NESTING",
    "M_CALL",
    "M_INITIALIZE",
    "M_LOAD",
    "M_RENDER",
    "M_RESOLVE",
    "M_SESSION",
    "M_SHUTDOWN",
    "M_UI",
    "Message",
    "Method",
    "MethodTable",
    "NEED_DATA",
    "N_ABORT",
    "N_CANCEL",
    "N_LOG",
    "N_PENDING",
    "N_UI_CHANGED",
    "N_UPDATE",
    "NotSerialisable",
    "Notice",
    "Notification",
    "NotificationDropped",
    "NotificationReceived",
    "PENDING",
    "PROTOCOL_VERSION",
    "PendingPushParams",
    "ProtocolError",
    "RENDER",
    "RESOLVE",
    "RefusalReason",
    "RemoteProtocolError",
    "RenderParams",
    "RenderResult",
    "Request",
    "RequestReceived",
    "RequestRefused",
    "Requires",
    "ResolveParams",
    "ResolveResult",
    "Response",
    "ResultReceived",
    "Role",
    "SESSION",
    "SHUTDOWN",
    "SandboxConfig",
    "SessionParams",
    "SessionResult",
    "ShutdownParams",
    "State",
    "ToolDescription",
    "UI",
    "UI_CHANGED",
    "UI_METHODS",
    "UI_NOTICE",
    "UPDATE",
    "UiChangedParams",
    "UiParams",
    "UpdateParams",
    "WORKER_PROTOCOL",
    "MAX_REPRESENTABLE",
    "NeedData",
    "decode_message",
    "encode_line",
    "encode_message",
    "encode_value",
    "error_object",
    "kind_of",
]

_HOMES: dict[str, str] = {
    "connection": "",
    "decoders": "",
    "events": "",
    "frames": "",
    "messages": "",
    "methods": "",
    "requires": "",
    "ABORT": "methods",
    "AbortParams": "methods",
    "CALL": "methods",
    "CANCEL": "methods",
    "CallParams": "methods",
    "CallResult": "methods",
    "CancelParams": "methods",
    "Connection": "connection",
    "ConnectionClosed": "events",
    "DEFAULT_MAX_FRAME_BYTES": "frames",
    "EntryError": "methods",
    "ErrorCode": "messages",
    "ErrorData": "messages",
    "ErrorObject": "messages",
    "ErrorReceived": "events",
    "ErrorResponse": "messages",
    "Event": "events",
    "FrameDecoder": "frames",
    "FrameTooLarge": "frames",
    "HEADER_BYTES": "frames",
    "INITIALIZE": "methods",
    "InitializeParams": "methods",
    "InitializeResult": "methods",
    "JsonRpcId": "messages",
    "KIND_BY_CODE": "messages",
    "LOAD": "methods",
    "LOG": "methods",
    "LoadParams": "methods",
    "LoadResult": "methods",
    "LocalProtocolError": "messages",
    "LogParams": "methods",
    "MAX_NESTING": "frames",
    "M_CALL": "methods",
    "M_INITIALIZE": "methods",
    "M_LOAD": "methods",
    "M_RENDER": "methods",
    "M_RESOLVE": "methods",
    "M_SESSION": "methods",
    "M_SHUTDOWN": "methods",
    "M_UI": "methods",
    "Message": "messages",
    "Method": "methods",
    "MethodTable": "methods",
    "NEED_DATA": "frames",
    "N_ABORT": "methods",
    "N_CANCEL": "methods",
    "N_LOG": "methods",
    "N_PENDING": "methods",
    "N_UI_CHANGED": "methods",
    "N_UPDATE": "methods",
    "NotSerialisable": "frames",
    "Notice": "methods",
    "Notification": "messages",
    "NotificationDropped": "events",
    "NotificationReceived": "events",
    "PENDING": "methods",
    "PROTOCOL_VERSION": "methods",
    "PendingPushParams": "methods",
    "ProtocolError": "messages",
    "RENDER": "methods",
    "RESOLVE": "methods",
    "RefusalReason": "messages",
    "RemoteProtocolError": "messages",
    "RenderParams": "methods",
    "RenderResult": "methods",
    "Request": "messages",
    "RequestReceived": "events",
    "RequestRefused": "events",
    "Requires": "requires",
    "ResolveParams": "methods",
    "ResolveResult": "methods",
    "Response": "messages",
    "ResultReceived": "events",
    "Role": "methods",
    "SESSION": "methods",
    "SHUTDOWN": "methods",
    "SandboxConfig": "methods",
    "SessionParams": "methods",
    "SessionResult": "methods",
    "ShutdownParams": "methods",
    "State": "methods",
    "ToolDescription": "methods",
    "UI": "methods",
    "UI_CHANGED": "methods",
    "UI_METHODS": "methods",
    "UI_NOTICE": "methods",
    "UPDATE": "methods",
    "UiChangedParams": "methods",
    "UiParams": "methods",
    "UpdateParams": "methods",
    "WORKER_PROTOCOL": "methods",
    "MAX_REPRESENTABLE": "frames",
    "NeedData": "frames",
    "decode_message": "messages",
    "encode_line": "frames",
    "encode_message": "frames",
    "encode_value": "frames",
    "error_object": "messages",
    "kind_of": "messages",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    if not home:  # a module of the package
        return importlib.import_module(f"{__name__}.{name}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
