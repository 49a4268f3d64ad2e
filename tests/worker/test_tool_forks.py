"""A process a tool forks keeps SIGTERM's default action: the worker's SIGTERM handler is its own.

``multiprocessing.Pool.terminate`` (the end of ``with Pool(...)``) takes the
task queue's lock, SIGTERMs every pool worker still alive and joins it. With
the worker's handler copied into them, a pool worker whose ``ToolCancelled``
was swallowed (it landed in one of ``os.fork``'s at-fork hooks) lived on,
blocked on that lock, and the tool's call never returned. These tests give the
child the same treatment without the race: it is sent SIGTERM while it waits
(or before it has run), and swallows whatever is raised; it must die of the
signal, not exit on its own.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import make_runner, needs_strict
from xcsh_run import SandboxPolicy

SWALLOWED = 7  # the child's exit code when SIGTERM did not end it

TOOL = """
import ctypes
import os
import signal
import time

from xcsh_run.pi import CustomTool


def _sigterm_child(fork, at_once):
    ready_r, ready_w = os.pipe()
    block_r, block_w = os.pipe()
    pid = fork()
    if pid == 0:
        try:
            os.close(block_w)  # the parent's close is then EOF here
            if not at_once:
                os.write(ready_w, b"1")
            try:
                os.read(block_r, 1)  # SIGTERM arrives while the child waits here
            except BaseException:
                pass  # swallowed, as os.fork's at-fork hooks swallow it
        finally:
            os._exit(SWALLOWED)
    os.close(ready_w)
    if not at_once:
        os.read(ready_r, 1)
    os.kill(pid, signal.SIGTERM)
    os.close(block_w)  # a child that survived the signal reads EOF and exits: never a hang
    _, status = os.waitpid(pid, 0)
    for fd in (ready_r, block_r):
        os.close(fd)
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status), "code": None}
    return {"signal": None, "code": os.WEXITSTATUS(status)}


FORKS = {
    "os.fork": os.fork,
    # Through libc: no Python at-fork hook runs in the child, which keeps every handler it had.
    # PyDLL holds the GIL across the call, so the child's only thread owns it.
    "libc fork": lambda: ctypes.PyDLL(None).fork(),
}


def factory(api):
    def execute(call_id, params, on_update, ctx, signal_):
        details = _sigterm_child(FORKS[params["fork"]], params["at_once"])
        return {"content": [{"type": "text", "text": "done"}], "details": details}

    def nap(call_id, params, on_update, ctx, signal_):
        time.sleep(3600)

    return [
        CustomTool(
            name="sigterm_child",
            description="forks a child, sends it SIGTERM and reports how it ended",
            parameters={
                "type": "object",
                "properties": {"fork": {"type": "string"}, "at_once": {"type": "boolean"}},
                "required": ["fork", "at_once"],
            },
            execute=execute,
        ),
        CustomTool(name="nap", description="sleeps", parameters={"type": "object"}, execute=nap),
    ]
""".replace("SWALLOWED", str(SWALLOWED))


POLICIES = [
    pytest.param(SandboxPolicy(level="none"), id="none"),
    pytest.param(
        SandboxPolicy(level="strict"),
        id="strict",
        marks=needs_strict,
    ),
]


def _write_tool(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    folder.chmod(0o755)  # strict may run the tool under another uid
    tool = folder / "forks.py"
    tool.write_text(TOOL)
    tool.chmod(0o644)
    return tool


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    ("fork", "at_once"),
    [
        ("os.fork", False),
        # Sent right after the fork, usually before the child has run at all (as Pool.terminate
        # may reach a pool worker): Python's C-level handler would take it there, and os.fork
        # clears what that handler noted: the signal would be lost.
        ("os.fork", True),
        ("libc fork", False),
    ],
    ids=["os.fork", "os.fork-at-once", "libc-fork"],
)
async def test_a_forked_child_dies_of_sigterm(tmp_path: Path, policy: SandboxPolicy, fork: str, at_once: bool) -> None:
    with trio.fail_after(30):
        async with make_runner(_write_tool(tmp_path), sandbox=policy) as runner:
            result = await runner.call_tool("sigterm_child", {"fork": fork, "at_once": at_once})
            # In the worker itself SIGTERM still cancels the tool (ToolCancelled, not the kill).
            nap = await runner.call_tool("nap", {}, timeout=1.0)
    assert nap.kind == "timeout" and nap.error.rung == "cooperative", nap
    assert not result.is_error, result
    details: dict[str, Any] = result.details
    assert details == {"signal": signal.SIGTERM, "code": None}, (
        f"the child forked by {fork} exited with code {details['code']} after SIGTERM: it ran the worker's "
        "handler (which raises ToolCancelled) or lost the signal, instead of taking SIGTERM's default action"
    )
