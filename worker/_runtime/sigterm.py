"""SIGTERM's handler belongs to the worker process alone; a process a tool forks dies of SIGTERM.

The worker turns SIGTERM into :class:`ToolCancelled` in the tool (``_loop``).
A tool's fork without exec (``multiprocessing``'s fork start method,
``os.fork``) copies that handler, and in the child it would not end the
process: it would wait a tenth of a second and raise ``ToolCancelled`` into
whatever the child runs. Code that stops its children with SIGTERM counts on
the default action instead. ``multiprocessing.Pool.terminate`` (what ``with
Pool(...)`` does on the way out) takes the task queue's read lock, sends each
pool worker still alive SIGTERM and joins it. A pool worker whose exception is
swallowed (it lands in one of ``os.fork``'s at-fork hooks in the child, in a
``__del__`` or under an ``except BaseException``) carries on, blocks on that
lock, and the join, so the tool's call, never returns. One whose exception is
raised outside the tool's own ``try`` can unwind into the worker's frames,
copied by the fork, where the call's ``except BaseException`` catches it, and
answer the host as if it were the worker.

So a child of ``os.fork`` gets SIGTERM's default action back in an at-fork
hook, and SIGTERM stays blocked from just before the fork until then. The
block matters: a child that has not run yet when its SIGTERM comes (the parent
runs first after a fork, and a pool's last worker is often still unscheduled
when the pool is done) takes it in Python's C-level handler, which only marks
it for later, and ``os.fork`` clears such marks in the child: the signal is
lost. Blocked, it stays pending in the kernel, and is delivered, with the
default action, when the hook unblocks it. The parent's two hooks are C
functions called through ctypes, with no Python frame in which the worker's own
handler could run (and its ``ToolCancelled`` be swallowed by the hook's caller).
A fork through libc (ctypes) runs no hook: there the handler itself sees that
it is not in the worker's process and takes the default action.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
from collections.abc import Callable
from types import FrameType

Handler = Callable[[int, FrameType | None], None]

SIGSET_BYTES = 128  # sizeof(sigset_t) in glibc and musl: 1024 bits


def install(handler: Handler) -> None:
    """Handle SIGTERM with ``handler`` in this process only (main thread, once, before any tool code)."""
    owner = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)
    sigterm = ctypes.create_string_buffer(SIGSET_BYTES)
    libc.sigemptyset(sigterm)
    libc.sigaddset(sigterm, int(signal.SIGTERM))
    # One saved mask is enough: os.fork holds the GIL from these hooks to the
    # ones after, so two threads' forks never interleave here.
    saved = ctypes.create_string_buffer(SIGSET_BYTES)
    block = functools.partial(libc.pthread_sigmask, int(signal.SIG_BLOCK), sigterm, saved)
    restore = functools.partial(libc.pthread_sigmask, int(signal.SIG_SETMASK), saved, None)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if os.getpid() == owner:
            handler(signum, frame)
            return
        # A child forked without the hooks below: take the default action now.
        # The signal is not blocked here (the kernel-level handler returned),
        # so it is delivered before kill() returns.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def forked() -> None:
        # Only the worker's own handler: one the tool installed is the tool's to keep.
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        restore()  # a SIGTERM that came since the fork is delivered now

    signal.signal(signal.SIGTERM, on_sigterm)
    os.register_at_fork(before=block, after_in_parent=restore, after_in_child=forked)
