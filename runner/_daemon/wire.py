"""The frames between a client, the daemon and its hosts: a 4-byte big-endian length, then one JSON object.

JSON, not msgspec: the client imports the standard library only. ``argv``
and the environment may hold bytes that are not UTF-8 (Python decodes them
with ``surrogateescape``); ``json``'s ASCII escapes carry those lone
surrogates through unchanged. File descriptors travel beside a frame's first
byte (``SCM_RIGHTS``), which is why every send of a frame with fds is one
``sendmsg`` of the whole frame, and every receive that may carry them reads
with room for them.
"""

from __future__ import annotations

import json
import os
import socket
from collections import deque

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the client's start is timed)
if TYPE_CHECKING:
    from typing import Any, Final, TypeAlias

    Frame: TypeAlias = dict[str, Any]

MAX_FRAME: Final = 64 << 20  # an --args JSON is the largest thing a client sends
MAX_FDS: Final = 4  # a call's stdin, stdout, stderr; and the client's socket, host-bound


class FrameError(Exception):
    """The peer sent something that is not a frame of this protocol (or the connection ended mid-frame)."""


def encode(frame: Frame) -> bytes:
    body = json.dumps(frame, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise FrameError(f"a frame of {len(body)} bytes is over the {MAX_FRAME}-byte limit")
    return len(body).to_bytes(4, "big") + body


class FrameReader:
    """Bytes in, whole frames out: the sans-io half every side shares."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.ready: deque[Frame] = deque()  # frames read whole, not yet taken

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= 4:
            size = int.from_bytes(self._buffer[:4], "big")
            if size > MAX_FRAME:
                raise FrameError(f"a frame of {size} bytes announced, over the {MAX_FRAME}-byte limit")
            if len(self._buffer) < 4 + size:
                break
            body = bytes(self._buffer[4 : 4 + size])
            del self._buffer[: 4 + size]
            try:
                frame = json.loads(body)
            except ValueError as exc:
                raise FrameError(f"a frame that is not JSON: {exc}") from None
            if not isinstance(frame, dict):
                raise FrameError("a frame that is not a JSON object")
            self.ready.append(frame)

    @property
    def partial(self) -> bool:
        return bool(self._buffer)

    def take_partial(self) -> bytes:
        """The bytes of a frame not read whole yet, taken out (another reader goes on from them)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest


def send(sock: socket.socket, frame: Frame, fds: tuple[int, ...] = ()) -> None:
    """Send one frame, blocking; ``fds`` ride with its first byte."""
    data = encode(frame)
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])


def receive(sock: socket.socket, reader: FrameReader, fds: list[int] | None = None) -> Frame | None:
    """The next frame, blocking; None at a clean end of the connection. Passed fds go into ``fds``, else are closed."""
    while not reader.ready:
        data, received, _flags, _addr = socket.recv_fds(sock, 1 << 16, MAX_FDS)
        if fds is not None:
            fds.extend(received)
        else:
            for fd in received:
                close_quietly(fd)
        if not data:
            if reader.partial:
                raise FrameError("the connection ended in the middle of a frame")
            return None
        reader.feed(data)
    return reader.ready.popleft()


def fds_in(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    """The fds of a ``recvmsg``'s ancillary data (``SCM_RIGHTS``), for a receiver that is not :func:`receive`."""
    import array

    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            whole = payload[: len(payload) - len(payload) % 4]
            fds.extend(array.array("i", whole))
    return fds


ANCILLARY_BYTES: Final = socket.CMSG_SPACE(MAX_FDS * 4)  # room for MAX_FDS fds beside a frame


def close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
