"""Tools that return every MCP content block type, declare output schemas and annotations, or fail."""

import base64
import os
import sys
from typing import Any

import msgspec

from worker.pi import (
    AudioContent,
    CustomTool,
    EmbeddedResource,
    Icon,
    ImageContent,
    ResourceContents,
    ResourceLink,
    TextContent,
    ToolAnnotations,
    ToolResult,
)

OBJ = {"type": "object"}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 100).decode()
WAV = base64.b64encode(b"RIFF" + b"\0" * 2044).decode()
BLOB = base64.b64encode(bytes(range(256))).decode()

# What `blocks` returns, as MCP JSON: the test compares the client's view with it.
BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "all the kinds", "annotations": {"audience": ["assistant"], "priority": 0.9}},
    {"type": "image", "data": PNG, "mimeType": "image/png", "annotations": {"audience": ["user"]}},
    {"type": "audio", "data": WAV, "mimeType": "audio/wav"},
    {
        "type": "resource",
        "resource": {"uri": "file:///project/notes.txt", "mimeType": "text/plain", "text": "some notes"},
        "annotations": {"lastModified": "2025-01-12T15:00:58Z"},
    },
    {
        "type": "resource",
        "resource": {"uri": "file:///project/data.bin", "mimeType": "application/octet-stream", "blob": BLOB},
    },
    {
        "type": "resource_link",
        "uri": "file:///project/report.pdf",
        "name": "report.pdf",
        "title": "The report",
        "description": "Quarterly numbers",
        "mimeType": "application/pdf",
        "size": 2048,
        "annotations": {"priority": 0.2},
    },
]


class Answer(msgspec.Struct):
    total: int
    items: list[str]


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"total": {"type": "integer"}, "items": {"type": "array", "items": {"type": "string"}}},
    "required": ["total", "items"],
}

BAD_BLOCKS = {
    "bytes_data": {"type": "image", "data": b"raw", "mimeType": "image/png"},
    "snake_mime": {"type": "audio", "data": WAV, "mime_type": "audio/wav"},
    "two_bodies": {"type": "resource", "resource": {"uri": "file:///x", "text": "a", "blob": BLOB}},
    "nameless_link": {"type": "resource_link", "uri": "file:///x"},
    "bad_audience": {"type": "text", "text": "x", "annotations": {"audience": ["model"]}},
}


def factory(api):
    def blocks(tcid, params, on_update, ctx, signal):
        return {"content": BLOCKS, "details": None}

    def structs(tcid, params, on_update, ctx, signal):
        return ToolResult(
            content=[
                TextContent(text="from structs"),
                ImageContent(data=PNG, mime_type="image/png"),
                AudioContent(data=WAV, mime_type="audio/wav", annotations={"priority": 1}),
                EmbeddedResource(resource=ResourceContents(uri="file:///a.bin", blob=BLOB)),
                ResourceLink(uri="https://example.com/r", name="r", size=3),
            ]
        )

    def bad_block(tcid, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": "fine"}, BAD_BLOCKS[params["which"]]]}

    def structured(tcid, params, on_update, ctx, signal):
        text = params.get("text")
        content = (
            [{"type": "text", "text": text}] if text else [{"type": "image", "data": PNG, "mimeType": "image/png"}]
        )
        return {"content": content, "details": params.get("details")}

    def answer(tcid, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": "answered"}], "details": params.get("details")}

    def answer_struct(tcid, params, on_update, ctx, signal):
        return ToolResult(content=[], details=Answer(total=2, items=["a", "b"]))

    def annotated(tcid, params, on_update, ctx, signal):
        return "annotated"

    def fails(tcid, params, on_update, ctx, signal):
        # An exception whose message names files in the served folder and next to the tool.
        raise FileNotFoundError(
            f"cannot read {os.path.join(api.cwd, 'data', 'input.csv')} (see {os.path.abspath(__file__)}:12)"
        )

    def dies(tcid, params, on_update, ctx, signal):
        sys.stderr.write(f'Traceback (most recent call last):\n  File "{os.path.abspath(__file__)}", line 1\n')
        sys.stderr.write(f"fatal: {os.path.abspath(__file__)} gave up\n")
        sys.stderr.flush()
        os._exit(7)

    def tool(fn, **options):
        return CustomTool(name=fn.__name__, description=fn.__name__, parameters=OBJ, execute=fn, **options)

    return [
        tool(blocks),
        tool(structs),
        tool(bad_block),
        tool(structured),
        tool(answer, output_schema=ANSWER_SCHEMA),
        tool(answer_struct, output_schema=Answer),
        tool(
            annotated,
            label="Annotated Tool",
            annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
            icons=[Icon(src="https://example.com/icon.png", mime_type="image/png", sizes=["48x48"], theme="dark")],
        ),
        tool(fails, annotations={"destructiveHint": True, "title": "Fails on purpose"}),
        tool(dies),
    ]
