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
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from xcsh_run.worker._sandbox import explain as _explain

if TYPE_CHECKING:
    from xcsh_run.worker._tool_api.abort_signal import AbortSignal

KILL_GRACE_SECONDS = 1.0


class ExecResult(msgspec.Struct, frozen=True):
    """The outcome of ``api.exec``: output, exit code and whether it was killed.

    Attributes:
        stdout: the program's standard output, decoded as UTF-8 (with replacement).
        stderr: its standard error, decoded the same way.
        code: its exit status; ``-N`` when a signal ``N`` ended it.
        killed: true only when ``api.exec`` killed it (its timeout, or the call's abort).
    """

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


DRAIN_SECONDS = 0.5


def _reader(stream: Any, chunks: list[bytes]) -> None:
    try:
        while data := stream.read1(65536):
            chunks.append(data)
    except (OSError, ValueError):
        pass


def _writer(stream: Any, data: bytes) -> None:
    try:
        stream.write(data)
    except (OSError, ValueError):
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass


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

    The program's end is its exit, not the end of its output: a background
    grandchild that keeps stdout open does not make this hang; output is read
    for at most half a second after the exit.

    Raises:
        FileNotFoundError / PermissionError: the program could not be started.
    """
    if signal is not None and signal.aborted:
        return ExecResult(stdout="", stderr="", code=-int(_signal.SIGTERM), killed=True)
    data = input.encode() if isinstance(input, str) else input
    try:
        proc = subprocess.Popen(
            [command, *args],
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except PermissionError as exc:
        # A program the sandbox does not let run: say so here, where the tool sees it first.
        denial = _explain.explain(exc)
        if denial is None:
            raise
        raise _explain.explained(exc, denial) from exc
    killed = threading.Event()
    out: list[bytes] = []
    err: list[bytes] = []
    threads = [
        threading.Thread(target=_reader, args=(proc.stdout, out), daemon=True),
        threading.Thread(target=_reader, args=(proc.stderr, err), daemon=True),
    ]
    if data is not None:
        threads.append(threading.Thread(target=_writer, args=(proc.stdin, data), daemon=True))
    for thread in threads:
        thread.start()

    def kill(_reason: object = None) -> None:
        if not killed.is_set():
            killed.set()
            threading.Thread(target=_kill_group, args=(proc, KILL_GRACE_SECONDS), daemon=True).start()

    if signal is not None:
        signal.add_callback(kill)
    try:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill()
            proc.wait()
    except BaseException:
        # Cancellation (ToolCancelled) lands here: never leave the child behind.
        killed.set()
        _kill_group(proc, 0.0)
        raise
    deadline = time.monotonic() + DRAIN_SECONDS
    for thread in threads[:2]:
        thread.join(max(0.0, deadline - time.monotonic()))
    return ExecResult(
        stdout=b"".join(out).decode(errors="replace"),
        stderr=b"".join(err).decode(errors="replace"),
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
    import functools

    from xcsh_run.worker._tool_api.abort_signal import AbortSignal, abort

    own = AbortSignal()
    if signal is not None:
        signal.add_callback(functools.partial(abort, own))
    try:
        return await asyncio.to_thread(exec_sync, command, args, signal=own, **kwargs)
    except asyncio.CancelledError:
        abort(own, "cancelled")
        raise
