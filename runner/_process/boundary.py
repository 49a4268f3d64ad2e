"""The kill boundary: a kernel-tracked group holding a worker and all it starts.

A process-group kill or a psutil snapshot leaves survivors when a tool
double-forks with ``setsid()`` (orphans reparent to PID 1 and leave the
group). A cgroup does not care about reparenting: membership is inherited at
fork and only a write to ``cgroup.procs`` moves a process out. So every
worker gets its own cgroup v2 directory and every kill is ``cgroup.kill``.

Layout: ``<v2 mount>/<our own cgroup>/xcsh-run.<host pid>/w<n>``. A host that
was SIGKILLed leaves an ``xcsh-run.<pid>`` directory behind; the next host
kills whatever is still in it and removes it (:func:`sweep_stale`).

Without a writable cgroup v2 hierarchy (no root, no delegation), the fallback
is the worker's process group plus a psutil sweep of its descendants. That
fallback is documented as unreliable against ``setsid()`` daemons, and
:attr:`Boundary.reliable` says which one is in use.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import trio

from xcsh_run._process.faults import fault_point

_V2_CANDIDATES: Final = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
_PREFIX: Final = "xcsh-run."
# How far past its CPU budget a tree may go before the host ends it: a single
# busy process meets its own RLIMIT_CPU first, and its catchable SIGXCPU
# says more than a SIGKILL from outside.
CPU_SLACK_SECONDS: Final = 0.25
_CPU_POLL_FLOOR: Final = 0.01
_roots = itertools.count(1)


def _own_v2_path() -> str | None:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                hier, _, rest = line.rstrip("\n").partition(":")
                controllers, _, path = rest.partition(":")
                if hier == "0" and controllers == "":
                    return path
    except OSError:
        return None
    return None


def _own_v1_path(controller: str) -> str | None:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controller in controllers.split(","):
                    return path
    except (OSError, ValueError):
        return None
    return None


def _v1_root(controller: str, name: str) -> Path | None:
    """``name`` under our own cgroup of a v1 ``controller``, or None if not writable."""
    mount = Path("/sys/fs/cgroup") / controller
    own = _own_v1_path(controller)
    if own is None or not (mount / "cgroup.procs").exists():
        return None
    base = mount / own.lstrip("/")
    sweep_stale(base)
    path = base / name
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return None
    return path


def _v2_mount() -> Path | None:
    for candidate in _V2_CANDIDATES:
        root = Path(candidate)
        if (root / "cgroup.procs").exists() and (root / "cgroup.controllers").exists():
            return root
    return None


class CgroupRoot:
    """The per-host parent cgroups under which every worker gets a child.

    ``path`` is the cgroup v2 parent (the kill boundary). ``memory`` and
    ``pids`` are cgroup v1 parents for limits, on hybrid hosts whose v2
    hierarchy has no controllers (None where not available).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.memory = _v1_root("memory", path.name)
        self.pids = _v1_root("pids", path.name)
        self._next = 0

    @classmethod
    def create(cls) -> CgroupRoot | None:
        """Make ``xcsh-run.<pid>`` under our own v2 cgroup, or return None if we cannot."""
        mount = _v2_mount()
        own = _own_v2_path()
        if mount is None or own is None:
            return None
        base = mount / own.lstrip("/")
        sweep_stale(base)
        # One directory per runner, so that two runners in one process (an
        # embedding host, an MCP server reloading) never share or kill each
        # other's workers: xcsh-run.<pid>.<n>.
        path = base / f"{_PREFIX}{os.getpid()}.{next(_roots)}"
        try:
            path.mkdir()
        except OSError:
            return None
        if not (path / "cgroup.kill").exists():  # kernels before 5.14
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    def new_boundary(
        self, *, memory_bytes: int | None = None, max_procs: int | None = None, cpu_seconds: float | None = None
    ) -> Boundary:
        """A fresh per-worker cgroup, with the limits set before any process is in it.

        ``cpu_seconds`` is a budget for the whole tree, watched by :meth:`Boundary.watch_cpu`.
        """
        self._next += 1
        name = f"w{self._next}"
        child = self.path / name
        fault_point("boundary")
        child.mkdir()
        try:
            # No cgroups below the boundary: a tool that mounts a cgroup2 of its
            # own (a user and cgroup namespace need no capability) could move a
            # daemon, or the supervisor, into one, out of the members the host
            # checks, and kill or freeze it there.
            (child / "cgroup.max.depth").write_text("0")
        except OSError:
            pass  # kernels before 4.14: the boundary's cgroup.kill still reaches them all
        limits: dict[str, Path] = {}
        try:
            if memory_bytes is not None and self.memory is not None:
                mem = self.memory / name
                mem.mkdir()
                limits["memory"] = mem
                (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):  # absent without swap accounting
                    (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            if max_procs is not None and self.pids is not None:
                pids = self.pids / name
                pids.mkdir()
                limits["pids"] = pids
                (pids / "pids.max").write_text(str(max_procs))
        except BaseException:
            # Half-made (ENOSPC, a vanished parent): nothing may stay behind.
            Boundary(child, limits).kill()
            raise
        return Boundary(child, limits, cpu_budget=cpu_seconds)

    def remove(self) -> None:
        kill_and_remove(self.path)
        for v1 in (self.memory, self.pids):
            if v1 is not None:
                _remove_v1(v1)


def _remove_v1(path: Path) -> None:
    # v1 groups cannot be killed as a whole; their members are the v2
    # boundary's, already dead. Only empty directories remain to remove.
    try:
        children = [c for c in path.iterdir() if c.is_dir()]
    except OSError:
        children = []
    for child in children:
        _remove_v1(child)
    with contextlib.suppress(OSError):
        path.rmdir()


def _populated(path: Path) -> bool:
    try:
        text = (path / "cgroup.events").read_text()
    except OSError:
        return False
    return "populated 1" in text


def kill_and_remove(path: Path, timeout: float = 5.0) -> bool:
    """Kill every process under ``path`` and remove the directory tree.

    Returns True when the cgroup was emptied and removed. Blocking; call it
    from a thread in async code.
    """
    try:
        (path / "cgroup.kill").write_text("1")
    except FileNotFoundError:
        return True
    except OSError:
        pass
    deadline = time.monotonic() + timeout
    # cgroup.kill is asynchronous: the kernel delivers SIGKILL to every member
    # and they exit over the next milliseconds. "populated 0" is the signal
    # that the last one is gone (zombies do not count as members).
    delay = 0.0005
    while _populated(path) and time.monotonic() < deadline:
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    ok = True
    # Two callers may race to remove the same cgroup (an explicit kill and the
    # exit watcher); a directory vanishing under us is success, not an error.
    try:
        children = sorted((c for c in path.iterdir() if c.is_dir()), reverse=True)
    except FileNotFoundError:
        return True
    except OSError:
        children = []
    for child in children:
        ok = kill_and_remove(child, max(0.0, deadline - time.monotonic())) and ok
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        ok = False
    return ok


def sweep_stale(base: Path) -> None:
    """Remove ``xcsh-run.<pid>`` cgroups whose host is dead, killing what is left inside."""
    try:
        entries = list(base.iterdir())
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(_PREFIX):
            continue
        try:
            pid = int(entry.name[len(_PREFIX) :].split(".")[0])
        except ValueError:
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        kill_and_remove(entry, timeout=1.0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Boundary:
    """One worker's boundary. ``attach`` before the worker runs code; ``kill`` at the end."""

    def __init__(
        self, cgroup: Path | None, limits: dict[str, Path] | None = None, *, cpu_budget: float | None = None
    ) -> None:
        self.cgroup = cgroup
        self.limits = limits or {}
        # CPU seconds the whole tree may use (None: no budget); RLIMIT_CPU
        # bounds each process, so without this a tree gets processes x budget.
        self.cpu_budget = cpu_budget if cgroup is not None else None
        self.cpu_exceeded = False
        self._cpu_fd = -1
        self._cpu_lock = threading.RLock()
        self._final_cpu: float | None = None
        self.pid: int | None = None
        # kill() is called from threads by both an explicit stop and the exit
        # watcher; the first does the work, the others wait for its answer.
        self._kill_lock = threading.Lock()
        self._kill_result: bool | None = None
        self._procs_fd = -1
        self._final: tuple[int, int] | None = None  # counters, kept once the groups are removed

    @property
    def reliable(self) -> bool:
        return self.cgroup is not None

    @property
    def kill_path(self) -> str | None:
        return str(self.cgroup / "cgroup.kill") if self.cgroup is not None else None

    def attach(self, pid: int) -> None:
        """Move ``pid`` in. Blocking (7-11 ms after idle: an RCU grace period)."""
        self.pid = pid
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(pid))
        for group in self.limits.values():
            (group / "cgroup.procs").write_text(str(pid))

    @property
    def has_memory_limit(self) -> bool:
        """Whether a memory cgroup holds the tree (else ``memory_mb`` is RLIMIT_DATA, or nothing)."""
        return "memory" in self.limits

    def oom_kills(self) -> int:
        """How many processes the memory limit's OOM killer took (v1 ``memory.oom_control``)."""
        if self._final is not None:
            return self._final[0]
        return _counter(self.limits.get("memory"), "memory.oom_control", "oom_kill")

    def pids_limit_hits(self) -> int:
        """How many forks the process limit refused (v1 ``pids.events``)."""
        if self._final is not None:
            return self._final[1]
        return _counter(self.limits.get("pids"), "pids.events", "max")

    def members(self) -> list[int]:
        """Pids inside the boundary. Cheap: checked after every call."""
        if self.cgroup is None:
            return _descendants(self.pid) if self.pid is not None else []
        try:
            if self._procs_fd < 0:
                self._procs_fd = os.open(self.cgroup / "cgroup.procs", os.O_RDONLY | os.O_CLOEXEC)
            # kernfs regenerates the list on every read from offset 0, so one
            # fd serves every check (a fresh open costs ten times more).
            data = os.pread(self._procs_fd, 1 << 16, 0)
        except OSError:
            return []
        return [int(x) for x in data.split()]

    def cpu_seconds(self) -> float:
        """CPU time of every process the boundary held, the dead included (cgroup v2 ``cpu.stat``); 0 if unknown.

        ``cpu.stat``'s ``usage_usec`` is kept by every v2 cgroup, with or
        without the cpu controller, so this needs no v1 ``cpuacct`` group.
        """
        # From the trio thread (the watch, the pool) and a kill's thread: one fd, opened once.
        with self._cpu_lock:
            if self._final_cpu is not None:
                return self._final_cpu
            if self.cgroup is None:
                return 0.0
            try:
                if self._cpu_fd < 0:
                    self._cpu_fd = os.open(self.cgroup / "cpu.stat", os.O_RDONLY | os.O_CLOEXEC)
                data = os.pread(self._cpu_fd, 4096, 0)
            except OSError:
                return 0.0
        for line in data.splitlines():
            key, _, value = line.partition(b" ")
            if key == b"usage_usec":
                return int(value) / 1e6
        return 0.0

    async def watch_cpu(self, kill: Callable[[], Awaitable[None]]) -> None:
        """``kill`` the tree once it has used its CPU budget; never without one, or without ``cpu.stat``.

        Wakes at the earliest moment the budget could be spent (what is left,
        spread over every CPU this host may use), reads once, and sleeps
        again: a few reads per call, however long the call.
        """
        if self.cpu_budget is None or self.cgroup is None or not (self.cgroup / "cpu.stat").exists():
            await trio.sleep_forever()
        assert self.cpu_budget is not None
        cpus = max(1, len(os.sched_getaffinity(0)))
        while True:
            left = self.cpu_budget + CPU_SLACK_SECONDS - self.cpu_seconds()
            if left <= 0:
                self.cpu_exceeded = True
                with trio.CancelScope(shield=True):
                    await kill()
                return
            await trio.sleep(max(left / cpus, _CPU_POLL_FLOOR))

    def close(self) -> None:
        if self._procs_fd >= 0:
            os.close(self._procs_fd)
            self._procs_fd = -1
        with self._cpu_lock:
            if self._final_cpu is None:
                # Read once more, then never again: no fd may be opened after close.
                self._final_cpu = self.cpu_seconds()
            if self._cpu_fd >= 0:
                os.close(self._cpu_fd)
                self._cpu_fd = -1

    def kill(self) -> bool:
        """Kill the worker and every process it started; True when none is left. Blocking, idempotent."""
        with self._kill_lock:
            if self._kill_result is None:
                self._kill_result = self._kill_once()
            return self._kill_result

    def _kill_once(self) -> bool:
        if self._final_cpu is None:
            # The group's counter goes with it; the last milliseconds of a dying tree do not matter.
            self._final_cpu = self.cpu_seconds()
        ok = kill_and_remove(self.cgroup) if self.cgroup is not None else self._kill_fallback()
        if self.limits and self._final is None:
            # Removing the groups loses their counters: keep the final values.
            self._final = (self.oom_kills(), self.pids_limit_hits())
        for group in self.limits.values():
            _remove_v1(group)
        return ok

    def _kill_fallback(self) -> bool:
        if self.pid is None:
            return True
        pids = _descendants(self.pid)
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        return False  # cannot prove nothing escaped


def _counter(group: Path | None, filename: str, key: str) -> int:
    if group is None:
        return 0
    try:
        for line in (group / filename).read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except Exception:
        return []
