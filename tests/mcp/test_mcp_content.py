"""What a tool's result and declaration become on the MCP wire: every content block type, details as
structuredContent, output schemas, annotations and icons per revision, and errors a model can read.

Driven like tests/mcp/test_mcp.py: `xcsh-run serve` as a subprocess, the official SDK client (which
validates results against the output schemas it listed) over stdio and Streamable HTTP, and raw
JSON-RPC on stdio where a revision other than the SDK's must be negotiated. The tool module is
tests/fixtures/tools/content.py.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import trio

from tests._support.mcp_clients import DEADLINE, open_session
from tests.conftest import TOOLS, XCSH_RUN
from tests.fixtures.tools.content import BLOCKS, PNG, WAV
from tests.mcp.test_mcp import RawServer, error_of, raw_server, text_of
from xcsh_run import open_runner

CONTENT = str(TOOLS / "content.py")


async def call_raw(server: RawServer, version: str, name: str, arguments: dict[str, Any] | None = None) -> Any:
    init = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
    assert (await server.request("initialize", init))["result"]["protocolVersion"] == version
    await server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    response = await server.request("tools/call", {"name": name, "arguments": arguments or {}})
    return response["result"]


def wire(result: mcp_types.CallToolResult) -> list[dict[str, Any]]:
    """The content blocks as the client received them, in MCP's JSON."""
    return [b.model_dump(by_alias=True, exclude_none=True) for b in result.content]


# --- content blocks -----------------------------------------------------------------


async def test_every_content_block_type_reaches_the_client_unchanged(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, CONTENT) as s:
            result = await s.call_tool("blocks", {})
            assert not result.is_error, result
            assert wire(result) == BLOCKS
            kinds = [type(b) for b in result.content]
            assert kinds == [
                mcp_types.TextContent,
                mcp_types.ImageContent,
                mcp_types.AudioContent,
                mcp_types.EmbeddedResource,
                mcp_types.EmbeddedResource,
                mcp_types.ResourceLink,
            ]


async def test_the_authoring_structs_become_the_same_blocks(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, CONTENT) as s:
            result = await s.call_tool("structs", {})
            assert not result.is_error, result
            assert [b["type"] for b in wire(result)] == ["text", "image", "audio", "resource", "resource_link"]
            assert wire(result)[2]["annotations"] == {"priority": 1}
            assert wire(result)[3]["resource"] == {
                "uri": "file:///a.bin",
                "blob": base64.b64encode(bytes(range(256))).decode(),
            }
            assert wire(result)[4] == {"type": "resource_link", "uri": "https://example.com/r", "name": "r", "size": 3}


@pytest.mark.parametrize(
    ("which", "says"),
    [
        ("bytes_data", "content[1].data must be base64 text, got bytes: use base64.b64encode(raw).decode()"),
        ("snake_mime", "content[1] has 'mime_type': MCP spells it 'mimeType'"),
        ("two_bodies", "content[1].resource must have exactly one of 'text' (a str) or 'blob'"),
        ("nameless_link", "content[1] is a 'resource_link' block without 'name'"),
        ("bad_audience", "content[1].annotations.audience must be a list of 'user' and/or 'assistant'"),
    ],
)
async def test_a_malformed_block_is_a_tool_error_that_says_how_to_fix_it(which: str, says: str, transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, CONTENT) as s:
            result = await s.call_tool("bad_block", {"which": which})
            assert error_of(result)["kind"] == "tool_error"
            assert says in text_of(result)


@pytest.mark.parametrize(
    ("version", "native"),
    [("2024-11-05", {"text", "image", "resource"}), ("2025-03-26", {"text", "image", "audio", "resource"})],
)
async def test_older_revisions_get_blocks_they_do_not_know_as_a_text_summary(version: str, native: set[str]) -> None:
    """Stdio only: raw JSON-RPC, to negotiate revisions the SDK client never asks for (rendering is per session)."""
    with trio.fail_after(DEADLINE):
        async with raw_server(CONTENT) as server:
            result = await call_raw(server, version, "blocks")
            sent = result["content"]
            assert len(sent) == len(BLOCKS)
            for block, original in zip(sent, BLOCKS, strict=True):
                if original["type"] in native:
                    assert block == original
                else:
                    assert block["type"] == "text"
                    assert block["text"].startswith(f"[{original['type'].replace('_', ' ')} ")
            assert "structuredContent" not in result


# --- details as structuredContent, output schemas ----------------------------------------


