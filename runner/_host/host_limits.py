"""The host's own limits, and the watch that notices when something changed them.

The sandbox keeps every ``contained`` and ``strict`` tool from naming the host
in ``prlimit64``, ``setpriority``, ``sched_setaffinity`` and the like
(docs/sandbox.md, "Syscalls that name another process"). This module is the
second line, for what the sandbox cannot stop: a tool at ``none``, a sandbox
step that a best-effort policy could not apply, or any other process of the
host's uid.

1. A snapshot is taken when the first runner of the process opens: every
   resource limit, the nice value, the CPU affinity and the scheduling policy.
   Later runners share it (one process, one set of limits). Only a change
   that can hurt the host counts: a lowered limit, a higher nice value, fewer
   CPUs, another scheduling policy. A raised limit (or more CPUs, a lower nice
   value) is adopted into the snapshot, since the program may well have done
   it itself; a program that lowers its own limits while a runner is open
   sees them put back, with the record of rule 3.
2. :meth:`HostLimits.check` compares the live values with the snapshot and
   puts back what changed (raising a lowered hard limit needs
   ``CAP_SYS_RESOURCE``; without it the change is reported as not undone). It
   is cheap (about twenty syscalls) and runs every :data:`WATCH_INTERVAL`
   seconds in each runner's housekeeping, never on a call's path.
3. A change is never silent: an ERROR record names what changed, from what to
   what, and whether it was undone. The runner then ends the calls that could
   have made it (xcsh_run._host.runner: those whose worker runs without the pid rules,
   at ``none`` or best effort without seccomp) with a ``tool_error`` saying so;
   when no running call could have, the record says the change came from
   outside the runner's tools, and no call is ended.
4. ``SIGXCPU``: a lowered ``RLIMIT_CPU`` soft limit delivers it at once, and
   its default action ends the process before any watch could run. While a
   runner is open, a process whose ``SIGXCPU`` was at its default gets a
   handler that puts the snapshot's CPU limit back and records the event for
   the next check; the default is restored when the last runner closes. The
   hard limit's SIGKILL cannot be caught: against that only the sandbox helps,
   and a host killed anyway leaves only what the next runner sweeps (its
   workdirs and cgroups carry its pid and start time).
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import threading
from dataclasses import dataclass, field
from typing import Final

import trio

from xcsh_run._calls import CallTable

log = logging.getLogger("xcsh_run")

WATCH_INTERVAL: Final = 0.5

# Every limit this Python knows, by name, in a stable order.
_LIMITS: Final = tuple((name, getattr(resource, name)) for name in sorted(dir(resource)) if name.startswith("RLIMIT_"))


def _size(value: int) -> float:
    """A limit as a number to compare: ``RLIM_INFINITY`` (which Python spells -1) is above every other."""
    return float("inf") if value == resource.RLIM_INFINITY else value


def _fmt(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


@dataclass
class Snapshot:
    """What the host's limits and scheduling were when it started watching (raised values are adopted)."""

    limits: dict[str, tuple[int, int]]
    nice: int | None
    affinity: frozenset[int] | None
    scheduler: int | None

    @classmethod
    def take(cls) -> Snapshot:
        limits = {}
        for name, which in _LIMITS:
            try:
                limits[name] = resource.getrlimit(which)
            except (OSError, ValueError):
                continue
        return cls(limits, _nice(), _affinity(), _scheduler())


def _nice() -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        return None


def _affinity() -> frozenset[int] | None:
    try:
        return frozenset(os.sched_getaffinity(0))
    except OSError:
        return None


def _scheduler() -> int | None:
    try:
        return os.sched_getscheduler(0)
    except OSError:
        return None


@dataclass
class Change:
    """One thing found changed: a sentence for people, and whether it was put back."""

    what: str
    undone: bool

    def describe(self) -> str:
        return f"{self.what} ({'restored' if self.undone else 'could not be restored'})"


