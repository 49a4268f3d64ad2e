"""``ctx.sessionManager``: a todo tool rebuilds its list from the session's history after its worker is killed.

The TypeScript tool is written in pi-mono's custom-tool style, its Python twin
in xcsh-run's; both keep the list only in memory and in their results'
``details``, and rebuild it in ``onSession``/``on_session`` from
``getBranch()``. Between calls the test SIGKILLs the worker (whose pid the
tool reports), so the next call runs in a new worker that only the host's
record of the session can have told about the list.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import trio

from tests._support.faces import LEVELS, Answer, open_face
from tests.conftest import FIXTURES
from xcsh_run import SandboxPolicy, ToolResult, open_runner

HERE = FIXTURES / "ecosystem" / "sessions"
TOOLS = {"ts": str(HERE / "todo.ts"), "py": str(HERE / "todo.py")}
NEXT = {"ts": "nextId", "py": "next_id"}


async def reaped(pid: int) -> None:
    """Wait until ``pid`` is gone and reaped by its parent (the runner or ``serve``), polling, bounded."""
    for _ in range(3000):  # 60 s
        if not Path(f"/proc/{pid}").exists():
            return
        await trio.sleep(0.02)
    raise AssertionError(f"worker {pid} still exists")


async def killed(pid: int) -> None:
    """SIGKILL a worker from outside, as an OOM killer or a user would, and wait until it is reaped."""
    os.kill(pid, signal.SIGKILL)
    await reaped(pid)


def texts(answers: list[Answer]) -> list[str]:
    return [a.text for a in answers]


@pytest.mark.parametrize("lang", ["ts", "py"])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", ["embed", "mcp"])
async def test_the_list_survives_a_killed_worker(face: str, level: str, lang: str) -> None:
    with trio.fail_after(120):
        async with open_face(face, level, TOOLS[lang]) as f:
            first = await f.call("todo", {"action": "add", "text": "milk"})
            await killed(first.details["pid"])
            second = await f.call("todo", {"action": "add", "text": "eggs"})
            await killed(second.details["pid"])
            toggled = await f.call("todo", {"action": "toggle", "id": 1})
            listed = await f.call("todo", {"action": "list"})
    assert not any(a.is_error for a in (first, second, toggled, listed)), texts([first, second, toggled, listed])
    assert second.details["pid"] != first.details["pid"]  # a new worker: only the history told it
    assert second.text == "Added todo #2: eggs"
    assert listed.text == "[x] #1: milk\n[ ] #2: eggs"
    assert listed.details[NEXT[lang]] == 3


@pytest.mark.parametrize("lang", ["ts", "py"])
async def test_each_cli_run_is_its_own_session(lang: str) -> None:
    with trio.fail_after(120):
        async with open_face("cli", "contained", TOOLS[lang]) as f:
            first = await f.call("todo", {"action": "add", "text": "milk"})
            listed = await f.call("todo", {"action": "list"})
    assert (first.is_error, first.text) == (False, "Added todo #1: milk"), first.stderr
    assert (listed.is_error, listed.text) == (False, "No todos"), listed.stderr


@pytest.mark.parametrize("lang", ["ts", "py"])
async def test_sessions_are_kept_apart_and_a_host_supplies_its_own_history(lang: str) -> None:
    with trio.fail_after(120):
        async with open_runner([TOOLS[lang]], sandbox=SandboxPolicy(level="contained")) as runner:
            a = await runner.call_tool("todo", {"action": "add", "text": "for a"}, session_id="a")
            b = await runner.call_tool("todo", {"action": "list"}, session_id="b")
            again = await runner.call_tool("todo", {"action": "list"}, session_id="a")
            # A branch of "a" at its first entry, taken by the host, then the event tools rebuild in.
            runner.set_session_history("a2", runner.session_history("a")[:1])
            branched = await runner.call_tool("todo", {"action": "add", "text": "on the branch"}, session_id="a2")
            warnings = await runner.emit_session_event(
                {"reason": "branch", "previousSessionFile": None}, session_id="a"
            )
            back = await runner.call_tool("todo", {"action": "list"}, session_id="a")
            history = runner.session_history("a2")
    assert not a.is_error and b.content[0]["text"] == "No todos"
    assert again.content[0]["text"] == "[ ] #1: for a"
    assert branched.content[0]["text"] == "Added todo #2: on the branch"
    assert warnings == [] and back.content[0]["text"] == "[ ] #1: for a"
    messages = [e["message"] for e in history]
    assert [m["role"] for m in messages] == ["toolResult", "toolResult"]
    assert history[1]["parentId"] == history[0]["id"]
    assert messages[1]["toolName"] == "todo" and messages[1]["isError"] is False


async def test_a_reaped_worker_rebuilds_from_the_history() -> None:
    with trio.fail_after(120):
        async with open_runner([TOOLS["py"]], sandbox=SandboxPolicy(level="contained"), idle_timeout=0.2) as runner:
            first = await runner.call_tool("todo", {"action": "add", "text": "milk"})
            await reaped(first.details["pid"])  # idle for longer than idle_timeout: reaped by the pool
            listed = await runner.call_tool("todo", {"action": "list"})
    assert listed.details["pid"] != first.details["pid"]
    assert listed.content[0]["text"] == "[ ] #1: milk"


def test_what_is_sent_is_capped_newest_kept() -> None:
    from xcsh_run._host.session_history import MAX_ENTRY_BYTES, MAX_SENT_BYTES, MAX_SENT_ENTRIES, SessionHistories

    histories = SessionHistories("/w")

    def result(text: str, n: int) -> ToolResult:
        return ToolResult(content=[{"type": "text", "text": text}], details={"n": n})

    for n in range(MAX_SENT_ENTRIES + 50):
        histories.record("s", f"c{n}", "todo", result("x" * 100, n))
    view = histories.view("s")
    assert view["truncated"] is True and len(view["entries"]) == MAX_SENT_ENTRIES
    assert view["entries"][-1]["message"]["details"] == {"n": MAX_SENT_ENTRIES + 49}
    for n in range(12):  # each about half the largest entry kept whole: 8 of them fill what is sent
        histories.record("mid", f"c{n}", "todo", result("y" * (MAX_ENTRY_BYTES // 2), n))
    mid = histories.view("mid")
    assert mid["truncated"] and len(mid["entries"]) == MAX_SENT_BYTES // (MAX_ENTRY_BYTES // 2) - 1
    assert mid["entries"][-1]["message"]["details"] == {"n": 11}
    untruncated = histories.view("fresh")
    assert untruncated["entries"] == [] and untruncated["truncated"] is False


def test_a_huge_result_is_kept_as_a_stub_and_hides_nothing_before_it() -> None:
    from xcsh_run._host.session_history import MAX_ENTRY_BYTES, MAX_KEPT_BYTES, SessionHistories

    histories = SessionHistories("/w")
    small = ToolResult(content=[{"type": "text", "text": "ok"}], details={"n": 0})
    huge = ToolResult(content=[{"type": "text", "text": "z" * (8 * MAX_ENTRY_BYTES)}], details={"n": 1})
    histories.record("s", "c0", "todo", small)
    histories.record("s", "c1", "todo", huge)
    sent = histories.view("s")["entries"]
    assert [e["message"]["details"] for e in sent] == [{"n": 0}, {"n": 1}]  # the state survives the stub
    assert "not kept" in sent[1]["message"]["content"][0]["text"]
    assert sent[1]["parentId"] == sent[0]["id"]
    kept = histories.entries("s")
    assert all(len(str(e)) < 2 * MAX_ENTRY_BYTES for e in kept)
    for n in range(2, 400):  # about 60 KiB each: far more than the session may keep
        histories.record(
            "s", f"c{n}", "todo", ToolResult(content=[{"type": "text", "text": "w" * 60_000}], details={"n": n})
        )
    kept = histories.entries("s")
    assert sum(len(str(e)) for e in kept) <= MAX_KEPT_BYTES * 1.1
    assert kept[-1]["message"]["details"] == {"n": 399}


async def test_an_mcp_session_keeps_its_history_across_a_serve_reload(tmp_path: Path) -> None:
    from mcp import types as mcp_types

    from tests._support.mcp_clients import open_session

    folder = tmp_path / "tools"
    folder.mkdir()
    source = Path(TOOLS["py"]).read_text()
    (folder / "todo.py").write_text(source)
    changed = trio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    with trio.fail_after(120):
        async with open_session("stdio", str(folder), message_handler=on_message) as s:
            first = await s.call_tool("todo", {"action": "add", "text": "milk"})
            # A new description: the tool list changes, so the client hears of the reload.
            (folder / "todo.py").write_text(source.replace("Manage a todo list.", "Manage a todo list, v2."))
            await changed.wait()  # sent once the new runner serves
            listed = await s.call_tool("todo", {"action": "list"})
            tools = await s.list_tools()
    assert next(t.description for t in tools.tools if t.name == "todo").startswith("Manage a todo list, v2.")
    assert not first.is_error and not listed.is_error
    assert [getattr(b, "text", "") for b in listed.content] == ["[ ] #1: milk"]
