"""The daemon's side: the per-user daemon (``supervisor``) and its host processes (``host``).

The daemon accepts clients on its Unix socket, checks their uid, and hands
each call to a host: a process forked from it, warm, that runs the CLI's own
command under the client's fds, cwd and environment, with runners it keeps
open between calls (``runner_cache``). The client's side is
``xcsh_run._daemon``; the process starts as ``python -m xcsh_run._daemon.hosting``.
"""

from xcsh_run._daemon.hosting.supervisor import IDLE_SECONDS, Supervisor, prepare

__all__ = [
    "IDLE_SECONDS",
    "Supervisor",
    "prepare",
]
