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
fuzz run starts: ``import runner`` (and so ``xcsh-run TOOL``) does not pay for them.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shlex
import signal
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from ._errors import ConfigError
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
MARK_VAR: Final = "XCSH_RUN_FUZZ_MARK"  # XCSH_RUN_* passes every sandbox's environment allow-list

VALID: Final = "valid inputs"
NEAR_MISSES: Final = "near-misses"
CLEANUP: Final = "no process left behind"

# Problem names, as reported (and as the JUnit failure type).
CRASHED: Final = "crashed"
TIMEOUT: Final = "timeout"
PROTOCOL_ERROR: Final = "protocol_error"
VALID_REJECTED: Final = "valid_rejected"
INVALID_ACCEPTED: Final = "invalid_accepted"
BAD_SHAPE: Final = "bad_shape"
LEFT_BEHIND: Final = "left_behind"
BUSY_WORKER: Final = "busy_worker"
RUNNER_STUCK: Final = "runner_stuck"
TOOL_ERROR: Final = "tool_error"


class FuzzFailure(msgspec.Struct, frozen=True):
    """One distinct problem found, with its minimal example.

    Attributes:
        tool: the tool's name.
        property: ``"valid inputs"``, ``"near-misses"`` or ``"no process left behind"``.
        problem: what went wrong: ``crashed``, ``timeout``, ``protocol_error``,
            ``valid_rejected``, ``invalid_accepted``, ``bad_shape``,
            ``left_behind``, ``busy_worker``, ``tool_error`` (only with
            ``fail_on_tool_error``), or another error kind the call ended with.
        message: one line saying what happened.
        arguments: the minimal arguments that show it (None for a problem
            found after the run, such as a process left behind).
        reproducer: a shell command that runs the tool with those arguments.
        near_miss: for a near-miss, which rule was broken.
        result: the call's result as JSON, when there was one.
        flaky: Hypothesis could not make the example fail again on replay.
    """

    tool: str
    property: str
    problem: str
    message: str
    arguments: dict[str, Any] | None = None
    reproducer: str | None = None
    near_miss: str | None = None
    result: dict[str, Any] | None = None
    flaky: bool = False


class PropertyReport(msgspec.Struct, frozen=True):
    """How one property of one tool went.

    Attributes:
        calls: tool calls made (generation and shrinking together).
        skipped: why the property did not run (the schema rejects nothing
            this fuzzer knows how to build), or None.
        error: why the property could not run to the end (no arguments could
            be generated, ...), or None.
        seconds: wall time (not in :meth:`FuzzReport.summary`, which is
            reproducible from the seed).
    """

    tool: str
    name: str
    calls: int = 0
    failures: list[FuzzFailure] = []
    skipped: str | None = None
    error: str | None = None
    seconds: float = 0.0


class FuzzReport(msgspec.Struct, frozen=True):
    """The outcome of a fuzz run: a property report per tool and property."""

    seed: int
    examples: int
    properties: list[PropertyReport]

    @property
    def failures(self) -> list[FuzzFailure]:
        """Every failure found, in report order."""
        return [f for prop in self.properties for f in prop.failures]

    @property
    def errors(self) -> list[str]:
        """Why some property could not run (each prefixed with tool and property)."""
        return [f"{p.tool}: {p.name}: {p.error}" for p in self.properties if p.error is not None]

    @property
    def ok(self) -> bool:
        """No failure and no error."""
        return not self.failures and not self.errors

    @property
    def reproducers(self) -> list[str]:
        """The reproducer command of every failure that has one."""
        return [f.reproducer for f in self.failures if f.reproducer is not None]

    @property
    def reproducer(self) -> str | None:
        """The first failure's reproducer command, or None."""
        return next(iter(self.reproducers), None)

    @property
    def exit_code(self) -> int:
        """What ``xcsh-run fuzz`` exits with: 0 clean, 1 a failure found, 2 could not run."""
        return 1 if self.failures else 2 if self.errors else 0

    def summary(self) -> str:
        """A human-readable report; the same seed gives the same text."""
        lines = []
        for prop in self.properties:
            head = f"{prop.tool}: {prop.name}:"
            if prop.skipped is not None:
                lines.append(f"{head} skipped ({prop.skipped})")
            elif prop.failures:
                n = len(prop.failures)
                lines.append(f"{head} FAILED, {n} distinct failure{'s' * (n != 1)} ({_calls(prop)})")
            elif prop.error is not None:
                lines.append(f"{head} ERROR: {prop.error}")
            else:
                lines.append(f"{head} ok ({_calls(prop)})" if prop.name != CLEANUP else f"{head} ok")
            for f in prop.failures:
                lines.append(f"  {f.problem}{' (flaky)' if f.flaky else ''}: {f.message}")
                if f.near_miss is not None:
                    lines.append(f"    near-miss: {f.near_miss}")
                if f.reproducer is not None:
                    lines.append(f"    reproduce: {f.reproducer}")
        n = len(self.failures)
        if n:
            lines.append(f"{n} failure{'s' * (n != 1)} found (seed {self.seed}; rerun with --seed {self.seed})")
        elif self.errors:
            lines.append(f"the fuzz could not run to the end (seed {self.seed})")
        else:
            lines.append(f"no failure found (seed {self.seed})")
        return "\n".join(lines)

    def junit_xml(self) -> str:
        """A JUnit XML report: a testsuite per tool, a testcase per property, a failure per problem."""
        import xml.etree.ElementTree as ET

        root = ET.Element("testsuites", name="xcsh-run fuzz")
        by_tool: dict[str, list[PropertyReport]] = {}
        for prop in self.properties:
            by_tool.setdefault(prop.tool, []).append(prop)
        totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
        for tool, props in by_tool.items():
            counts = {
                "tests": len(props),
                "failures": sum(1 for p in props if p.failures),
                "errors": sum(1 for p in props if p.error is not None and not p.failures),
                "skipped": sum(1 for p in props if p.skipped is not None),
            }
            seconds = sum(p.seconds for p in props)
            attrib = {"name": tool, "time": f"{seconds:.3f}", **{k: str(v) for k, v in counts.items()}}
            suite = ET.SubElement(root, "testsuite", attrib)
            properties = ET.SubElement(suite, "properties")
            ET.SubElement(properties, "property", name="seed", value=str(self.seed))
            ET.SubElement(properties, "property", name="examples", value=str(self.examples))
            for prop in props:
                case = ET.SubElement(
                    suite, "testcase", classname=f"xcsh-run.fuzz.{tool}", name=prop.name, time=f"{prop.seconds:.3f}"
                )
                for f in prop.failures:
                    failure = ET.SubElement(case, "failure", message=f.reproducer or f.message, type=f.problem)
                    failure.text = _failure_text(f)
                if prop.error is not None and not prop.failures:
                    ET.SubElement(case, "error", message=prop.error, type="fuzz_error")
                if prop.skipped is not None:
                    ET.SubElement(case, "skipped", message=prop.skipped)
            for key, value in counts.items():
                totals[key] += value
        root.attrib.update({k: str(v) for k, v in totals.items()})
        ET.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

    def write_junit(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`junit_xml` to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.junit_xml())


