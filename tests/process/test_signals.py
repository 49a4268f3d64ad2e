"""_host.signals: SIGINT and SIGTERM go to the innermost handler, or cancel the body; errors come out unwrapped."""

from __future__ import annotations

import os
import signal

import pytest
import trio

from xcsh_run._host.signals import watching_signals


async def test_a_signal_no_handler_takes_cancels_the_body() -> None:
    reached_end = False
    with trio.fail_after(10):
        async with watching_signals() as signals:
            os.kill(os.getpid(), signal.SIGTERM)
            await trio.sleep_forever()
            reached_end = True
    assert signals.received is signal.SIGTERM
    assert not reached_end


async def test_the_innermost_handler_gets_the_signal_first() -> None:
    seen: list[tuple[str, signal.Signals]] = []
    taken = trio.Event()

    def outer(sig: signal.Signals) -> bool:
        seen.append(("outer", sig))
        taken.set()
        return True

    def declines(sig: signal.Signals) -> bool:
        seen.append(("declines", sig))
        return False

    with trio.fail_after(10):
        async with watching_signals() as signals:
            with signals.handled_by(outer):
                os.kill(os.getpid(), signal.SIGINT)
                await taken.wait()  # taken: the body goes on
                with signals.handled_by(declines):
                    os.kill(os.getpid(), signal.SIGTERM)
                    await trio.sleep_forever()
    assert seen == [("outer", signal.SIGINT), ("declines", signal.SIGTERM)]
    assert signals.received is signal.SIGINT  # the first one


async def test_an_error_in_the_body_comes_out_as_itself() -> None:
    with pytest.raises(ValueError, match="boom"):
        async with watching_signals():
            raise ValueError("boom")
