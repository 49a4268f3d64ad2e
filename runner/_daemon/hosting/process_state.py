"""A client's process state, put on its host for one call: fds 0-2, the cwd, the environment, argv, the search path.

1. **A host runs one call at a time** (the daemon sends it another only once
   it said it is done), so what the CLI reads process-wide can be the
   client's for the call: the command runs unchanged, its ``--cwd`` and
   ``isatty`` included; and so is its umask (the files a tool makes), which
   stays after the call, for the spare workers its runner starts next. The
   client's ``sys.path`` is where the discovery reads installed tools' entry
   points (``xcsh_run._discovery.use_search_path``), not the host's own path:
   the host's imports stay its own.
   Limits, groups, cgroup and namespaces stay the daemon's (``docs/daemon.md``).
2. **The client's own fds become 0-2** (``dup2``), and new ``sys.stdin``,
   ``sys.stdout`` and ``sys.stderr`` are made over them: a stream kept from an
   earlier call could still buffer what that client's stdin had left.
3. **Everything is put back after the call**, whatever happened: the streams
   are flushed first (the exit frame must not overtake their last bytes),
   then 0-2 go back to the host's own (the null device, the daemon's log),
   which closes the host's copies of the client's: a client reading its
   stdout to the end sees the end when it exits, not when the host does.
   Every child the host starts sets its own stdio, so none inherits them.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TextIO

from xcsh_run._discovery import use_search_path


class DirectoryGone(Exception):
    """The client's cwd cannot be entered by the host (removed, or not searchable)."""


class ProcessState:
    """The host's own fds 0-2, kept (duplicated) once, to put back after each call."""

    def __init__(self) -> None:
        self._own = tuple(os.dup(fd) for fd in (0, 1, 2))
        for fd in self._own:
            os.set_inheritable(fd, False)

    @contextlib.contextmanager
    def of_client(
        self,
        fds: Sequence[int],
        cwd: str,
        env: Mapping[str, str],
        argv: list[str],
        umask: int,
        search_path: Sequence[str] | None = None,
    ) -> Iterator[None]:
        """Within the block, the process is the client's (rules 1-3); raises :class:`DirectoryGone` on entry."""
        streams = sys.stdin, sys.stdout, sys.stderr
        saved_env = dict(os.environ)
        saved_argv = sys.argv
        try:
            os.chdir(cwd)
        except OSError as exc:
            raise DirectoryGone(f"the current directory {cwd!r} cannot be entered ({exc.strerror})") from None
        # Kept after the call: the spare workers its runner starts next inherit it (rule 1).
        os.umask(umask & 0o777)
        try:
            for target, fd in zip((0, 1, 2), fds, strict=True):
                os.dup2(fd, target)
            sys.stdin = _stream(0, "r", streams[0])
            sys.stdout = _stream(1, "w", streams[1])
            sys.stderr = _stream(2, "w", streams[2], errors="backslashreplace")
            os.environ.clear()
            os.environ.update(env)
            sys.argv = ["xcsh-run", *argv]
            use_search_path(search_path)
            yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):  # a client that closed its end
                    stream.flush()
            sys.stdin, sys.stdout, sys.stderr = streams
            for target, own in zip((0, 1, 2), self._own, strict=True):
                os.dup2(own, target)
            os.environ.clear()
            os.environ.update(saved_env)
            sys.argv = saved_argv
            use_search_path(None)
            os.chdir("/")


def _stream(fd: int, mode: str, like: TextIO | None, errors: str | None = None) -> TextIO:
    """A text stream over ``fd`` as Python makes one: ``like``'s encoding; line-buffered on a terminal, and stderr."""
    encoding = getattr(like, "encoding", None) or "utf-8"
    raw = io.FileIO(fd, mode, closefd=False)  # the fd is the call's; the stream only borrows it
    errors = errors or getattr(like, "errors", None) or "strict"
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), encoding, errors)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding, errors, line_buffering=fd == 2 or raw.isatty())
