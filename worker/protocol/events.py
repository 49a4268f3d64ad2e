"""The events a :class:`~xcsh_run.worker.protocol.connection.Connection` turns the peer's bytes into, one at a time."""

from __future__ import annotations

from typing import Any

import msgspec

from xcsh_run.worker.protocol.messages import ErrorObject, JsonRpcId, RefusalReason
from xcsh_run.worker.protocol.methods import Method, Notice


class RequestReceived(msgspec.Struct, frozen=True):
    """A request of the peer's, to answer exactly once with ``send_result`` or ``send_error``."""

    id: JsonRpcId
    method: Method[Any, Any]
    params: Any


class NotificationReceived(msgspec.Struct, frozen=True):
    method: Notice[Any]
    params: Any


class ResultReceived(msgspec.Struct, frozen=True):
    """The answer to one of our requests, decoded into the method's result type."""

    id: int
    method: Method[Any, Any]
    result: Any


class ErrorReceived(msgspec.Struct, frozen=True):
    """The error answer to one of our requests."""

    id: int
    method: Method[Any, Any]
    error: ErrorObject


class RequestRefused(msgspec.Struct, frozen=True):
    """A request the table does not allow: write ``reply`` (already encoded); nothing else to do."""

    id: JsonRpcId
    method_name: str
    error: ErrorObject
    reply: bytes
    reason: RefusalReason


class NotificationDropped(msgspec.Struct, frozen=True):
    """An unknown or out-of-state notification, ignored as JSON-RPC allows."""

    method_name: str
    reason: str


class ConnectionClosed(msgspec.Struct, frozen=True):
    """End of stream: ``outstanding`` are our requests that will never be answered."""

    outstanding: tuple[int, ...]


Event = (
    RequestReceived | NotificationReceived | ResultReceived | ErrorReceived | RequestRefused | NotificationDropped
    | ConnectionClosed
)  # fmt: skip
