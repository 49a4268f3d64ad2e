"""What the strict sandbox denied, in plain words, for the error a tool's call ends with.

Landlock and seccomp answer a denied operation with a bare ``EACCES`` or
``EPERM``: ``[Errno 13] Permission denied: 'git'`` says nothing of the sandbox
nor of the flag that allows it. The worker cannot see a syscall fail, but it
can see it asked for: an audit hook (``sys.addaudithook``, installed before any
tool code runs) checks each sensitive operation (``open``, listing, making and
removing files, running a program, creating, connecting and binding a socket,
resolving a name) against the worker's own policy, and remembers the ones the
policy does not allow. When a call then ends in a ``PermissionError`` (or an
exception caused by one) that matches one of them, :func:`explain` gives the
sentence its error message ends with.

Only an operation the policy really does not allow is claimed: the path,
program or port is checked against the same allow-lists the sandbox was built
from, so a tool's own ``raise PermissionError("mine")`` (no errno), a file only
root may read, or a denial that matches nothing recorded keeps its message as
it was. A path is matched by the exception's ``filename``; an error without one
(a socket's) only by the last operation of the thread that asked for it.

Seen only what Python does: a C extension's own ``open(2)`` or ``connect(2)``
raises no audit event, and its denial stays unexplained.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from xcsh_run.worker.protocol import methods as m

if TYPE_CHECKING:
    import shutil
    import socket
else:
    # Imported by install(), under strict only: every other worker starts without their cost.
    shutil = socket = None

_WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_DENIED_ERRNOS: Final = (errno.EACCES, errno.EPERM)
_CHAIN_DEPTH: Final = 8


class Denial:
    """One operation the policy does not allow; ``subjects`` are the names an exception may carry for it."""

    __slots__ = ("kind", "text", "subjects", "thread")

    def __init__(self, kind: str, text: str, subjects: frozenset[str] = frozenset()) -> None:
        self.kind = kind  # "path", "exec", "socket", "connect", "bind" or "dns"
        self.text = text
        self.subjects = subjects
        self.thread = threading.get_ident()


class _Allowed:
    """Paths granted with everything beneath them: a path is inside if it is one, or under one."""

    def __init__(self, paths: list[str]) -> None:
        self.exact = frozenset(paths)
        self.beneath = tuple(path.rstrip("/") + "/" for path in paths)

    def __contains__(self, path: str) -> bool:
        return path in self.exact or path.startswith(self.beneath)


class _Policy:
    def __init__(self, cfg: m.SandboxConfig) -> None:
        self.read = _Allowed([*cfg.read_paths, *cfg.write_paths, *cfg.exec_paths])
        self.write = _Allowed(cfg.write_paths)
        self.exec = frozenset(cfg.exec_paths)
        self.ports = frozenset(cfg.connect_ports)


_policy: _Policy | None = None
_recent: deque[Denial] = deque(maxlen=32)
_last: dict[int, Denial | None] = {}
# Each thread's last name lookup: socket.create_connection() looks the address
# up before it makes the socket, so a denied socket() can name where it was going.
_lookups: dict[int, tuple[str, int]] = {}


def install(cfg: m.SandboxConfig) -> None:
    """Watch sensitive operations from now on (``strict`` only; once per process)."""
    global _policy, shutil, socket
    if cfg.level != "strict" or _policy is not None:
        return
    import shutil
    import socket

    _policy = _Policy(cfg)
    sys.addaudithook(_hook)


def reset() -> None:
    """Forget what earlier calls were denied: a new call starts."""
    _recent.clear()
    _last.clear()
    _lookups.clear()


def _hook(event: str, args: tuple[Any, ...]) -> None:
    check = _CHECKS.get(event)
    if check is None or _policy is None:
        return
    try:
        denial = check(_policy, args)
    except Exception:  # never let the explanation break the operation it watches
        return
    _last[threading.get_ident()] = denial
    if denial is not None:
        _recent.append(denial)


# --- the checks: each returns the Denial for an operation the policy does not allow ---------------


def _name(path: object) -> str | None:
    if isinstance(path, bytes):
        return os.fsdecode(path)
    if isinstance(path, str):
        return path
    if isinstance(path, os.PathLike):
        return _name(os.fspath(path))
    return None  # an fd: nothing to check


def _inside(path: str, allowed: _Allowed) -> bool:
    # A symlink (/etc/localtime, a venv's lib64): the rules were made on real paths.
    return path in allowed or os.path.realpath(path) in allowed


def _path_denial(policy: _Policy, raw: object, write: bool, verb: str) -> Denial | None:
    name = _name(raw)
    if name is None:
        return None
    path = os.path.abspath(name)
    if _inside(path, policy.write if write else policy.read):
        return None
    if write:
        # A rule on a path that does not exist grants nothing: a new file needs its folder.
        grant = path if os.path.exists(path) else os.path.dirname(path)
        text = (
            f"the strict sandbox blocked {verb} {path} (outside the write allow-list): allow it with "
            f"--allow-write {grant} (policy field extra_write_paths); a tool declares this need with "
            f'requires={{"write": ["{grant}"]}}'
        )
    else:
        text = (
            f"the strict sandbox blocked {verb} {path} (outside the read allow-list): allow it with "
            f"--allow-read {path} (policy field extra_read_paths); a tool declares this need with "
            f'requires={{"read": ["{path}"]}}'
        )
    return Denial("path", text, frozenset({name, path}))


def _open(policy: _Policy, args: tuple[Any, ...]) -> Denial | None:
    path, _mode, flags = args
    write = bool(flags & _WRITE_FLAGS) if isinstance(flags, int) else False
    return _path_denial(policy, path, write, "writing" if write else "reading")


def _listdir(policy: _Policy, args: tuple[Any, ...]) -> Denial | None:
    return _path_denial(policy, "." if args[0] is None else args[0], False, "listing")


def _change(verb: str) -> Callable[[_Policy, tuple[Any, ...]], Denial | None]:
    def check(policy: _Policy, args: tuple[Any, ...]) -> Denial | None:
        return _path_denial(policy, args[0], True, verb)

    return check


def _two_paths(verb: str) -> Callable[[_Policy, tuple[Any, ...]], Denial | None]:
    def check(policy: _Policy, args: tuple[Any, ...]) -> Denial | None:
        return _path_denial(policy, args[0], True, verb) or _path_denial(policy, args[1], True, verb)

    return check


def _program_denial(policy: _Policy, program: object, cwd: object, env: object) -> Denial | None:
    name = _name(program)
    if not name:
        return None
    if os.sep in name:
        found: str | None = os.path.join(_name(cwd) or os.getcwd(), name)
    else:
        path_env = env.get("PATH") if isinstance(env, dict) else None
        found = shutil.which(name, path=path_env if isinstance(path_env, str) else os.environ.get("PATH"))
    if found is None or not os.path.exists(found):
        return None  # not found: FileNotFoundError says so already
    real = os.path.realpath(found)
    if real in policy.exec:
        return None
    text = (
        f"the strict sandbox blocked running {name!r} (not in allow_exec): allow it with --allow-exec {name} "
        f'(policy field allow_exec); a tool declares this need with requires={{"programs": ["{name}"]}}'
    )
    return Denial("exec", text, frozenset({name, found, real}))


def _popen(policy: _Policy, args: tuple[Any, ...]) -> Denial | None:
    executable, argv, cwd, env = args
    if executable is None:
        executable = argv[0] if isinstance(argv, list | tuple) and argv else argv
    return _program_denial(policy, executable, cwd, env)


def _exec(policy: _Policy, args: tuple[Any, ...]) -> Denial | None:
    return _program_denial(policy, args[0], None, args[2] if len(args) > 2 else None)


def _socket(policy: _Policy, args: tuple[Any, ...]) -> Denial | None:
    _sock, family, kind, proto = args
    if family == -1:
        return None  # socket(fileno=...): wraps an fd that exists already
    tcp = family in (socket.AF_INET, socket.AF_INET6) and kind & 0xF == socket.SOCK_STREAM and proto in (0, 6)
    if tcp and policy.ports:
        return None
    lookup = _lookups.get(threading.get_ident())
    if tcp and lookup is not None:
        host, port = lookup
        denial = _connect(policy, (None, (host, port)))
        if denial is not None:
            return Denial("socket", denial.text)
    if tcp:
        text = (
            "the strict sandbox blocked creating a TCP socket (network is off): allow connecting to a port with "
            '--allow-connect PORT (policy field allow_connect); a tool declares this need with requires={"network": '
            '["tcp:PORT"]}'
        )
    else:
        text = (
            f"the strict sandbox blocked creating a socket ({_family(family)}, type {kind & 0xF}): strict allows "
            "only outbound TCP, to the ports granted with --allow-connect PORT (policy field allow_connect); "
            "UDP (so DNS), raw and UNIX sockets need --sandbox contained"
        )
    return Denial("socket", text)


def _family(family: int) -> str:
    try:
        return socket.AddressFamily(family).name
    except ValueError:
        return f"family {family}"


def _address(address: object) -> tuple[str, int | None]:
    if isinstance(address, tuple) and len(address) >= 2 and isinstance(address[1], int):
        host = str(address[0])
        return (f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"), address[1]
    return repr(address), None


def _connect(policy: _Policy, args: tuple[Any, ...]) -> Denial | None:
    shown, port = _address(args[1])
    if port is None or port in policy.ports:
        return None
    _lookups.pop(threading.get_ident(), None)
    why = "network is off" if not policy.ports else f"port {port} is not in allow_connect"
    text = (
        f"the strict sandbox blocked connect to {shown} ({why}): allow it with --allow-connect {port} (policy "
        f'field allow_connect); a tool declares this need with requires={{"network": ["tcp:{port}"]}}'
    )
    return Denial("connect", text)


def _bind(policy: _Policy, args: tuple[Any, ...]) -> Denial | None:
    shown, _port = _address(args[1])
    text = (
        f"the strict sandbox blocked bind to {shown}: a strict tool may not bind or listen (only outbound TCP "
        "with --allow-connect PORT); run it with --sandbox contained to serve"
    )
    return Denial("bind", text)


def _getaddrinfo(policy: _Policy, args: tuple[Any, ...]) -> Denial | None:
    host, port = _name(args[0]), args[1]
    if host and isinstance(port, int | str) and str(port).isdigit():
        _lookups[threading.get_ident()] = (host, int(port))
    if not host or _numeric(host):
        return None
    text = (
        f"the strict sandbox blocked resolving {host!r}: DNS needs UDP, which strict never allows (only names in "
        "/etc/hosts resolve); connect by IP address with --allow-connect PORT, or run it with --sandbox contained"
    )
    return Denial("dns", text)


def _numeric(host: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host.split("%")[0])
            return True
        except OSError:
            continue
    return False


_CHECKS: Final[dict[str, Callable[[_Policy, tuple[Any, ...]], Denial | None]]] = {
    "open": _open,
    "os.listdir": _listdir,
    "os.scandir": _listdir,
    "os.mkdir": _change("making"),
    "os.remove": _change("removing"),
    "os.rmdir": _change("removing"),
    "os.truncate": _change("truncating"),
    "os.rename": _two_paths("renaming"),
    "os.link": lambda policy, args: _path_denial(policy, args[1], True, "linking"),
    "os.symlink": lambda policy, args: _path_denial(policy, args[1], True, "making a symlink at"),
    "subprocess.Popen": _popen,
    "os.exec": _exec,
    "os.posix_spawn": _exec,
    "socket.__new__": _socket,
    "socket.connect": _connect,
    "socket.bind": _bind,
    "socket.getaddrinfo": _getaddrinfo,
}


# --- matching a call's exception ------------------------------------------------------------------


def explain(exc: BaseException) -> str | None:
    """The sentence for the sandbox denial ``exc`` (or an exception it came from) is, if it is one."""
    if _policy is None:
        return None
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < _CHAIN_DEPTH:
        if getattr(current, "sandbox_denial", None):
            return None  # already explained in its own message (api.exec)
        text = _match(current)
        if text is not None:
            return text
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def _match(exc: BaseException) -> str | None:
    if isinstance(exc, socket.gaierror):
        last = _last.get(threading.get_ident())
        return last.text if last is not None and last.kind == "dns" else None
    if not isinstance(exc, OSError) or exc.errno not in _DENIED_ERRNOS:
        return None
    names = {_name(exc.filename), _name(exc.filename2)} - {None}
    if names:
        for denial in reversed(_recent):
            if denial.subjects & names:
                return denial.text
        return None
    # No file name: a socket's. Only the newest denial, and only while it is
    # still its thread's last watched operation (nothing else was tried since).
    if not _recent:
        return None
    newest = _recent[-1]
    if newest.kind not in ("socket", "connect", "bind") or _last.get(newest.thread) is not newest:
        return None
    if newest.kind == "socket" and not _raised_in_socket_init(exc):
        return None  # socketpair() wraps its fds with socket(): that record is no denial
    return newest.text


def _raised_in_socket_init(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return (
        tb is not None
        and tb.tb_frame.f_code.co_name == "__init__"
        and tb.tb_frame.f_code.co_filename == socket.__file__
    )


def explained(exc: OSError, text: str) -> OSError:
    """A copy of ``exc`` whose message ends with ``text``, marked so it is not explained twice."""
    shown = f"{exc.strerror}: {exc.filename!r}" if exc.filename is not None else str(exc.strerror)
    new = type(exc)(exc.errno, f"{shown} [{text}]")
    new.sandbox_denial = text  # type: ignore[attr-defined]
    return new
