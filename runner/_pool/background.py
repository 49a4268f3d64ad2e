"""Processes a call leaves running: kept for a tool that declares ``keeps_processes``, else killed with a warning.

1. A leftover is a member of the worker's kill boundary (its cgroup) other
   than the worker and its supervisor, seen when the call's answer is in.
   The boundary, not the process tree, says what belongs to the call:
   ``setsid()`` daemons and reparented grandchildren are members too.
2. A tool that declares ``keeps_processes`` keeps its leftovers: they are
   recorded on the worker's slot, which the pool then neither reaps (idle
   timeout) nor retires for its budget (calls, RSS, CPU) while any of them
   lives. They stay inside the boundary, so the worker's end (a timeout's
   kill, a crash, the runner's close) ends them too, within the teardown bounds.
3. Any other call's leftovers are killed as before (the worker is retired;
   in a worker that holds kept processes, only the new pids are killed, each
   through a pidfd, which names the process it was opened for and no reused pid).
4. Either way each one is named (pid and command line) in a log line and in
   the result: a text line and :attr:`ToolResult.background` (kept ones).
   The tool's own ``details`` are never touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from typing import TYPE_CHECKING, Final

import msgspec
import trio

from xcsh_run._results import BackgroundProcess, ToolResult

if TYPE_CHECKING:
    from xcsh_run._pool.worker_pool import Slot

log: Final = logging.getLogger("xcsh_run")

_COMMAND_CHARS: Final = 200
_NAME_TRIES: Final = 20
_NAME_PAUSE: Final = 0.005
_KILL_WAIT: Final = 0.5  # seconds for SIGKILLed processes to exit: the kernel takes microseconds


def command_of(pid: int) -> str:
    """``pid``'s command line, shortened, or ``?`` once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return "?"
    text = " ".join(raw.replace(b"\0", b" ").decode("utf-8", "replace").split())  # one line
    return text if len(text) <= _COMMAND_CHARS else text[: _COMMAND_CHARS - 3] + "..."


def leftovers(members: list[int], own: set[int]) -> list[BackgroundProcess]:
    """The members of a boundary that are not in ``own``, with their command lines."""
    return [BackgroundProcess(pid=pid, command=command_of(pid)) for pid in sorted(set(members) - own)]


async def _named(procs: list[BackgroundProcess]) -> list[BackgroundProcess]:
    """``procs`` with their command lines, waiting a moment for one that is still in ``execve``.

    A child that a tool's ``spawn`` just started may not have set up its new
    command line yet (the kernel shows it empty for that instant), and the
    name is what the log and the result are for; the wait is bounded.
    """
    for _ in range(_NAME_TRIES):
        if all(p.command for p in procs):
            break
        await trio.sleep(_NAME_PAUSE)
        procs = [p if p.command else BackgroundProcess(pid=p.pid, command=command_of(p.pid)) for p in procs]
    return procs


async def kill_each(pids: list[int]) -> None:
    """SIGKILL each pid through a pidfd (race-free against pid reuse) and wait, briefly, until each has exited.

    The wait matters: the pool reads the boundary's members right after, and a
    killed process that has not exited yet would still count as a leftover and
    retire the worker, ending the processes another call was promised (rule 2).
    A pidfd turns readable when its process exits; ones already gone are skipped.
    """
    fds: list[int] = []
    try:
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            fds.append(fd)
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        with trio.move_on_after(_KILL_WAIT):
            for fd in fds:
                await trio.lowlevel.wait_readable(fd)
    finally:
        for fd in fds:
            os.close(fd)


def kept(result: ToolResult, tool: str, procs: list[BackgroundProcess]) -> ToolResult:
    """``result`` listing ``procs`` as kept in the background (rule 4)."""
    for proc in procs:
        log.info("tool %r keeps background process %d: %s", tool, proc.pid, proc.command)
    lines = [f"[background process {p.pid} kept until the session ends: {p.command}]" for p in procs]
    return msgspec.structs.replace(
        result,
        content=[*result.content, {"type": "text", "text": "\n".join(lines)}],
        background=[*result.background, *procs],
    )


def killed(result: ToolResult, tool: str, procs: list[BackgroundProcess]) -> ToolResult:
    """``result`` naming ``procs`` as killed at the call's end (rule 3)."""
    for proc in procs:
        log.warning(
            "tool %r left process %d running (%s): killed at the end of the call; "
            "declare keeps_processes (keepsProcesses in TypeScript) to keep it",
            tool,
            proc.pid,
            proc.command,
        )
    lines = [f"[process {p.pid} left running was killed at the end of the call: {p.command}]" for p in procs]
    return msgspec.structs.replace(result, content=[*result.content, {"type": "text", "text": "\n".join(lines)}])


async def settle_leftovers(slot: Slot, tool: str, keeps_processes: bool, result: ToolResult) -> ToolResult:
    """After an answered call on ``slot``'s worker: keep or kill what it left running (rules 2-4)."""
    worker = slot.worker
    if not worker.alive:
        return result
    slot.background &= set(worker.boundary.members())
    procs = leftovers(worker.boundary.members(), {worker.pid, worker.supervisor_pid, *slot.background})
    if not procs:
        return result
    procs = await _named(procs)
    if keeps_processes:
        slot.background |= {p.pid for p in procs}
        return kept(result, tool, procs)
    if slot.background:
        # The kept ones stay: only what this call left goes (the pool would retire the whole worker).
        await kill_each([p.pid for p in procs])
    return killed(result, tool, procs)
