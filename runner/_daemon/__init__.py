"""The daemon's client side: a warm host per user that ``xcsh-run`` hands its command to. Standard library only.

``xcsh-run`` started with ``--daemon`` (or ``XCSH_RUN_DAEMON=1``, or
``[daemon] enabled = true`` in ``~/.xcsh/config.toml``) does not import trio,
typer or the host at all: :func:`route` decides on argv and the environment,
and :func:`call` forwards the command, its cwd, environment and standard fds
to the daemon over a Unix socket, forwards its signals, and exits with the
command's exit code. The daemon's side is ``xcsh_run._daemon.hosting``;
``docs/daemon.md`` is for users.
"""

from xcsh_run._daemon.client import (
    DAEMON_FAILED,
    LOCAL,
    SERVED,
    DaemonError,
    call,
    connect,
    identity,
    route,
    status,
    stop,
)
from xcsh_run._daemon.paths import DaemonDirUnsafe, runtime_dir

__all__ = [
    "DAEMON_FAILED",
    "LOCAL",
    "SERVED",
    "DaemonDirUnsafe",
    "DaemonError",
    "call",
    "connect",
    "identity",
    "route",
    "runtime_dir",
    "status",
    "stop",
]
