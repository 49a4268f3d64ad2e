"""Fuzzing a tool from its own JSON Schema: ``xcsh-run fuzz TOOL`` and :func:`fuzz_tool`.

Two properties per tool, each a Hypothesis test driven through the real runner
(real workers, the tool's own sandbox policy):

* **valid inputs**: arguments the schema accepts must not crash the worker,
  time out, break the protocol, be refused as ``invalid_arguments``, or come
  back in a shape other than text/image blocks. ``tool_error`` is allowed (a
  tool may refuse data it does not like) unless ``fail_on_tool_error``.
* **near-misses**: a valid object with one thing broken (a required property
  left out, a property of the wrong type, an unknown property when
  ``additionalProperties`` is false, a number out of range, a value outside an
  enum) must end as ``invalid_arguments``, before any tool code runs.

After every call no worker may still be busy and no process carrying this
run's marker may live outside the runner's own workers; after the run, none at
all. Failures are shrunk by Hypothesis to a minimal example, reported with a
ready ``xcsh-run TOOL --args '...'`` command; a run is reproducible from its
seed (no example database, so CI runs do not depend on local state).

Hypothesis, and the strategies in ``_fuzz_schema``, are imported only when a
fuzz run starts: ``import runner`` (and so ``xcsh-run TOOL``) does not pay for
them, and works without them. Hypothesis is the ``fuzz`` extra
(``pip install 'xcsh-run[fuzz]'``); without it a run fails at once with a
:class:`ConfigError` saying so. The reports are in ``_fuzz_report``, the
process checks in ``_fuzz_procs``.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from ._config import check_seconds
from ._errors import ConfigError
from ._fuzz_procs import MARK_VAR, describe_processes, kill_processes, marked_processes
from ._fuzz_report import (
    BAD_SHAPE,
    BUSY_WORKER,
    CLEANUP,
    INVALID_ACCEPTED,
    LEFT_BEHIND,
    NEAR_MISSES,
    RUNNER_STUCK,
    TIMEOUT,
    TOOL_ERROR,
    VALID,
    VALID_REJECTED,
    FuzzFailure,
    FuzzReport,
    PropertyReport,
    reproducer_command,
)
from ._host import Runner, RunnerStatistics, ToolInfo, open_runner
from ._results import ToolResult
from ._sandbox import SandboxPolicy

if TYPE_CHECKING:
    from ._fuzz_schema import SchemaStrategies

DEFAULT_EXAMPLES: Final = 100
DEFAULT_CALL_TIMEOUT: Final = 10.0
# A call that has not returned this long after its own timeout means the
# runner itself is stuck (its ladder always ends a call): report it, do not hang.
_RUNNER_SLACK: Final = 30.0
# What a caller without Hypothesis is told: `import runner` and every other
# command work without it.
FUZZ_EXTRA_MISSING: Final = (
    "fuzzing needs Hypothesis, which is not installed; install it with: pip install 'xcsh-run[fuzz]'"
)


# --- the judge ------------------------------------------------------------------------


def _shape_problem(result: ToolResult) -> str | None:
    """Why ``result`` breaks the result contract, or None."""
    for i, block in enumerate(result.content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            continue
        if kind in ("image", "audio") and isinstance(block.get("data"), str) and isinstance(block.get("mimeType"), str):
            continue
        if kind == "resource" and isinstance(block.get("resource"), dict):
            continue
        if kind == "resource_link" and isinstance(block.get("uri"), str) and isinstance(block.get("name"), str):
            continue
        return f"content[{i}] is not an MCP content block: {json.dumps(block, default=repr)[:200]}"
    if result.is_error != (result.error is not None):
        return f"is_error is {result.is_error} but error is {result.error!r}"
    try:
        msgspec.json.encode(result.details)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        return f"details are not JSON: {exc}"
    return None


def _judge(prop: str, result: ToolResult, fail_on_tool_error: bool) -> tuple[str, str] | None:
    """(problem, message) if ``result`` breaks the property, else None."""
    kind = result.kind
    detail = _first_line(result.error.message) if result.error is not None else ""
    if prop == NEAR_MISSES:
        if kind == "invalid_arguments":
            return None
        ended = f"ended as {kind}: {detail}" if kind is not None else "succeeded"
        return INVALID_ACCEPTED, f"arguments the schema rejects were accepted; the call {ended}"
    if kind is None:
        shape = _shape_problem(result)
        return (BAD_SHAPE, shape) if shape is not None else None
    if kind == "invalid_arguments":
        return VALID_REJECTED, f"arguments the schema accepts were rejected: {detail}"
    if kind == "tool_error":
        return (TOOL_ERROR, detail) if fail_on_tool_error else None
    return kind, detail


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --- the run --------------------------------------------------------------------------


def require_hypothesis() -> None:
    """Raise :class:`ConfigError` saying how to install the ``fuzz`` extra, unless Hypothesis imports."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        raise ConfigError(FUZZ_EXTRA_MISSING) from None


