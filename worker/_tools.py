"""Loading a tool module, checking what its factory returns, and shaping results.

Everything here runs inside the worker, on its main thread.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import msgspec

from . import _protocol as p
from .pi import CustomTool, ImageContent, TextContent, ToolResult


class LoadFailure(Exception):
    """The module could not be imported, or its factory failed as a whole."""


class ResultError(Exception):
    """``execute`` returned something that is not a result."""


class LoadedTool:
    __slots__ = ("tool", "description", "struct_type", "decoder")

    def __init__(self, tool: CustomTool, description: p.ToolDescription, struct_type: type[msgspec.Struct] | None):
        self.tool = tool
        self.description = description
        self.struct_type = struct_type
        self.decoder: msgspec.json.Decoder[Any] = (
            msgspec.json.Decoder(struct_type) if struct_type is not None else msgspec.json.Decoder(dict[str, Any])
        )


def import_by_name(module: str, sys_path: str | None) -> ModuleType:
    """Import an installed module by its dotted name (entry-point plugins)."""
    import importlib

    if sys_path and sys_path not in sys.path:
        sys.path.append(sys_path)
    return importlib.import_module(module)


def find_factory(module: ModuleType, attr: str) -> Any:
    """``module.<attr>`` where ``attr`` may be dotted (``obj.method``); None if absent."""
    value: Any = module
    for part in attr.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the tool file from source on every load, and never writes __pycache__.

    CPython validates a .pyc by the source's mtime in whole seconds and its
    size, so an edit within the same second that keeps the size would run the
    old code. Tool files are small: compiling them costs about a millisecond.
    """

    def get_code(self, fullname: str) -> Any:
        source = self.get_data(self.get_filename(fullname))
        return compile(source, self.get_filename(fullname), "exec", dont_inherit=True)


