"""The fault-injection matrix: every step of a worker's start fails, and the host stays whole.

Through the seam in ``runner/_process/faults.py``, a hook raises a real ``OSError``
(or, for ``initialize`` and ``load``, SIGKILLs the worker: one that dies
early) at one named step, the first time only (``once``) or every time
(``always``), on each of three paths:

``call``       the module is known from a warm cache and there is no spare:
               the first worker starts inside ``call_tool``;
``discovery``  no cache: the module is loaded in a worker during ``open_runner``;
``spare``      a warm cache and one spare: the spare starts during ``open_runner``.

Whatever happens: only results leave ``call_tool`` (no OSError,
ProcessLookupError, FileNotFoundError); ``open_runner`` does not raise (a
discovery failure is an entry in ``runner.errors``); a failed start is an
``is_error`` result of kind ``crashed`` or ``load_error`` whose message names
the injected error (errno name or strerror, or SIGKILL); after a ``once``
fault the next call works; the close is bounded; and nothing is left:
processes, cgroups, worker workdirs, fds of this process.

Each case is one ``trio.run`` under the watchdog of :func:`conftest.run_guarded`,
so a hang is a failure with a stack dump, not a hung pytest.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import trio

from tests._support.scale import scaled
from tests.conftest import SUMMARY, TOOLS, leaks_since, run_guarded, snapshot
from xcsh_run import ToolResult, open_runner
from xcsh_run._process.faults import STEPS, injected

MODULE = str(TOOLS / "lifecycle.py")
# The Bun worker starts through the same steps (its Python step execs Bun after
# the handshake): the call and discovery paths again with it (it takes no spare).
JS_MODULE = str(TOOLS / "lifecycle.ts")
GRACE = 0.5
LOAD_TIMEOUT = 5.0
# A runner that retried a failing start until the deadline would answer
# `timeout` here, which the checks reject: a failed start is not a slow one.
CALL_TIMEOUT = 8.0
CLOSE_BOUND = 5.0
WATCHDOG = 30.0
Path_ = Literal["call", "discovery", "spare"]
Mode = Literal["once", "always"]


@dataclass(frozen=True)
class Kind:
    """One way a step fails: an errno raised, the worker SIGKILLed, or both."""

    code: int | None  # raised as OSError(code, strerror), if set
    kill: bool = False  # SIGKILL the worker first (the step has its pid)

    @property
    def label(self) -> str:
        parts = ([errno.errorcode[self.code]] if self.code is not None else []) + (["SIGKILL"] if self.kill else [])
        return "+".join(parts)


# The error each step meets in real life: out of disk, out of fds, a fork
# refused, the cgroup removed under us (ENODEV), and, once the worker runs, a
# broken pipe or the worker dying early. ESRCH from attach is what the kernel
# says for a worker that already died, so that case kills it too: raising
# ESRCH for a live worker would test a situation that cannot happen.
FAULTS: dict[str, tuple[Kind, ...]] = {
    "workdir": (Kind(errno.ENOSPC),),
    "boundary": (Kind(errno.ENOSPC),),
    "pipes": (Kind(errno.EMFILE),),
    "popen": (Kind(errno.EAGAIN),),
    "pidfd_open": (Kind(errno.EMFILE),),
    "attach": (Kind(errno.ENODEV), Kind(errno.ESRCH, kill=True)),
    "initialize": (Kind(errno.EPIPE), Kind(None, kill=True)),
    "load": (Kind(errno.EPIPE), Kind(None, kill=True)),
}
assert set(FAULTS) == set(STEPS), "a fault point without a case (or a case without a fault point)"


class Fault:
    """``hook(step, pid)``: fails ``step`` once or always; counts what it saw.

    Called on the trio thread, except ``attach`` (a worker thread): the
    counters are under a lock.
    """

    def __init__(self, step: str, kind: Kind, mode: Mode) -> None:
        self.step = step
        self.kind = kind
        self.mode = mode
        self.hits = 0
        self.fired = 0
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        return self.kind.label

    def __call__(self, step: str, pid: int) -> None:
        if step != self.step:
            return
        with self._lock:
            self.hits += 1
            if self.mode == "once" and self.hits > 1:
                return
            self.fired += 1
        if self.kind.kill:
            os.kill(pid, signal.SIGKILL)
        if self.kind.code is not None:
            raise OSError(self.kind.code, os.strerror(self.kind.code))

    def mentioned_in(self, text: str) -> bool:
        """Whether a message names the injected error (either one, for kill + errno)."""
        code = self.kind.code
        if code is not None and (errno.errorcode[code] in text or os.strerror(code) in text):
            return True
        return self.kind.kill and "SIGKILL" in text


@dataclass
class Observed:
    """What one faulted run saw."""

    tools: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # runner.errors' messages (+ stderr tails)
    results: list[ToolResult] = field(default_factory=list)
    raised: list[str] = field(default_factory=list)  # anything that escaped open_runner or call_tool
    close_seconds: float | None = None


async def faulted_run(path: Path_, fault: Fault, cache_dir: Path, module: str = MODULE) -> Observed:
    seen = Observed()
    try:
        with injected(fault), trio.fail_after(WATCHDOG - 5):
            async with open_runner(
                [module],
                discover_sources=False,
                cache=path != "discovery",
                cache_dir=cache_dir,
                spare_workers=1 if path == "spare" else 0,
                grace=GRACE,
                load_timeout=LOAD_TIMEOUT,
            ) as runner:
                seen.tools = [t.name for t in runner.tools]
                seen.errors = [e.message + (f"\n{e.stderr_tail}" if e.stderr_tail else "") for e in runner.errors]
                # Two calls: the first meets the fault (or, on the discovery
                # and spare paths, what it left); the second must work after a
                # `once` fault.
                for _ in range(2):
                    try:
                        seen.results.append(await runner.call_tool("ping", timeout=CALL_TIMEOUT))
                    except Exception as exc:  # the point of the test: nothing but results
                        seen.raised.append(f"call_tool raised {type(exc).__name__}: {exc}")
                closing = time.monotonic()
            seen.close_seconds = time.monotonic() - closing
    except Exception as exc:
        seen.raised.append(f"open_runner raised {type(exc).__name__}: {exc}")
    return seen


def check(path: Path_, mode: Mode, fault: Fault, seen: Observed) -> list[str]:
    problems = list(seen.raised)
    if fault.fired == 0:
        problems.append(f"the fault point {fault.step!r} was never reached on the {path} path")
    loaded = "ping" in seen.tools
    if not loaded:
        # Only the discovery path loads the module in a worker during open.
        if path != "discovery":
            problems.append(f"the tool did not load: {seen.errors}")
        elif not any(fault.mentioned_in(message) for message in seen.errors):
            problems.append(f"discovery failed, but no load error names {fault.label}: {seen.errors}")
    elif seen.errors:
        problems.append(f"the tool loaded, yet there are load errors: {seen.errors}")
    for i, result in enumerate(seen.results):
        if not result.is_error:
            continue
        if result.kind == "not_found" and not loaded:
            continue  # discovery failed (checked above): a missing tool is the honest answer
        if result.kind not in ("crashed", "load_error"):
            problems.append(f"call {i}: a {result.kind!r} result, not crashed or load_error: {result.text}")
        elif not fault.mentioned_in(result.text):
            problems.append(f"call {i}: the {result.kind} message does not name {fault.label}: {result.text}")
    last = seen.results[-1] if seen.results else None
    if mode == "once" and loaded and (last is None or last.is_error):
        problems.append(
            f"after a once fault the next call still failed: {last.kind if last else 'no result'}: "
            f"{last.text if last else ''}"
        )
    if mode == "always" and any(not r.is_error for r in seen.results):
        # Every worker start passes every step: a start that fails each time
        # cannot have served a call (a call that did bypassed the fault seam).
        problems.append(f"a call worked although {fault.step!r} always fails: {[r.text for r in seen.results]}")
    if seen.close_seconds is not None and seen.close_seconds > CLOSE_BOUND:
        problems.append(f"the close took {seen.close_seconds:.1f} s (bound {CLOSE_BOUND:g} s)")
    return problems


CASES = [
    pytest.param(step, kind, mode, path, id=f"{step}-{kind.label}-{mode}-{path}")
    for step in STEPS
    for kind in FAULTS[step]
    for mode in ("once", "always")
    for path in ("call", "discovery", "spare")
]
JS_CASES = [
    pytest.param(step, kind, mode, path, id=f"{step}-{kind.label}-{mode}-{path}-bun")
    for step in STEPS
    for kind in FAULTS[step]
    for mode in ("once", "always")
    for path in ("call", "discovery")
]


def _fill_cache(cache: Path, module: str) -> Path:
    async def fill() -> None:
        async with open_runner(
            [module], discover_sources=False, cache=True, cache_dir=cache, spare_workers=0
        ) as runner:
            assert (await runner.call_tool("ping")).text == "pong"

    guarded = run_guarded(fill, timeout=WATCHDOG)
    assert not guarded.hung and guarded.error is None, f"could not fill the cache: {guarded}"
    return cache


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A module cache that already knows tests/fixtures/tools/lifecycle.py (copied per case)."""
    return _fill_cache(tmp_path_factory.mktemp("fault-cache"), MODULE)


