"""The fork server's zygote: an interpreter with the worker already imported, forking fresh workers.

Started by the host as ``python -I -m xcsh_run.worker --zygote S`` (``xcsh_run._process.forkserver``),
S one end of a ``SOCK_SEQPACKET`` socketpair. It stays single-threaded for
its whole life (a fork copies only the forking thread: a lock another thread
held would stay held in every child) and answers one request at a time:

- ``fork``: with four fds passed by ``SCM_RIGHTS`` (the worker's protocol
  read end, protocol write end, stdout and stderr pipes), a cwd and an
  environment. The child is made into exactly what ``subprocess.Popen`` makes
  (:func:`_become_worker`) and runs ``xcsh_run.worker._runtime.loop.main``: it waits for
  ``initialize`` and has run no tool code, so the host attaches it to its
  boundary first, as for a Popen worker, and it applies its own sandbox at
  ``initialize`` (Landlock naming its module's folder included). The reply is
  its pid and a pidfd, opened here while the child is ours and unreaped, so
  it can never name a recycled pid.
- ``reap``: ``wait4`` of one child, without blocking: its status and rusage.
  Children are reaped only when the host asks, after it has attached and
  killed their boundary, so no pid it still uses is ever freed early.

EOF on S means the host is gone (or closed us): the zygote exits. Its children
do not depend on it: each one's lifeline is its own protocol pipe.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import Any, NoReturn

import msgspec

# Loaded here once, so that every fork inherits them.
from xcsh_run.worker._runtime import loop as _loop
from xcsh_run.worker._runtime import supervisor as _supervisor  # noqa: F401
from xcsh_run.worker._sandbox import apply as _apply  # noqa: F401

MAX_REQUEST = 1 << 20
EXIT_SETUP = 127


class Fork(msgspec.Struct, tag="fork", array_like=True):
    cwd: str
    env: dict[str, str]


class Reap(msgspec.Struct, tag="reap", array_like=True):
    pid: int


_decoder = msgspec.msgpack.Decoder(Fork | Reap)
_encode = msgspec.msgpack.encode


def serve(sock_fd: int) -> NoReturn:
    # Stopped with the host's SIGKILL or by EOF; a Ctrl-C meant for the host is not for us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=sock_fd)
    sock.set_inheritable(False)
    sock.send(_encode(["ready", os.getpid()]))
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 4)
        except OSError:
            os._exit(0)
        if not data:
            os._exit(0)  # the host is gone
        try:
            request = _decoder.decode(data)
        except msgspec.DecodeError as exc:
            request = None
            reply: list[Any] = ["error", f"malformed request: {exc}"]
        if isinstance(request, Fork) and len(fds) == 4:
            _fork(sock, request, fds)
            continue
        for fd in fds:
            os.close(fd)
        if isinstance(request, Reap):
            reply = _reap(request.pid)
        elif request is not None:
            reply = ["error", f"a fork request carries 4 fds, not {len(fds)}"]
        sock.send(_encode(reply))


def _fork(sock: socket.socket, request: Fork, fds: list[int]) -> None:
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        sock.send(_encode(["error", f"fork: {exc}"]))
        return
    if pid == 0:
        try:
            _become_worker(sock, request, fds)
        except BaseException as exc:
            os.write(2, f"xcsh-run worker: could not set up a forked worker: {exc!r}\n".encode())
        os._exit(EXIT_SETUP)
    for fd in fds:
        os.close(fd)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        sock.send(_encode(["error", f"pidfd_open: {exc}"]))
        return
    try:
        socket.send_fds(sock, [_encode(["forked", pid])], [pidfd])
    finally:
        os.close(pidfd)


def _reap(pid: int) -> list[Any]:
    try:
        got, status, usage = os.wait4(pid, os.WNOHANG)
    except ChildProcessError:
        return ["unknown", pid]
    if got == 0:
        return ["running", pid]
    return ["reaped", pid, status, list(usage)]


def _become_worker(sock: socket.socket, request: Fork, fds: list[int]) -> NoReturn:
    """In the child: the state a Popen'd ``python -I -m xcsh_run.worker`` starts in, then the worker's main."""
    # First of all: a tool must never reach the zygote, which forks unsandboxed processes.
    sock.close()
    to_r, from_w, out_w, err_w = fds
    os.setsid()  # start_new_session=True
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    # close_fds=True: nothing but 0-2 and the protocol pipe, whatever the zygote held.
    keep = sorted({0, 1, 2, to_r, from_w})
    for low, high in zip(keep, [*keep[1:], 1 << 30], strict=True):
        os.closerange(low + 1, high)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    main = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "__main__.py")
    sys.argv = [main, "--fd-in", str(to_r), "--fd-out", str(from_w)]
    _loop.main(sys.argv[1:])
