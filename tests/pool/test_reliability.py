"""Reproducers of lifecycle bugs found by cancelling and faulting the host from outside.

Each test names the situation that used to hang, leak or lose a result. The
autouse fixture checks that no process, cgroup or workdir is left after each.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest
import trio

from tests.conftest import BROKEN, TOOLS, XCSH_RUN, make_runner
from xcsh_run import SandboxPolicy, open_runner

POOL = TOOLS / "pool.py"
HOSTAPI = TOOLS / "hostapi.py"
NESTED = TOOLS / "nested.py"
GATE = TOOLS / "gate.py"


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


# --- cancellation while a worker starts ---------------------------------------------------


@pytest.mark.parametrize("timeout", [0.001, 0.003, 0.010])
async def test_a_call_timing_out_while_its_worker_starts_returns_a_timeout(timeout: float) -> None:
    with trio.fail_after(30):
        async with make_runner(POOL, spare_workers=0, cache=True) as runner:
            for _ in range(5):
                result = await runner.call_tool("pid", timeout=timeout)
                assert result.kind in ("timeout", None), result.text
            # The runner is still usable: nothing is stuck half-started.
            after = await runner.call_tool("pid")
            stats = runner.statistics()
    assert not after.is_error
    assert stats.starting_workers == 0 and stats.teardown_overruns == 0


async def test_cancelling_open_runner_at_once_leaves_nothing() -> None:
    before = fd_count()
    with trio.fail_after(60):
        for delay in (0.0, 0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03):
            with trio.move_on_after(delay):
                async with open_runner([], spare_workers=1, discover_sources=False):
                    await trio.sleep_forever()
    assert fd_count() == before


async def test_after_a_spare_start_is_cancelled_cold_calls_still_work() -> None:
    with trio.fail_after(60):
        async with make_runner(POOL, cache=True):
            pass
        with trio.move_on_after(0.0005):
            async with make_runner(POOL, spare_workers=1):
                await trio.sleep_forever()
        async with make_runner(POOL, spare_workers=1) as runner:
            result = await runner.call_tool("pid", timeout=10)
    assert not result.is_error, result.text


async def test_closing_while_a_spare_is_attaching_logs_no_attach_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="xcsh_run")
    with trio.fail_after(60):
        for _ in range(20):
            async with make_runner(POOL, spare_workers=1, cache=True) as runner:
                pass
    assert runner.statistics().teardown_overruns == 0
    assert not [r for r in caplog.records if "spare" in r.getMessage()], caplog.text


# --- the idle reaper and pinned workers ------------------------------------------------------


async def test_the_idle_reaper_never_kills_a_worker_a_call_has_taken(tmp_path: Path) -> None:
    results = []
    with trio.fail_after(90):
        async with make_runner(GATE, idle_timeout=0.3, max_workers=8) as runner:
            for round_ in range(3):
                # Eight workers go idle at the same moment and so expire
                # together: the reaper has a list to work through, one kill at
                # a time, and a call takes a worker meanwhile.
                gate = tmp_path / f"open{round_}"
                waiting = 0
                all_waiting = trio.Event()

                def arrived(_: object, all_waiting: trio.Event = all_waiting) -> None:
                    nonlocal waiting
                    waiting += 1
                    if waiting == 8:
                        all_waiting.set()

                async with trio.open_nursery() as nursery:
                    for i in range(8):
                        nursery.start_soon(
                            lambda i=i, gate=gate, round_=round_, arrived=arrived: runner.call_tool(
                                "gate", {"path": str(gate)}, tool_call_id=f"g{round_}.{i}", on_update=arrived
                            )
                        )
                    await all_waiting.wait()
                    gate.touch()
                while runner.statistics().idle_workers == 8:  # noqa: ASYNC110 - time-driven: wait for the reaper
                    await trio.sleep(0.001)
                # The reaper is at work: a call now takes a worker it has not
                # reached yet, and holds it until well after the reaper's pass.
                second_gate = tmp_path / f"second{round_}"
                async with trio.open_nursery() as nursery:

                    async def call(gate: Path = second_gate) -> None:
                        results.append(await runner.call_tool("gate", {"path": str(gate)}))

                    nursery.start_soon(call)
                    while runner.statistics().idle_workers:  # noqa: ASYNC110 - time-driven: the reaper's pass
                        await trio.sleep(0.001)
                    await trio.sleep(0.3)  # another reaper period or two, for a worker it should not touch
                    second_gate.touch()
    crashed = [r.text for r in results if r.is_error]
    assert crashed == []


async def test_a_pending_action_outlives_the_idle_timeout() -> None:
    with trio.fail_after(60):
        async with make_runner(HOSTAPI, idle_timeout=0.2) as runner:
            made = await runner.call_tool("propose", {"label": "keep me"})
            assert runner.statistics().pinned_workers == 1
            # Several reaper periods pass (it wakes every idle_timeout / 2).
            await trio.sleep(1.0)
            applied = await runner.call_tool("resolve", {"action": "apply", "reason": "later"})
            stats = runner.statistics()
    assert not made.is_error
    assert applied.text == "applied keep me: later", applied.text
    assert applied.details["result"]["pid"] == made.details["pid"]
    assert stats.pinned_workers == 0


async def test_a_worker_past_its_call_budget_is_kept_until_its_action_is_resolved() -> None:
    with trio.fail_after(60):
        async with make_runner(HOSTAPI, max_calls_per_worker=1) as runner:
            made = await runner.call_tool("propose", {"label": "budget"})
            kept = runner.statistics()
            applied = await runner.call_tool("resolve", {"action": "apply", "reason": "ok"})
            while runner.statistics().idle_workers:  # noqa: ASYNC110 - retired in the background once unpinned
                await trio.sleep(0.01)
    assert kept.pinned_workers == 1
    assert applied.details["result"]["pid"] == made.details["pid"]


# --- hostile trees, and discovery that cannot change the answer --------------------------------


@pytest.mark.parametrize("level", ["contained", "strict"])
async def test_a_tool_leaving_1100_nested_folders_in_its_tmpdir_does_not_hang_the_host(level: str) -> None:
    with trio.fail_after(60):
        async with make_runner(NESTED, sandbox=SandboxPolicy(level=level), max_calls_per_worker=1) as runner:  # type: ignore[arg-type]
            # One call per worker: the first call returns only once its worker
            # and that tree are gone, and the second needs a fresh worker.
            result = await runner.call_tool("deep_tmp", {"depth": 1100})
            second = await runner.call_tool("deep_tmp", {"depth": 10})
            stats = runner.statistics()
    assert result.text == "built" and second.text == "built"
    assert stats.teardown_overruns == 0


async def test_a_module_looping_at_import_after_the_wanted_tool_costs_nothing(tmp_path: Path) -> None:
    with trio.fail_after(30):
        # load_timeout far beyond the deadline: only not waiting for loops.py passes.
        async with make_runner(TOOLS / "basic.py", BROKEN / "loops.py", load_timeout=120, wanted_tool="add") as runner:
            result = await runner.call_tool("add", {"a": 2, "b": 3})
            names = {t.name for t in runner.tools}
    assert result.text == "5"
    assert "add" in names


async def test_a_module_looping_at_import_before_the_wanted_tool_is_waited_for() -> None:
    # It comes first in precedence, so it could define the name: it must be settled.
    with trio.fail_after(30):
        async with make_runner(BROKEN / "loops.py", TOOLS / "basic.py", load_timeout=1, wanted_tool="add") as runner:
            errors = [e.message for e in runner.errors]
            result = await runner.call_tool("add", {"a": 2, "b": 3})
    assert result.text == "5"
    assert any("of CPU importing (load timeout 1 s of CPU); it may loop" in m for m in errors)


async def test_wanted_tool_that_nobody_defines_waits_for_every_module() -> None:
    with trio.fail_after(30):
        async with make_runner(TOOLS / "basic.py", POOL, wanted_tool="nope") as runner:
            names = {t.name for t in runner.tools}
            result = await runner.call_tool("nope")
    assert {"add", "pid"} <= names
    assert result.kind == "not_found"


def test_the_cli_does_not_wait_for_a_looping_module_later_in_precedence(tmp_path: Path) -> None:
    # --load-timeout far beyond the subprocess deadline: only not waiting for loops.py passes.
    for _ in range(2):  # cold cache, then cached: neither may wait
        proc = subprocess.run(
            [XCSH_RUN, "add", "--args", '{"a": 2, "b": 3}', "--load-timeout", "300",
             "--tools", str(TOOLS / "basic.py"), "--tools", str(BROKEN / "loops.py")],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "5"


async def test_a_call_too_large_for_one_frame_is_invalid_arguments_and_keeps_the_worker() -> None:
    with trio.fail_after(30):
        async with make_runner(POOL, max_frame_bytes=1024) as runner:
            before = await runner.call_tool("pid")
            big = await runner.call_tool("pid", {"pad": "x" * 4096})
            after = await runner.call_tool("pid")
    assert big.kind == "invalid_arguments" and "does not fit in one protocol message" in big.text, big.text
    assert before.details == after.details  # the same warm worker: nothing was sent to it