@pytest.fixture(scope="module")
def warm_cache_bun(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A module cache that already knows tests/fixtures/tools/lifecycle.ts (copied per case)."""
    return _fill_cache(tmp_path_factory.mktemp("fault-cache-bun"), JS_MODULE)


pytestmark = pytest.mark.stress
_seconds: dict[str, list[float]] = {}


@pytest.fixture(scope="module", autouse=True)
def _summary() -> Iterator[None]:
    """Cases and time per path, in the session's closing summary (conftest.SUMMARY)."""
    yield
    SUMMARY.append(
        "fault matrix: "
        + ", ".join(f"{path} path {len(times)} cases in {sum(times):.1f} s" for path, times in _seconds.items())
    )


@pytest.mark.parametrize(("step", "kind", "mode", "path"), CASES)
def test_fault(step: str, kind: Kind, mode: Mode, path: Path_, warm_cache: Path, tmp_path: Path) -> None:
    _run_case(step, kind, mode, path, warm_cache, tmp_path, MODULE)


@pytest.mark.parametrize(("step", "kind", "mode", "path"), JS_CASES)
def test_fault_bun(
    step: str, kind: Kind, mode: Mode, path: Path_, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue("bun")  # skipped without Bun, failed under CI
    _run_case(step, kind, mode, path, request.getfixturevalue("warm_cache_bun"), tmp_path, JS_MODULE)


def _run_case(step: str, kind: Kind, mode: Mode, path: Path_, warm: Path, tmp_path: Path, module: str) -> None:
    cache_dir = tmp_path / "cache"
    shutil.copytree(warm, cache_dir)
    fault = Fault(step, kind, mode)
    before = snapshot()
    guarded = run_guarded(faulted_run, path, fault, cache_dir, module, timeout=WATCHDOG)
    if guarded.hung:
        stuck = " (still running after its processes were killed)" if guarded.stuck else ""
        problems = [f"hang{stuck}; killed {guarded.killed}; where:\n{guarded.dump}"]
    elif guarded.error is not None:
        problems = [f"trio.run raised {type(guarded.error).__name__}: {guarded.error}"]
    else:
        problems = check(path, mode, fault, guarded.value)
    problems += leaks_since(before)
    _seconds.setdefault(path + ("-bun" if module == JS_MODULE else ""), []).append(guarded.seconds)
    assert not problems, f"{step} {fault.label} {mode} on the {path} path (fired {fault.fired}x):\n" + "\n".join(
        problems
    )


def test_a_worker_killed_while_starting_is_reported_with_its_signal_every_time(
    warm_cache: Path, tmp_path: Path
) -> None:
    """The window between the worker's end being seen (pipe EOF, pidfd) and its reap, swept.

    A request made in that window used to fail at once with a made-up status
    ("exited with code 0"); it now fails with the others once the exit is
    recorded, so the message names SIGKILL every time.
    """
    cache_dir = tmp_path / "cache"
    shutil.copytree(warm_cache, cache_dir)
    rounds = scaled(30, 300)

    def kill_at_initialize(step: str, pid: int) -> None:
        if step == "initialize":
            os.kill(pid, signal.SIGKILL)

    async def sweep() -> list[str]:
        wrong: list[str] = []
        with injected(kill_at_initialize):
            for _ in range(rounds):
                async with open_runner(
                    [MODULE], discover_sources=False, cache=True, cache_dir=cache_dir, spare_workers=0
                ) as runner:
                    result = await runner.call_tool("ping")
                if result.kind != "crashed" or "SIGKILL" not in result.text:
                    wrong.append(result.text)
        return wrong

    before = snapshot()
    guarded = run_guarded(sweep, timeout=WATCHDOG + rounds)
    assert not guarded.hung and guarded.error is None, guarded
    assert guarded.value == [], f"{len(guarded.value)} of {rounds}: {guarded.value[:3]}"
    assert not leaks_since(before)
