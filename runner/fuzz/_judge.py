"""The fuzz judge: whether one call's result breaks a property, and which failures are the same one.

A ``tool_error`` on valid input is judged by the exception behind it, which the
worker names in the error's evidence (``exception``, ``exception_mro``,
``raised_at``, ``deliberate``; protocol.md, section 6):

* deliberate errors pass: a ``xcsh_run.pi.ToolError`` (or subclass), or an
  exception of a class the tool declares in ``expected_errors``;
* exceptions that signal a bug fail: those in :data:`BUG_EXCEPTIONS`, by class
  hierarchy (``LookupError`` covers ``KeyError`` and ``IndexError``);
* anything else passes (``ValueError``, ``OSError``, ``RuntimeError``, a
  tool's own exception classes): code raises these on purpose too often.

The names are matched as the worker gives them, whatever its language. The
JavaScript worker names a thrown error by its constructor and prototype chain
(``["TypeError", "Error"]``); ``pi.ToolError`` is its deliberate error. Of
JavaScript's built-in errors, those that signal a bug are listed by the same
names (``TypeError``, ``ReferenceError`` and ``SyntaxError`` share Python's;
``RangeError``, ``URIError`` and ``EvalError`` are JavaScript's own), as is
the worker's ``ProcessExit`` (a tool that called ``process.exit()``, the twin
of ``SystemExit``); a plain ``Error`` passes, as a ``RuntimeError`` does.

The command line (``--allow-error`` / ``--flag-error``) overrides both, the
most specific class deciding; ``--fail-on-tool-error`` fails every
``tool_error``. A worker that names no exception (an older one, or one in
another language) gets the old rule: its ``tool_error`` passes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from typing import Final, TypeAlias

import msgspec

from xcsh_run._results import ErrorInfo, ToolResult
from xcsh_run.fuzz._report import BAD_SHAPE, INVALID_ACCEPTED, NEAR_MISSES, TOOL_ERROR, VALID_REJECTED

Key: TypeAlias = tuple[str, ...]
"""What tells failures apart (:func:`failure_key`)."""

BUG_EXCEPTIONS: Final = (
    "ArithmeticError",  # ZeroDivisionError, OverflowError, FloatingPointError
    "LookupError",  # KeyError, IndexError
    "TypeError",  # including a result that is not one
    "AttributeError",
    "NameError",  # UnboundLocalError
    "AssertionError",
    "RecursionError",
    "NotImplementedError",
    "ImportError",  # ModuleNotFoundError
    "SyntaxError",  # IndentationError, TabError (from exec, compile, a late import)
    "UnicodeError",  # UnicodeEncodeError, UnicodeDecodeError: valid strings are any Unicode
    "StopIteration",  # leaked out of a generator's caller
    "StopAsyncIteration",
    "SystemError",
    "ReferenceError",
    "SystemExit",  # sys.exit() in a tool: raise ToolError to refuse a call
    # JavaScript's own (its TypeError, ReferenceError and SyntaxError are matched by the names above):
    "RangeError",  # "x".repeat(-1), new Array(-1), toFixed(101), a runaway recursion
    "URIError",  # decodeURIComponent("%") on valid input
    "EvalError",
    "ProcessExit",  # process.exit() in a JavaScript tool, as SystemExit: throw pi.ToolError to refuse a call
)
"""Exception classes (and their subclasses) whose ``tool_error`` on valid input is a bug."""


class ErrorRules(msgspec.Struct, frozen=True):
    """How ``tool_error`` results on valid input are judged.

    Attributes:
        fail_on_tool_error: every ``tool_error`` fails, deliberate or not.
        allow: exception names that pass (a bare name or ``module.Class``),
            whatever the defaults say.
        flag: exception names that fail, whatever the defaults and the
            tool's own declaration say.
    """

    fail_on_tool_error: bool = False
    allow: frozenset[str] = frozenset()
    flag: frozenset[str] = frozenset()


def error_rules(
    fail_on_tool_error: bool, allow_errors: Iterable[str] = (), flag_errors: Iterable[str] = ()
) -> ErrorRules:
    """The rules, with names checked: a class name, dotted or not, with no spaces."""
    for name in (*allow_errors, *flag_errors):
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"{name!r} is not an exception class name; give one like KeyError or json.JSONDecodeError")
    return ErrorRules(fail_on_tool_error, frozenset(allow_errors), frozenset(flag_errors))


def _matches(name: str, names: frozenset[str]) -> bool:
    return name in names or name.rsplit(".", 1)[-1] in names


def tool_error_verdict(error: ErrorInfo, rules: ErrorRules) -> str | None:
    """Why this ``tool_error`` on valid input is a failure, or None when it passes."""
    mro: Sequence[str] = error.exception_mro or ([error.exception] if error.exception else [])
    if rules.fail_on_tool_error:
        return "every tool_error counts (--fail-on-tool-error)"
    for name in mro:
        if _matches(name, rules.allow):
            return None
        if _matches(name, rules.flag):
            return f"{name} is flagged (--flag-error)"
    if error.deliberate:
        return None
    for name in mro:
        if name in BUG_EXCEPTIONS:
            return f"{name} signals a bug" if name == mro[0] else f"a kind of {name}, which signals a bug"
    return None


def describe_tool_error(error: ErrorInfo, why: str) -> str:
    """``ZeroDivisionError: division by zero (raised at tool.py:4; an exception that signals a bug)``."""
    first = first_line(error.message)
    head = f"{error.exception}: {first}" if error.exception and not first.startswith(error.exception) else first
    where = f"raised at {_short_path(error.raised_at)}; " if error.raised_at else ""
    deliberate = "deliberate, but " if error.deliberate else ""
    return f"{head} ({where}{deliberate}{why})"


def _short_path(location: str) -> str:
    path, _, line = location.rpartition(":")
    if not path:
        return location
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return location
    return f"{rel if not rel.startswith('..') else path}:{line}"


def shape_problem(result: ToolResult) -> str | None:
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


def judge(prop: str, result: ToolResult, rules: ErrorRules) -> tuple[str, str] | None:
    """(problem, message) if ``result`` breaks the property, else None."""
    kind = result.kind
    detail = first_line(result.error.message) if result.error is not None else ""
    if prop == NEAR_MISSES:
        if kind == "invalid_arguments":
            return None
        ended = f"ended as {kind}: {detail}" if kind is not None else "succeeded"
        return INVALID_ACCEPTED, f"arguments the schema rejects were accepted; the call {ended}"
    if kind is None:
        shape = shape_problem(result)
        return (BAD_SHAPE, shape) if shape is not None else None
    if kind == "invalid_arguments":
        return VALID_REJECTED, f"arguments the schema accepts were rejected: {detail}"
    if kind == "tool_error":
        assert result.error is not None
        why = tool_error_verdict(result.error, rules)
        return (TOOL_ERROR, describe_tool_error(result.error, why)) if why is not None else None
    return kind, detail


def failure_key(problem: str, near_miss: str | None, result: ToolResult | None) -> Key:
    """What makes two failures the same one: the problem, and the exception type and place, or how it crashed."""
    error = result.error if result is not None else None
    if error is None:
        return (problem, near_miss or "")
    how = error.exception or error.signal or (str(error.exit_code) if error.exit_code is not None else "")
    if error.kind == "timeout":
        # One that ran out before a worker was ready (no rung: no tool code
        # ran) is the host's slowness, not the tool's hang: keep them apart.
        how = "ran" if error.rung is not None else "never started"
    return (problem, near_miss or "", how, error.raised_at or "")


def first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."
