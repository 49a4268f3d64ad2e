"""What :meth:`Runner.statistics` reports: a snapshot of a runner's workers and calls."""

from __future__ import annotations

import msgspec


class RunnerStatistics(msgspec.Struct, frozen=True):
    """A snapshot of the runner's workers and calls."""

    idle_workers: int
    busy_workers: int
    starting_workers: int
    running_calls: int
    queued_calls: int
    spare_workers: int
    workers_started: int
    reliable_boundary: bool
    pinned_workers: int = 0
    """Workers kept alive because they hold a pending action (a preview waiting for ``resolve``)."""
    teardown_overruns: int = 0
    """Bounded teardown waits that expired (a worker not reaped after SIGKILL, a cgroup or
    workdir that could not be removed); each one is also logged. 0 on a healthy host."""
    workers_forked: int = 0
    """Of ``workers_started``, those forked by the fork server (``forkserver=True``) rather than started anew."""
