"""The daemon: one per user. It takes clients, checks who they are, and hands each call to a host process.

Rules of the daemon:

1. **Single-threaded, and never runs trio**: hosts are forked from it, warm
   (the host's modules are imported here first, then frozen out of the
   collector's reach so that forks share them), and a fork copies only the
   thread that calls it.
2. **Every connection's uid is checked** when it is accepted (``SO_PEERCRED``):
   another user's is refused with a frame saying so, and closed. The folder
   is 0700 anyway (``xcsh_run._daemon.paths``); this holds should it not be.
3. **A call goes to an idle host that last served the same cwd and
   environment** (its runners are warm for them), else to the idle host
   longest idle, else to a new host while there are fewer than
   :data:`EAGER_HOSTS`; past that, it waits, and a call that has waited
   :data:`GROW_AFTER` seconds adds a host, up to ``max_hosts``. Short calls
   are served by the warm hosts; long ones grow the pool.
4. **The daemon keeps no copy of a call's fds**: the client's connection
   and its stdin, stdout and stderr go to the host (``SCM_RIGHTS``) and are
   closed here at once, so the host holds the connection's only end: a host
   that dies ends its client's call (client rule 5).
5. **A call that waits can still be stopped**: a forwarded signal answers it
   exit 130, as the CLI would, and a client that leaves is forgotten.
6. **Idle**: a host idle ``host_idle`` seconds is told to end (its control
   socket is closed); the daemon ends ``idle`` seconds after its last call,
   when no call runs or waits and no client is connected.
7. **Stopping** (``stop``, SIGTERM, SIGINT, SIGHUP, or its socket replaced by
   another daemon's): it stops listening at once, removes the socket if it is
   still its own, lets the running calls end, answers the waiting ones that
   it stopped before they started, and ends once every host has; a host
   still there :data:`HOST_END_SECONDS` after being told is killed.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import hashlib
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Final

from xcsh_run._daemon import client, paths, wire
from xcsh_run._version import __version__

EAGER_HOSTS: Final = max(2, 2 * (os.cpu_count() or 1))
MAX_HOSTS: Final = 32
GROW_AFTER: Final = 0.1
IDLE_SECONDS: Final = 1800.0
HOST_IDLE_SECONDS: Final = 600.0
HOST_END_SECONDS: Final = 30.0
PEER_SECONDS: Final = 60.0
SEND_SECONDS: Final = 10.0  # a call frame to a host  # a connection that sends no call in this long is closed
_CANCELLED: Final = 130


@dataclass
class _Peer:
    """A connected client whose call is not with a host: reading its frames, or waiting for a host."""

    sock: socket.socket
    reader: wire.FrameReader = field(default_factory=wire.FrameReader)
    fds: list[int] = field(default_factory=list)
    call: wire.Frame | None = None
    waiting_since: float = 0.0
    stopping: bool = False  # asked `stop`: answered (closed) once the daemon has ended
    since: float = field(default_factory=time.monotonic)


@dataclass
class _Host:
    pid: int
    control: socket.socket
    busy: bool = False
    affinity: str = ""
    idle_since: float = field(default_factory=time.monotonic)
    runners: int = 0
    told_to_end: float | None = None
    reader: wire.FrameReader = field(default_factory=wire.FrameReader)


def _affinity(call: wire.Frame) -> str:
    env = call.get("env")
    items = sorted(env.items()) if isinstance(env, dict) else []
    return hashlib.sha256(repr((call.get("cwd"), call.get("umask"), items)).encode()).hexdigest()


def _rss(pid: int, *, tree: bool = False) -> int:
    """Resident bytes of ``pid`` (and, with ``tree``, of every process under it: a host's workers)."""
    import psutil

    try:
        process = psutil.Process(pid)
        processes = [process, *process.children(recursive=True)] if tree else [process]
    except psutil.Error:
        return 0
    total = 0
    for each in processes:
        try:
            total += each.memory_info().rss
        except psutil.Error:
            pass
    return int(total)


class Supervisor:
    """The daemon's loop (the module docstring's rules)."""

    def __init__(
        self,
        folder: str,
        listener: socket.socket,
        *,
        idle: float = IDLE_SECONDS,
        host_idle: float = HOST_IDLE_SECONDS,
        max_hosts: int = MAX_HOSTS,
    ) -> None:
        self._folder = folder
        self._path = paths.socket_path(folder)
        self._listener: socket.socket | None = listener
        self._inode = os.stat(self._path).st_ino
        self._idle = idle
        self._host_idle = min(host_idle, idle)
        self._max_hosts = max(1, max_hosts)
        self._identity = client.identity()
        self._started = time.time()
        self._selector = selectors.DefaultSelector()
        self._peers: dict[int, _Peer] = {}
        self._waiting: collections.deque[_Peer] = collections.deque()
        self._hosts: dict[int, _Host] = {}  # by pid
        self._last_activity = time.monotonic()
        self._stopping = False
        self._stopped_at = 0.0
        self._wake_r, self._wake_w = socket.socketpair()
        for sock in (self._wake_r, self._wake_w):
            sock.setblocking(False)
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, "listener")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "signal")

    def run(self) -> None:
        """Serve until stopped or idle (rules 6, 7)."""
        signal.set_wakeup_fd(self._wake_w.fileno())
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: None)  # the wake-up fd carries it to the loop
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        while not (self._stopping and not self._hosts):
            for key, _events in self._selector.select(timeout=0.5 if self._waiting else 2.0):
                self._ready(key.data, key.fileobj)
            self._housekeeping()
        self._end()

    # -- events ---------------------------------------------------------------------------------

    def _ready(self, what: object, fileobj: object) -> None:
        if what == "listener":
            self._accept()
        elif what == "signal":
            with contextlib.suppress(BlockingIOError):
                self._wake_r.recv(512)
            self._stop("a signal")
        elif isinstance(what, _Peer):
            self._from_peer(what)
        elif isinstance(what, _Host):
            self._from_host(what)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # EMFILE and the like: the client retries on its refused connection
            _pid, uid, _gid = wire.peer_credentials(sock)
            if uid != os.getuid():
                with contextlib.suppress(OSError):
                    sock.setblocking(True)
                    sock.settimeout(1.0)
                    wire.send(sock, {"refused": f"this daemon serves uid {os.getuid()} only, not uid {uid}"})
                sock.close()
                continue
            sock.setblocking(False)
            peer = _Peer(sock)
            self._peers[sock.fileno()] = peer
            self._selector.register(sock, selectors.EVENT_READ, peer)
            self._last_activity = time.monotonic()

    def _from_peer(self, peer: _Peer) -> None:
        try:
            data, fds = wire.receive_bytes(peer.sock)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds = b"", []
        peer.fds.extend(fds)
        if not data:
            self._forget(peer)
            return
        try:
            peer.reader.feed(data)
        except wire.FrameError:
            self._forget(peer)
            return
        while peer.reader.ready and peer.sock.fileno() >= 0:
            self._frame(peer, peer.reader.take())

    def _frame(self, peer: _Peer, frame: wire.Frame) -> None:
        op = frame.get("op")
        if peer.call is not None:  # waiting for a host: only a signal may come (rule 5)
            if frame.get("signal") in (signal.SIGINT, signal.SIGTERM):
                name = signal.Signals(frame["signal"]).name
                self._answer(peer, {"exit": _CANCELLED, "say": f"xcsh-run: interrupted by {name}"})
            return
        if op == "hello":
            self._reply(peer, {"identity": self._identity, "pid": os.getpid()})
        elif op == "status":
            self._reply(peer, self._status())
        elif op == "stop":
            self._reply(peer, {"pid": os.getpid()})
            peer.stopping = True
            self._stop("a client's stop")
        elif op == "call" and not self._stopping:
            if len(peer.fds) != 3:
                self._answer(peer, {"exit": client.DAEMON_FAILED, "say": "xcsh-run: daemon: a call without its fds"})
                return
            peer.call = frame
            peer.waiting_since = time.monotonic()
            self._waiting.append(peer)
            self._dispatch()
        elif op == "call":
            self._answer(peer, {"exit": client.DAEMON_FAILED, "say": _STOPPED_BEFORE})
        else:
            self._forget(peer)

    def _reply(self, peer: _Peer, frame: wire.Frame) -> None:
        try:
            peer.sock.setblocking(True)
            peer.sock.settimeout(5.0)
            wire.send(peer.sock, frame)
            peer.sock.setblocking(False)
        except OSError:
            self._forget(peer)

    def _answer(self, peer: _Peer, frame: wire.Frame) -> None:
        """Answer a call here, and close it."""
        self._reply(peer, frame)
        self._forget(peer)

    def _forget(self, peer: _Peer) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(peer.sock)
        with contextlib.suppress(ValueError):
            self._waiting.remove(peer)
        if not peer.stopping:
            self._peers.pop(peer.sock.fileno(), None)
            peer.sock.close()
        for fd in peer.fds:
            wire.close_quietly(fd)
        peer.fds.clear()

    def _from_host(self, host: _Host) -> None:
        try:
            data = host.control.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._host_gone(host)
            return
        try:
            host.reader.feed(data)
        except wire.FrameError:
            self._end_host(host)
            return
        while host.reader.ready:
            frame = host.reader.take()
            if frame.get("done"):
                host.busy = False
                host.idle_since = time.monotonic()
                host.runners = int(frame.get("runners") or 0)
                self._last_activity = time.monotonic()
        if self._stopping and not host.busy:
            self._end_host(host)
        self._dispatch()

    # -- hosts ----------------------------------------------------------------------------------

    def _dispatch(self, grow: bool = False) -> None:
        """Hand waiting calls to hosts, in order (rule 3)."""
        while self._waiting:
            peer = self._waiting[0]
            assert peer.call is not None
            affinity = _affinity(peer.call)
            idle = [h for h in self._hosts.values() if not h.busy and h.told_to_end is None]
            host = next((h for h in idle if h.affinity == affinity), None)
            if host is None and idle:
                host = min(idle, key=lambda h: h.idle_since)
            if host is None:
                count = len(self._hosts)
                if count < min(EAGER_HOSTS, self._max_hosts) or (grow and count < self._max_hosts):
                    host = self._spawn()
                    grow = False
                if host is None:
                    return
            self._waiting.popleft()
            if not self._send_call(host, peer, affinity):
                return  # the host is gone: the next turn of the loop tries again

    def _send_call(self, host: _Host, peer: _Peer, affinity: str) -> bool:
        assert peer.call is not None
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(peer.sock)
        # What the client sent behind the call that is not handled here (its first signals, maybe
        # half of one): the host reads the rest of the stream, so it gets these bytes first.
        rest = b"".join(wire.encode(f) for f in peer.reader.ready) + peer.reader.take_partial()
        peer.reader.ready.clear()
        try:
            host.control.settimeout(SEND_SECONDS)  # a host that does not read is a host gone
            wire.send(host.control, {**peer.call, "rest": rest.decode("latin-1")}, (peer.sock.fileno(), *peer.fds))
            host.control.setblocking(False)
        except OSError:
            # It ended after its last `done` (or hangs): the call goes back to the front, to another host.
            peer.reader.feed(rest)
            self._selector.register(peer.sock, selectors.EVENT_READ, peer)
            self._waiting.appendleft(peer)
            with contextlib.suppress(ProcessLookupError):
                os.kill(host.pid, signal.SIGKILL)
            self._host_gone(host)
            return False
        host.busy = True
        host.affinity = affinity
        self._peers.pop(peer.sock.fileno(), None)
        peer.sock.close()  # rule 4: the host's copy is the only one now
        for fd in peer.fds:
            wire.close_quietly(fd)
        peer.fds.clear()
        self._last_activity = time.monotonic()
        return True

    def _spawn(self) -> _Host | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return None
        if pid == 0:  # the host
            code = 1
            try:
                ours.close()
                self._close_in_host()
                from xcsh_run._daemon.hosting.host import serve

                code = serve(theirs.detach())
            finally:
                os._exit(code)
        theirs.close()
        ours.setblocking(False)
        host = _Host(pid, ours)
        self._hosts[pid] = host
        self._selector.register(ours, selectors.EVENT_READ, host)
        return host

    def _close_in_host(self) -> None:
        """In a new host: the daemon's sockets and fds are not its own (a stray copy would keep a client waiting)."""
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python starts: EPIPE, not death
        self._selector.close()
        for sock in [self._listener, self._wake_r, self._wake_w, *(h.control for h in self._hosts.values())]:
            if sock is not None:
                sock.close()
        for peer in self._peers.values():
            peer.sock.close()
            for fd in peer.fds:
                wire.close_quietly(fd)

    def _end_host(self, host: _Host) -> None:
        if host.told_to_end is None:
            host.told_to_end = time.monotonic()
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(host.control)
            host.control.close()

    def _host_gone(self, host: _Host) -> None:
        self._end_host(host)
        self._reap(host.pid, block=False)

    def _reap(self, pid: int, *, block: bool) -> bool:
        try:
            done, _status = os.waitpid(pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done == pid:
            self._hosts.pop(pid, None)
            return True
        return False

    # -- time -----------------------------------------------------------------------------------

    def _housekeeping(self) -> None:
        now = time.monotonic()
        for host in list(self._hosts.values()):
            if self._stopping and host.busy and host.told_to_end is None and now - self._stopped_at > HOST_END_SECONDS:
                # A call still running that long after a stop: its host is stopped, which stops the
                # call through the ladder (its client gets the `cancelled` result), then ends.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(host.pid, signal.SIGTERM)
                host.told_to_end = now
            if host.told_to_end is not None:
                if not self._reap(host.pid, block=False) and now - host.told_to_end > HOST_END_SECONDS:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(host.pid, signal.SIGKILL)
                    self._reap(host.pid, block=True)
            elif not host.busy and now - host.idle_since > self._host_idle:
                self._end_host(host)
        for peer in list(self._peers.values()):
            if peer.call is None and not peer.stopping and now - peer.since > PEER_SECONDS:
                self._forget(peer)  # connected, and never asked anything: not a reason to stay up
        if self._waiting and now - self._waiting[0].waiting_since > GROW_AFTER:
            self._dispatch(grow=True)
        if self._stopping:
            return
        try:
            replaced = os.stat(self._path).st_ino != self._inode
        except OSError:
            replaced = True
        if replaced:
            self._stop("its socket replaced or removed")
        elif (
            not self._waiting
            and not any(h.busy for h in self._hosts.values())
            and not self._peers
            and now - self._last_activity > self._idle
        ):
            self._stop("idle")

    def _stop(self, why: str) -> None:
        if self._stopping:
            return
        self._stopping = True
        self._stopped_at = time.monotonic()
        print(f"xcsh-run daemon {os.getpid()}: stopping ({why})", file=sys.stderr, flush=True)
        if self._listener is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._listener)
            with contextlib.suppress(OSError):
                if os.stat(self._path).st_ino == self._inode:
                    os.unlink(self._path)
            self._listener.close()
            self._listener = None
        while self._waiting:
            self._answer(self._waiting[0], {"exit": client.DAEMON_FAILED, "say": _STOPPED_BEFORE})
        for host in list(self._hosts.values()):
            if not host.busy:
                self._end_host(host)

    def _end(self) -> None:
        for peer in list(self._peers.values()):
            peer.stopping = False
            self._forget(peer)  # a `stop` client waits for this close
        self._selector.close()

    def _status(self) -> wire.Frame:
        hosts = [
            {"pid": h.pid, "busy": h.busy, "runners": h.runners, "rss": _rss(h.pid, tree=True)}
            for h in self._hosts.values()
            if h.told_to_end is None
        ]
        return {
            "pid": os.getpid(),
            "identity": self._identity,
            "version": __version__,
            "python": sys.executable,
            "folder": self._folder,
            "started": self._started,
            "idle_seconds": self._idle if self._idle < float("inf") else None,  # JSON has no infinity
            "rss": _rss(os.getpid()),
            "hosts": hosts,
            "waiting": len(self._waiting),
        }


_STOPPED_BEFORE: Final = "xcsh-run: daemon: it stopped before the call started; run the command again"


def prepare() -> None:
    """Import what a host runs, once, here (rule 1): every host forked after starts warm."""
    import xcsh_run._daemon.hosting.host  # noqa: F401

    gc.collect()
    gc.freeze()