def _calls(prop: PropertyReport) -> str:
    return f"{prop.calls} call{'s' * (prop.calls != 1)}"


def _failure_text(f: FuzzFailure) -> str:
    lines = [f"{f.problem}{' (flaky: did not fail again on replay)' if f.flaky else ''}: {f.message}"]
    if f.near_miss is not None:
        lines.append(f"near-miss: {f.near_miss}")
    if f.arguments is not None:
        lines.append(f"arguments: {json.dumps(f.arguments, ensure_ascii=False)}")
    if f.reproducer is not None:
        lines.append(f"reproduce: {f.reproducer}")
    if f.result is not None:
        lines.append(f"result: {json.dumps(f.result, ensure_ascii=False, default=str)}")
    return "\n".join(lines)


# --- the judge ------------------------------------------------------------------------


def _shape_problem(result: ToolResult) -> str | None:
    """Why ``result`` breaks the result contract, or None."""
    for i, block in enumerate(result.content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            continue
        if kind == "image" and isinstance(block.get("data"), str) and isinstance(block.get("mimeType"), str):
            continue
        return f"content[{i}] is not a text or image block: {json.dumps(block, default=repr)[:200]}"
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


# --- processes ------------------------------------------------------------------------


def _marked(mark: str) -> list[tuple[int, int, str]]:
    """(pid, ppid, command) of live processes whose environment carries ``MARK_VAR=mark``.

    Read straight from /proc rather than through psutil: this runs after every
    example, and on a busy machine psutil's per-process objects cost several
    times more (xcsh-run is Linux-only anyway: pidfds, cgroups).
    """
    needle = f"{MARK_VAR}={mark}".encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] in (b"Z", b"X"):
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        found.append((int(entry), int(fields[1]), cmd))
    return found


def _kill(processes: Sequence[tuple[int, int, str]]) -> None:
    for pid, _, _ in processes:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _describe_processes(processes: Sequence[tuple[int, int, str]]) -> str:
    shown = ", ".join(f"{cmd[:60] or '?'}" for _, _, cmd in processes[:3])
    more = f" and {len(processes) - 3} more" if len(processes) > 3 else ""
    return f"{len(processes)} process{'es' * (len(processes) != 1)} ({shown}{more})"


# --- the run --------------------------------------------------------------------------


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


def reproducer_command(
    tool: str,
    arguments: Mapping[str, Any],
    *,
    tool_paths: Sequence[str] = (),
    timeout: float | None = None,
    sandbox: SandboxPolicy | None = None,
) -> str:
    """``xcsh-run TOOL --args '<json>' ...``, shell-quoted, ready to paste."""
    from ._cli import COMMANDS  # only when there is something to report

    argv = ["xcsh-run"]
    if tool in COMMANDS or tool.startswith("-"):
        argv.append("run")
    argv += [tool, "--args", json.dumps(arguments, ensure_ascii=False)]
    if timeout is not None:
        argv += ["--timeout", f"{timeout:g}"]
    for path in tool_paths:
        argv += ["--tools", path]
    if sandbox is not None and sandbox.level != "contained":
        argv += ["--sandbox", sandbox.level]
    if sandbox is not None and sandbox.best_effort:
        argv.append("--sandbox-best-effort")
    return " ".join(shlex.quote(arg) for arg in argv)


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
        strays = [p for p in _marked(self.mark) if p[1] != os.getpid()]
        if strays:
            _kill(strays)
            if found is None:
                found = (LEFT_BEHIND, f"{_describe_processes(strays)} outlived the call")
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
            included), or the arguments are out of range.

    Cancellation: cancelling the caller's scope stops the call in flight
    through the ladder, and every worker is gone before ``Cancelled`` propagates.
    """
    names = [tool] if isinstance(tool, str) else list(tool)
    if not names:
        raise ConfigError("name at least one tool to fuzz")
    if examples < 1:
        raise ConfigError(f"examples must be at least 1, got {examples}")
    if timeout is not None and not (timeout > 0 and timeout < float("inf")):
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
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
    survivors = await trio.to_thread.run_sync(_marked, mark)
    cleanup: list[FuzzFailure] = []
    if survivors:
        _kill(survivors)
        cleanup.append(FuzzFailure(name, CLEANUP, LEFT_BEHIND, f"{_describe_processes(survivors)} outlived the runner"))
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