class _Found(Exception):
    """Raised inside the Hypothesis test; one subclass per problem (see :func:`_found`)."""

    def __init__(self, failure: FuzzFailure) -> None:
        super().__init__(f"{failure.problem}: {failure.message}")
        self.failure = failure


_FOUND_CLASSES: dict[str, type[_Found]] = {}


def _found(problem: str) -> type[_Found]:
    # Hypothesis tells bugs apart by exception type and origin: one class per
    # problem makes it shrink (and report) a crash and a hang separately,
    # instead of shrinking both towards whichever is simpler.
    cls = _FOUND_CLASSES.get(problem)
    if cls is None:
        cls = _FOUND_CLASSES[problem] = type(f"Found_{problem}", (_Found,), {})
    return cls


class _ToolFuzz:
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
        fail_on_tool_error: bool,
        tool_paths: Sequence[str],
        sandbox: SandboxPolicy,
    ) -> None:
        self.runner = runner
        self.info = info
        self.mark = mark
        self.examples = examples
        self.seed = seed
        self.timeout = timeout
        self.fail_on_tool_error = fail_on_tool_error
        self.tool_paths = tool_paths
        self.sandbox = sandbox
        self._ids = itertools.count(1)
        self.calls = 0

    def run_property(self, name: str, strategies: SchemaStrategies) -> PropertyReport:
        """Run one property to the end, in this (non-trio) thread."""
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as hypothesis_seed
        from hypothesis.errors import Unsatisfiable

        self.calls = 0
        started = time.monotonic()
        config = settings(
            max_examples=self.examples,
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

            @hypothesis_seed(self.seed)
            @config
            @given(strategies.valid())
            def valid_inputs(arguments: dict[str, Any]) -> None:
                self.check(VALID, arguments, None)

            test = valid_inputs
        else:
            kinds = strategies.near_miss_kinds()
            if not kinds:
                return PropertyReport(
                    self.info.name, name, skipped="the schema rejects no argument object this fuzzer knows how to build"
                )

            @hypothesis_seed(self.seed)
            @config
            @given(strategies.near_misses())
            def near_misses(pair: tuple[str, dict[str, Any]]) -> None:
                self.check(NEAR_MISSES, pair[1], pair[0])

            test = near_misses
        failures: list[FuzzFailure] = []
        error = None
        try:
            test()
        except Unsatisfiable:
            error = "could not generate arguments the schema accepts (is it satisfiable?)"
        except Exception as exc:  # sorted below; BaseExceptions (cancellation) propagate
            failures, errors = _collect(exc, False)
            error = "; ".join(errors) or None
        failures.sort(key=lambda f: (f.problem, f.reproducer or "", f.message))
        return PropertyReport(
            self.info.name,
            name,
            calls=self.calls,
            failures=failures,
            error=error,
            seconds=round(time.monotonic() - started, 3),
        )

    def check(self, prop: str, arguments: dict[str, Any], near_miss: str | None) -> None:
        """One example: call, judge, look for busy workers and stray processes."""
        self.calls += 1
        result, stats = trio.from_thread.run(self._call, arguments)
        found: tuple[str, str] | None
        if result is None:
            found = (RUNNER_STUCK, f"the call did not return within {self.timeout + _RUNNER_SLACK:g} s")
        else:
            found = _judge(prop, result, self.fail_on_tool_error)
        if found is None and stats is not None and (stats.busy_workers or stats.running_calls):
            found = (BUSY_WORKER, f"after the call returned: {stats.busy_workers} busy worker(s)")
        # After a call, every marked process is an idle worker, a direct child
        # of this process: anything else was left behind by the call.
        strays = [p for p in marked_processes(self.mark) if p[1] != os.getpid()]
        if strays:
            kill_processes(strays)
            if found is None:
                found = (LEFT_BEHIND, f"{describe_processes(strays)} outlived the call")
        if found is None:
            return
        problem, message = found
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
        raise _found(problem)(failure)

    async def _call(self, arguments: dict[str, Any]) -> tuple[ToolResult | None, RunnerStatistics | None]:
        with trio.move_on_after(self.timeout + self.runner.grace + _RUNNER_SLACK):
            result = await self.runner.call_tool(
                self.info.name, arguments, timeout=self.timeout, tool_call_id=f"fuzz-{next(self._ids)}"
            )
            return result, self.runner.statistics()
        return None, None


def _collect(exc: BaseException, flaky: bool) -> tuple[list[FuzzFailure], list[str]]:
    """Our failures (and anything else, as errors) out of what Hypothesis raised."""
    from hypothesis.errors import Flaky  # FlakyFailure, an ExceptionGroup, in current Hypothesis

    if isinstance(exc, _Found):
        return [msgspec.structs.replace(exc.failure, flaky=flaky)], []
    if isinstance(exc, BaseExceptionGroup):
        failures: list[FuzzFailure] = []
        errors: list[str] = []
        for sub in exc.exceptions:
            f, e = _collect(sub, flaky or isinstance(exc, Flaky))
            failures += f
            errors += e
        return failures, errors
    return [], [f"{type(exc).__name__}: {_first_line(str(exc))}"]


async def fuzz_tool(
    tool: str | Sequence[str],
    *,
    tool_paths: Sequence[str] = (),
    examples: int = DEFAULT_EXAMPLES,
    seed: int | None = None,
    timeout: float | None = None,
    fail_on_tool_error: bool = False,
    sandbox: SandboxPolicy | None = None,
    **runner_options: Any,
) -> FuzzReport:
    """Fuzz one tool (or several) with arguments generated from its own JSON Schema.

    Args:
        tool: a tool name, or several.
        tool_paths: tool files or folders, as for :func:`open_runner` (and ``--tools``).
        examples: examples per property (Hypothesis ``max_examples``).
        seed: the run's seed; the same seed replays the same run. Default: a
            random one, reported in the result.
        timeout: seconds per call; default the tool's own timeout, else 10 s.
        fail_on_tool_error: count a ``tool_error`` on valid input as a failure.
        sandbox: the runner's policy (a tool's own policy still wins).
        runner_options: passed to :func:`open_runner` (``cwd``, ``grace``,
            ``load_timeout``, ``discover_sources``, ``env``, ...).

    Returns:
        A :class:`FuzzReport`; ``report.failures`` is empty when nothing was found.

    Raises:
        ConfigError: a tool is not found (the message says why, load errors
            included), the arguments are out of range, or Hypothesis is not
            installed (``pip install 'xcsh-run[fuzz]'``).

    Cancellation: cancelling the caller's scope stops the call in flight
    through the ladder, and every worker is gone before ``Cancelled`` propagates.
    """
    require_hypothesis()
    names = [tool] if isinstance(tool, str) else list(tool)
    if not names:
        raise ConfigError("name at least one tool to fuzz")
    if examples < 1:
        raise ConfigError(f"examples must be at least 1, got {examples}")
    if timeout is not None:
        check_seconds("timeout", timeout)
    seed = random.randrange(2**32) if seed is None else seed
    policy = sandbox if sandbox is not None else SandboxPolicy()
    properties: list[PropertyReport] = []
    for name in names:
        properties += await _fuzz_one(
            name,
            tool_paths=tool_paths,
            examples=examples,
            seed=seed,
            timeout=timeout,
            fail_on_tool_error=fail_on_tool_error,
            sandbox=policy,
            runner_options=runner_options,
        )
    return FuzzReport(seed=seed, examples=examples, properties=properties)


async def _fuzz_one(
    name: str,
    *,
    tool_paths: Sequence[str],
    examples: int,
    seed: int,
    timeout: float | None,
    fail_on_tool_error: bool,
    sandbox: SandboxPolicy,
    runner_options: dict[str, Any],
) -> list[PropertyReport]:
    # A marker of our own, so that what this run started is found wherever it
    # was reparented, and nothing else is mistaken for it.
    mark = uuid.uuid4().hex
    options = dict(runner_options)
    options["env"] = {**(options.get("env") or os.environ), MARK_VAR: mark}
    reports: list[PropertyReport] = []
    missing = None
    async with open_runner(tool_paths, sandbox=sandbox, **options) as runner:
        info = runner.get_tool(name)
        if info is None:
            # Raised once the runner is closed: from inside its block it
            # would come out wrapped in the runner's nursery's ExceptionGroup.
            missing = _not_found(runner, name)
        else:
            strategies = await trio.to_thread.run_sync(_strategies, info)
            fuzz = _ToolFuzz(
                runner,
                info,
                mark=mark,
                examples=examples,
                seed=seed,
                timeout=timeout if timeout is not None else info.timeout or DEFAULT_CALL_TIMEOUT,
                fail_on_tool_error=fail_on_tool_error,
                tool_paths=tool_paths,
                sandbox=sandbox,
            )
            for prop in (VALID, NEAR_MISSES):
                reports.append(await trio.to_thread.run_sync(fuzz.run_property, prop, strategies))
    if missing is not None:
        raise ConfigError(missing)
    started = time.monotonic()
    # The runner is closed: nothing carrying the mark may be left at all.
    survivors = await trio.to_thread.run_sync(marked_processes, mark)
    cleanup: list[FuzzFailure] = []
    if survivors:
        kill_processes(survivors)
        cleanup.append(FuzzFailure(name, CLEANUP, LEFT_BEHIND, f"{describe_processes(survivors)} outlived the runner"))
    reports.append(PropertyReport(name, CLEANUP, failures=cleanup, seconds=round(time.monotonic() - started, 3)))
    return reports


def _strategies(info: ToolInfo) -> SchemaStrategies:
    from ._fuzz_schema import SchemaStrategies

    return SchemaStrategies(info.parameters)


def _not_found(runner: Runner, name: str) -> str:
    names = sorted(t.name for t in runner.tools if not t.hidden)
    message = f"no tool named {name!r}"
    message += f"; known tools: {', '.join(names)}" if names else "; no tools were found"
    failed = [e for e in runner.errors if e.shadowed_by is None]
    if failed:
        message += "\nmodules that failed to load:\n" + "\n".join(f"  {e.message}" for e in failed)
    return message


def fuzz_tool_sync(tool: str | Sequence[str], **options: Any) -> FuzzReport:
    """:func:`fuzz_tool` for plain (non-trio) code, such as a synchronous pytest test."""

    async def main() -> FuzzReport:
        return await fuzz_tool(tool, **options)

    return trio.run(main)


def assert_fuzz_clean(tool: str | Sequence[str], **options: Any) -> FuzzReport:
    """Fuzz ``tool`` and raise ``AssertionError`` with the report (and reproducers) if anything failed.

    For a tool author's test suite::

        def test_my_tool_survives_fuzzing():
            assert_fuzz_clean("my_tool", tool_paths=["tools/my_tool.py"], examples=200, seed=0)

    Options are those of :func:`fuzz_tool`. Returns the (clean) report.
    """
    report = fuzz_tool_sync(tool, **options)
    if not report.ok:
        raise AssertionError("xcsh-run fuzz found problems:\n" + report.summary())
    return report
