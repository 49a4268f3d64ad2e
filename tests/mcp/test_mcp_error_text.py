"""The text of an MCP error result: what a model reads, since clients show it the content only.

Driven like tests/mcp/test_mcp.py: `xcsh-run serve` as a subprocess and the official SDK client over
stdio. Each kind's text is asserted exactly: it names the tool, what happened (the exception's type
for a tool's own error; the path and the schema's expectation for invalid arguments) and the message,
without host paths (runner/_mcp/render.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import mcp_types
import pytest
import trio

from tests._support.mcp_clients import DEADLINE, stdio_session
from tests.mcp.test_mcp import error_of, text_of
from xcsh_run import open_runner
from xcsh_run._mcp.render import render_result

TOOLS = """
import os
import time
from typing import Annotated

import msgspec

from xcsh_run.pi import CustomTool, ToolError

GLOB = {
    "type": "object",
    "properties": {
        "glob": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1},
        "mode": {"enum": ["files", "lines"]},
    },
    "additionalProperties": False,
}


class Typed(msgspec.Struct, forbid_unknown_fields=True):
    glob: str
    depth: Annotated[int, msgspec.Meta(ge=0)] = 0


def factory(api):
    def repo_stats(tcid, params, on_update, ctx, signal):
        return sorted(params)[0]  # an IndexError for {}

    def typed(tcid, params, on_update, ctx, signal):
        return params.glob

    def refuses(tcid, params, on_update, ctx, signal):
        raise ToolError("no notes.txt in this repository; create it first")

    def reads(tcid, params, on_update, ctx, signal):
        open(os.path.join(api.cwd, "missing.txt")).read()

    def sleeps(tcid, params, on_update, ctx, signal):
        on_update({"content": [{"type": "text", "text": "started"}]})
        time.sleep(3600)

    def exits(tcid, params, on_update, ctx, signal):
        os._exit(3)

    return [
        CustomTool(name="repo_stats", description="Counts", parameters=GLOB, execute=repo_stats),
        CustomTool(name="typed", description="A Struct tool", parameters=Typed, execute=typed),
        CustomTool(name="refuses", description="Refuses", parameters={"type": "object"}, execute=refuses),
        CustomTool(
            name="reads", description="Reads", parameters={"type": "object"}, execute=reads,
            expected_errors=(FileNotFoundError,),
        ),
        CustomTool(name="sleeps", description="Sleeps", parameters={"type": "object"}, execute=sleeps),
        CustomTool(name="exits", description="Exits", parameters={"type": "object"}, execute=exits),
    ]
