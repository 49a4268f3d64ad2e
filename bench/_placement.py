"""CPU placement of the whole benchmark process tree.

floors.md: with no pinning, a warm round trip flips between the one-CPU
regime (about 11 us floor) and the cross-CPU regime (about 55 us) from round
to round, so warm latencies are compared within one placement. ``pin_tree``
sets the affinity of every thread of this process and of all its
descendants (drivers, their workers, MCP servers); processes started later
inherit it from their parent.
"""

from __future__ import annotations

import contextlib
import os

import psutil


def all_cpus() -> set[int]:
    return set(range(os.cpu_count() or 1))


def pin_tree(cpus: set[int]) -> int:
    """Pin every thread of this process tree to ``cpus``; returns how many threads were pinned."""
    me = psutil.Process()
    count = 0
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(OSError, psutil.Error):
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(tid), cpus)
                    count += 1
    return count
