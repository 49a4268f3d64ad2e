"""The frames between a client, the daemon and its hosts: a 4-byte big-endian length, then one JSON object.

1. **JSON, from the interpreter's own C codec parts**: the client imports the
   standard library only, and not even all of that: ``json`` itself imports
   ``re`` (and with it ``enum`` and ``functools``), milliseconds of a start
   that is timed. A frame is written by :func:`encode` (objects, arrays,
   strings, integers, floats, booleans, null) and read by ``_json``'s
   scanner, the one ``json.loads`` uses.
2. **Stricter than** ``json.loads``: no whitespace around the object, no
   NaN or infinity, no float out of range; what :func:`decode` accepts,
   :func:`encode` writes again.
3. **Lone surrogates travel**: ``argv`` and the environment may hold bytes
   that are not UTF-8 (Python decodes them with ``surrogateescape``); ASCII
   escapes carry those surrogates through unchanged, both ways.
4. **Fds travel beside a frame's first byte** (``SCM_RIGHTS``), which is why
   every send of a frame with fds is one ``sendmsg`` of the whole frame, and
   every receive that may carry them reads with room for them.
"""

from __future__ import annotations

import _socket
import os
import sys
from _json import encode_basestring_ascii as _quote
from _json import make_scanner

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the client's start is timed)
if TYPE_CHECKING:
    from typing import Any, Final, TypeAlias

    Frame: TypeAlias = dict[str, Any]

MAX_FRAME: Final = 64 << 20  # an --args JSON is the largest thing a client sends
MAX_FDS: Final = 4  # a call's stdin, stdout, stderr; and the client's socket, host-bound
ANCILLARY_BYTES: Final = _socket.CMSG_SPACE(MAX_FDS * 4)  # room for MAX_FDS fds beside a frame
_FD_BYTES: Final = 4  # an fd in SCM_RIGHTS is a C int


class FrameError(Exception):
    """The peer sent something that is not a frame of this protocol (or the connection ended mid-frame)."""


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _finite(value: float, shown: object) -> float:
    if value - value != 0.0:  # inf or nan, which JSON cannot hold
        raise ValueError(f"{shown} is not a finite JSON number")
    return value


def _read_float(text: str) -> float:
    return _finite(float(text), text)  # 1e400 reads as inf: refused, so that what is read can be written again


class _Syntax:
    """What ``_json``'s scanner reads off a ``json.JSONDecoder``: strict JSON, plain dicts, no NaN."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = staticmethod(_read_float)
    parse_int = int
    parse_constant = staticmethod(_no_constant)


# The stub types the scanner's argument as the scanner itself; it reads these six attributes.
_scan = make_scanner(_Syntax())  # type: ignore[arg-type]


def _loads(text: str) -> object:
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("no JSON value at the start") from None
    except SystemError:
        # 3.11's scanner reports a syntax error with json.decoder's error class, which it finds
        # only once something imported it (else: "returned NULL without setting an exception").
        if "json.decoder" in sys.modules:
            raise ValueError("not a JSON text") from None
        import json.decoder  # noqa: F401  (on the error path only)

        return _loads(text)
    if end != len(text):
        raise ValueError(f"extra data at character {end}")
    return value


def _write(value: object, out: list[str]) -> None:
    # bool before int: True is an int to isinstance.
    if isinstance(value, str):
        out.append(_quote(value))
    elif value is None or value is True or value is False:
        out.append("null" if value is None else "true" if value else "false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(float.__repr__(_finite(value, repr(value))))
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"a frame's keys are strings, not {type(key).__name__}")
            out.append("," if i else "")
            out.append(_quote(key))
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            out.append("," if i else "")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"a frame cannot hold a {type(value).__name__}")


def encode(frame: Frame) -> bytes:
    """One frame's bytes: its length, then its JSON (ASCII, no spaces)."""
    out: list[str] = []
    _write(frame, out)
    body = "".join(out).encode("ascii")
    if len(body) > MAX_FRAME:
        raise FrameError(f"a frame of {len(body)} bytes is over the {MAX_FRAME}-byte limit")
    return len(body).to_bytes(4, "big") + body


def decode(body: bytes) -> Frame:
    """One frame's JSON object; :class:`FrameError` for anything else."""
    try:
        frame = _loads(body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise FrameError(f"a frame that is not JSON: {exc}") from None
    if not isinstance(frame, dict):
        raise FrameError("a frame that is not a JSON object")
    return frame


class FrameReader:
    """Bytes in, whole frames out: the sans-io half every side shares."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.ready: list[Frame] = []  # frames read whole, not yet taken, oldest first

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
            self.ready.append(decode(body))

    def take(self) -> Frame:
        """The oldest frame read whole (there is one: check :attr:`ready`)."""
        return self.ready.pop(0)

    @property
    def partial(self) -> bool:
        return bool(self._buffer)

    def take_partial(self) -> bytes:
        """The bytes of a frame not read whole yet, taken out (another reader goes on from them)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest


def send(sock: _socket.socket, frame: Frame, fds: tuple[int, ...] = ()) -> None:
    """Send one frame, blocking; ``fds`` ride with its first byte."""
    data = encode(frame)
    if fds:
        rights = b"".join(fd.to_bytes(_FD_BYTES, sys.byteorder, signed=True) for fd in fds)
        sent = sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    else:
        sent = sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])


def receive_bytes(sock: _socket.socket, size: int = 1 << 16) -> tuple[bytes, list[int]]:
    """One ``recvmsg``: the bytes, and the fds that came with them (the caller owns them)."""
    data, ancdata, _flags, _addr = sock.recvmsg(size, ANCILLARY_BYTES)
    return data, fds_in(ancdata)


def receive(sock: _socket.socket, reader: FrameReader, fds: list[int] | None = None) -> Frame | None:
    """The next frame, blocking; None at a clean end of the connection. Passed fds go into ``fds``, else are closed."""
    while not reader.ready:
        data, received = receive_bytes(sock)
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
    return reader.take()


def fds_in(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    """The fds of a ``recvmsg``'s ancillary data (``SCM_RIGHTS``); a truncated last one is dropped."""
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            for at in range(0, len(payload) - _FD_BYTES + 1, _FD_BYTES):
                fds.append(int.from_bytes(payload[at : at + _FD_BYTES], sys.byteorder, signed=True))
    return fds


def close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def peer_credentials(sock: _socket.socket) -> tuple[int, int, int]:
    """The pid, uid and gid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    pid = int.from_bytes(raw[0:4], sys.byteorder, signed=True)
    uid, gid = (int.from_bytes(raw[at : at + 4], sys.byteorder) for at in (4, 8))  # uid_t is unsigned
    return pid, uid, gid
