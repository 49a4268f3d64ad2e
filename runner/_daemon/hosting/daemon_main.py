"""The daemon process's start: detach, import the host, take the socket, say it is ready, serve.

1. **Detached**: the process the client started forks the daemon and exits,
   so the daemon is nobody's child but init's (the client reaps the starter
   at once) and, not a session leader, can never take a controlling terminal.
2. **The socket appears only when it is served**: the host's modules are
   imported first, then the socket is bound under a temporary name and
   renamed over the daemon's path, which replaces a stale one atomically.
3. **Ready** is a line on the fd the client passed; any failure before it is
   the fd's end without one, and the traceback is in the daemon's log.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from xcsh_run._daemon import paths


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m xcsh_run._daemon.hosting")
    parser.add_argument("--folder", required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--idle-timeout", type=float, default=None)
    options = parser.parse_args()
    if os.fork() > 0:  # rule 1
        os._exit(0)
    from xcsh_run._daemon.hosting import supervisor

    supervisor.prepare()
    where = paths.socket_path(options.folder)
    temporary = f"{where}.{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    listener.bind(temporary)
    os.chmod(temporary, 0o600)
    listener.listen(128)
    os.rename(temporary, where)  # rule 2
    idle = options.idle_timeout
    if idle is None:
        idle = float(os.environ.get("XCSH_RUN_DAEMON_IDLE") or supervisor.IDLE_SECONDS)
    daemon = supervisor.Supervisor(options.folder, listener, idle=idle)
    print(f"xcsh-run daemon {os.getpid()}: serving {where}", file=sys.stderr, flush=True)
    os.write(options.ready_fd, f"{os.getpid()}\n".encode())  # rule 3
    os.close(options.ready_fd)
    daemon.run()
