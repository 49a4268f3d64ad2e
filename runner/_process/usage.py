"""What a worker process uses: CPU time and resident memory, from its rusage once reaped, else from ``/proc``.

The pool reads both after every call (a worker over its budget is retired),
so the ``/proc`` files stay open: one ``pread`` at offset 0 per reading.
"""

from __future__ import annotations

import os
import resource
from typing import NamedTuple

import trio


class HighWater(NamedTuple):
    """Marks the kernel keeps for a live process, which only grow; -1 where unreadable.

    The worker's own code cannot lower them without doing the thing they count,
    so the host checks a worker's claim that it hit a limit against them.
    """

    fd_slots: int  # FDSize: its fd table's size, grown to cover the highest fd it ever held
    peak_rss: int  # VmHWM, bytes
    peak_vm: int  # VmPeak, bytes: what RLIMIT_DATA (no memory cgroup) counts is part of it
    written: int  # wchar of /proc/<pid>/io: bytes it passed to write() and friends


class ResourceUse:
    """CPU and memory of a worker process, from its rusage once reaped, else from ``/proc``."""

    pid: int
    rusage: resource.struct_rusage | None
    _proc_fds: dict[str, int]
    _finished: trio.Event

    def cpu_seconds(self) -> float:
        """CPU time the worker process has used (user + system), 0 if unknown."""
        if self.rusage is not None:
            return float(self.rusage.ru_utime + self.rusage.ru_stime)
        try:
            fields = self._read_proc("stat", 1024).rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0

    def rss_bytes(self) -> int:
        """The worker process's resident memory, 0 if unknown."""
        try:
            return int(self._read_proc("statm", 128).split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            return 0

    def high_water(self) -> HighWater:
        """The worker process's :class:`HighWater` marks (all -1 once it is gone)."""
        fields: dict[bytes, int] = {}
        for name, size in (("status", 4096), ("io", 512)):
            try:
                text = self._read_proc(name, size)
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(b":")
                parts = value.split()
                if parts and parts[0].isdigit():
                    fields[key] = int(parts[0])
        hwm, peak = fields.get(b"VmHWM", -1), fields.get(b"VmPeak", -1)
        return HighWater(
            fields.get(b"FDSize", -1), hwm * 1024 if hwm >= 0 else -1, peak * 1024 if peak >= 0 else -1,
            fields.get(b"wchar", -1),
        )  # fmt: skip

    def _read_proc(self, name: str, size: int) -> bytes:
        if self._finished.is_set():
            # Gone without a rusage: never reopen /proc for a pid that is no longer ours.
            raise ProcessLookupError(self.pid)
        fd = self._proc_fds.get(name)
        if fd is None:
            fd = self._proc_fds[name] = os.open(f"/proc/{self.pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
        return os.pread(fd, size, 0)
