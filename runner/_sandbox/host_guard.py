"""What the host does to itself when a runner opens, so that no tool can reach into it.

The worker's half of the sandbox (``xcsh_run.worker._sandbox``) makes each
worker non-dumpable; the host is made so too, with the same call, since a
tool of the host's own uid could otherwise read the host's /proc entries.
"""

from __future__ import annotations

from xcsh_run.worker._sandbox import set_undumpable


def protect_host() -> None:
    """Make the host non-dumpable, when a runner opens; kept for the rest of the process's life.

    Its /proc entries (its environ, with every secret the scrub keeps from
    tools; its fds, the MCP channel among them; its memory) then need
    CAP_SYS_PTRACE, which no contained or strict tool has, even one of the
    host's uid. Never undone: a worker of a closed runner may still be on its
    way out, and another runner may be open in the same process.
    """
    try:
        set_undumpable()
    except OSError:
        pass  # prctl(PR_SET_DUMPABLE) has no failure mode for a live process; nothing to stop for
