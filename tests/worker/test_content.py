"""The worker's checks of content blocks and of what a CustomTool declares for MCP (output schema,
annotations, icons), and that those declarations survive the module cache."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from tests.conftest import TOOLS
from xcsh_run import open_runner
from xcsh_run.pi import AudioContent, CustomTool, Icon, ImageContent, ResourceContents, ToolAnnotations
from xcsh_run.worker._runtime.tool_module import ResultError, describe_tool, normalize_result

B64 = base64.b64encode(b"abc").decode()


def blocks(*content: Any) -> list[dict[str, Any]]:
    return normalize_result({"content": list(content)}).content


def problem(block: Any) -> str:
    with pytest.raises(ResultError) as caught:
        normalize_result({"content": [block]})
    return str(caught.value)


def test_valid_blocks_keep_mcp_keys_and_drop_the_rest() -> None:
    assert blocks({"type": "text", "text": "a", "extra": 1}) == [{"type": "text", "text": "a"}]
    assert blocks(
        {"type": "audio", "data": B64, "mimeType": "audio/ogg; codecs=opus", "annotations": {"priority": 0}},
        AudioContent(data=B64, mime_type="audio/wav", meta={"k": "v"}),
        {"type": "resource", "resource": ResourceContents(uri="mem://x", text="t", mime_type="text/markdown")},
    ) == [
        {"type": "audio", "data": B64, "mimeType": "audio/ogg; codecs=opus", "annotations": {"priority": 0}},
        {"type": "audio", "data": B64, "mimeType": "audio/wav", "_meta": {"k": "v"}},
        {"type": "resource", "resource": {"uri": "mem://x", "mimeType": "text/markdown", "text": "t"}},
    ]
    annotated = {"audience": ["user", "assistant"], "priority": 1, "lastModified": "2025-06-18T10:00:00+02:00"}
    assert blocks({"type": "text", "text": "a", "annotations": annotated})[0]["annotations"] == annotated


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ("just text", "the result's content[0] is not a content block: expected a dict like {'type': 'text'"),
        ({"type": "txt", "text": "a"}, "content[0] is not a content block: its type 'txt' is not one of 'text', "),
        ({"type": "text", "text": 3}, "the result's content[0].text must be a str, got 3"),
        ({"type": "image", "mimeType": "image/png"}, "is a 'image' block without 'data': expected {'type': 'image'"),
        ({"type": "image", "data": "not base64!", "mimeType": "image/png"}, "content[0].data is not valid base64"),
        (ImageContent(data=B64, mime_type="png"), "content[0].mimeType must be a MIME type such as 'image/png'"),
        ({"type": "resource", "resource": "file:///x"}, "content[0].resource must be a dict {'uri': str, 'text'"),
        ({"type": "resource", "resource": {"text": "x"}}, "content[0].resource is a 'resource' block without 'uri'"),
        ({"type": "resource", "resource": {"uri": "x", "blob": "%%%"}}, "content[0].resource.blob is not valid base64"),
        ({"type": "resource_link", "uri": "", "name": "n"}, "content[0].uri must be a non-empty str, got ''"),
        (
            {"type": "resource_link", "uri": "u", "name": "n", "size": True},
            "content[0].size must be the resource's size",
        ),
        (
            {"type": "text", "text": "a", "annotations": {"priority": -0.5}},
            "annotations.priority must be a number from 0",
        ),
        (
            {"type": "text", "text": "a", "annotations": ["user"]},
            "content[0].annotations must be a dict with 'audience'",
        ),
        ({"type": "text", "text": "a", "_meta": "x"}, "content[0]._meta must be a dict (JSON object), got 'x'"),
    ],
)
def test_each_malformed_block_is_named_with_its_fix(block: Any, says: str) -> None:
    assert says in problem(block)


def test_an_update_names_itself() -> None:
    with pytest.raises(ResultError, match=r"^the update's content\[0\]\.text must be a str"):
        normalize_result({"content": [{"type": "text", "text": None}]}, "the update")


def tool(**options: Any) -> CustomTool:
    return CustomTool(name="t", description="d", parameters={"type": "object"}, execute=print, **options)


class Out(msgspec.Struct):
    n: int


def test_declarations_become_the_tool_description() -> None:
    described = describe_tool(
        tool(
            output_schema=Out,
            annotations=ToolAnnotations(title="T", read_only_hint=True, destructive_hint=False),
            icons=[
                Icon(src="data:image/svg+xml;base64,AAAA", sizes=["any"]),
                {"src": "https://x/i.png", "theme": "light"},
            ],
        )
    ).description
    assert described.output_schema is not None
    assert described.output_schema["properties"] == {"n": {"type": "integer"}}
    assert described.annotations == {"title": "T", "readOnlyHint": True, "destructiveHint": False}
    assert described.icons == [
        {"src": "data:image/svg+xml;base64,AAAA", "sizes": ["any"]},
        {"src": "https://x/i.png", "theme": "light"},
    ]
    plain = describe_tool(tool()).description
    assert (plain.output_schema, plain.annotations, plain.icons) == (None, None, None)
    # Absent fields stay off the wire (and out of the cache).
    assert b"output_schema" not in msgspec.json.encode(plain)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"output_schema": {"type": "array"}}, 'tool \'t\': output_schema must have "type": "object" at its root'),
        ({"output_schema": {"properties": {}}}, 'output_schema must have "type": "object" at its root'),
        (
            {"output_schema": "Out"},
            "tool 't': output_schema must be a msgspec.Struct type or a JSON Schema dict, got str",
        ),
        (
            {"annotations": {"readOnly": True}},
            "annotations has an unknown key 'readOnly'; did you mean 'readOnlyHint'?",
        ),
        ({"annotations": {"read_only_hint": True}}, "unknown key 'read_only_hint'; did you mean 'readOnlyHint'?"),
        ({"annotations": {"destructiveHint": "no"}}, "tool 't': annotations destructiveHint must be True or False"),
        ({"annotations": ["readOnlyHint"]}, "annotations must be a xcsh_run.pi.ToolAnnotations or a dict"),
        ({"icons": {"src": "https://x"}}, "tool 't': icons must be a list of icons"),
        ({"icons": [{"src": "/home/me/icon.png"}]}, "icons[0].src must be an https:// (or http://) URL or a data: URI"),
        ({"icons": [{"src": "https://x", "sizes": "48x48"}]}, "icons[0].sizes must be a list of 'WxH' strings"),
        ({"icons": [{"src": "https://x", "theme": "blue"}]}, "icons[0].theme must be 'light' or 'dark', got 'blue'"),
        (
            {"icons": [{"src": "https://x", "mime_type": "image/png"}]},
            "unknown key 'mime_type'; did you mean 'mimeType'?",
        ),
    ],
)
def test_each_bad_declaration_is_an_entry_error_that_says_what_to_change(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=r"^tool 't': ") as caught:
        describe_tool(tool(**options))
    assert says in str(caught.value)


async def test_an_invalid_output_schema_is_a_load_error_and_declarations_survive_the_cache(tmp_path: Path) -> None:
    module = tmp_path / "declared.py"
    module.write_text(
        "from xcsh_run.pi import CustomTool, ToolAnnotations\n"
        "OBJ = {'type': 'object'}\n"
        "def factory(api):\n"
        "    run = lambda *a: {'content': [], 'details': {'n': 1}}\n"
        "    return [\n"
        "        CustomTool(name='good', description='d', parameters=OBJ, execute=run,\n"
        "                   output_schema={'type': 'object', 'properties': {'n': {'type': 'integer'}}},\n"
        "                   annotations=ToolAnnotations(read_only_hint=True), icons=[{'src': 'https://x/i.png'}]),\n"
        "        CustomTool(name='bad', description='d', parameters=OBJ, execute=run,\n"
        "                   output_schema={'type': 'object', 'properties': {'n': {'type': 'integr'}}}),\n"
        "    ]\n"
    )
    seen = []
    with trio.fail_after(30):
        for _ in range(2):  # the second load is answered by the module cache, without a worker
            async with open_runner([str(module)]) as runner:
                (good,) = runner.tools
                seen.append((good.output_schema, good.annotations, good.icons))
                (error,) = runner.errors
                assert "tool 'bad': output_schema is not a valid JSON Schema" in error.message
                result = await runner.call_tool("good", {})
                assert result.details == {"n": 1}
    cached = list((Path(os.environ["XDG_CACHE_HOME"]) / "xcsh-run" / "modules").glob("*.json"))
    assert len(cached) == 1 and b"readOnlyHint" in cached[0].read_bytes()
    assert (
        seen[0]
        == seen[1]
        == (
            {"type": "object", "properties": {"n": {"type": "integer"}}},
            {"readOnlyHint": True},
            [{"src": "https://x/i.png"}],
        )
    )


def test_the_content_tool_module_loads_every_tool() -> None:
    # A guard for tests/mcp/test_mcp_content.py: a declaration mistake there would hide its tools.
    import importlib.util

    spec = importlib.util.spec_from_file_location("content_tools", TOOLS / "content.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names = [describe_tool(entry).description.name for entry in module.factory(None)]
    assert "annotated" in names and "answer_struct" in names
