"""Deadlines of warm calls: one task and one cancel scope for all of them, instead of a scope each.

A trio ``CancelScope`` with a deadline costs more than the rest of a warm
call's host-side bookkeeping together. A warm call waits for one thing only,
its answer, so it waits on an event instead, and this keeper sets that event
when the call's deadline passes. The call then goes through the same ladder
as one whose scope expired.

Rules this module keeps:

1. A watched call is woken at its deadline, or earlier if the keeper ends
   (the runner's nursery is going): a woken call that is neither answered nor
   past its deadline waits under a scope of its own, so no call is ever left
   without a deadline.
2. The keeper's scope never expires later than the earliest watched
   deadline. It may expire earlier (a call that set it has finished): the
   keeper then looks again and sleeps until the next one. With calls of
   similar timeouts that is about once per timeout, whatever the call rate.
3. :meth:`DeadlineKeeper.watch` and :meth:`DeadlineKeeper.unwatch` are
   synchronous and O(1); only the keeper's wake-up looks at every call.
"""

from __future__ import annotations

import math

import trio

from xcsh_run._pool import Housekeeping


class DeadlineKeeper:
    """Wakes each watched call's event once its deadline has passed."""

    def __init__(self, housekeeping: Housekeeping) -> None:
        self._housekeeping = housekeeping
        self._watched: dict[object, tuple[float, trio.Event]] = {}
        self._scope: trio.CancelScope | None = None
        self._started = False
        self._gone = False

    def __len__(self) -> int:
        return len(self._watched)

    def watch(self, key: object, deadline: float, wake: trio.Event) -> bool:
        """Set ``wake`` at ``deadline`` unless :meth:`unwatch` comes first; False if there is no keeper."""
        if self._gone:
            return False
        if not self._started:
            self._started = True
            if not self._housekeeping.start_soon(self._keep):
                self._gone = True
                return False
        self._watched[key] = (deadline, wake)
        scope = self._scope
        if scope is not None and deadline < scope.deadline:  # rule 2
            scope.deadline = deadline
        return True

    def unwatch(self, key: object) -> None:
        self._watched.pop(key, None)

    async def _keep(self) -> None:
        try:
            while True:
                earliest = min((deadline for deadline, _ in self._watched.values()), default=math.inf)
                # No checkpoint between this scope's exit and the next one's
                # entry, so no watch() can slip through unseen.
                with trio.CancelScope(deadline=earliest) as self._scope:
                    await trio.sleep_forever()
                self._scope = None
                now = trio.current_time()
                for key, (deadline, wake) in list(self._watched.items()):
                    if deadline <= now:
                        del self._watched[key]
                        wake.set()
        finally:
            # Rule 1: nobody may wait on a keeper that is gone.
            self._gone = True
            self._scope = None
            watched, self._watched = self._watched, {}
            for _, wake in watched.values():
                wake.set()
