"""Stateful campaign: random sequences of calls, cancels, timeouts, crashes and floods against one live runner.

Hypothesis drives a :class:`RuleBasedStateMachine` whose rules run real tools
(``tests/fixtures/tools/basic.py`` and ``hostile.py``) in real workers, some of them at
the same time, some left running in the background across steps. Invariants,
checked after every step and at the end:

* exactly one terminal result per call: ``call_tool`` returns (never raises)
  once, and no partial result arrives after it;
* every result is the one its rule expects (``cancelled``, ``timeout``,
  ``crashed``, or the right value);
* the runner is quiescent between steps: no call running but the background
  sleepers, no busy worker but theirs, and no process of ours that is not one
  of the runner's workers;
* the host stays responsive: a trivial call finishes within a bound while
  everything else goes on;
* no process survives: once the runner is closed nothing carries the test
  session's marker.

The machine runs in the test's (main) thread; the runner lives in a trio loop
in a helper thread (:class:`Portal`), reached with ``trio.from_thread``. One
runner per example, so workers are reused, retired and replaced across steps
as they would be in a long-lived agent host. The budget per profile is in
``fuzz/conftest.py`` (``STATEFUL_BUDGETS``).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.conftest import TOOLS, make_runner, marked_processes
from xcsh_run import Runner, ToolResult

from .conftest import stateful_settings, stateful_timeout

T = TypeVar("T")
RESPONSIVE_SECONDS = 5.0  # a warm trivial call takes milliseconds; this is for slow CI machines
STEP_SECONDS = 20.0  # no single step may take longer (a worker start is included)
MAX_BACKGROUND = 3


class CallRecord:
    """Everything one call delivered, in order; filled on the trio thread."""

    def __init__(self, call_id: str, tool: str) -> None:
        self.call_id = call_id
        self.tool = tool
        self.updates: list[dict[str, Any]] = []
        self.results: list[ToolResult] = []
        self.late_updates = 0
        self.started = trio.Event()
        self.done = trio.Event()

    def on_update(self, partial: dict[str, Any]) -> None:
        if self.results:
            self.late_updates += 1
        self.updates.append(partial)
        self.started.set()

    @property
    def result(self) -> ToolResult:
        assert len(self.results) == 1, f"{self.call_id} ({self.tool}): {len(self.results)} results"
        return self.results[0]


class Portal:
    """One runner, owned by a trio loop in a helper thread, for as long as the machine lives."""

    def __init__(self, cache_dir: Path) -> None:
        self._cache_dir = cache_dir
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._failure: BaseException | None = None
        self.runner: Runner | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._thread_main, name="runner-portal", daemon=True)
        self._thread.start()
        if not self._ready.wait(STEP_SECONDS) or self._failure is not None:
            raise RuntimeError(f"the runner did not start: {self._failure!r}")

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported by close()
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        async with make_runner(
            TOOLS / "basic.py", TOOLS / "hostile.py", discover_sources=False, cache_dir=self._cache_dir
        ) as runner:
            self.runner = runner
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            # Background calls live in this nursery, inside the runner's block:
            # closing the portal cancels them and waits for their results first.
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._ready.set()
                await self._stop.wait()
                runner.cancel_all("the machine is done")

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` on the runner's loop, within :data:`STEP_SECONDS`."""

        async def bounded() -> T:
            with trio.fail_after(STEP_SECONDS):
                return await fn(*args)

        return trio.from_thread.run(bounded, trio_token=self._token)

    def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def start_background(self, record: CallRecord, arguments: dict[str, Any]) -> None:
        async def call() -> None:
            assert self.runner is not None
            try:
                result = await self.runner.call_tool(
                    record.tool, arguments, on_update=record.on_update, tool_call_id=record.call_id
                )
                record.results.append(result)
            finally:
                record.done.set()

        async def start() -> None:
            assert self._nursery is not None
            self._nursery.start_soon(call)
            await record.started.wait()  # the tool is running (it sent its first update)

        self.run(start)

    def close(self) -> None:
        """Stop the runner (cancelling what still runs) and join the thread."""
        if self._stop is not None and self._thread.is_alive():
            self.run_sync(self._stop.set)
        self._thread.join(STEP_SECONDS)
        assert not self._thread.is_alive(), "the runner did not close"
        if self._failure is not None:
            raise self._failure


