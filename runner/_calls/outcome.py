"""What a call's end means: the worker's answer (or its end, or the ladder) as a :class:`ToolResult`.

Rule 3 of ``xcsh_run._calls.lifecycle`` lives here: the error kind comes from the JSON-RPC
error code, never from the worker's free-form ``error.data``; a worker cannot
claim that its call "timed out" or "crashed", those kinds are the host's own
observations.

A tool that declares an ``output_schema`` answers with details that conform
to it, or its result is a ``tool_error`` that names the mismatch (MCP: a
server MUST provide structured results that conform to the output schema).
"""

from __future__ import annotations

import enum
import logging
import os
import re
import sysconfig
from collections.abc import Callable, Mapping
from typing import Any, Final

from xcsh_run._calls.trace_context import TraceContext
from xcsh_run._discovery import LAST_STDERR, ToolInfo, check_details, last_line
from xcsh_run._errors import RemoteError, RemoteProtocolError, WorkerDied, describe_exit
from xcsh_run._pool import InFlight, LoadFailed, PoolWorker
from xcsh_run._results import ErrorKind, ToolResult, error_result
from xcsh_run._sandbox import SandboxPolicy
from xcsh_run.worker import protocol as p

log: Final = logging.getLogger("xcsh_run")
UpdateCallback = Callable[[dict[str, Any]], object]


class Rung(enum.StrEnum):
    """Which step of the ladder ended a call."""

    COOPERATIVE = "cooperative"  # it answered or exited within the grace period
    KILLED = "killed"  # its tree was killed after the grace period


def deliverer(on_update: UpdateCallback | None) -> Callable[[p.CallResult], None]:
    def deliver(partial: p.CallResult) -> None:
        if on_update is None:
            return
        try:
            on_update({"content": partial.content, "details": partial.details})
        except Exception as exc:  # the caller's callback must not take the host down
            log.warning("on_update callback raised %r; update dropped", exc)

    return deliver


def not_started(info: ToolInfo, exc: LoadFailed) -> ToolResult:
    if exc.startup:
        message = f"could not run {info.name!r}: {exc}"
        return error_result(ErrorKind.CRASHED, message, stderr_tail=exc.stderr_tail, module=info.module)
    return error_result(ErrorKind.LOAD_ERROR, str(exc), stderr_tail=exc.stderr_tail, module=info.module)


def not_sent(info: ToolInfo, exc: p.LocalProtocolError) -> ToolResult:
    if isinstance(exc, p.FrameTooLarge):
        message = (
            f"the call to {info.name!r} does not fit in one protocol message ({exc}); pass less data, "
            "or open the runner with a larger max_frame_bytes"
        )
        return error_result(ErrorKind.INVALID_ARGUMENTS, message, path="$", module=info.module)
    # Not JSON: a ctx (set_context, or the call's own) holding values JSON cannot carry.
    message = (
        f"the call to {info.name!r} could not be sent: {exc}; ctx values must be JSON (str, numbers, lists, dicts)"
    )
    return error_result(ErrorKind.INVALID_ARGUMENTS, message, module=info.module)


def stopped(
    info: ToolInfo, kind: ErrorKind, reason: str | None, timeout: float, rung: Rung, worker: PoolWorker
) -> ToolResult:
    if kind is ErrorKind.TIMEOUT:
        message = f"{info.name!r} timed out after {timeout:g} s"
    else:
        message = f"{info.name!r} was cancelled ({reason})"
    how = "stopped within the grace period" if rung is Rung.COOPERATIVE else "was killed after the grace period"
    return error_result(
        kind,
        f"{message}; the tool {how}",
        rung=rung.value,
        stderr_tail=worker.stderr_tail.text() or None,
        module=info.module,
    )


def _exception_evidence(data: Mapping[str, Any]) -> dict[str, Any]:
    """What the worker says of a tool_error's exception, kept only where it has the documented types."""
    mro = data.get("exception_mro")
    return {
        "exception": str_or_none(data.get("exception")),
        "exception_mro": mro if isinstance(mro, list) and all(isinstance(n, str) for n in mro) else None,
        "raised_at": str_or_none(data.get("raised_at")),
        "deliberate": data.get("deliberate") if isinstance(data.get("deliberate"), bool) else None,
    }


def _argument_evidence(data: Mapping[str, Any]) -> dict[str, Any]:
    """What the worker says an invalid argument should have been and was, kept only as strings."""
    return {"expected": str_or_none(data.get("expected")), "got": str_or_none(data.get("got"))}