async def test_object_details_are_structured_content_with_a_json_text_block_when_there_is_no_text(
    transport: str,
) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, CONTENT) as s:
            details = {"rows": 3, "names": ["a", "b"]}
            result = await s.call_tool("structured", {"text": "three rows", "details": details})
            assert result.structured_content == details
            assert result.meta == {"xcsh-run/details": details}  # kept for older readers
            assert text_of(result) == "three rows"
            # No text from the tool: the JSON is added as text, for clients that read only content.
            result = await s.call_tool("structured", {"details": details})
            assert [b.type for b in result.content] == ["image", "text"]
            assert json.loads(text_of(result)) == details
            # Details that are not an object are not structuredContent (which must be one).
            result = await s.call_tool("structured", {"text": "a list", "details": [1, 2]})
            assert result.structured_content is None
            assert result.meta == {"xcsh-run/details": [1, 2]}


async def test_output_schemas_are_listed_and_conforming_details_pass_the_clients_validation(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, CONTENT) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert tools["answer"].output_schema is not None
            assert tools["answer"].output_schema["required"] == ["total", "items"]
            # A msgspec.Struct type is served as its JSON Schema, as for parameters.
            struct_schema = tools["answer_struct"].output_schema
            assert struct_schema is not None
            assert struct_schema["type"] == "object"
            assert set(struct_schema["properties"]) == {"total", "items"}
            assert tools["blocks"].output_schema is None
            # The SDK client validates structuredContent against the listed schema; it would raise.
            result = await s.call_tool("answer", {"details": {"total": 1, "items": ["x"]}})
            assert result.structured_content == {"total": 1, "items": ["x"]}
            result = await s.call_tool("answer_struct", {})
            assert result.structured_content == {"total": 2, "items": ["a", "b"]}
            assert json.loads(text_of(result)) == {"total": 2, "items": ["a", "b"]}


@pytest.mark.parametrize(
    ("details", "says", "path"),
    [
        ({"total": "many", "items": []}, "'many' is not of type 'integer' (at $.total)", "$.total"),
        ({"items": []}, "'total' is a required property", "$"),
        (None, "the result has no details", "$"),
    ],
)
async def test_details_that_do_not_match_the_output_schema_are_a_tool_error(
    details: Any, says: str, path: str, transport: str
) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, CONTENT) as s:
            result = await s.call_tool("answer", {"details": details} if details is not None else {})
            error = error_of(result)
            assert error["kind"] == "tool_error"
            assert error["path"] == path
            assert text_of(result).startswith("answer failed: returned details that do not match its output_schema: ")
            assert says in text_of(result)


async def test_the_runner_applies_the_output_schema_too() -> None:
    # Not only MCP: Runner.call_tool (and so the CLI) gives the same tool_error.
    with trio.fail_after(DEADLINE):
        async with open_runner([CONTENT]) as runner:
            good = await runner.call_tool("answer", {"details": {"total": 0, "items": []}})
            assert not good.is_error
            bad = await runner.call_tool("answer", {"details": {"total": 0}})
            assert bad.kind == "tool_error"
            assert "'items' is a required property" in bad.text


# --- annotations, title, icons -------------------------------------------------------------


