"""The tool's AbortSignal: waiting, callbacks, and a waiter interrupted the way SIGTERM interrupts a tool."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from types import FrameType

import pytest

from xcsh_run.worker._tool_api.abort_signal import AbortSignal, ToolCancelled, abort

DEADLINE = 10.0


def test_wait_times_out_while_not_aborted() -> None:
    sig = AbortSignal()
    assert sig.wait(0) is False
    assert sig.wait(-1) is False  # like threading.Event: not a wait at all
    assert sig.wait(0.01) is False
    assert not sig.aborted and sig.reason is None


def test_every_waiter_wakes_once_aborted_and_later_waits_return_at_once() -> None:
    sig = AbortSignal()
    woke: list[bool] = []
    waiting = [threading.Thread(target=lambda: woke.append(sig.wait())) for _ in range(4)]
    waiting.append(threading.Thread(target=lambda: woke.append(sig.wait(DEADLINE))))
    for thread in waiting:
        thread.start()
    assert abort(sig, "timeout") is True
    assert abort(sig, "cancelled") is False  # the first reason stays
    for thread in waiting:
        thread.join(DEADLINE)
    assert woke == [True] * 5
    assert sig.wait() is True and sig.wait(0) is True
    assert sig.reason == "timeout"
    with pytest.raises(ToolCancelled, match="timeout"):
        sig.throw_if_aborted()


def test_callbacks_run_once_with_the_reason_even_when_added_late() -> None:
    sig = AbortSignal()
    seen: list[str] = []
    sig.add_callback(seen.append)
    abort(sig, "cancelled")
    abort(sig, "again")
    sig.add_callback(seen.append)  # already aborted: called now
    assert seen == ["cancelled", "cancelled"]


def test_wait_async_returns_the_reason() -> None:
    sig = AbortSignal()

    async def main() -> str:
        threading.Timer(0.01, abort, (sig, "timeout")).start()
        return await asyncio.wait_for(sig.wait_async(), DEADLINE)

    assert asyncio.run(main()) == "timeout"


def test_a_wait_interrupted_by_a_signal_handler_strands_no_other_waiter() -> None:
    """A SIGTERM handler raises inside the tool's wait; a second waiter still wakes on the abort."""
    sig = AbortSignal()

    class Interrupted(Exception):
        pass

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    woke: list[bool] = []
    other = threading.Thread(target=lambda: woke.append(sig.wait(DEADLINE)))
    other.start()
    deadline = time.monotonic() + DEADLINE
    while not sig._waiters:  # the other thread is waiting
        assert time.monotonic() < deadline
        time.sleep(0.001)
    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.start()
        with pytest.raises(Interrupted):
            sig.wait(DEADLINE)
        timer.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert len(sig._waiters) == 1  # only the other thread's
    abort(sig, "cancelled")
    other.join(DEADLINE)
    assert woke == [True]
    assert sig._waiters == []
