"""Fuzzing a tool from its own JSON Schema: ``xcsh-run fuzz TOOL`` and :func:`fuzz_tool`.

Two properties per tool, each a Hypothesis test driven through the real runner
(real workers, the tool's own sandbox policy):

* **valid inputs**: arguments the schema accepts must not crash the worker,
  time out, break the protocol, be refused as ``invalid_arguments``, or come
  back in a shape other than MCP content blocks, or end as a ``tool_error``
  whose exception signals a bug (``_judge`` has the rule: a deliberate
  ``ToolError`` or a declared expected error passes).
* **near-misses**: a valid object with one thing broken (a required property
  left out, a property of the wrong type, an unknown property when
  ``additionalProperties`` is false, a number out of range, a value outside an
  enum) must end as ``invalid_arguments``, before any tool code runs.

After every call no worker may still be busy and no process carrying this
run's marker may live outside the runner's own workers; after the run, none at
all. A failure does not end the search (``_search`` runs each property
in rounds): every distinct failure is shrunk by Hypothesis to a minimal
example and reported with a ready ``xcsh-run TOOL --args '...'`` command; a
run is reproducible from its seed (no example database, so CI runs do not
depend on local state).

Hypothesis, and the strategies in ``_schema``, are imported only when a
fuzz run starts: ``import xcsh_run`` (and so ``xcsh-run TOOL``) does not pay for
them, and works without them. Hypothesis is a dependency of xcsh-run; should it
be missing all the same (an install with ``--no-deps``), a run fails at once with a
:class:`ConfigError` saying how to add it. The reports are in ``_report``, the
process checks in ``_leftovers``, the verdicts in ``_judge``.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import trio

from xcsh_run._config import check_seconds
from xcsh_run._discovery import ToolInfo
from xcsh_run._errors import ConfigError
from xcsh_run._host import Runner, open_runner
from xcsh_run._sandbox import SandboxPolicy
from xcsh_run.fuzz._judge import ErrorRules, error_rules
from xcsh_run.fuzz._leftovers import MARK_VAR, describe_processes, kill_processes, marked_processes
from xcsh_run.fuzz._report import CLEANUP, LEFT_BEHIND, NEAR_MISSES, VALID, FuzzFailure, FuzzReport, PropertyReport
from xcsh_run.fuzz._search import ToolFuzz

if TYPE_CHECKING:
    from xcsh_run.fuzz._schema import SchemaStrategies

DEFAULT_EXAMPLES: Final = 100
DEFAULT_CALL_TIMEOUT: Final = 10.0
# The API's: a hang fails a test suite in about one call timeout. The CLI's
# (`--max-timeouts`, 20) is higher, so that it shrinks hangs too.
DEFAULT_MAX_TIMEOUTS: Final = 1
# What a caller is told when Hypothesis, a dependency, is missing all the same (an install with
# --no-deps, or one that removed it): `import xcsh_run` and every other command work without it.
HYPOTHESIS_MISSING: Final = (
    "fuzzing needs Hypothesis, a dependency of xcsh-run that is missing from the environment xcsh-run "
    "runs in; install it there: pip install 'hypothesis>=6.100' (pipx: pipx inject xcsh-run hypothesis; "
    "uv: uv tool install --with hypothesis ...), or reinstall xcsh-run with its dependencies; "
    "docs/install.md has every way"
)


# --- the run --------------------------------------------------------------------------


def require_hypothesis() -> None:
    """Raise :class:`ConfigError` saying how to install Hypothesis, unless it imports."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        raise ConfigError(HYPOTHESIS_MISSING) from None


async def fuzz_tool(
    tool: str | Sequence[str],
    *,
    tool_paths: Sequence[str] = (),
    examples: int = DEFAULT_EXAMPLES,
    seed: int | None = None,
    timeout: float | None = None,
    fail_on_tool_error: bool = False,
    allow_errors: Sequence[str] = (),
    flag_errors: Sequence[str] = (),
    max_timeouts: int = DEFAULT_MAX_TIMEOUTS,
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
        timeout: seconds per call before it counts as a hang; default 10 s,
            or the tool's own timeout when that is shorter.
        fail_on_tool_error: count every ``tool_error`` on valid input as a
            failure, deliberate ones included. Without it, only an exception
            that signals a bug fails (``ZeroDivisionError``, ``KeyError``,
            ``TypeError``, ...; docs/fuzzing.md has the list), never a
            ``xcsh_run.pi.ToolError`` or one of the tool's ``expected_errors``.
        allow_errors: exception class names (``"ValueError"``,
            ``"json.JSONDecodeError"``) whose ``tool_error`` passes, subclasses
            included; the most specific class named here or in ``flag_errors`` wins.
        flag_errors: exception class names whose ``tool_error`` fails, even
            when the tool declares them expected.
        max_timeouts: stop searching a property once this many calls have
            timed out (each costs ``timeout``, and shrinking a hang replays
            it): the failures found so far are reported, each with the
            smallest example seen. The default, 1, fails a hanging tool
            within about one timeout; raise it to have hangs shrunk too.
        sandbox: the runner's policy (a tool's own policy still wins).
        runner_options: passed to :func:`open_runner` (``cwd``, ``grace``,
            ``load_timeout``, ``discover_sources``, ``env``, ...).

    Returns:
        A :class:`FuzzReport`; ``report.failures`` is empty when nothing was found.

    Raises:
        ConfigError: a tool is not found (the message says why, load errors
            included), the arguments are out of range, or Hypothesis is not
            installed (the message says how to add it).

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
    if max_timeouts < 1:
        raise ConfigError(f"max_timeouts must be at least 1, got {max_timeouts}")
    try:
        rules = error_rules(fail_on_tool_error, allow_errors, flag_errors)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
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
            rules=rules,
            max_timeouts=max_timeouts,
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
    rules: ErrorRules,
    max_timeouts: int,
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
            fuzz = ToolFuzz(
                runner,
                info,
                mark=mark,
                examples=examples,
                seed=seed,
                timeout=timeout
                if timeout is not None
                else min(info.timeout or DEFAULT_CALL_TIMEOUT, DEFAULT_CALL_TIMEOUT),
                rules=rules,
                max_timeouts=max_timeouts,
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
    from xcsh_run.fuzz._schema import SchemaStrategies

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
