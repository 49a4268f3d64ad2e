"""Contract tests: real workers, one call at a time, every kind of terminal result."""

from __future__ import annotations

import os

import pytest
import trio

from tests.conftest import TOOLS, make_runner
from xcsh_run._process.supervised import protocol_pipe_bytes


async def test_struct_tool_returns_result() -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool("add", {"a": 2, "b": 3})
    assert not result.is_error
    assert result.text == "5"
    assert result.details == {"sum": 5}
    assert result.error is None


async def test_json_schema_tool_gets_a_dict_and_ctx() -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool("echo", {"text": "ab", "times": 2}, tool_call_id="c-1", ctx={"model": "m1"})
    assert result.text == "abab"
    assert result.details == {"call_id": "c-1", "ctx": {"model": "m1"}}


async def test_async_tool() -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool("async_echo", {"text": "hi"})
    assert result.text == "async hi"


@pytest.mark.parametrize(
    ("tool", "args", "path", "fragment"),
    [
        ("add", {"a": "x"}, "$.a", "Expected `int`, got `str`"),
        ("add", {"a": 1, "zzz": 1}, "$", "unknown field `zzz`"),
        ("add", {}, "$", "missing required field `a`"),
        ("echo", {"text": 1}, "$.text", "is not of type 'string'"),
        ("echo", {"text": "a", "times": 0}, "$.times", "less than the minimum"),
        ("echo", {}, "$", "'text' is a required property"),
    ],
)
async def test_invalid_arguments_never_reach_the_tool(
    tool: str, args: dict[str, object], path: str, fragment: str
) -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool(tool, args)
            assert runner.statistics().idle_workers == 1  # the worker was not harmed
    assert result.is_error and result.kind == "invalid_arguments"
    assert result.error is not None and result.error.path == path
    assert fragment in result.error.message


async def test_unknown_tool_lists_close_names() -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool("ech")
    assert result.kind == "not_found"
    assert "did you mean 'echo'" in result.text


async def test_tool_error_carries_message_and_traceback() -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool("raises")
            again = await runner.call_tool("add", {"a": 1})
    assert result.kind == "tool_error"
    assert result.text == "the tool failed on purpose"
    assert result.error is not None and "ValueError" in (result.error.traceback or "")
    assert again.text == "1"  # the same worker serves the next call


@pytest.mark.parametrize(
    ("tool", "fragment"),
    [
        ("sys_exit", "sys.exit(3)"),
        ("unserialisable", "not JSON-serialisable"),
        ("cyclic", "not JSON-serialisable"),  # a RecursionError in the encoder, not a dead worker
        ("bad_result", "content[0] is not a content block"),
    ],
)
async def test_tool_misbehaviour_is_a_tool_error(tool: str, fragment: str) -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool(tool)
    assert result.kind == "tool_error"
    assert fragment in result.text


async def test_base_exception_in_tool_is_a_tool_error() -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "hostile.py") as runner:
            result = await runner.call_tool("raise_base")
    assert result.kind == "tool_error"
    assert "not really" in result.text


async def test_updates_arrive_in_order_before_the_result() -> None:
    seen: list[object] = []
    with trio.fail_after(60):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool(
                "progress", {"count": 100_000}, on_update=lambda partial: seen.append(partial["details"])
            )
            seen.append("final")
    assert result.details == 100_000
    assert seen[:-1] == list(range(100_000))
    assert seen[-1] == "final"


async def test_twenty_mib_result_arrives_whole() -> None:
    with trio.fail_after(60):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool("big", {"mib": 20})
    assert not result.is_error
    assert len(result.text) == 20 * 2**20 and set(result.text) == {"x"}


async def test_result_over_frame_limit_is_limit_exceeded() -> None:
    with trio.fail_after(30):
        async with make_runner(TOOLS / "basic.py", max_frame_bytes=2**20) as runner:
            result = await runner.call_tool("big", {"mib": 2})
            small = await runner.call_tool("big", {"mib": 0.5})
    assert result.kind == "limit_exceeded"
    assert result.error is not None and result.error.limit == "output"
    assert "frame limit" in result.text
    assert not small.is_error


async def test_worker_is_reused_between_calls() -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py") as runner:
            first = await runner.call_tool("environment")
            second = await runner.call_tool("environment")
    assert first.details["pid"] == second.details["pid"]


async def test_concurrent_calls_run_in_separate_workers() -> None:
    results: dict[int, object] = {}
    with trio.fail_after(30):
        async with make_runner(TOOLS / "basic.py") as runner:

            async def one(i: int) -> None:
                results[i] = (await runner.call_tool("environment")).details["pid"]

            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(one, i)
            stats = runner.statistics()
    assert len(set(results.values())) == 3
    assert stats.idle_workers == 3 and stats.busy_workers == 0


async def test_worker_surroundings() -> None:
    """The protocol is off fds 0-2, stdin is the null device, nothing heavy is imported."""
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool("environment")
    d = result.details
    assert d["modules"] == []  # no trio, typer, psutil or host module of xcsh_run inside a worker
    assert d["stdin"] == "/dev/null" and d["stdin_read"] == ""
    assert d["isatty"] == [False, False, False]
    assert d["sid"] == d["pid"]  # its own session
    assert d["cwd"] == os.getcwd()
    # 0-2, the two protocol pipes, the boundary's cgroup.kill (the lifeline's), the
    # reader thread's epoll, and the listing's own directory fd: nothing inherited.
    assert len(d["fds"]) == 8, d["fds"]
    # The protocol pipes as large as the kernel lets anyone ask, up to 1 MiB (best effort).
    wanted = max(protocol_pipe_bytes(), 65536)
    assert d["pipe_sizes"] == [wanted, wanted]


async def test_host_fds_do_not_leak() -> None:
    before = sorted(os.listdir("/proc/self/fd"))
    with trio.fail_after(20):
        async with make_runner(TOOLS / "basic.py", TOOLS / "hostile.py") as runner:
            await runner.call_tool("add", {"a": 1})
            await runner.call_tool("os_exit")
    assert sorted(os.listdir("/proc/self/fd")) == before


async def test_caller_cancellation_propagates_after_the_tree_is_gone() -> None:
    with trio.fail_after(20):
        async with make_runner(TOOLS / "hostile.py") as runner:
            started = trio.Event()
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:

                    async def call() -> None:
                        await runner.call_tool("ignore_sigterm", on_update=lambda _: started.set())

                    nursery.start_soon(call)
                    await started.wait()
                    scope.cancel()
            assert scope.cancelled_caught
            stats = runner.statistics()
    assert stats.busy_workers == 0 and stats.running_calls == 0


async def test_two_runners_in_one_process_do_not_share_workers() -> None:
    with trio.fail_after(30):
        async with make_runner(TOOLS / "basic.py") as first:
            async with make_runner(TOOLS / "basic.py") as second:
                a = await first.call_tool("environment")
                b = await second.call_tool("environment")
            # Closing the second runner left the first one's worker alone.
            again = await first.call_tool("environment")
    assert a.details["pid"] != b.details["pid"]
    assert again.details["pid"] == a.details["pid"]
