"""The fuzz run's process checks: every process it started carries a marker in its environment.

A marker of the run's own, so that what it started is found wherever it was
reparented (a ``setsid`` daemon, an orphan) and nothing else is mistaken for it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from typing import Final

MARK_VAR: Final = "XCSH_RUN_FUZZ_MARK"  # XCSH_RUN_* passes every sandbox's environment allow-list


def marked_processes(mark: str, var: str = MARK_VAR) -> list[tuple[int, int, str]]:
    """(pid, ppid, command) of live processes, other than this one, whose environment carries ``var=mark``.

    Read straight from /proc rather than through psutil: this runs after every
    example, and on a busy machine psutil's per-process objects cost several
    times more (xcsh-run is Linux-only anyway: pidfds, cgroups).
    """
    needle = f"{var}={mark}".encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] in (b"Z", b"X"):
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        found.append((int(entry), int(fields[1]), cmd))
    return found


def lasting_strays(mark: str, grace: float, var: str = MARK_VAR) -> list[tuple[int, int, str]]:
    """Marked processes, other than this one's children, that are still there (and still marked) after ``grace``.

    A worker the pool is starting in the background (a spare) forks its
    supervisor, which carries the mark and is not our child until it scrubs
    its environment, a few milliseconds later (longer on a loaded machine).
    Only what outlasts that is a stray; a stray the tool left behind lasts.
    Polled: a process's environment has no event to wait on.
    """
    me = os.getpid()
    strays = [p for p in marked_processes(mark, var) if p[1] != me]
    deadline = time.monotonic() + grace
    while strays and time.monotonic() < deadline:
        time.sleep(0.02)
        again = {p[0]: p for p in marked_processes(mark, var) if p[1] != me}
        strays = [again[pid] for pid, _, _ in strays if pid in again]
    return strays


def kill_processes(processes: Sequence[tuple[int, int, str]]) -> None:
    """SIGKILL each of ``processes`` (as :func:`marked_processes` lists them) that is still there."""
    for pid, _, _ in processes:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def describe_processes(processes: Sequence[tuple[int, int, str]]) -> str:
    """``"2 processes (cmd, cmd)"``: for a failure message."""
    shown = ", ".join(f"{cmd[:60] or '?'}" for _, _, cmd in processes[:3])
    more = f" and {len(processes) - 3} more" if len(processes) > 3 else ""
    return f"{len(processes)} process{'es' * (len(processes) != 1)} ({shown}{more})"
