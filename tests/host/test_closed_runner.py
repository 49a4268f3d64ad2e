"""A runner used after its block ended raises ``RunnerClosedError``, on every face.

It is a ``RuntimeError`` (the call came too late; no option is wrong) and a
``RunnerError``, not a ``ConfigError``; its message says the runner is closed
and names the block its calls belong in, as the program wrote it. The trio
runner keeps what it knew readable (a host saves the session's history after
the block) and its ``cancel`` harmless; the blocking and asyncio faces,
whose thread has ended, raise from every method but their settings. Real
workers: each runner ran a call before it closed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.conftest import TOOLS, make_runner
from xcsh_run import ConfigError, RunnerClosedError, RunnerError, open_asyncio_runner, open_blocking_runner

POOL = TOOLS / "pool.py"
TREE = {"reason": "tree", "previousSessionFile": None}


def closed_message(block: str) -> str:
    return re.escape(f"this runner is closed: make its calls inside the `{block}` block that opened it")


def test_the_error_is_a_runtime_error_and_a_runner_error_but_no_config_error() -> None:
    assert issubclass(RunnerClosedError, RuntimeError) and issubclass(RunnerClosedError, RunnerError)
    assert not issubclass(RunnerClosedError, ConfigError)
    assert RunnerClosedError.__module__ == "xcsh_run"


async def test_the_trio_runner_refuses_work_once_closed_and_keeps_what_it_knew() -> None:
    with trio.fail_after(60):
        async with make_runner(POOL) as runner:
            pid = await runner.call_tool("pid", tool_call_id="before")
            assert not pid.is_error, pid.text
        result = pid
        expected = closed_message("async with open_runner(...)")
        with pytest.raises(RunnerClosedError, match=expected):
            await runner.call_tool("pid")
        with pytest.raises(RunnerClosedError, match=expected):
            await runner.emit_session_event(TREE)
        with pytest.raises(RunnerClosedError, match=expected):
            await runner.render_call("pid", {})
        with pytest.raises(RunnerClosedError, match=expected):
            await runner.render_result("pid", result)
        with pytest.raises(RunnerClosedError, match=expected):
            await runner.load([str(POOL)])
    # What it knew stays readable, and what closing code calls stays harmless.
    assert runner.closed
    assert [entry["message"]["toolCallId"] for entry in runner.session_history()] == ["before"]
    assert runner.statistics().workers_started == 1
    assert runner.get_tool("pid") is not None
    assert runner.cancel("before") is False


def test_every_method_of_the_closed_blocking_runner_names_its_block() -> None:
    with open_blocking_runner([str(POOL)], grace=0.5, spare_workers=0) as runner:
        assert not runner.call_tool("pid", timeout=30).is_error
    calls: list[Callable[[], Any]] = [
        lambda: runner.call_tool("pid"),
        lambda: runner.emit_session_event(TREE),
        lambda: runner.render_call("pid", {}),
        runner.statistics,
        runner.pending_actions,
        lambda: runner.set_context({"user": "ada"}),
        lambda: runner.cancel("any"),
        lambda: runner.tools,
    ]
    expected = closed_message("with open_blocking_runner(...)")
    for call in calls:
        with pytest.raises(RunnerClosedError, match=expected):
            call()
    assert runner.closed and runner.grace == 0.5  # the settings stay


def test_every_method_of_the_closed_asyncio_runner_names_its_block() -> None:
    async def main() -> None:
        async with open_asyncio_runner([str(POOL)], grace=0.5, spare_workers=0) as runner:
            assert not (await runner.call_tool("pid", timeout=30)).is_error
        expected = closed_message("async with open_asyncio_runner(...)")
        with pytest.raises(RunnerClosedError, match=expected):
            await runner.call_tool("pid")
        with pytest.raises(RunnerClosedError, match=expected):
            await runner.emit_session_event(TREE)
        with pytest.raises(RunnerClosedError, match=expected):
            await runner.render_call("pid", {})
        with pytest.raises(RunnerClosedError, match=expected):
            runner.pending_actions()
        with pytest.raises(RunnerClosedError, match=expected):
            runner.statistics()
        assert runner.closed

    asyncio.run(asyncio.wait_for(main(), 60))


def test_an_except_runtime_error_catches_it() -> None:
    with open_blocking_runner([str(POOL)], grace=0.5, spare_workers=0) as runner:
        pass
    try:
        runner.call_tool("pid")
    except RuntimeError as exc:
        caught: BaseException = exc
    assert isinstance(caught, RunnerClosedError)
