"""A tool that starts a background helper keeps it for later calls if it declares so; nothing outlives the session.

The helpers (``tests/fixtures/ecosystem/background/``) answer a ping through files
in the worker's temp folder, so a later call of the same session talks to the
process an earlier one started. Each helper carries a fresh marker on its command
line; every check reads the process itself with psutil, never a sleep.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests._support.faces import FACES, LEVELS, Answer, open_face
from tests._support.mcp_clients import LOG
from xcsh_run import SandboxPolicy, open_runner

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "ecosystem" / "background"
TOOLS = {"py": HERE / "watcher.py", "ts": HERE / "watcher.ts"}
GONE_WITHIN = 15.0  # seconds for a killed process to be reaped (the teardown bounds are 5 + 10 s)


def _options(lang: str, level: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    """CLI flags and policy fields: the TypeScript tool runs its helper on this Python, which strict must allow."""
    if lang == "ts" and level == "strict":
        return ("-v", "--allow-exec", sys.executable), {"allow_exec": (sys.executable,)}
    return ("-v",), {}


def _start_args(marker: str) -> dict[str, str]:
    return {"action": "start", "marker": marker, "python": sys.executable}


def _live(pid: int, marker: str) -> bool:
    try:
        return marker in psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
        return False


def _assert_gone(pid: int, marker: str) -> None:
    try:
        process = psutil.Process(pid)
        if marker in process.cmdline():
            process.wait(timeout=GONE_WITHIN)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        pytest.fail(f"process {pid} ({marker}) outlived its session")
    assert not _live(pid, marker)


def _listed(answer: Answer, pid: int, marker: str) -> None:
    assert [b["pid"] for b in answer.background] == [pid], answer
    assert marker in answer.background[0]["command"]
    assert f"[background process {pid} kept until the session ends:" in answer.text
    assert answer.details["pid"] == pid  # the tool's own details are untouched


@pytest.mark.parametrize("lang", sorted(TOOLS))
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", ["embed", "mcp"])
async def test_a_declared_helper_lives_across_calls_and_ends_with_the_session(face: str, level: str, lang: str) -> None:
    marker = f"bg-{uuid.uuid4().hex}"
    flags, policy = _options(lang, level)
    with trio.fail_after(120):
        async with open_face(face, level, str(TOOLS[lang]), cli_options=flags, policy=policy) as f:
            started = await f.call("watcher", _start_args(marker))
            assert not started.is_error, started
            pid = started.details["pid"]
            _listed(started, pid, marker)
            assert _live(pid, marker)
            first = await f.call("watcher", {"action": "ping", "marker": "one"})
            second = await f.call("watcher", {"action": "ping", "marker": "two"})
            assert (first.is_error, first.text) == (False, f"one from {pid}"), first
            assert (second.is_error, second.text) == (False, f"two from {pid}"), second
            assert second.background == []  # listed by the call that started it
            assert _live(pid, marker)
        _assert_gone(pid, marker)
    if face == "mcp":
        assert f"keeps background process {pid}" in Path(LOG).read_text()


@pytest.mark.parametrize("lang", sorted(TOOLS))
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_an_undeclared_helper_is_killed_at_the_end_of_its_call_with_a_warning(
    face: str, level: str, lang: str, caplog: pytest.LogCaptureFixture
) -> None:
    marker = f"bg-{uuid.uuid4().hex}"
    flags, policy = _options(lang, level)
    with trio.fail_after(120):
        async with open_face(face, level, str(TOOLS[lang]), cli_options=flags, policy=policy) as f:
            started = await f.call("stray_watcher", _start_args(marker))
            assert not started.is_error, started
            pid = started.details["pid"]
            assert started.background == []
            assert f"[process {pid} left running was killed at the end of the call:" in started.text
            assert marker in started.text
            _assert_gone(pid, marker)  # before the session ends
            again = await f.call("stray_watcher", {"action": "ping", "marker": "anyone"})
            assert again.is_error and "did not answer" in again.text
    warning = f"left process {pid} running"
    if face == "cli":
        assert warning in f.log[0] and marker in f.log[0]
    elif face == "mcp":
        assert warning in Path(LOG).read_text()
    else:
        assert any(warning in r.getMessage() and marker in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("lang", sorted(TOOLS))
@pytest.mark.parametrize("level", LEVELS)
async def test_the_cli_lists_a_kept_helper_and_ends_it_when_it_exits(level: str, lang: str) -> None:
    marker = f"bg-{uuid.uuid4().hex}"
    flags, _ = _options(lang, level)
    with trio.fail_after(120):
        async with open_face("cli", level, str(TOOLS[lang]), cli_options=flags) as f:
            started = await f.call("watcher", _start_args(marker))
    assert (started.is_error, started.exit_code) == (False, 0), started
    pid = started.details["pid"]
    _listed(started, pid, marker)
    assert f"keeps background process {pid}" in started.stderr
    _assert_gone(pid, marker)


@pytest.mark.parametrize("level", LEVELS)
async def test_a_call_killed_for_its_timeout_ends_the_kept_helper_of_its_worker(level: str) -> None:
    marker = f"bg-{uuid.uuid4().hex}"
    with trio.fail_after(120):
        async with open_runner([str(TOOLS["py"])], sandbox=SandboxPolicy(level=level)) as runner:
            started = await runner.call_tool("watcher", _start_args(marker))
            pid = started.details["pid"]
            assert _live(pid, marker)
            hung = await runner.call_tool("watcher", {"action": "hang", "marker": "x"}, timeout=1)
            assert hung.kind == "timeout", hung
            _assert_gone(pid, marker)  # the worker's tree went, the runner still open
            again = await runner.call_tool("watcher", {"action": "ping", "marker": "x"})
            assert again.is_error and "did not answer" in again.text


@pytest.mark.parametrize("level", LEVELS)
async def test_a_stray_left_beside_kept_processes_is_killed_alone(level: str) -> None:
    kept_marker, stray_marker = f"bg-{uuid.uuid4().hex}", f"bg-{uuid.uuid4().hex}"
    with trio.fail_after(120):
        async with open_runner([str(TOOLS["py"])], sandbox=SandboxPolicy(level=level)) as runner:
            started = await runner.call_tool("watcher", _start_args(kept_marker))
            kept_pid = started.details["pid"]
            # The same module, so the same warm worker: it already holds a kept helper.
            stray = await runner.call_tool("stray_watcher", _start_args(stray_marker))
            assert f"[process {stray.details['pid']} left running was killed" in stray.content[-1]["text"]
            _assert_gone(stray.details["pid"], stray_marker)
            pinged = await runner.call_tool("watcher", {"action": "ping", "marker": "still"})
            assert (pinged.is_error, pinged.content[0]["text"]) == (False, f"still from {kept_pid}"), pinged
            assert _live(kept_pid, kept_marker)
        _assert_gone(kept_pid, kept_marker)
