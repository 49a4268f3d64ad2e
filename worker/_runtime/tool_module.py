"""Loading a tool module, checking what its factory returns, and shaping results.

Everything here runs inside the worker, on its main thread.
"""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Final, Literal

import msgspec

from xcsh_run.worker import protocol as p
from xcsh_run.worker._runtime.content import ContentError, check_block, check_icons, short
from xcsh_run.worker.pi import CustomTool, ToolAnnotations, ToolResult
from xcsh_run.worker.protocol import requires as _requires


class LoadFailure(Exception):
    """The module could not be imported, or its factory failed as a whole."""


class ResultError(TypeError):
    """``execute`` returned something that is not a result (a TypeError: ``xcsh-run fuzz`` counts it as a bug)."""


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


def _object_schema(value: object, tool: str, field: str) -> dict[str, Any]:
    """``parameters`` or ``output_schema`` as a JSON Schema dict whose root describes an object."""
    if isinstance(value, type) and issubclass(value, msgspec.Struct):
        return _json_schema_for_struct(value)
    if not isinstance(value, Mapping):
        raise ValueError(
            f"tool {tool!r}: {field} must be a msgspec.Struct type or a JSON Schema dict, got {type(value).__name__}"
        )
    try:
        schema: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(value))
    except (TypeError, msgspec.MsgspecError) as exc:
        raise ValueError(f"tool {tool!r}: {field} is not a JSON-serialisable schema: {exc}") from None
    if field == "output_schema" and schema.get("type") != "object":
        # MCP's outputSchema describes structuredContent, which is a JSON object.
        raise ValueError(
            f'tool {tool!r}: output_schema must have "type": "object" at its root (the details a tool '
            f"returns are served as MCP structuredContent, a JSON object), got type {short(schema.get('type'))}"
        )
    if schema.get("type", "object") != "object":
        raise ValueError(f"tool {tool!r}: the {field} schema must describe an object, got type {schema['type']!r}")
    return schema


_HINTS: Final = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def _annotations(value: object, tool: str) -> dict[str, Any]:
    """MCP's ToolAnnotations, from a :class:`ToolAnnotations` or a dict with MCP's keys."""
    if isinstance(value, ToolAnnotations):
        value = msgspec.to_builtins(value)
    if not isinstance(value, Mapping):
        raise ValueError(
            f"tool {tool!r}: annotations must be a xcsh_run.pi.ToolAnnotations or a dict like "
            f"{{'readOnlyHint': True}}, got {type(value).__name__}"
        )
    out: dict[str, Any] = {}
    for key, hint in value.items():
        if key == "title":
            if not isinstance(hint, str):
                raise ValueError(f"tool {tool!r}: annotations title must be a str, got {short(hint)}")
        elif key in _HINTS:
            if not isinstance(hint, bool):
                raise ValueError(f"tool {tool!r}: annotations {key} must be True or False, got {short(hint)}")
        else:
            camel = "".join(w.capitalize() if i else w for i, w in enumerate(str(key).split("_")))
            near = difflib.get_close_matches(camel, [*_HINTS, "title"], n=1)
            raise ValueError(
                f"tool {tool!r}: annotations has an unknown key {short(key)}"
                + (f"; did you mean {near[0]!r}?" if near else "")
                + f" (the keys are title, {', '.join(_HINTS)})"
            )
        if hint is not None:
            out[key] = hint
    return out


def _icons(value: object, tool: str) -> list[dict[str, Any]]:
    try:
        return check_icons(value, "icons")
    except ContentError as exc:
        raise ValueError(f"tool {tool!r}: {exc}") from None


def _approval(tool: CustomTool) -> Literal["read", "write", "exec", "dynamic"] | None:
    """The tier a tool declares (``dynamic``: a function decides per call); raises ValueError for another value."""
    if tool.format_approval_details is not None and not callable(tool.format_approval_details):
        raise ValueError(f"tool {tool.name!r}: format_approval_details must be a function (args) -> list[str]")
    value = tool.approval
    if value is None or callable(value):
        return None if value is None else "dynamic"
    if value in ("read", "write", "exec"):
        return value  # type: ignore[return-value]
    raise ValueError(f"tool {tool.name!r}: approval must be 'read', 'write', 'exec' or a function, got {value!r}")


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
    if tool.task_support not in ("forbidden", "optional", "required"):
        raise ValueError(
            f"tool {tool.name!r}: task_support must be 'forbidden', 'optional' or 'required', got {tool.task_support!r}"
        )
    if tool.task_after_input and tool.task_support == "forbidden":
        raise ValueError(f"tool {tool.name!r}: task_after_input needs task_support 'optional' or 'required'")
    if tool.timeout is not None and not (isinstance(tool.timeout, int | float) and tool.timeout > 0):
        raise ValueError(f"tool {tool.name!r}: timeout must be a positive number of seconds, got {tool.timeout!r}")
    params = tool.parameters
    struct_type: type[msgspec.Struct] | None = None
    if isinstance(params, type) and issubclass(params, msgspec.Struct):
        struct_type = params
    schema = _object_schema(params, tool.name, "parameters")
    description = p.ToolDescription(
        name=tool.name,
        label=tool.label,
        description=tool.description,
        parameters=schema,
        params_kind="struct" if struct_type is not None else "json_schema",
        hidden=bool(tool.hidden),
        deferrable=bool(tool.deferrable),
        concurrency=tool.concurrency,
        timeout=float(tool.timeout) if tool.timeout is not None else None,
        has_on_session=tool.on_session is not None,
        has_render_call=tool.render_call is not None,
        has_render_result=tool.render_result is not None,
        output_schema=_object_schema(tool.output_schema, tool.name, "output_schema")
        if tool.output_schema is not None
        else None,
        annotations=_annotations(tool.annotations, tool.name) if tool.annotations is not None else None,
        icons=_icons(tool.icons, tool.name) if tool.icons is not None else None,
        requires=_requires.coerce(tool.requires, tool.name) if tool.requires is not None else None,
        keeps_processes=bool(tool.keeps_processes),
        task_support=tool.task_support,
        task_after_input=bool(tool.task_after_input),
        approval=_approval(tool),
    )
    return LoadedTool(tool, description, struct_type)


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
    try:
        blocks = [check_block(b, f"{what}'s content[{i}]") for i, b in enumerate(content)] if content else []
    except ContentError as exc:
        raise ResultError(str(exc)) from None
    return p.CallResult(content=blocks, details=details)
