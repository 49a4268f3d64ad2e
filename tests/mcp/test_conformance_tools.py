"""The tools `make conformance` serves load and behave as the suite's scenarios expect (no Node needed).

The suite itself runs in `make conformance` (docs/conformance.md); these tests keep the tool
module honest in the ordinary test run: the names and schemas the suite looks up, and the
results the host API gives today.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import trio

from tests.conftest import make_runner

CONFORMANCE_TOOLS = Path(__file__).parents[1] / "conformance" / "tools" / "conformance_tools.py"

SUITE_TOOL_NAMES = {
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_tool_with_logging",
    "test_tool_with_progress",
    "test_error_handling",
    "test_reconnection",
    "test_sampling",
    "test_elicitation",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
    "json_schema_2020_12_tool",
    # 2026-07-28: input-required-result-*, server-stateless, tasks-*
    "test_input_required_result_elicitation",
    "test_input_required_result_list_roots",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_sampling",
    "test_input_required_result_request_state",
    "test_input_required_result_multi_round",
    "test_input_required_result_tampered_state",
    "test_input_required_result_capabilities",
    "test_missing_capability",
    "test_streaming_elicitation",
    "test_logging_tool",
    "greet",
    "slow_compute",
    "test_custom_header",
    "protocol_error_job",
    "failing_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
}


async def test_every_tool_the_suite_calls_loads_with_its_schema() -> None:
    with trio.fail_after(30):
        async with make_runner(CONFORMANCE_TOOLS) as runner:
            tools = {tool.name: tool for tool in runner.tools if tool.module == str(CONFORMANCE_TOOLS)}
            assert not [e for e in runner.errors if str(CONFORMANCE_TOOLS) in str(e)]
    assert set(tools) == SUITE_TOOL_NAMES
    assert all(tool.description for tool in tools.values())
    schema = tools["json_schema_2020_12_tool"].parameters
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$defs"]["address"]["properties"] == {"street": {"type": "string"}, "city": {"type": "string"}}
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["address"]["$anchor"] == "addressDef"
    assert {"allOf", "if", "then", "else"} <= set(schema)
    assert tools["test_sampling"].parameters["required"] == ["prompt"]
    assert tools["test_elicitation"].parameters["required"] == ["message"]
    assert tools["greet"].parameters["required"] == ["name"]
    assert set(tools["slow_compute"].parameters["properties"]) == {"seconds", "label"}
    assert tools["confirm_delete"].parameters["required"] == ["filename"]
    # The tasks scenarios need these registrations, not only these names.
    supports = {name: (tool.task_support, tool.task_after_input) for name, tool in tools.items()}
    assert supports["greet"] == ("forbidden", False)
    assert supports["failing_job"] == ("required", False)
    assert supports["test_tool_with_task"] == ("required", True)
    assert {supports[n][0] for n in ("slow_compute", "confirm_delete", "multi_input", "protocol_error_job")} == {
        "optional"
    }


async def test_the_tools_answer_as_the_suite_checks() -> None:
    updates: list[dict[str, Any]] = []
    with trio.fail_after(60):
        async with make_runner(CONFORMANCE_TOOLS) as runner:
            text = await runner.call_tool("test_simple_text")  # the suite sends no `arguments` at all
            image = await runner.call_tool("test_image_content", {})
            error = await runner.call_tool("test_error_handling", {})
            progress = await runner.call_tool("test_tool_with_progress", {}, on_update=updates.append)
            logged = await runner.call_tool("test_tool_with_logging", {})
            elicit = await runner.call_tool("test_elicitation", {"message": "Please provide your information"})
            schema = await runner.call_tool(
                "json_schema_2020_12_tool", {"name": "n", "address": {"city": "c"}, "email": "n@example.com"}
            )
            extra = await runner.call_tool("json_schema_2020_12_tool", {"zip": 1, "email": "n@example.com"})
            # if/then/else: contactMethod "phone" needs the phone.
            no_phone = await runner.call_tool(
                "json_schema_2020_12_tool", {"contactMethod": "phone", "email": "n@example.com"}
            )

    assert text.content == [{"type": "text", "text": "This is a simple text response for testing."}]
    [block] = image.content
    assert block["type"] == "image" and block["mimeType"] == "image/png"
    assert base64.b64decode(block["data"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert error.is_error and error.kind == "tool_error"
    assert "This tool intentionally returns an error for testing" in error.text
    assert not progress.is_error
    assert [u["details"] for u in updates] == [{"progress": p, "total": 100} for p in (0, 50, 100)]
    assert logged.text == "Tool with logging executed successfully"
    # No UI attached: api.ui.elicit answers cancel.
    assert elicit.text == "User response: action=cancel, content={}"
    expected = '{"name": "n", "address": {"city": "c"}, "email": "n@example.com"}'
    assert schema.text == f"JSON Schema 2020-12 tool called with: {expected}"
    assert extra.kind == "invalid_arguments"
    assert no_phone.kind == "invalid_arguments"


async def test_the_2026_tools_answer_without_a_client() -> None:
    # No UI and no MCP client: elicitations answer cancel and sampling answers None at once.
    with trio.fail_after(60):
        async with make_runner(CONFORMANCE_TOOLS) as runner:
            greet = await runner.call_tool("greet", {"name": "World"})
            slow = await runner.call_tool("slow_compute", {"seconds": 0, "label": "instant"})
            failing = await runner.call_tool("failing_job", {})
            asked = await runner.call_tool("test_input_required_result_elicitation", {})
            state = await runner.call_tool("test_input_required_result_request_state", {})
            sampled = await runner.call_tool("test_input_required_result_sampling", {})
            fallback = await runner.call_tool("test_input_required_result_capabilities", {})
            both = await runner.call_tool("multi_input", {})
            kept = await runner.call_tool("confirm_delete", {"filename": "rt.txt"})

    assert greet.text == "Hello, World!"
    assert slow.text == "Computed instant in 0 s" and not slow.is_error
    assert failing.is_error and failing.kind == "tool_error"
    assert asked.text == "No name given"
    assert "state-ok" in state.text
    assert sampled.text.startswith("Sampling not available")
    assert fallback.text == "Elicited: None"
    assert both.text == "name=None, color=None"
    assert kept.text == "Kept rt.txt"
