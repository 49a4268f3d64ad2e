"""SIGINT and SIGTERM for a host process: one watcher for every front end (the CLI, the MCP server).

:func:`watching_signals` installs trio's receiver synchronously on entry, so
there is no window in which SIGTERM would kill the host with its default
action and leave workers, cgroups and workdirs behind. Each signal goes to
the innermost handler that :meth:`Signals.handled_by` installed; a handler
that takes it (returns True) decides what it means, e.g. cancel one call
through the ladder, or stop a server taking requests. A signal no handler
takes cancels the body of :func:`watching_signals`: leaving it is how a host
stops every worker.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Final

import trio

from xcsh_run._safe_text import visible

WATCHED: Final = (signal.SIGINT, signal.SIGTERM)

# Takes one signal and says whether it dealt with it: False lets it cancel the body.
SignalHandler = Callable[[signal.Signals], bool]


class Signals:
    """What :func:`watching_signals` has received, and who handles the next one."""

    def __init__(self, scope: trio.CancelScope) -> None:
        self.received: signal.Signals | None = None  # the first signal received, if any
        self._scope = scope
        self._handlers: list[SignalHandler] = []

    @contextlib.contextmanager
    def handled_by(self, handler: SignalHandler) -> Iterator[None]:
        """Within the block, each signal goes to ``handler`` first; one it does not take cancels the body."""
        self._handlers.append(handler)
        try:
            yield
        finally:
            self._handlers.remove(handler)

    async def _watch(self, receiver: AsyncIterator[int]) -> None:
        async for signum in receiver:
            sig = signal.Signals(signum)
            if self.received is None:
                self.received = sig
            handler = self._handlers[-1] if self._handlers else None
            if handler is None or not handler(sig):
                self._scope.cancel()


class CallStopper:
    """A :data:`SignalHandler` for the CLI's one call: stop it through the ladder, and say so; again: kill it now.

    The first signal cancels the call (``$/cancel`` and SIGTERM, then the
    grace period) and says on stderr what happens next, since the grace may
    be long and the terminal would otherwise look hung. A second one forces
    the ladder's kill rung at once: the worker's whole tree is still killed
    and reaped before the command exits. ``cancel`` is ``Runner.cancel``; it
    says False when the call is not running (not registered yet, or over),
    and the signal then stops the whole command instead.
    """

    def __init__(
        self, cancel: Callable[..., bool], call_id: str, tool: str, grace: float, clear: Callable[[], None] | None
    ) -> None:
        self._cancel = cancel
        self._call_id = call_id
        self._tool = tool
        self._grace = grace
        self._clear = clear
        self.received = 0

    def __call__(self, sig: signal.Signals) -> bool:
        self.received += 1
        reason = f"interrupted by {sig.name}"
        if self.received == 1:
            if not self._cancel(self._call_id, reason):
                return False
            again = "press Ctrl-C again" if sig is signal.SIGINT else f"send {sig.name} again"
            self._say(f"stopping {self._tool} (SIGTERM sent; killing in {self._grace:.1f} s; {again} to kill now)")
            return True
        if not self._cancel(self._call_id, reason, force=True):
            return False
        if self.received == 2:
            self._say(f"killing {self._tool} and every process it started now")
        return True

    def _say(self, text: str) -> None:
        if self._clear is not None:
            self._clear()  # the status line would garble it
        try:
            sys.stderr.write(f"xcsh-run: {visible(text)}\n")  # it names the tool
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed stderr must not turn a stop into a crash
            pass


@contextlib.asynccontextmanager
async def watching_signals(source: AsyncIterator[int] | None = None) -> AsyncIterator[Signals]:
    """SIGINT and SIGTERM handled from the body's first step to its last (see the module docstring).

    A signal that no handler takes cancels the body, which then ends normally
    (the caller tells it apart by ``signals.received``). An exception from
    the body comes out as itself, not wrapped in an ``ExceptionGroup``.

    ``source``, when given, is where the signal numbers come from instead of
    this process's own signals: the daemon's host takes its client's, which
    the client forwards (``xcsh_run._daemon.client``, rule 3).
    """
    with contextlib.nullcontext(source) if source is not None else trio.open_signal_receiver(*WATCHED) as receiver:
        error: Exception | None = None
        async with trio.open_nursery() as nursery:
            signals = Signals(nursery.cancel_scope)
            nursery.start_soon(signals._watch, receiver)
            try:
                yield signals
            except Exception as exc:
                # Re-raised below, out of the nursery: inside it, it would come
                # out wrapped in an ExceptionGroup (a traceback instead of a message).
                error = exc
            nursery.cancel_scope.cancel()
        if error is not None:
            raise error