def import_module(path: str) -> ModuleType:
    """Import a ``name.py`` file or a ``name/`` package by path, under a private name."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        init = os.path.join(path, "__init__.py")
        if not os.path.isfile(init):
            raise LoadFailure(f"{path} is a folder without __init__.py; a tool package needs one")
        stem = os.path.basename(path.rstrip(os.sep))
        spec = importlib.util.spec_from_file_location(
            f"xcsh_tool_{stem}",
            init,
            loader=_SourceOnlyLoader(f"xcsh_tool_{stem}", init),
            submodule_search_locations=[path],
        )
        parent = os.path.dirname(path)
    else:
        stem = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(
            f"xcsh_tool_{stem}", path, loader=_SourceOnlyLoader(f"xcsh_tool_{stem}", path)
        )
        parent = os.path.dirname(path)
    if spec is None or spec.loader is None:
        raise LoadFailure(f"{path} is not a Python module (expected a .py file or a package folder)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    # Appended, not prepended: sibling helpers become importable, but a tool
    # file named like a stdlib module cannot shadow it for everyone else.
    if parent not in sys.path:
        sys.path.append(parent)
    spec.loader.exec_module(module)
    return module


def _json_schema_for_struct(struct_type: type[msgspec.Struct]) -> dict[str, Any]:
    (root,), components = msgspec.json.schema_components([struct_type], ref_template="#/$defs/{name}")
    ref = root.get("$ref", "")
    name = ref.rsplit("/", 1)[-1] if ref.startswith("#/$defs/") else None
    if name is None or name not in components:
        return dict(root)
    schema = dict(components[name])
    others = {k: v for k, v in components.items() if k != name}
    if others or ref in msgspec.json.encode(components[name]).decode():
        # Nested or recursive types: keep every definition so $refs resolve.
        schema["$defs"] = dict(components)
    return schema


def _coerce_tool(entry: object) -> CustomTool:
    if isinstance(entry, CustomTool):
        return entry
    if isinstance(entry, Mapping):
        try:
            return CustomTool(**dict(entry))
        except TypeError as exc:
            raise ValueError(f"a dict entry must have CustomTool's fields: {exc}") from None
    raise ValueError(f"expected a CustomTool, got {type(entry).__name__}")


def describe_tool(entry: object) -> LoadedTool:
    """Check one factory entry and describe it; raises ValueError saying what is wrong."""
    tool = _coerce_tool(entry)
    if not isinstance(tool.name, str) or not tool.name or not tool.name.replace("_", "a").replace("-", "a").isalnum():
        raise ValueError(f"name must be a non-empty string of letters, digits, '_' or '-', got {tool.name!r}")
    if not isinstance(tool.description, str):
        raise ValueError(f"tool {tool.name!r}: description must be a string")
    if not isinstance(tool.label, str):
        raise ValueError(f"tool {tool.name!r}: label must be a string")
    if not callable(tool.execute):
        raise ValueError(f"tool {tool.name!r}: execute must be callable")
    if tool.concurrency not in ("shared", "exclusive"):
        raise ValueError(f"tool {tool.name!r}: concurrency must be 'shared' or 'exclusive', got {tool.concurrency!r}")
    if tool.timeout is not None and not (isinstance(tool.timeout, int | float) and tool.timeout > 0):
        raise ValueError(f"tool {tool.name!r}: timeout must be a positive number of seconds, got {tool.timeout!r}")
    params = tool.parameters
    struct_type: type[msgspec.Struct] | None = None
    if isinstance(params, type) and issubclass(params, msgspec.Struct):
        struct_type = params
        schema = _json_schema_for_struct(params)
        kind: Any = "struct"
    elif isinstance(params, Mapping):
        try:
            schema = msgspec.json.decode(msgspec.json.encode(params))
        except (TypeError, msgspec.MsgspecError) as exc:
            raise ValueError(f"tool {tool.name!r}: parameters is not a JSON-serialisable schema: {exc}") from None
        if schema.get("type", "object") != "object":
            raise ValueError(
                f"tool {tool.name!r}: the parameters schema must describe an object, got type {schema['type']!r}"
            )
        kind = "json_schema"
    else:
        raise ValueError(
            f"tool {tool.name!r}: parameters must be a msgspec.Struct type or a JSON Schema dict, "
            f"got {type(params).__name__}"
        )
    description = p.ToolDescription(
        name=tool.name,
        label=tool.label,
        description=tool.description,
        parameters=schema,
        params_kind=kind,
        hidden=bool(tool.hidden),
        deferrable=bool(tool.deferrable),
        concurrency=tool.concurrency,
        timeout=float(tool.timeout) if tool.timeout is not None else None,
        has_on_session=tool.on_session is not None,
        has_render_call=tool.render_call is not None,
        has_render_result=tool.render_result is not None,
    )
    return LoadedTool(tool, description, struct_type)


def _block(block: object, what: str, index: int) -> dict[str, Any]:
    if isinstance(block, TextContent | ImageContent):
        out: dict[str, Any] = msgspec.to_builtins(block)
        return out
    if type(block) is dict or isinstance(block, Mapping):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            return {"type": "text", "text": block["text"]}
        if kind == "image" and isinstance(block.get("data"), str) and isinstance(block.get("mimeType"), str):
            return {"type": "image", "data": block["data"], "mimeType": block["mimeType"]}
    raise ResultError(
        f"{what}'s content[{index}] is not a content block: expected {{'type': 'text', 'text': str}} or "
        f"{{'type': 'image', 'data': base64 str, 'mimeType': str}}, got {_short(block)}"
    )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def normalize_result(value: object, what: str = "the result") -> p.CallResult:
    """Turn what ``execute`` (or ``on_update``) gave into a :class:`CallResult`."""
    # A plain dict first, by its exact type: the Mapping check goes through the ABC machinery.
    if type(value) is dict:
        if "content" not in value:
            raise ResultError(f"{what} has no 'content' list: return {{'content': [...], 'details': ...}} or a str")
        content, details = value["content"], value.get("details")
    elif isinstance(value, str):
        return p.CallResult(content=[{"type": "text", "text": value}], details=None)
    elif isinstance(value, ToolResult):
        content, details = value.content, value.details
    elif isinstance(value, Mapping):
        if "content" not in value:
            raise ResultError(f"{what} has no 'content' list: return {{'content': [...], 'details': ...}} or a str")
        content, details = value["content"], value.get("details")
    else:
        raise ResultError(f"{what} must be a dict with 'content', a ToolResult or a str, got {type(value).__name__}")
    if type(content) is not list and not isinstance(content, list | tuple):
        raise ResultError(f"{what}'s 'content' must be a list of content blocks, got {type(content).__name__}")
    return p.CallResult(content=[_block(b, what, i) for i, b in enumerate(content)] if content else [], details=details)
