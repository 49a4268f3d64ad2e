"""Where the daemon lives: a private folder per user, its socket, its lock and its log.

1. **The folder is the user's alone**: ``$XCSH_RUN_DAEMON_DIR`` if set (tests,
   a shared machine's policy), else ``$XDG_RUNTIME_DIR/xcsh-run`` (the login
   session's own tmpfs), else ``/tmp/xcsh-run-UID``. It is made mode 0700, and
   one that is a link, not a folder, not owned by this uid, or open to others
   is refused, never used: another user who could write there could put a
   socket of their own in the daemon's place.
2. **The socket's path fits** ``sun_path`` (107 bytes); a longer one is an
   error that says to set ``XCSH_RUN_DAEMON_DIR`` to a shorter folder.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the client's start is timed)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

DIR_ENV: Final = "XCSH_RUN_DAEMON_DIR"
SOCKET_NAME: Final = "daemon.sock"
LOCK_NAME: Final = "start.lock"
LOG_NAME: Final = "daemon.log"
_SUN_PATH_MAX: Final = 107


class DaemonDirUnsafe(Exception):
    """The daemon's folder exists but is not this user's private folder; the message says how to fix it."""


def runtime_dir(env: Mapping[str, str] = os.environ) -> str:
    """The daemon's folder (rule 1), made if missing; raises :class:`DaemonDirUnsafe`."""
    explicit = env.get(DIR_ENV)
    uid = os.getuid()
    if explicit:
        folder = os.path.abspath(explicit)
        os.makedirs(os.path.dirname(folder), exist_ok=True)
    elif env.get("XDG_RUNTIME_DIR") and os.path.isdir(env["XDG_RUNTIME_DIR"]):
        folder = os.path.join(env["XDG_RUNTIME_DIR"], "xcsh-run")
    else:
        folder = os.path.join(env.get("TMPDIR") or "/tmp", f"xcsh-run-{uid}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    problem = None
    if not stat.S_ISDIR(info.st_mode):
        problem = "is not a folder (a link or a file)"
    elif info.st_uid != uid:
        problem = f"belongs to uid {info.st_uid}, not to this user (uid {uid})"
    elif info.st_mode & 0o077:
        problem = f"is open to other users (mode {stat.S_IMODE(info.st_mode):04o}, not 0700)"
    if problem is not None:
        raise DaemonDirUnsafe(
            f"the daemon's folder {folder} {problem}; remove it, or set {DIR_ENV} to a folder of your own"
        )
    if len(os.fsencode(os.path.join(folder, SOCKET_NAME))) > _SUN_PATH_MAX:
        raise DaemonDirUnsafe(
            f"the daemon's socket path under {folder} is longer than a Unix socket allows "
            f"({_SUN_PATH_MAX} bytes); set {DIR_ENV} to a shorter folder"
        )
    return folder


def socket_path(folder: str) -> str:
    return os.path.join(folder, SOCKET_NAME)


def lock_path(folder: str) -> str:
    return os.path.join(folder, LOCK_NAME)


def log_path(folder: str) -> str:
    return os.path.join(folder, LOG_NAME)