@dataclass
class HostLimits:
    """The snapshot, the checks against it and the ``SIGXCPU`` guard (rules 1, 2 and 4)."""

    snapshot: Snapshot
    _users: int = 0
    _previous_xcpu: object = None
    _xcpu_seen: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self) -> list[Change]:
        """What changed since the snapshot, each put back where possible (rule 2)."""
        changes: list[Change] = []
        if self._xcpu_seen:
            count, self._xcpu_seen = self._xcpu_seen, 0
            changes.append(
                Change(f"RLIMIT_CPU lowered below the CPU time already used (SIGXCPU {count} time(s))", True)
            )
        for name, which in _LIMITS:
            want = self.snapshot.limits.get(name)
            if want is None:
                continue
            try:
                now = resource.getrlimit(which)
            except (OSError, ValueError):
                continue
            if now == want:
                continue
            if _size(now[0]) >= _size(want[0]) and _size(now[1]) >= _size(want[1]):
                self.snapshot.limits[name] = now  # raised: never harmful, and the program may do it itself
                continue
            what = f"{name} {_fmt(want[0])}/{_fmt(want[1])} -> {_fmt(now[0])}/{_fmt(now[1])}"
            changes.append(Change(what, _restore(lambda w=which, v=want: resource.setrlimit(w, v))))
        nice = _nice()
        if self.snapshot.nice is not None and nice is not None and nice < self.snapshot.nice:
            self.snapshot.nice = nice  # a higher priority needs CAP_SYS_NICE: the program's own doing
        elif self.snapshot.nice is not None and nice is not None and nice != self.snapshot.nice:
            want_nice = self.snapshot.nice
            changes.append(
                Change(f"nice {want_nice} -> {nice}", _restore(lambda: os.setpriority(os.PRIO_PROCESS, 0, want_nice)))
            )
        affinity = _affinity()
        if self.snapshot.affinity is not None and affinity is not None and affinity > self.snapshot.affinity:
            self.snapshot.affinity = affinity
        elif self.snapshot.affinity is not None and affinity is not None and affinity != self.snapshot.affinity:
            want_cpus = self.snapshot.affinity
            changes.append(
                Change(
                    f"CPU affinity {sorted(want_cpus)} -> {sorted(affinity)}",
                    _restore(lambda: os.sched_setaffinity(0, want_cpus)),
                )
            )
        scheduler = _scheduler()
        if self.snapshot.scheduler is not None and scheduler is not None and scheduler != self.snapshot.scheduler:
            want_policy = self.snapshot.scheduler
            changes.append(
                Change(
                    f"scheduling policy {want_policy} -> {scheduler}",
                    _restore(lambda: os.sched_setscheduler(0, want_policy, os.sched_param(0))),
                )
            )
        return changes

    # --- rule 4: SIGXCPU -----------------------------------------------------------

    def _on_xcpu(self, signum: int, frame: object) -> None:
        # A Python-level handler runs between bytecodes of the main thread: put
        # the CPU limit back at once, before the next tick sends SIGXCPU again.
        self._xcpu_seen += 1
        want = self.snapshot.limits.get("RLIMIT_CPU")
        if want is not None:
            _restore(lambda: resource.setrlimit(resource.RLIMIT_CPU, want))

    def acquire(self) -> None:
        """A runner opens: the first one installs the ``SIGXCPU`` guard where the default stood."""
        with self._lock:
            self._users += 1
            if self._users > 1 or threading.current_thread() is not threading.main_thread():
                return
            try:
                if signal.getsignal(signal.SIGXCPU) is signal.SIG_DFL:
                    self._previous_xcpu = signal.signal(signal.SIGXCPU, self._on_xcpu)
            except (OSError, ValueError):
                pass

    def release(self) -> None:
        """A runner closed: the last one puts the default ``SIGXCPU`` back (if it is still ours)."""
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users or self._previous_xcpu is None:
                return
            try:
                if signal.getsignal(signal.SIGXCPU) == self._on_xcpu:
                    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
            except (OSError, ValueError):
                pass  # not the main thread now: the handler stays, harmless
            self._previous_xcpu = None


def _restore(put_back: object) -> bool:
    try:
        put_back()  # type: ignore[operator]
    except (OSError, ValueError):
        return False
    return True


_shared: HostLimits | None = None
_shared_lock = threading.Lock()


def host_limits() -> HostLimits:
    """The process's one :class:`HostLimits`, its snapshot taken on first use (rule 1)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = HostLimits(Snapshot.take())
        return _shared


async def watch_host_limits(limits: HostLimits, table: CallTable, interval: float = WATCH_INTERVAL) -> None:
    """Check every ``interval`` seconds, for as long as the runner's housekeeping runs (rules 2 and 3)."""
    while True:
        await trio.sleep(interval)
        changes = limits.check()
        if changes:
            end_suspects(changes, table)


def end_suspects(changes: list[Change], table: CallTable) -> None:
    """Say what changed, and end the calls that could have changed it (rule 3)."""
    what = "; ".join(change.describe() for change in changes)
    # Only a worker without the pid rules can name the host (none, or best
    # effort without seccomp): its calls are ended, the others carry on.
    suspects = [call for call in table.calls() if call.pid_rules is False]
    if not suspects:
        log.error(
            "the host's own limits were changed while no running call could have done it (%s): by a process "
            "outside this runner's tools, or by a worker that has ended",
            what,
        )
        return
    tools = ", ".join(sorted({repr(call.tool) for call in suspects}))
    log.error(
        "the host's own limits were changed while %s ran without the sandbox's pid rules (%s); ending those calls",
        tools,
        what,
    )
    message = (
        f"the host's own resource limits or scheduling were changed while this call ran ({what}): a tool may "
        "change only its own process's limits; its worker was stopped. Run it at the default 'contained' "
        "level, where the sandbox refuses such calls"
    )
    for call in suspects:
        if call.host_stop is None:
            call.host_stop = message
        table.cancel(call.call_id, "the host's limits were changed", force=True)
