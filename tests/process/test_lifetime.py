"""Contract tests: worker lifetime across idle periods (the trio pdeathsig trap)."""

from __future__ import annotations

import trio

from tests.conftest import TOOLS, make_runner


async def test_worker_survives_idle_longer_than_trio_thread_cache() -> None:
    """trio retires idle worker threads after 10 s; a worker tied to the thread that forked
    it (PR_SET_PDEATHSIG) would die then. Ours are spawned from the trio thread itself."""
    with trio.fail_after(40):
        async with make_runner(TOOLS / "basic.py") as runner:
            first = await runner.call_tool("environment")
            # Make sure trio's thread cache was used (cgroup attach runs there), then idle.
            await trio.to_thread.run_sync(lambda: None)
            await trio.sleep(12)
            second = await runner.call_tool("environment")
    assert not second.is_error
    assert second.details["pid"] == first.details["pid"]
