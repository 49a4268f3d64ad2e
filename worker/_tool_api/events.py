"""``api.events``: an event bus shared by the tools of one worker, as ``pi.events`` is in the original.

Rules:

1. One bus per worker, never across workers: two tools of one module (or
   an ``on_session`` hook and a tool) talk through it; tools of another
   module, in another process, never see its events.
2. ``emit`` calls the handlers of a name in the order they were added, on
   the emitting thread, before it returns. A handler that raises is logged
   to the tool's log and the others still run: one broken listener must not
   break the tool that emits.
3. A handler that returns an awaitable (an ``async def``) is scheduled on
   the running asyncio loop when there is one, and closed unawaited
   otherwise (with a log line), never left as a "coroutine was never
   awaited" warning on the tool's stderr.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("xcsh.tool")

Handler = Callable[[Any], Any]


class EventBus:
    """``on(name, handler)`` and ``emit(name, data)`` between one worker's tools (rules: the module docstring)."""

    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = {}
        self._tasks: set[Any] = set()  # a scheduled handler's task is kept until it ends (rule 3)

    def on(self, name: str, handler: Handler) -> Callable[[], None]:
        """Call ``handler(data)`` on every ``emit(name, data)``; returns the function that stops it."""
        if not callable(handler):
            raise TypeError(f"events.on({name!r}, handler): handler must be callable, not {type(handler).__name__}")
        self._handlers.setdefault(name, []).append(handler)

        def off() -> None:
            handlers = self._handlers.get(name, [])
            if handler in handlers:
                handlers.remove(handler)

        return off

    def emit(self, name: str, data: Any = None) -> None:
        """Call the handlers of ``name`` in the order they were added (rule 2)."""
        for handler in list(self._handlers.get(name, ())):
            try:
                out = handler(data)
            except Exception:
                log.exception("events: a %r handler failed", name)
                continue
            if hasattr(out, "__await__"):
                self._schedule(name, out)

    def _schedule(self, name: str, awaitable: Any) -> None:
        # A sync tool never imported asyncio, and then no loop can be running.
        asyncio = sys.modules.get("asyncio")
        try:
            if asyncio is None:
                raise RuntimeError
            loop = asyncio.get_running_loop()
        except RuntimeError:
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()
            log.warning("events: a %r handler is async but no event loop is running; it was not run", name)
            return

        async def run() -> None:
            try:
                await awaitable
            except Exception:
                log.exception("events: a %r handler failed", name)

        task = loop.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