def interpret(
    info: ToolInfo, worker: PoolWorker, pending: InFlight[p.CallResult], policy: SandboxPolicy, *, stopped: bool
) -> ToolResult:
    """The worker's answer (or its end) as a result; ``stopped``: the host was stopping the call."""
    try:
        result = pending.outcome()
    except RemoteError as exc:
        data = exc.data
        kind = ErrorKind(p.kind_of(exc.error.code))  # rule 3
        message = exc.error.message
        limit = str_or_none(data.get("limit")) if kind is ErrorKind.LIMIT_EXCEEDED else None
        if kind is ErrorKind.PROTOCOL_ERROR:
            message = f"the worker answered with an unexpected error ({exc.error.code}): {message}"
        elif (doubt := _unconfirmed(kind, limit, worker, policy, stopped)) is not None:
            # Rule 3, for what a worker may say at all: these kinds are the host's
            # observations, and the worker's word is a claim the host checks.
            message = f"{message} [the tool reported this as {kind.value}{f' ({limit})' if limit else ''}; {doubt}]"
            kind, limit = ErrorKind.TOOL_ERROR, None
        return error_result(
            kind,
            message,
            traceback=str_or_none(data.get("traceback")),
            path=str_or_none(data.get("path")),
            limit=limit,
            **(_argument_evidence(data) if kind is ErrorKind.INVALID_ARGUMENTS else {}),
            module=info.module,
            **(_exception_evidence(data) if kind is ErrorKind.TOOL_ERROR else {}),
        )
    except WorkerDied as exc:
        return error_result(
            ErrorKind.CRASHED,
            f"the worker running {info.name!r} {describe_exit(exc.returncode)}"
            + (f"{LAST_STDERR}{crash_line(exc.stderr_tail, info.module)}" if exc.stderr_tail.strip() else ""),
            exit_code=exc.exit_code,
            signal=exc.signal_name,
            stderr_tail=exc.stderr_tail or None,
            module=info.module,
        )
    except RemoteProtocolError as exc:
        tail = worker.stderr_tail.text() or None
        return error_result(ErrorKind.PROTOCOL_ERROR, str(exc), stderr_tail=tail, module=info.module)
    if info.output_schema is not None:
        problem = check_details(info.output_schema, result.details)
        if problem is not None:
            message = (
                f"{info.name!r} returned details that do not match its output_schema: {problem}; "
                "the tool must return details that match the schema it declares"
            )
            return error_result(ErrorKind.TOOL_ERROR, message, path=problem.path, module=info.module)
    return ToolResult(content=result.content, details=result.details)


_FRAME: Final = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+ in \S+\s*$')
# The worker package (the protocol is its subpackage): its frames are not the tool's.
_WORKER_DIR: Final = os.path.dirname(os.path.dirname(os.path.abspath(p.__file__))) + os.sep
_STDLIB: Final = tuple(os.path.abspath(sysconfig.get_path(name)) + os.sep for name in ("stdlib", "platstdlib"))


def crash_line(stderr_tail: str, module: str) -> str:
    """The line of a dead worker's stderr that says why: faulthandler's, with the tool's innermost frame.

    A fatal signal makes faulthandler write ``Fatal Python error: ...``, each
    thread's frames (most recent first), and then a list of extension
    modules: its last line says nothing. Another death: the last line.
    """
    lines = [line.strip() for line in stderr_tail.splitlines() if line.strip()]
    fatal = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("Fatal Python error:")), None)
    if fatal is None:
        return last_line(stderr_tail)
    frames = [line for line in lines[fatal + 1 :] if (m := _FRAME.match(line)) and _tool_frame(m["file"])]
    # The crashing thread's frames come after "Current thread ...": its innermost tool frame first.
    current = next((i for i, line in enumerate(lines) if i > fatal and line.startswith("Current thread")), None)
    if current is not None:
        frames = [line for line in lines[current + 1 :] if line in frames] or frames
    exact = [line for line in frames if f'"{module}"' in line]
    where = (exact or frames or [""])[0]
    return f"{lines[fatal]}; innermost tool frame: {where}" if where else lines[fatal]


def _tool_frame(path: str) -> bool:
    """A frame of the tool's code: not the worker's, not the standard library's, not frozen."""
    return not (path.startswith(("<", _WORKER_DIR, *_STDLIB)))


WORKER_KINDS: Final = frozenset({ErrorKind.TOOL_ERROR, ErrorKind.INVALID_ARGUMENTS, ErrorKind.NOT_FOUND})
"""What a worker's answer to a call may say as it is; ``cancelled`` and ``limit_exceeded`` are checked."""


