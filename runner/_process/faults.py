"""Fault points: the named steps of a worker's start, where tests inject failures.

Every step of bringing a worker up that can fail for reasons outside the
tool (the host is out of fds, the disk is full, the cgroup vanished, the
worker died early) calls :func:`fault_point` just before it acts. In
production nothing is installed and the call is one global lookup. The
fault-injection suite installs a hook with :func:`injected` that raises
``OSError`` (or kills the worker) at chosen steps, once or always, and then
checks that only results leave ``call_tool`` and that nothing is left.

The steps, in order:

``workdir``     creating the worker's private HOME/TMPDIR
``boundary``    creating its cgroup (and the v1 limit groups)
``pipes``       creating the four pipe pairs (called once per pipe)
``popen``       spawning the process
``pidfd_open``  opening its pidfd (``pid`` is the new worker's)
``attach``      moving it into its cgroup, in a worker thread (``pid`` set)
``initialize``  sending ``initialize`` (``pid`` set)
``load``        sending ``load`` (``pid`` set)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Final

FaultHook = Callable[[str, int], None]
"""``hook(step, pid)``; raise to fail the step. ``pid`` is 0 before the process exists."""

STEPS: Final = ("workdir", "boundary", "pipes", "popen", "pidfd_open", "attach", "initialize", "load")

_hook: FaultHook | None = None


def fault_point(step: str, pid: int = 0) -> None:
    """Give an installed hook the chance to fail ``step``."""
    hook = _hook
    if hook is not None:
        hook(step, pid)


@contextlib.contextmanager
def injected(hook: FaultHook) -> Iterator[None]:
    """Install ``hook`` for the duration of the block (tests only; process-wide)."""
    global _hook
    previous, _hook = _hook, hook
    try:
        yield
    finally:
        _hook = previous
