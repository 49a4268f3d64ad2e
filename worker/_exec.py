"""``api.exec``: run a program without a shell, killable as a whole tree.

Each program starts in a new session, so a timeout or abort can signal its
whole process group: SIGTERM first, then SIGKILL after a short grace. Anything
that escapes the group (a ``setsid()`` grandchild) still dies with the worker's
kernel-tracked boundary when the call's worker is torn down.

A program killed by a signal is reported with ``code = -signal`` and
``killed = True`` (the original design reported ``code = 0``, which hid the
signal); check ``killed`` first.
"""

from __future__ import annotations

import os
import signal as _signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from ._signal import AbortSignal

KILL_GRACE_SECONDS = 1.0


class ExecResult(msgspec.Struct, frozen=True):
    """The outcome of :func:`exec_sync`: output, exit code and whether it was killed."""

    stdout: str
    stderr: str
    code: int
    killed: bool


def _kill_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    # The group id is the child's pid (start_new_session=True). Signalling a
    # group whose leader is gone still reaches its remaining members.
    for sig, wait in ((_signal.SIGTERM, grace), (_signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(wait)
            # The leader exited; sweep the rest of its group as well.
            try:
                os.killpg(proc.pid, _signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def exec_sync(
    command: str,
    args: Sequence[str] = (),
    *,
    cwd: str | None = None,
    timeout: float | None = None,
    signal: AbortSignal | None = None,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
) -> ExecResult:
    """Run ``command args...`` and wait for it. A non-zero exit does not raise.

    Raises:
        FileNotFoundError / PermissionError: the program could not be started.
    """
    if signal is not None and signal.aborted:
        return ExecResult(stdout="", stderr="", code=-int(_signal.SIGTERM), killed=True)
    data = input.encode() if isinstance(input, str) else input
    proc = subprocess.Popen(
        [command, *args],
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    killed = threading.Event()

    def kill(_reason: object = None) -> None:
        if not killed.is_set():
            killed.set()
            threading.Thread(target=_kill_group, args=(proc, KILL_GRACE_SECONDS), daemon=True).start()

    if signal is not None:
        signal.add_callback(kill)
    try:
        try:
            out, err = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill()
            out, err = proc.communicate()
    except BaseException:
        # Cancellation (ToolCancelled) lands here: never leave the child behind.
        killed.set()
        _kill_group(proc, 0.0)
        raise
    return ExecResult(
        stdout=out.decode(errors="replace"),
        stderr=err.decode(errors="replace"),
        code=proc.returncode,
        killed=killed.is_set(),
    )


async def exec_async(
    command: str, args: Sequence[str] = (), *, signal: AbortSignal | None = None, **kwargs: Any
) -> ExecResult:
    """Async form of :func:`exec_sync`: runs it in a thread so the event loop stays free.

    Cancelling the awaiting task kills the program's process group.
    """
    import asyncio

    from ._signal import AbortSignal

    own = AbortSignal()
    if signal is not None:
        signal.add_callback(own._abort)
    try:
        return await asyncio.to_thread(exec_sync, command, args, signal=own, **kwargs)
    except asyncio.CancelledError:
        own._abort("cancelled")
        raise