"""

BROKEN = "def factory(api):\n    return [\n"  # a SyntaxError: the module cannot load


@pytest.fixture
def tools(tmp_path: Path) -> str:
    path = tmp_path / "tools" / "errors.py"
    path.parent.mkdir()
    path.write_text(TOOLS)
    return str(path)


async def call(tools: str, name: str, arguments: dict[str, object]) -> mcp_types.CallToolResult:
    with trio.fail_after(DEADLINE):
        async with stdio_session(tools, options=("--timeout", "1")) as s:
            return await s.call_tool(name, arguments)


def only_text(result: mcp_types.CallToolResult) -> str:
    """The one text block of an error result."""
    assert result.is_error, result
    assert [b.type for b in result.content] == ["text"], result.content
    return text_of(result)


@pytest.mark.parametrize(
    ("name", "arguments", "kind", "text"),
    [
        ("repo_stats", {}, "tool_error", "repo_stats failed: IndexError: list index out of range"),
        (
            "refuses",
            {},
            "tool_error",
            "refuses failed: no notes.txt in this repository; create it first",
        ),
        (
            "repo_stats",
            {"glob": 3},
            "invalid_arguments",
            "repo_stats: invalid arguments: at $.glob: expected a string, got 3",
        ),
        (
            "repo_stats",
            {"limit": 0},
            "invalid_arguments",
            "repo_stats: invalid arguments: at $.limit: expected an integer >= 1, got 0",
        ),
        (
            "repo_stats",
            {"mode": "words"},
            "invalid_arguments",
            'repo_stats: invalid arguments: at $.mode: expected one of "files", "lines", got "words"',
        ),
        (
            "repo_stats",
            {"glob": "*", "globs": ["*"]},
            "invalid_arguments",
            'repo_stats: invalid arguments: at $: expected only the properties "glob", "limit", "mode", '
            'got the unknown property "globs"',
        ),
        ("typed", {"glob": 3}, "invalid_arguments", "typed: invalid arguments: at $.glob: expected a string, got 3"),
        (
            "typed",
            {"glob": "*", "depth": -1},
            "invalid_arguments",
            "typed: invalid arguments: at $.depth: expected an integer >= 0, got -1",
        ),
        (
            "typed",
            {},
            "invalid_arguments",
            'typed: invalid arguments: at $: expected the required property "glob", got {}',
        ),
        ("repo_stat", {}, "not_found", "repo_stat: unknown tool; did you mean 'repo_stats'?"),
        (
            "sleeps",
            {},
            "timeout",
            "sleeps: timed out after 1 s; the tool stopped within the grace period",
        ),
    ],
)
async def test_the_text_names_the_tool_what_happened_and_what_to_change(
    tools: str, name: str, arguments: dict[str, object], kind: str, text: str
) -> None:
    result = await call(tools, name, arguments)
    assert error_of(result)["kind"] == kind
    assert only_text(result) == text


async def test_an_expected_exception_names_its_type_and_no_host_path(tools: str) -> None:
    result = await call(tools, "reads", {})
    error = error_of(result)
    assert error["kind"] == "tool_error" and error["deliberate"] is True
    # The served folder is the test's: the path is shown relative to it.
    assert only_text(result) == "reads failed: FileNotFoundError: [Errno 2] No such file or directory: 'missing.txt'"
    assert os.getcwd() in error["message"]  # the evidence stays in _meta


async def test_a_crash_says_how_the_worker_ended(tools: str) -> None:
    result = await call(tools, "exits", {})
    assert error_of(result)["kind"] == "crashed"
    assert only_text(result) == "exits: crashed: the worker running the tool exited with code 3"


async def test_a_tool_whose_module_failed_to_load_says_so(tools: str) -> None:
    broken = Path(tools).parent / "broken.py"
    broken.write_text(BROKEN)
    result = await call(str(broken.parent), "broken", {})  # the folder: both modules
    assert error_of(result)["kind"] == "load_error"
    text = only_text(result)
    head, _, rest = text.partition("\n")
    assert head == "broken: not loaded: the module that would define it failed to load:"
    assert "broken.py" in rest and "SyntaxError" in rest
    assert str(broken) not in text  # relative to the served folder
    assert rest.endswith("Fix the module and run again (`xcsh-run list` shows every tool and load problem).")


async def test_structured_content_carries_the_expectation(tools: str) -> None:
    result = await call(tools, "repo_stats", {"glob": 3})
    assert result.structured_content is not None
    structured = result.structured_content["error"]
    assert {k: structured[k] for k in ("kind", "tool", "path", "expected", "got")} == {
        "kind": "invalid_arguments",
        "tool": "repo_stats",
        "path": "$.glob",
        "expected": "a string",
        "got": "3",
    }
    assert error_of(result)["expected"] == "a string"


async def test_a_cancelled_call_names_the_tool(tools: str) -> None:
    # Over MCP a cancelled request gets no response at all, so the text is rendered here from the
    # runner's real result: what a client that asked would read.
    with trio.fail_after(DEADLINE):
        async with open_runner([tools]) as runner, trio.open_nursery() as nursery:
            results = []
            started = trio.Event()

            async def run() -> None:
                results.append(
                    await runner.call_tool("sleeps", {}, tool_call_id="c1", on_update=lambda _: started.set())
                )

            nursery.start_soon(run)
            await started.wait()
            assert runner.cancel("c1", "the user pressed stop")
    rendered = render_result(results[0], "2025-11-25", root=os.getcwd())
    assert rendered["content"] == [
        {"type": "text", "text": "sleeps: cancelled (the user pressed stop); the tool stopped within the grace period"}
    ]


def test_the_name_the_client_called_wins_over_the_tools_own() -> None:
    from xcsh_run._results import ErrorKind, error_result, named

    result = named(error_result(ErrorKind.TOOL_ERROR, "boom", exception="RuntimeError"), "résumé")
    assert render_result(result, "2025-11-25")["content"][0]["text"] == "résumé failed: RuntimeError: boom"
    served = render_result(result, "2025-11-25", tool="resume-1a2b3c4d")
    assert served["content"][0]["text"] == "resume-1a2b3c4d failed: RuntimeError: boom"
