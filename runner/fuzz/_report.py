"""What a fuzz run found: :class:`FuzzReport` (its summary and JUnit XML) and the reproducer commands.

The reproducer is the one ``xcsh-run`` command line the library writes, so the
command names it must step around (a tool named like a command is reached
through ``run``) are declared here, and the CLI dispatches on this same tuple.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from xcsh_run._sandbox import SandboxPolicy

# The `xcsh-run` commands; any other first argument is a tool's name.
COMMANDS: Final = (
    "run", "list", "describe", "batch", "watch", "serve", "fuzz", "new", "doctor", "install-bun", "daemon",
)  # fmt: skip

# The properties, as reported (and as the JUnit test case names).
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
            ``left_behind``, ``busy_worker``, ``tool_error`` (an exception
            that signals a bug, or any with ``fail_on_tool_error``), or
            another error kind the call ended with.
        message: one line saying what happened.
        arguments: the minimal arguments that show it (None for a problem
            found after the run, such as a process left behind).
        reproducer: a shell command that runs the tool with those arguments.
        near_miss: for a near-miss, which rule was broken.
        result: the call's result as JSON, when there was one.
        flaky: Hypothesis could not make the example fail again on replay.
        shrunk: False when the search stopped (``max_timeouts``) before
            Hypothesis shrank it: the smallest example seen, maybe not minimal.
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
    shrunk: bool = True


class PropertyReport(msgspec.Struct, frozen=True):
    """How one property of one tool went.

    Attributes:
        calls: tool calls made (generation and shrinking together).
        skipped: why the property did not run (the schema rejects nothing
            this fuzzer knows how to build), or None.
        error: why the property could not run to the end (no arguments could
            be generated, ...), or None.
        stopped: why the search ended before its examples were spent (too
            many calls timed out), or None.
        seconds: wall time (not in :meth:`FuzzReport.summary`, which is
            reproducible from the seed).
    """

    tool: str
    name: str
    calls: int = 0
    failures: list[FuzzFailure] = []
    skipped: str | None = None
    error: str | None = None
    stopped: str | None = None
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
            if prop.stopped is not None:
                lines.append(f"  stopped early: {prop.stopped}")
            for f in prop.failures:
                lines.append(f"  {f.problem}{_marks(f)}: {f.message}")
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
                if prop.stopped is not None:
                    ET.SubElement(case, "system-out").text = f"stopped early: {prop.stopped}"
            for key, value in counts.items():
                totals[key] += value
        root.attrib.update({k: str(v) for k, v in totals.items()})
        ET.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

    def write_junit(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`junit_xml` to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.junit_xml())


def _marks(f: FuzzFailure) -> str:
    return (" (flaky)" if f.flaky else "") + ("" if f.shrunk else " (not shrunk)")


def _calls(prop: PropertyReport) -> str:
    return f"{prop.calls} call{'s' * (prop.calls != 1)}"


def _failure_text(f: FuzzFailure) -> str:
    lines = [f"{f.problem}{' (flaky: did not fail again on replay)' if f.flaky else ''}: {f.message}"]
    if not f.shrunk:
        lines.append("not shrunk: the search stopped (max_timeouts) before this example was made minimal")
    if f.near_miss is not None:
        lines.append(f"near-miss: {f.near_miss}")
    if f.arguments is not None:
        lines.append(f"arguments: {json.dumps(f.arguments, ensure_ascii=False)}")
    if f.reproducer is not None:
        lines.append(f"reproduce: {f.reproducer}")
    if f.result is not None:
        lines.append(f"result: {json.dumps(f.result, ensure_ascii=False, default=str)}")
    return "\n".join(lines)


def reproducer_command(
    tool: str,
    arguments: Mapping[str, Any],
    *,
    tool_paths: Sequence[str] = (),
    timeout: float | None = None,
    sandbox: SandboxPolicy | None = None,
) -> str:
    """``xcsh-run TOOL --args '<json>' ...``, shell-quoted, ready to paste."""
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
