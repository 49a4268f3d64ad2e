"""The cancellation ladder (:class:`CancelLadder`), used for timeouts and cancellation alike:

1. send ``$/cancel`` with the reason, then SIGTERM to the worker: the tool's
   ``signal`` fires; a sync tool gets ``ToolCancelled`` raised, an async one
   has its task cancelled;
2. wait up to ``grace`` seconds for the worker to answer or exit;
3. kill the worker's whole boundary (cgroup) and wait until it is empty.

A forced cancel (:meth:`CallTable.cancel` with ``force``, e.g. a second
Ctrl-C) ends step 2 at once: the tree is killed by the same step 3.
Each rung is logged (INFO) on the ``xcsh_run`` logger with the call's id.

The result's ``error.rung`` says whether step 2 (``"cooperative"``) or step 3
(``"killed"``) ended it. A worker that went through the ladder is never reused.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from xcsh_run._calls.outcome import Rung
from xcsh_run._pool import InFlight, PoolWorker
from xcsh_run.worker import protocol as p

if TYPE_CHECKING:
    from xcsh_run._calls.table import Call

log = logging.getLogger("xcsh_run")

# How to stop a call's worker, in the spirit of trio's `run_process(deliver_cancel=...)`:
# given the worker, the call, the reason and the call's request (if sent), stop
# it and say which rung did. It must leave the worker dead or dying, and be bounded.
DeliverCancel = Callable[[PoolWorker, "Call", str, "InFlight[p.CallResult] | None"], Awaitable[Rung]]


@dataclass(frozen=True)
class CancelLadder:
    """The default :data:`DeliverCancel`: ``$/cancel`` + SIGTERM, ``grace`` seconds, then the tree kill."""

    grace: float

    async def __call__(
        self, worker: PoolWorker, call: Call, reason: str, pending: InFlight[p.CallResult] | None
    ) -> Rung:
        rung = Rung.KILLED
        extra = {"tool": call.tool, "call_id": call.call_id, "pid": worker.pid}
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.grace) as grace:
                # No checkpoint since the scope was entered: a forced cancel finds it, or finds `forced` set.
                call.grace = grace
                if call.forced:
                    grace.cancel()
                log.info("stopping %r (%s): $/cancel and SIGTERM sent, killing in %g s", call.tool, reason,
                         self.grace, extra=extra)  # fmt: skip
                await worker.notify(p.CANCEL, p.CancelParams(call_id=call.call_id, reason=reason))
                worker.terminate()
                if pending is not None:
                    await pending.wait()
                else:
                    await worker.wait_exited()
                rung = Rung.COOPERATIVE
            call.grace = None
            if rung is Rung.KILLED:
                why = "forced" if call.forced else f"still running after the {self.grace:g} s grace"
                log.warning("killing %r and every process it started (%s)", call.tool, why, extra=extra)
            await worker.kill()
            log.info("%r stopped (%s)", call.tool, rung.value, extra=extra)
        return rung
