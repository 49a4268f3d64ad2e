"""The daemon's client: what ``xcsh-run`` runs when the daemon is opted in. The standard library only.

Rules of the client:

1. **It decides before anything else is imported** (:func:`route`): the
   console script's first step, before trio, typer or the host. A command
   the daemon does not serve, no opt-in, or shell completion, and it hands
   over to the CLI in this process as if the daemon did not exist.
2. **A call is forwarded whole**: argv, the cwd, the environment, and the
   three standard fds themselves (``SCM_RIGHTS``). The host writes the
   results into this process's own stdout and stderr and reads its stdin, so
   output, ``--json``, ``--stream``, the progress line and the terminal
   prompts are those of the CLI; the exit code comes back in a frame.
3. **Signals are forwarded**: SIGINT and SIGTERM become frames the host's
   call handles exactly as the CLI handles the signals themselves (the first
   stops the call through the ladder, the second kills it). Any other end of
   this process closes the connection, which the host takes as a SIGTERM.
4. **Nothing is trusted that is not ours**: the daemon's peer uid must be
   ours (``SO_PEERCRED``), and a daemon of another install or version is
   asked to stop and replaced. A socket nobody listens on is stale: it is
   removed and a daemon started, under a lock, so that concurrent first calls
   start one daemon.
5. **A daemon lost mid-call** is one line on stderr and exit
   :data:`DAEMON_FAILED`; the next call starts a new daemon.
"""

from __future__ import annotations

import _socket
import os
import sys
import time

from xcsh_run._daemon import paths, wire
from xcsh_run._version import __version__

# Neither ``socket`` nor ``signal``, nor ``contextlib`` or ``collections``: their C halves do, and
# the wrappers' imports (``enum``, ``selectors``, ``functools``) are most of a cold client's own cost.
TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the client's start is timed)
if TYPE_CHECKING:
    import signal as _signal
    from collections.abc import Mapping
    from typing import Any, Final
else:
    import _signal

DAEMON_FAILED: Final = 70  # sysexits.h's EX_SOFTWARE: the daemon could not start, refused, or ended mid-call
OPT_ENV: Final = "XCSH_RUN_DAEMON"
START_SECONDS: Final = 60.0  # a daemon's start imports the host: seconds on a loaded machine
STOP_SECONDS: Final = 90.0  # a stop lets running calls end; past 30 s the daemon stops their hosts
ASK_SECONDS: Final = 10.0

# The commands the daemon runs; every other name is a tool's (the `run` shorthand).
SERVED: Final = ("run", "list", "describe")
# The commands that run in the client's own process: long-lived, or not worth a round trip.
LOCAL: Final = ("batch", "watch", "serve", "fuzz", "new", "doctor", "install-bun", "daemon")
# Read when the host is imported, so a daemon serves only clients that agree on them.
IMPORT_TIME_ENV: Final = ("XCSH_RUN_FORKSERVER",)
_COMPLETION_ENV: Final = "_XCSH_RUN_COMPLETE"
_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("0", "false", "no", "off", "")


class DaemonError(Exception):
    """The daemon could not be reached, started or trusted; the message says what happened and what to do."""


def identity(env: Mapping[str, str] = os.environ) -> str:
    """What a daemon must match to serve this client: the version, the install, the interpreter, import-time settings.

    The install's folder stamp changes when a wheel is installed over it (its
    files are replaced); an editable checkout edited in place does not change
    it: ``xcsh-run daemon stop`` after editing the host's code.
    """
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        stamp = os.stat(package).st_mtime_ns
    except OSError:
        stamp = 0
    settings = ",".join(f"{name}={env.get(name, '')}" for name in IMPORT_TIME_ENV)
    return f"xcsh-run {__version__} {os.path.realpath(package)}@{stamp} {sys.executable} {settings}"