def _unconfirmed(
    kind: ErrorKind, limit: str | None, worker: PoolWorker, policy: SandboxPolicy, stopped: bool
) -> str | None:
    """Why the host does not take a worker's error kind as it is; None if it does."""
    if kind in WORKER_KINDS:
        return None
    if kind is ErrorKind.CANCELLED:
        return None if stopped else "the host did not cancel it"
    if kind is not ErrorKind.LIMIT_EXCEEDED:
        return f"only the host reports {kind.value}"
    # A limit enforced inside the worker (an rlimit, or the frame size its own
    # encoder checks) leaves marks in the kernel that only grow: a tool that
    # raises MemoryError or EMFILE itself, or writes the error frame by hand,
    # has not made them, and the host says only what it can see.
    mib = 1 << 20
    mark = worker.high_water()
    seen = {
        "memory": policy.memory_mb is not None
        and (
            worker.boundary.oom_kills() > 0
            or mark.peak_rss >= policy.memory_mb * mib // 2
            or mark.peak_vm >= policy.memory_mb * mib
            or mark.peak_vm < 0
            # Without a memory cgroup the ceiling is RLIMIT_DATA, which refuses
            # a big allocation before it is mapped: no mark grows, nothing refutes.
            or not worker.boundary.has_memory_limit
        ),
        # -1: a mark the host cannot read cannot refute the claim (a host that
        # is not root may not read a non-dumpable worker's /proc/<pid>/io).
        "open_files": policy.open_files is not None and not 0 <= mark.fd_slots < policy.open_files,
        "file_size": policy.file_size_mb is not None and not 0 <= mark.written < policy.file_size_mb * mib,
        "output": mark.peak_rss >= worker.max_frame_bytes,
    }
    if limit is not None and seen.get(limit):
        return None
    return f"the host saw no sign of the {limit or 'unnamed'} limit being reached, so it is reported as a tool_error"


def limits(result: ToolResult, worker: PoolWorker, policy: SandboxPolicy) -> ToolResult:
    """Name the sandbox limit behind a failure, when one was hit."""
    if result.kind not in ("crashed", "tool_error"):
        return result
    err = result.error
    assert err is not None
    limit, why = None, ""
    if worker.output_exceeded:
        limit, why = "output", f"the worker wrote more than {policy.output_mb} MiB to stdout and stderr"
    elif worker.boundary.oom_kills():
        limit, why = "memory", f"the tool's processes went over the {policy.memory_mb} MiB memory limit (OOM kill)"
    elif worker.boundary.cpu_exceeded:
        limit, why = "cpu", f"the tool's processes used its {policy.cpu_seconds} s of CPU time between them"
    elif (err.signal == "SIGXCPU" and _near_cpu_limit(worker, policy)) or (
        err.signal == "SIGKILL" and _at_cpu_limit(worker, policy)
    ):
        # SIGXCPU alone is no proof: a tool can send it to itself.
        limit, why = "cpu", f"the worker used its {policy.cpu_seconds} s of CPU time"
    elif worker.boundary.pids_limit_hits():
        limit, why = "processes", f"the tool tried to run more than {policy.max_procs} processes"
    if limit is None:
        return result
    return error_result(
        ErrorKind.LIMIT_EXCEEDED,
        f"{limit} limit exceeded: {why}; raise it in the sandbox policy if the tool needs more",
        limit=limit,
        exit_code=err.exit_code,
        signal=err.signal,
        stderr_tail=err.stderr_tail,
        traceback=err.traceback,
        module=err.module,
    )


def _near_cpu_limit(worker: PoolWorker, policy: SandboxPolicy) -> bool:
    # SIGXCPU at the soft limit, SIGKILL at the hard one (soft + 5 s) for a tool
    # that ignored SIGXCPU. The kernel checks the limit against its precise run
    # time, while rusage is tick-sampled: at SIGXCPU it read 0.83 s of a 1 s
    # limit here. Half the limit is proof enough that a tool did not just send
    # itself the signal: it had to burn that much CPU first.
    return policy.cpu_seconds is not None and worker.cpu_seconds() >= policy.cpu_seconds / 2


def _at_cpu_limit(worker: PoolWorker, policy: SandboxPolicy) -> bool:
    # The SIGKILL at the hard limit comes 5 s after SIGXCPU: the whole budget
    # is used by then (half would also take a tool's own kill -9 for the limit).
    return policy.cpu_seconds is not None and worker.cpu_seconds() >= policy.cpu_seconds


# The ends the host logs (the file, and -v): what a person debugging a tool looks for.
_END_LEVELS: Final = {
    "timeout": logging.WARNING,
    "crashed": logging.WARNING,
    "limit_exceeded": logging.WARNING,
    "protocol_error": logging.WARNING,
    "cancelled": logging.INFO,
    "busy": logging.INFO,
}


def log_end(
    result: ToolResult, tool: str, call_id: str, worker: PoolWorker | None, trace: TraceContext | None = None
) -> None:
    """A host record of a call that ended in one of the host's own observations (see ``_END_LEVELS``)."""
    level = _END_LEVELS.get(result.kind or "")
    if level is None or result.error is None:
        return
    extra = {"tool": tool, "call_id": call_id, "pid": worker.pid if worker is not None else None}
    if trace is not None:
        extra["trace_id"] = trace.trace_id
    log.log(level, "%r ended %s: %s", tool, result.kind, result.error.message, extra=extra)


def str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
