"""Teardown bounds: how long each step of a worker's end may take, and the count of bounds that expired.

Every teardown wait is bounded (rule 9 of ``_process``); a bound that expires
is logged and counted in :class:`TeardownStats` instead of waited on forever.
"""

from __future__ import annotations

import logging
import select
from pathlib import Path
from typing import Final

log: Final = logging.getLogger("xcsh_run")

DRAIN_SECONDS: Final = 0.5
# How long a kill may take to be seen (reaped) before it is reported as an
# overrun instead of waited on forever: SIGKILL is not instant for a process
# in uninterruptible sleep (a hung NFS read, a frozen cgroup).
KILL_WAIT_SECONDS: Final = 5.0
# A worker's private HOME/TMPDIR gets this long to be removed, however the
# tool built it; what is left is retried when the runner closes.
WORKDIR_REMOVAL_SECONDS: Final = 10.0
TEARDOWN_SECONDS: Final = DRAIN_SECONDS + WORKDIR_REMOVAL_SECONDS + KILL_WAIT_SECONDS


class TeardownStats:
    """Bounded teardown waits that expired: each one logged, and counted here.

    A runner shares one with all its workers; ``RunnerStatistics.teardown_overruns``
    reports the count. Anything above 0 means a kill or a cleanup did not
    finish in its bound and was given up on rather than waited on forever.
    """

    def __init__(self) -> None:
        self.overruns = 0
        # Workdirs whose removal ran out of time, retried when the runner
        # closes (a live host's own workdirs are never swept by others).
        self.leftover_workdirs: list[Path] = []

    def overrun(self, what: str) -> None:
        self.overruns += 1
        log.error("teardown bound expired: %s", what)


NO_STATS = TeardownStats()


def exited_now(pidfd: int, wait: float = 0.0) -> bool:
    """True if the process behind ``pidfd`` has exited (a pidfd is readable then), waiting up to ``wait`` s.

    ``poll``, not ``select``: select refuses fds above 1023, which a host with
    a raised RLIMIT_NOFILE and many workers reaches.
    """
    if pidfd < 0:
        return False
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(wait * 1000))
