"""Reading a file that someone else may have replaced: never block, never read without bound.

A ``contained`` tool runs as the user and can write what the user can: the
module cache, the probe cache, the config, its own folder. The host reads
those files later, on its own threads, where a read that blocks or never ends
stalls every run after it. Rules:

1. Open with ``O_RDONLY | O_NONBLOCK | O_CLOEXEC``: opening a FIFO does not
   wait for a writer, and a file under a lease (``F_SETLEASE``) fails with
   ``EWOULDBLOCK`` instead of blocking the opener until the holder lets go.
2. ``O_NOFOLLOW`` unless the caller says a symlink is legitimate: a cache
   entry the host wrote is never one (a link there points somewhere a tool
   chose: ``/dev/zero``, a FIFO, another user's file), while a user's tool
   file or dotfile may well be one.
3. ``fstat`` on the opened descriptor, not ``stat`` on the path: the file
   checked is the file read, whatever is renamed in between. Only a regular
   file is read (a FIFO, a device, a socket, a directory is refused).
4. At most ``cap`` bytes, checked against ``st_size`` first (a huge sparse file
   is refused without a read) and again while reading (a file that grows
   after the ``fstat``). Each caller picks the cap for its kind of file.
5. Every refusal is an ``UnsafeFile``, an ``OSError`` whose ``strerror`` says
   what the file was, so callers that already treat ``OSError`` as "cannot
   read" (a cache miss, a config error) handle it unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Final

# The caps of rule 4 that several readers share (each cache keeps its own beside it):
# A tool's source file: far past any hand-written module or bundled JavaScript; a larger one is not
# fingerprinted (loaded in a worker every run) and its PEP 723 block is not looked for.
SOURCE_MAX_BYTES: Final = 32 << 20
# A metadata or registry JSON (a plugin registry, the entry-point scan): lists of names and paths.
METADATA_MAX_BYTES: Final = 8 << 20
# ``config.toml``: a few tables of grants; a megabyte of TOML is already a mistake.
CONFIG_MAX_BYTES: Final = 1 << 20
_CHUNK: Final = 1 << 20
_KINDS: Final = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}


class UnsafeFile(OSError):
    """The file is not a regular file of at most the allowed size; it was not read (or not to its end)."""


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path: str | os.PathLike[str], *, follow: bool = False) -> tuple[int, os.stat_result]:
    """An fd open on ``path`` (rules 1-3) and its ``fstat``; the caller closes the fd. Raises OSError."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise UnsafeFile(errno.ELOOP, "a symbolic link, which is never followed here", str(path)) from None
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise UnsafeFile(exc.errno, "held under a lease by another process", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(errno.EINVAL, f"{_kind(st.st_mode)}, not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _too_big(path: str | os.PathLike[str], cap: int) -> UnsafeFile:
    return UnsafeFile(errno.EFBIG, f"larger than the {cap} bytes such a file may have", str(path))


def read_capped(path: str | os.PathLike[str], cap: int, *, follow: bool = False) -> bytes:
    """The whole content of the regular file at ``path``, at most ``cap`` bytes; raises OSError (UnsafeFile)."""
    fd, st = open_regular(path, follow=follow)
    try:
        if st.st_size > cap:
            raise _too_big(path, cap)
        chunks: list[bytes] = []
        left = cap + 1  # one byte past the cap tells a file that grew from one that is exactly at it
        while left > 0:
            chunk = os.read(fd, min(_CHUNK, left))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise _too_big(path, cap)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_replacing(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a fresh file beside ``path``, then rename it over ``path``; raises OSError.

    Never opens ``path`` itself (a FIFO there would block the open, a link would
    be written through) nor a predictable temporary name (one a tool made first);
    a reader sees the old file or the new one, never half of one.
    """
    import tempfile

    folder, name = os.path.split(os.fspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_replaced(path: str | os.PathLike[str]) -> None:
    """Remove what stands at ``path`` (a file, a link, a FIFO, a folder), so that a rename can put a file there.

    A rename replaces anything but a directory; removing first also keeps a refused
    file from being read again when the caller cannot write the new one. Raises OSError.
    """
    import shutil

    if stat.S_ISDIR(os.lstat(path).st_mode):
        shutil.rmtree(path)  # removes the links inside, never what they point at
    else:
        os.unlink(path)