async def test_annotations_and_icons_reach_the_sdk_client(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, CONTENT) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            annotated = tools["annotated"]
            assert annotated.title == "Annotated Tool"
            assert annotated.annotations is not None
            assert annotated.annotations.read_only_hint is True
            assert annotated.annotations.idempotent_hint is True
            assert annotated.annotations.open_world_hint is False
            assert annotated.annotations.destructive_hint is None  # not declared: the client's default
            assert annotated.icons is not None
            icon = annotated.icons[0]
            assert (icon.src, icon.mime_type, icon.sizes, icon.theme) == (
                "https://example.com/icon.png", "image/png", ["48x48"], "dark",
            )  # fmt: skip
            fails = tools["fails"]
            assert fails.annotations is not None
            assert fails.annotations.destructive_hint is True
            assert fails.annotations.title == "Fails on purpose"
            assert tools["blocks"].annotations is None
            assert tools["blocks"].icons is None


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
async def test_tool_metadata_is_served_per_negotiated_revision(version: str) -> None:
    """Stdio only: raw JSON-RPC, to negotiate revisions the SDK client never asks for (rendering is per session)."""
    with trio.fail_after(DEADLINE):
        async with raw_server(CONTENT) as server:
            init = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
            assert (await server.request("initialize", init))["result"]["protocolVersion"] == version
            tools = {t["name"]: t for t in (await server.request("tools/list"))["result"]["tools"]}
            annotated, answer = tools["annotated"], tools["answer"]
            hints = {"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False}
            if version == "2024-11-05":
                assert "annotations" not in annotated
            elif version == "2025-03-26":
                # No tool title in this revision: the label travels as the annotation's title.
                assert annotated["annotations"] == {**hints, "title": "Annotated Tool"}
            else:
                assert annotated["annotations"] == hints
            assert ("title" in annotated) == (version >= "2025-06-18")
            assert ("outputSchema" in answer) == (version >= "2025-06-18")
            assert ("icons" in annotated) == (version >= "2025-11-25")


async def test_instructions_speak_to_the_model() -> None:
    """Stdio only: the initialize result as sent, on the raw wire."""
    with trio.fail_after(DEADLINE):
        async with raw_server(CONTENT) as server:
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
            instructions = (await server.request("initialize", init))["result"]["instructions"]
            assert "error" in instructions
            assert "_meta" not in instructions and "worker" not in instructions


# --- errors a model can read ---------------------------------------------------------------------


def assert_no_host_paths(text: str, *paths: str) -> None:
    for path in paths:
        assert path not in text, f"{path!r} in what the model reads: {text!r}"
    assert "Traceback" not in text


async def test_a_raising_tool_leaves_no_host_path_or_traceback_in_what_the_model_reads(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, CONTENT) as s:
            result = await s.call_tool("fails", {})
            assert result.is_error
            served = os.getcwd()
            model_view = text_of(result) + json.dumps(result.structured_content)
            assert_no_host_paths(model_view, served, str(TOOLS), os.environ["HOME"])
            # Inside the served folder: relative to it; the tool's own file: its name, with the line.
            assert text_of(result) == "fails failed: FileNotFoundError: cannot read data/input.csv (see content.py:12)"
            assert result.structured_content is not None
            assert result.structured_content["error"]["module"] == "content.py"
            # The evidence is all in _meta, and in the server's log.
            error = error_of(result)
            assert os.path.join(served, "data", "input.csv") in error["message"]
            assert error["module"] == CONTENT
            assert "FileNotFoundError" in error["traceback"]
        log = Path("serve.log").read_text()
        assert "FileNotFoundError" in log and CONTENT in log


async def test_a_crashing_tool_keeps_its_stderr_out_of_what_the_model_reads(transport: str) -> None:
    with trio.fail_after(DEADLINE):
        async with open_session(transport, CONTENT) as s:
            result = await s.call_tool("dies", {})
            error = error_of(result)
            assert error["kind"] == "crashed"
            assert error["exit_code"] == 7
            assert text_of(result) == "dies: crashed: the worker running the tool exited with code 7"
            assert_no_host_paths(text_of(result) + json.dumps(result.structured_content), str(TOOLS), "gave up")
            assert "gave up" in error["message"] and "gave up" in error["stderr_tail"]
        assert "gave up" in Path("serve.log").read_text()


def test_a_load_error_names_the_module_by_its_place_in_the_served_folder() -> None:
    # The render step alone: a load_error whose message starts with the module's absolute path.
    from xcsh_run._mcp.render import render_result
    from xcsh_run._results import ErrorKind, error_result

    served = os.getcwd()
    module = os.path.join(served, ".xcsh", "tools", "flaky.py")
    home_file = os.path.join(os.environ["HOME"], "secrets", "key.txt")
    message = f"{module}: importing the module raised RuntimeError: cannot open {home_file} or /etc/flaky.conf"
    result = error_result(ErrorKind.LOAD_ERROR, message, module=module, traceback="Traceback ...")
    rendered = render_result(result, "2025-11-25", root=served)
    model_text = (
        ".xcsh/tools/flaky.py: importing the module raised RuntimeError: cannot open key.txt or /etc/flaky.conf"
    )
    # No tool was called (the result was made alone): the text starts with the kind.
    assert rendered["content"] == [{"type": "text", "text": f"not loaded: {model_text}"}]
    assert rendered["structuredContent"] == {
        "error": {"kind": "load_error", "message": model_text, "module": ".xcsh/tools/flaky.py"}
    }
    assert rendered["_meta"]["xcsh-run/error"] == {
        "kind": "load_error", "message": message, "traceback": "Traceback ...", "module": module,
    }  # fmt: skip
    # An older client gets the same text, and no structuredContent.
    old = render_result(result, "2025-03-26", root=served)
    assert old["content"] == rendered["content"] and "structuredContent" not in old


# --- the CLI ---------------------------------------------------------------------------------------


def test_the_cli_prints_a_summary_line_for_each_non_text_block() -> None:
    out = subprocess.run(
        [XCSH_RUN, "blocks", "--tools", CONTENT], capture_output=True, text=True, timeout=DEADLINE, check=True
    ).stdout
    png_bytes, wav_bytes = len(base64.b64decode(PNG)), len(base64.b64decode(WAV))
    assert out.splitlines() == [
        "all the kinds",
        f"[image image/png, {png_bytes} bytes]",
        f"[audio audio/wav, {wav_bytes / 1024:.1f} KiB]",
        "[resource file:///project/notes.txt, text/plain, 10 chars]",
        "some notes",
        "[resource file:///project/data.bin, application/octet-stream, 256 bytes]",
        "[resource link report.pdf: file:///project/report.pdf, application/pdf, 2.0 KiB] Quarterly numbers",
    ]