class RunnerMachine(RuleBasedStateMachine):
    running = Bundle("running")

    def __init__(self, cache_dir: Path) -> None:
        super().__init__()
        self.portal = Portal(cache_dir)
        self.records: list[CallRecord] = []
        self.background: dict[str, CallRecord] = {}
        self._ids = itertools.count(1)

    @property
    def runner(self) -> Runner:
        assert self.portal.runner is not None
        return self.portal.runner

    def _record(self, tool: str) -> CallRecord:
        record = CallRecord(f"m-{next(self._ids)}", tool)
        self.records.append(record)
        return record

    async def _call(self, record: CallRecord, arguments: dict[str, Any], timeout: float | None = None) -> None:
        result = await self.runner.call_tool(
            record.tool, arguments, on_update=record.on_update, timeout=timeout, tool_call_id=record.call_id
        )
        record.results.append(result)
        record.done.set()

    def call(self, tool: str, arguments: dict[str, Any], timeout: float | None = None) -> CallRecord:
        record = self._record(tool)
        self.portal.run(self._call, record, arguments, timeout)
        return record

    # --- rules -------------------------------------------------------------------------

    @rule(text=st.text(max_size=20), times=st.integers(1, 3))
    def echo(self, text: str, times: int) -> None:
        result = self.call("echo", {"text": text, "times": times}).result
        assert result.kind is None, result
        assert result.text == text * times

    @rule(a=st.integers(-(2**62), 2**62), b=st.integers(-(2**62), 2**62))
    def add(self, a: int, b: int) -> None:
        result = self.call("add", {"a": a, "b": b}).result
        assert result.kind is None, result
        assert result.details == {"sum": a + b}

    @rule(count=st.integers(0, 30))
    def progress(self, count: int) -> None:
        record = self.call("progress", {"count": count})
        assert record.result.kind is None, record.result
        assert [u["details"] for u in record.updates] == list(range(count))  # every update, in order
        assert record.result.details == count

    @rule(mode=st.sampled_from(["raises", "bad_result", "sys_exit", "unserialisable", "raise_base"]))
    def tool_failure(self, mode: str) -> None:
        result = self.call(mode, {}).result
        assert result.kind == "tool_error", result  # sys.exit and KeyboardInterrupt included

    @precondition(lambda self: len(self.background) < MAX_BACKGROUND)
    @rule(target=running, tool=st.sampled_from(["sleeper", "async_sleeper"]))
    def start_sleeper(self, tool: str) -> str:
        record = self._record(tool)
        self.portal.start_background(record, {})
        self.background[record.call_id] = record
        return record.call_id

    @rule(call_id=consumes(running), reason=st.text(min_size=1, max_size=10))
    def cancel(self, call_id: str, reason: str) -> None:
        record = self.background.pop(call_id)
        assert self.portal.run_sync(self.runner.cancel, call_id, reason)
        self.portal.run(record.done.wait)
        result = record.result
        assert result.kind == "cancelled", result
        assert result.error is not None and reason in result.error.message

    @rule(timeout=st.sampled_from([0.1, 0.3]), tool=st.sampled_from(["busy_loop", "ignore_sigterm"]))
    def time_out(self, timeout: float, tool: str) -> None:
        result = self.call(tool, {}, timeout=timeout).result
        assert result.kind == "timeout", result
        assert result.error is not None
        if result.error.rung is None:
            # Starting a worker counts against the timeout: a cold one may not get that far.
            assert "before its worker was ready" in result.error.message, result
        else:
            # ignore_sigterm ignores SIGTERM only once it runs: a deadline that
            # lands while it is still starting ends cooperatively.
            allowed = ("killed", "cooperative") if tool == "ignore_sigterm" else ("cooperative",)
            assert result.error.rung in allowed, result

    @rule(tool=st.sampled_from(["os_exit", "segfault", "sigkill_self"]))
    def crash(self, tool: str) -> None:
        result = self.call(tool, {}).result
        assert result.kind == "crashed", result
        assert result.error is not None
        if tool == "segfault":
            assert result.error.signal == "SIGSEGV"

    @rule(rounds=st.integers(1, 5))
    def flood(self, rounds: int) -> None:
        result = self.call("flood", {"rounds": rounds}).result
        assert result.kind is None, result
        assert result.text == "flooded"  # the fake frames in its output forged nothing

    @rule(daemon=st.sampled_from(["daemon", "many_setsid"]))
    def leave_a_daemon(self, daemon: str) -> None:
        result = self.call(daemon, {"count": 3} if daemon == "many_setsid" else {}).result
        assert result.kind is None, result
        # The quiescence invariant checks the daemons died with their worker.

    @rule(
        batch=st.lists(
            st.sampled_from(["echo", "add", "progress", "os_exit", "raises", "async_echo"]), min_size=2, max_size=4
        )
    )
    def concurrent(self, batch: list[str]) -> None:
        arguments = {
            "echo": {"text": "hi"},
            "add": {"a": 1, "b": 2},
            "progress": {"count": 3},
            "os_exit": {},
            "raises": {},
            "async_echo": {"text": "hi"},
        }
        expected = {
            "echo": None,
            "add": None,
            "progress": None,
            "os_exit": "crashed",
            "raises": "tool_error",
            "async_echo": None,
        }
        records = [self._record(tool) for tool in batch]

        async def all_at_once() -> None:
            async with trio.open_nursery() as nursery:
                for record in records:
                    nursery.start_soon(self._call, record, arguments[record.tool])

        self.portal.run(all_at_once)
        for record in records:
            assert record.result.kind == expected[record.tool], (record.tool, record.result)

    # --- invariants ------------------------------------------------------------------

    @invariant()
    def one_result_per_call(self) -> None:
        for record in self.records:
            finished = record.call_id not in self.background
            assert len(record.results) == (1 if finished else 0), (record.call_id, record.tool, record.results)
            assert record.late_updates == 0, f"{record.call_id}: an update arrived after the result"

    @invariant()
    def quiescent(self) -> None:
        stats = self.portal.run_sync(self.runner.statistics)
        assert stats.running_calls == len(self.background), stats
        assert stats.busy_workers == len(self.background), stats
        assert stats.starting_workers == 0, stats
        # Every live process of ours is one of the runner's workers: a direct
        # child of this process. Daemons, children of retired workers and the
        # like (reparented elsewhere) must be gone. (A count against the
        # statistics would race with spare workers starting in the background.)
        strays = [(pid, cmd) for pid, cmd in marked_processes() if _parent(pid) not in (os.getpid(), None)]
        assert not strays, (stats, strays)

    @invariant()
    def responsive(self) -> None:
        record = self._record("echo")

        async def ping() -> None:
            with trio.fail_after(RESPONSIVE_SECONDS):
                await self._call(record, {"text": "ping"})

        self.portal.run(ping)
        assert record.result.text == "ping"

    def teardown(self) -> None:
        self.portal.close()
        # Closing the runner ended the background sleepers, each with one result.
        for record in self.background.values():
            assert record.result.kind == "cancelled", record.result
        self.background.clear()
        self.one_result_per_call()
        assert marked_processes() == []


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None  # gone meanwhile


@pytest.mark.timeout(stateful_timeout())
def test_runner_state_machine(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    run_state_machine_as_test(lambda: RunnerMachine(cache), settings=stateful_settings())  # type: ignore[arg-type,return-value]
