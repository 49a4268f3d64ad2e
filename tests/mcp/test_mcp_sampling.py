"""A tool's own forms (``api.ui.elicit``) and completions (``api.sample``) through the official SDK client.

Over stdio and Streamable HTTP (the ``transport`` fixture).

``api.ui.elicit(message, schema)`` sends the tool's schema as ``elicitation/create``
and returns ``{"action", "content"}``; ``api.sample(...)`` sends
``sampling/createMessage`` to a client that declared ``sampling`` and returns its
result object, or None where there is no such client (not MCP, no capability,
an error).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import trio

from tests._support.mcp_clients import DEADLINE, open_session
from tests.conftest import XCSH_RUN
from tests.mcp.test_mcp import text_of

TOOLS = """
import json

from xcsh_run.pi import CustomTool

OBJ = {"type": "object"}
FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "default": "Ada"},
        "size": {"type": "string", "enum": ["S", "M", "L"]},
    },
    "required": ["name"],
}


def factory(api):
    def form(tcid, params, on_update, ctx, signal_):
        return json.dumps(api.ui.elicit("Your order", FORM))

    def think(tcid, params, on_update, ctx, signal_):
        answer = api.sample(params.get("prompt", "hi"), max_tokens=50, system_prompt="Be brief.", temperature=0.2)
        return json.dumps(answer)

    return [
        CustomTool(name="form", description="Asks for a form", parameters=OBJ, execute=form),
        CustomTool(name="think", description="Asks the client's model", parameters=OBJ, execute=think),
    ]
"""


@pytest.fixture
def tools(tmp_path: Path) -> str:
    path = tmp_path / "asking.py"
    path.write_text(TOOLS)
    return str(path)


async def test_elicit_sends_the_tools_own_schema_and_returns_action_and_content(tools: str, transport: str) -> None:
    asked: list[mcp_types.ElicitRequestParams] = []
    answers = [
        mcp_types.ElicitResult(action="accept", content={"name": "Grace", "size": "M"}),
        mcp_types.ElicitResult(action="decline"),
        mcp_types.ElicitResult(action="cancel"),
    ]

    async def on_elicit(ctx: Any, params: mcp_types.ElicitRequestParams) -> Any:
        asked.append(params)
        return answers[len(asked) - 1]

    results = []
    with trio.fail_after(DEADLINE):
        async with open_session(transport, tools, elicitation_callback=on_elicit) as s:
            for _ in answers:
                results.append(json.loads(text_of(await s.call_tool("form", {}))))
    assert results == [
        {"action": "accept", "content": {"name": "Grace", "size": "M"}},
        {"action": "decline", "content": None},
        {"action": "cancel", "content": None},
    ]
    assert asked[0].message == "Your order"
    schema = asked[0].requested_schema
    assert schema["properties"]["name"]["default"] == "Ada" and schema["properties"]["size"]["enum"] == ["S", "M", "L"]


async def test_without_the_capability_elicit_is_cancelled_and_sample_is_none(tools: str, transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, tools) as s:
            form = json.loads(text_of(await s.call_tool("form", {})))
            sampled = json.loads(text_of(await s.call_tool("think", {})))
    assert form == {"action": "cancel", "content": None}
    assert sampled is None


async def test_sample_asks_the_clients_model_and_returns_its_result(tools: str, transport: str) -> None:
    asked: list[mcp_types.CreateMessageRequestParams] = []

    async def on_sample(ctx: Any, params: mcp_types.CreateMessageRequestParams) -> Any:
        asked.append(params)
        return mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text="forty-two"),
            model="test-model",
            stop_reason="endTurn",
        )

    with trio.fail_after(DEADLINE):
        async with open_session(transport, tools, sampling_callback=on_sample) as s:
            answer = json.loads(text_of(await s.call_tool("think", {"prompt": "What is six times seven?"})))
    assert answer["content"] == {"type": "text", "text": "forty-two"}
    assert answer["model"] == "test-model" and answer["role"] == "assistant"
    params = asked[0]
    assert params.max_tokens == 50 and params.system_prompt == "Be brief." and params.temperature == 0.2
    assert params.messages[0].role == "user"
    assert params.messages[0].content.text == "What is six times seven?"  # type: ignore[union-attr]


async def test_a_client_that_fails_to_sample_gives_none(tools: str, transport: str) -> None:
    async def on_sample(ctx: Any, params: mcp_types.CreateMessageRequestParams) -> Any:
        return mcp_types.ErrorData(code=-1, message="the user rejected the sampling request")

    with trio.fail_after(DEADLINE):
        async with open_session(transport, tools, sampling_callback=on_sample) as s:
            result = await s.call_tool("think", {})
    assert not result.is_error and json.loads(text_of(result)) is None


def test_outside_mcp_sample_is_none_and_elicit_is_cancelled(tools: str) -> None:
    for tool, expected in (("think", None), ("form", {"action": "cancel", "content": None})):
        proc = subprocess.run(
            [XCSH_RUN, tool, "--tools", tools, "--args", "{}", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(json.loads(proc.stdout)["content"][0]["text"]) == expected
