"""One tool's properties as Hypothesis searches: the calls, the judge's verdicts, the distinct failures.

Each property runs in rounds (see :class:`ToolFuzz`), so that a failure does
not end the search: every distinct failure is reported, each shrunk on its own.
Hypothesis is imported inside the methods, as in ``_fuzz``.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from xcsh_run._discovery import ToolInfo
from xcsh_run._host import Runner, RunnerStatistics
from xcsh_run._results import ToolResult
from xcsh_run._sandbox import SandboxPolicy
from xcsh_run.fuzz._judge import ErrorRules, Key, failure_key, first_line, judge
from xcsh_run.fuzz._leftovers import describe_processes, kill_processes, lasting_strays
from xcsh_run.fuzz._report import (
    BUSY_WORKER,
    LEFT_BEHIND,
    NEAR_MISSES,
    RUNNER_STUCK,
    TIMEOUT,
    VALID,
    FuzzFailure,
    PropertyReport,
    reproducer_command,
)

if TYPE_CHECKING:
    from xcsh_run.fuzz._schema import SchemaStrategies

# A call that has not returned this long after its own timeout means the
# runner itself is stuck (its ladder always ends a call): report it, do not hang.
_RUNNER_SLACK: Final = 30.0
# How long a marked process that is not one of our workers may take to stop
# looking like a stray (see lasting_strays) before it is reported as one.
_STRAY_GRACE: Final = 1.0
# Each round finds at least one new distinct failure, or is the last.
_MAX_ROUNDS: Final = 10


class _Found(Exception):
    """Raised inside the Hypothesis test; one subclass per distinct failure (see :func:`_found`)."""

    def __init__(self, key: Key, failure: FuzzFailure) -> None:
        super().__init__(f"{failure.problem}: {failure.message}")
        self.key = key
        self.failure = failure


class _Stop(BaseException):
    """Raised inside the Hypothesis test to end the search now: not a failure, so Hypothesis lets it through."""


_FOUND_CLASSES: dict[Key, type[_Found]] = {}


def _found(key: Key) -> type[_Found]:
    # Hypothesis tells bugs apart by exception type and origin: one class per
    # distinct failure (problem, exception type, place) makes it shrink and
    # report a crash, a hang, a KeyError and a ZeroDivisionError separately,
    # instead of shrinking them all towards whichever is simplest.
    cls = _FOUND_CLASSES.get(key)
    if cls is None:
        cls = _FOUND_CLASSES[key] = type(f"Found_{key[0]}", (_Found,), {})
    return cls


def _round_seed(seed: int, round_: int) -> int:
    # Round 0 is the run's seed itself; later rounds explore afresh, reproducibly.
    return seed if round_ == 0 else random.Random(f"{seed}/{round_}").randrange(2**32)


class ToolFuzz:
    """Both properties of one tool, against one open runner.

    Threading: Hypothesis runs synchronous tests, the runner is trio. The whole
    fuzz of a tool runs in one ``trio.run`` with one runner; each property's
    Hypothesis test runs in a worker thread (``trio.to_thread.run_sync``) and
    makes every call with ``trio.from_thread.run``. Warm workers are reused
    from call to call, so a well-behaved tool costs about a millisecond per
    example; a fresh ``trio.run`` and runner per example would pay a worker
    start and module import (~100 ms) every time. Cancelling the caller's
    scope reaches the call in flight (``from_thread.run`` runs inside the
    thread's parent task), which ends it through the ladder.

    Searching on after a failure: Hypothesis stops generating soon after the
    first failure (at twice the call that found the latest one, at least ten
    calls), so a second bug found later by the same seed would be missed. A
    property therefore runs in rounds: each round is a Hypothesis run with a
    seed of its own in which the failures of earlier rounds pass, and is given
    what is left of the ``examples`` budget once its first new failure is found.
    The rounds end when one finds nothing new or the budget is spent.
    """

    def __init__(
        self,
        runner: Runner,
        info: ToolInfo,
        *,
        mark: str,
        examples: int,
        seed: int,
        timeout: float,
        rules: ErrorRules,
        max_timeouts: int,
        tool_paths: Sequence[str],
        sandbox: SandboxPolicy,
    ) -> None:
        self.runner = runner
        self.info = info
        self.mark = mark
        self.examples = examples
        self.seed = seed
        self.timeout = timeout
        self.rules = rules
        self.max_timeouts = max_timeouts
        self.tool_paths = tool_paths
        self.sandbox = sandbox
        self._ids = itertools.count(1)
        self.calls = 0
        self.timeouts = 0
        self.round_calls = 0
        self.first_new_at: int | None = None
        self.known: set[Key] = set()  # found in an earlier round: passes now
        self.smallest: dict[Key, FuzzFailure] = {}  # the smallest example of each failure seen yet

    def run_property(self, name: str, strategies: SchemaStrategies) -> PropertyReport:
        """Run one property to the end, in this (non-trio) thread."""
        from hypothesis.errors import Unsatisfiable

        if name == NEAR_MISSES and not strategies.near_miss_kinds():
            return PropertyReport(
                self.info.name, name, skipped="the schema rejects no argument object this fuzzer knows how to build"
            )
        self.calls = self.timeouts = 0
        self.known, self.smallest = set(), {}
        started = time.monotonic()
        found: dict[Key, FuzzFailure] = {}
        errors: list[str] = []
        stopped: str | None = None
        budget = self.examples
        for round_ in range(_MAX_ROUNDS):
            new: list[_Found] = []
            try:
                self._search(name, strategies, _round_seed(self.seed, round_), budget)
            except Unsatisfiable:
                errors.append("could not generate arguments the schema accepts (is it satisfiable?)")
            except _Stop as stop:
                stopped = str(stop)
            except Exception as exc:  # sorted below; BaseExceptions (cancellation) propagate
                new, more = _collect(exc, False)
                errors += more
            for f in new:
                found.setdefault(f.key, f.failure)
            if stopped is not None:
                # Hypothesis reports nothing when stopped: what it had seen must do.
                for key, failure in self.smallest.items():
                    found.setdefault(key, msgspec.structs.replace(failure, shrunk=False))
                break
            fresh = {f.key for f in new} - self.known
            if not fresh or errors or self.first_new_at is None:
                break
            self.known |= fresh
            budget -= self.first_new_at
            if budget <= 0:
                break
        failures = sorted(found.values(), key=lambda f: (f.problem, f.reproducer or "", f.message))
        return PropertyReport(
            self.info.name,
            name,
            calls=self.calls,
            failures=failures,
            error="; ".join(errors) or None,
            stopped=stopped,
            seconds=round(time.monotonic() - started, 3),
        )

    def _search(self, name: str, strategies: SchemaStrategies, seed: int, examples: int) -> None:
        """One round: a Hypothesis run of ``examples`` examples; raises what Hypothesis raises."""
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as hypothesis_seed

        self.round_calls, self.first_new_at = 0, None
        config = settings(
            max_examples=examples,
            database=None,  # reproducible from the seed alone, never from local state
            deadline=None,  # a slow call is the timeout's business, not Hypothesis's
            derandomize=False,
            # No `explain` phase: it replays extra calls to annotate source
            # lines, and the lines here would be ours, not the tool's.
            phases=(Phase.explicit, Phase.generate, Phase.shrink),
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
            print_blob=False,
            report_multiple_bugs=True,
        )
        if name == VALID:

            @hypothesis_seed(seed)
            @config
            @given(strategies.valid())
            def valid_inputs(arguments: dict[str, Any]) -> None:
                self.check(VALID, arguments, None)

            valid_inputs()
        else:

            @hypothesis_seed(seed)
            @config
            @given(strategies.near_misses())
            def near_misses(pair: tuple[str, dict[str, Any]]) -> None:
                self.check(NEAR_MISSES, pair[1], pair[0])

            near_misses()

    def check(self, prop: str, arguments: dict[str, Any], near_miss: str | None) -> None:
        """One example: call, judge, look for busy workers and stray processes."""
        self.calls += 1
        self.round_calls += 1
        result, stats = trio.from_thread.run(self._call, arguments)
        found: tuple[str, str] | None
        if result is None:
            found = (RUNNER_STUCK, f"the call did not return within {self.timeout + _RUNNER_SLACK:g} s")
        else:
            found = judge(prop, result, self.rules)
        if found is None and stats is not None and (stats.busy_workers or stats.running_calls):
            found = (BUSY_WORKER, f"after the call returned: {stats.busy_workers} busy worker(s)")
        # After a call, every marked process is an idle worker, a direct child
        # of this process: anything else that lasts was left behind by the call.
        strays = lasting_strays(self.mark, _STRAY_GRACE)
        if strays:
            kill_processes(strays)
            if found is None:
                found = (LEFT_BEHIND, f"{describe_processes(strays)} outlived the call")
        if found is None:
            return
        problem, message = found
        key = failure_key(problem, near_miss, result)
        failure = FuzzFailure(
            tool=self.info.name,
            property=prop,
            problem=problem,
            message=message,
            arguments=arguments,
            reproducer=reproducer_command(
                self.info.name,
                arguments,
                tool_paths=self.tool_paths,
                timeout=self.timeout if problem == TIMEOUT else None,
                sandbox=self.sandbox,
            ),
            near_miss=near_miss,
            result=result.to_json() if result is not None else None,
        )
        size = len(json.dumps(arguments, ensure_ascii=False))
        seen = self.smallest.get(key)
        if seen is None or size <= len(json.dumps(seen.arguments, ensure_ascii=False)):
            self.smallest[key] = failure
        if problem in (TIMEOUT, RUNNER_STUCK):
            self.timeouts += 1
            if self.timeouts >= self.max_timeouts:
                raise _Stop(
                    f"{self.timeouts} call{'s' * (self.timeouts != 1)} timed out "
                    f"(max_timeouts={self.max_timeouts}, --max-timeouts {self.max_timeouts})"
                )
        if key in self.known:
            return
        if self.first_new_at is None:
            self.first_new_at = self.round_calls
        raise _found(key)(key, failure)

    async def _call(self, arguments: dict[str, Any]) -> tuple[ToolResult | None, RunnerStatistics | None]:
        with trio.move_on_after(self.timeout + self.runner.grace + _RUNNER_SLACK):
            result = await self.runner.call_tool(
                self.info.name, arguments, timeout=self.timeout, tool_call_id=f"fuzz-{next(self._ids)}"
            )
            return result, self.runner.statistics()
        return None, None


def _collect(exc: BaseException, flaky: bool) -> tuple[list[_Found], list[str]]:
    """Our failures (and anything else, as errors) out of what Hypothesis raised."""
    from hypothesis.errors import Flaky  # FlakyFailure, an ExceptionGroup, in current Hypothesis

    if isinstance(exc, _Found):
        if flaky:
            exc.failure = msgspec.structs.replace(exc.failure, flaky=True)
        return [exc], []
    if isinstance(exc, BaseExceptionGroup):
        failures: list[_Found] = []
        errors: list[str] = []
        for sub in exc.exceptions:
            f, e = _collect(sub, flaky or isinstance(exc, Flaky))
            failures += f
            errors += e
        return failures, errors
    return [], [f"{type(exc).__name__}: {first_line(str(exc))}"]