def _opted_in_by_config(env: Mapping[str, str]) -> bool:
    home = env.get("HOME") or os.path.expanduser("~")
    try:
        with open(os.path.join(home, ".xcsh", "config.toml"), "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return False
    if b"daemon" not in data:
        return False  # most files: no TOML parser imported
    import tomllib

    try:
        table = tomllib.loads(data.decode()).get("daemon")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False  # the CLI itself reports a broken config file, with where
    return isinstance(table, dict) and table.get("enabled") is True


def route(argv: list[str], env: Mapping[str, str] = os.environ) -> tuple[bool, list[str]]:
    """Whether this command goes to the daemon, and argv without ``--daemon`` / ``--no-daemon``.

    The flag may stand anywhere before ``--``; the last one wins. Without it,
    ``XCSH_RUN_DAEMON`` decides (1, true, yes, on; or 0, false, no, off), and
    without that ``enabled = true`` under ``[daemon]`` in ``~/.xcsh/config.toml``.
    """
    flag: bool | None = None
    kept: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            kept.extend(argv[i:])
            break
        if arg in ("--daemon", "--no-daemon"):
            flag = arg == "--daemon"
        else:
            kept.append(arg)
    if flag is None:
        value = env.get(OPT_ENV)
        if value is not None and value.strip().lower() in _TRUE:
            flag = True
        elif value is not None and value.strip().lower() in _FALSE:
            flag = False
        else:
            flag = _opted_in_by_config(env)
    if not flag or _COMPLETION_ENV in env or not kept:
        return False, kept
    first = kept[0]
    return not first.startswith("-") and first not in LOCAL, kept


def _connect(path: str) -> _socket.socket | None:
    """A connection to the daemon at ``path``, None when none listens there (rule 4)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except OSError:
        sock.close()
        raise
    _pid, uid, _gid = wire.peer_credentials(sock)
    if uid != os.getuid():
        sock.close()
        raise DaemonError(f"the socket {path} is served by uid {uid}, not by this user; remove it")
    return sock


class _StartLock:
    """The folder's start lock, held while a client checks for a daemon and starts one (rule 4)."""

    def __init__(self, folder: str) -> None:
        self._path = paths.lock_path(folder)
        self._fd = -1

    def __enter__(self) -> None:
        import fcntl

        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(self._fd)
            raise

    def __exit__(self, *_exc: object) -> None:
        os.close(self._fd)  # the lock goes with its fd


def _ask(sock: _socket.socket, frame: wire.Frame) -> wire.Frame | None:
    """One question, one answer, bounded: a daemon that does not answer in time is an error."""
    sock.settimeout(ASK_SECONDS)
    wire.send(sock, frame)
    return wire.receive(sock, wire.FrameReader())


def _start(folder: str, env: Mapping[str, str]) -> None:
    """Start a daemon for ``folder`` and wait until it listens (it detaches: not this process's child)."""
    import subprocess

    ready_r, ready_w = os.pipe()
    try:
        with open(paths.log_path(folder), "ab") as log:
            starter = subprocess.Popen(
                [sys.executable, "-m", "xcsh_run._daemon.hosting", "--folder", folder, "--ready-fd", str(ready_w)],
                pass_fds=(ready_w,), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, cwd="/", env=dict(env),
            )  # fmt: skip
        os.close(ready_w)
        ready_w = -1
        starter.wait()  # the starter forks the daemon and exits at once
        import select

        deadline = time.monotonic() + START_SECONDS
        answer = b""
        while not answer.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([ready_r], [], [], left)[0]:
                raise DaemonError(
                    f"the daemon did not start within {START_SECONDS:.0f} s; see {paths.log_path(folder)}"
                )
            chunk = os.read(ready_r, 512)
            if not chunk:
                raise DaemonError(f"the daemon failed to start; see {paths.log_path(folder)}")
            answer += chunk
    finally:
        os.close(ready_r)
        if ready_w >= 0:
            os.close(ready_w)


def connect(env: Mapping[str, str] = os.environ, *, start: bool = True) -> _socket.socket | None:
    """A connection to this user's daemon, started if need be (and ``start``); None if none runs and not ``start``.

    A daemon of another identity is asked to stop and replaced (rule 4).
    """
    folder = paths.runtime_dir(env)
    where = paths.socket_path(folder)
    mine = identity(env)
    for _attempt in range(3):
        sock = _connect(where)
        if sock is not None:
            theirs = _ask(sock, {"op": "hello"}) or {}
            if theirs.get("identity") == mine:
                return sock
            if isinstance(theirs.get("refused"), str):
                sock.close()
                raise DaemonError(f"the daemon at {where} refused this client: {theirs['refused']}")
            sock.close()
            _stop_at(where)  # another install or version: never trusted with a call
        if not start:
            return None
        with _StartLock(folder):
            sock = _connect(where)
            if sock is not None:
                sock.close()
                continue  # another client started one meanwhile: check it as above
            try:
                os.unlink(where)  # stale: nothing listens on it
            except FileNotFoundError:
                pass
            _start(folder, env)
    raise DaemonError(f"no daemon of this install would answer at {where}; see {paths.log_path(folder)}")


def _stop_at(where: str) -> int | None:
    """Ask the daemon at ``where`` to stop and wait until it has (bounded); its pid, or None if none ran."""
    sock = _connect(where)
    if sock is None:
        return None
    try:
        answer = _ask(sock, {"op": "stop"}) or {}
        sock.settimeout(STOP_SECONDS)
        try:
            wire.receive(sock, wire.FrameReader())  # it closes the connection once every host has ended
        except (TimeoutError, OSError, wire.FrameError):
            pass
    finally:
        sock.close()
    pid = answer.get("pid")
    return pid if isinstance(pid, int) else None


def stop(env: Mapping[str, str] = os.environ) -> int | None:
    """Stop this user's daemon (letting running calls end); its pid, or None if none ran."""
    return _stop_at(paths.socket_path(paths.runtime_dir(env)))


def status(env: Mapping[str, str] = os.environ) -> dict[str, Any] | None:
    """The daemon's own account of itself (pid, identity, hosts, memory), or None if none runs."""
    sock = _connect(paths.socket_path(paths.runtime_dir(env)))
    if sock is None:
        return None
    try:
        answer = _ask(sock, {"op": "status"})
    finally:
        sock.close()
    if answer is not None:
        answer["current"] = answer.get("identity") == identity(env)
    return answer


def _standard_fds() -> tuple[list[int], list[int]]:
    """Fds 0-2 to pass, a closed one replaced by the null device; and the fds opened for that."""
    passed: list[int] = []
    opened: list[int] = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            passed.append(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            opened.append(null)
            passed.append(null)
    return passed, opened


def call(argv: list[str], env: Mapping[str, str] = os.environ) -> int:
    """Run one CLI command in the daemon (rules 2, 3, 5); its exit code."""
    try:
        cwd = os.getcwd()
    except OSError as exc:
        print(
            f"xcsh-run: the current directory cannot be read ({exc.strerror}); cd to one that exists", file=sys.stderr
        )
        return 2
    try:
        sock = connect(env)
    except (DaemonError, paths.DaemonDirUnsafe, OSError, wire.FrameError) as exc:
        print(f"xcsh-run: daemon: {exc}; or run without it (--no-daemon)", file=sys.stderr)
        return DAEMON_FAILED
    except KeyboardInterrupt:  # while a daemon starts: nothing runs yet
        print("xcsh-run: interrupted by SIGINT", file=sys.stderr)
        return 130
    assert sock is not None
    fds, opened = _standard_fds()
    reader = wire.FrameReader()
    umask = os.umask(0o022)
    os.umask(umask)

    def forward(signum: int, _frame: object) -> None:
        try:
            wire.send(sock, {"signal": signum})
        except OSError:
            pass  # the daemon is gone: the receive below says so

    forwarded = (_signal.SIGINT, _signal.SIGTERM)
    # Held until the call frame is sent whole: a signal frame sent from a handler in the middle
    # of it would cut it in two. The handlers run once the mask is lifted (rule 3).
    _signal.pthread_sigmask(_signal.SIG_BLOCK, forwarded)
    try:
        for sig in forwarded:
            _signal.signal(sig, forward)
        # sys.path: where the host reads installed tools' entry points, as this process would have.
        call_frame = {"op": "call", "argv": argv, "cwd": cwd, "env": dict(env), "umask": umask, "path": sys.path}
        wire.send(sock, call_frame, tuple(fds))
        sock.settimeout(None)  # the call takes as long as it takes; the host bounds it
        sent = True
    except OSError:
        sent = False
    finally:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, forwarded)
        for fd in opened:
            os.close(fd)
    answer: wire.Frame | None = None
    if sent:
        try:
            answer = wire.receive(sock, reader)
        except (OSError, wire.FrameError):
            answer = None
    if answer is None or not isinstance(answer.get("exit"), int):
        print(
            "xcsh-run: daemon: the daemon ended during the call, and its result is lost; run the command again "
            "(a new daemon starts), or without the daemon (--no-daemon)",
            file=sys.stderr,
        )
        return DAEMON_FAILED
    message = answer.get("say")  # a line the daemon says for the CLI: a call stopped before it started
    if isinstance(message, str):
        print(message, file=sys.stderr)
    code: int = answer["exit"]
    return code
