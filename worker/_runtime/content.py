"""Content blocks: what a tool's result may hold, checked in the worker with messages that say how to fix it.

The blocks are MCP's (revision 2025-11-25): ``text``, ``image``, ``audio``,
``resource`` (an embedded resource) and ``resource_link``, each with optional
``annotations`` and ``_meta``. A valid block is copied with MCP's keys only, in
a fixed order, so that the host and every front end downstream can trust its
shape without checking it again; other keys are dropped. The checks run on the
worker's main thread for every result and update: the text block, by far the
most common, takes a short path.
"""

from __future__ import annotations

import binascii
import datetime
import difflib
import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

BLOCK_TYPES: Final = ("text", "image", "audio", "resource", "resource_link")
_SHAPES: Final = {
    "text": "{'type': 'text', 'text': str}",
    "image": "{'type': 'image', 'data': base64 str, 'mimeType': 'image/png'}",
    "audio": "{'type': 'audio', 'data': base64 str, 'mimeType': 'audio/wav'}",
    "resource": "{'type': 'resource', 'resource': {'uri': str, 'text': str | 'blob': base64 str, 'mimeType'?: str}}",
    "resource_link": "{'type': 'resource_link', 'uri': str, 'name': str, 'title'?, 'description'?, "
    "'mimeType'?, 'size'?: int}",
}
_ANNOTATION_KEYS: Final = ("audience", "priority", "lastModified")
_ROLES: Final = ("user", "assistant")
_ICON_KEYS: Final = ("src", "mimeType", "sizes", "theme")
_ICON_SIZE: Final = re.compile(r"[1-9][0-9]*x[1-9][0-9]*|any")
_MIME: Final = re.compile(r"[A-Za-z0-9][\w.+-]*/[A-Za-z0-9][\w.+-]*(\s*;.*)?")
# Keys authors write in Python style, and the MCP key each stands for.
_SNAKE: Final = {"mime_type": "mimeType", "last_modified": "lastModified", "meta": "_meta"}


class ContentError(ValueError):
    """A block (or an icon) that is not what MCP defines; the message says what to change."""


def short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_block(block: object, where: str) -> dict[str, Any]:
    """The block as MCP's JSON (known keys only), or :class:`ContentError` naming ``where`` and the fix."""
    if type(block) is not dict:  # the exact type first: the Mapping check goes through the ABC machinery
        if isinstance(block, msgspec.Struct):
            block = msgspec.to_builtins(block)
        if not isinstance(block, Mapping):
            raise ContentError(
                f"{where} is not a content block: expected a dict like {_SHAPES['text']}, got {short(block)}"
            )
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        if type(text) is str and len(block) == 2:  # the common case: nothing else to check
            return {"type": "text", "text": text}
        out: dict[str, Any] = {"type": "text", "text": _str(block, "text", where, kind)}
    elif kind in ("image", "audio"):
        out = {"type": kind, "data": _base64(block, "data", where, kind), "mimeType": _mime(block, where, kind)}
    elif kind == "resource":
        out = {"type": kind, "resource": _resource(block.get("resource"), f"{where}.resource")}
    elif kind == "resource_link":
        out = {"type": kind, "uri": _str(block, "uri", where, kind, nonempty=True)}
        out["name"] = _str(block, "name", where, kind, nonempty=True)
        for key in ("title", "description"):
            if block.get(key) is not None:
                out[key] = _str(block, key, where, kind)
        if block.get("mimeType") is not None or "mime_type" in block:
            out["mimeType"] = _mime(block, where, kind)
        size = block.get("size")
        if size is not None:
            if type(size) is not int or size < 0:
                raise ContentError(
                    f"{where}.size must be the resource's size in bytes (an int >= 0), got {short(size)}"
                )
            out["size"] = size
        if block.get("icons") is not None:
            out["icons"] = check_icons(block["icons"], f"{where}.icons")
    else:
        known = ", ".join(repr(k) for k in BLOCK_TYPES)
        hint = difflib.get_close_matches(kind, BLOCK_TYPES, n=1) if isinstance(kind, str) else []
        raise ContentError(
            f"{where} is not a content block: its type {short(kind)} is not one of {known}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
        )
    _extras(block, out, where)
    return out


def _extras(block: Mapping[str, Any], out: dict[str, Any], where: str) -> None:
    annotations = block.get("annotations")
    if annotations is not None:
        out["annotations"] = check_annotations(annotations, f"{where}.annotations")
    meta = block.get("_meta")
    if meta is not None:
        if not isinstance(meta, Mapping):
            raise ContentError(f"{where}._meta must be a dict (JSON object), got {short(meta)}")
        out["_meta"] = dict(meta)


def _str(block: Mapping[str, Any], key: str, where: str, kind: str, *, nonempty: bool = False) -> str:
    value = block.get(key)
    if isinstance(value, str) and (value or not nonempty):
        return value
    if value is None and key not in block:
        raise ContentError(f"{where} is a {kind!r} block without {key!r}: expected {_SHAPES[kind]}")
    what = "a non-empty str" if nonempty else "a str"
    raise ContentError(f"{where}.{key} must be {what}, got {short(value)}")


def _base64(block: Mapping[str, Any], key: str, where: str, kind: str) -> str:
    value = block.get(key)
    if isinstance(value, bytes | bytearray | memoryview):
        raise ContentError(
            f"{where}.{key} must be base64 text, got {type(value).__name__}: use base64.b64encode(raw).decode()"
        )
    value = _str(block, key, where, kind)
    try:
        binascii.a2b_base64(value, strict_mode=True)
    except binascii.Error as exc:
        raise ContentError(
            f"{where}.{key} is not valid base64 ({exc}): encode the raw bytes with base64.b64encode(raw).decode()"
        ) from None
    return value


def _mime(block: Mapping[str, Any], where: str, kind: str) -> str:
    if "mimeType" not in block and "mime_type" in block:
        raise ContentError(f"{where} has 'mime_type': MCP spells it 'mimeType'")
    value = _str(block, "mimeType", where, kind)
    if not _MIME.fullmatch(value):
        example = {"image": "image/png", "audio": "audio/wav"}.get(kind, "text/plain")
        raise ContentError(f"{where}.mimeType must be a MIME type such as {example!r}, got {short(value)}")
    return value


def _resource(resource: object, where: str) -> dict[str, Any]:
    if isinstance(resource, msgspec.Struct):
        resource = msgspec.to_builtins(resource)
    if not isinstance(resource, Mapping):
        raise ContentError(
            f"{where} must be a dict {{'uri': str, 'text': str}} or {{'uri', 'blob'}}, got {short(resource)}"
        )
    out: dict[str, Any] = {"uri": _str(resource, "uri", where, "resource", nonempty=True)}
    if resource.get("mimeType") is not None or "mime_type" in resource:
        out["mimeType"] = _mime(resource, where, "resource")
    has_text, has_blob = resource.get("text") is not None, resource.get("blob") is not None
    if has_text == has_blob:
        raise ContentError(
            f"{where} must have exactly one of 'text' (a str) or 'blob' (base64 of binary content), "
            + ("got both" if has_text else "got neither")
        )
    if has_text:
        out["text"] = _str(resource, "text", where, "resource")
    else:
        out["blob"] = _base64(resource, "blob", where, "resource")
    meta = resource.get("_meta")
    if meta is not None:
        if not isinstance(meta, Mapping):
            raise ContentError(f"{where}._meta must be a dict (JSON object), got {short(meta)}")
        out["_meta"] = dict(meta)
    return out


def check_annotations(value: object, where: str) -> dict[str, Any]:
    """A block's ``annotations``: ``audience`` (of "user", "assistant"), ``priority`` (0 to 1), ``lastModified``."""
    if not isinstance(value, Mapping):
        raise ContentError(f"{where} must be a dict with 'audience', 'priority' or 'lastModified', got {short(value)}")
    _unknown_keys(value, _ANNOTATION_KEYS, where)
    out: dict[str, Any] = {}
    audience = value.get("audience")
    if audience is not None:
        if not isinstance(audience, list | tuple) or any(role not in _ROLES for role in audience):
            raise ContentError(f"{where}.audience must be a list of 'user' and/or 'assistant', got {short(audience)}")
        out["audience"] = list(audience)
    priority = value.get("priority")
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int | float) or not 0 <= priority <= 1:
            raise ContentError(
                f"{where}.priority must be a number from 0 (optional) to 1 (required), got {short(priority)}"
            )
        out["priority"] = priority
    modified = value.get("lastModified")
    if modified is not None:
        if not isinstance(modified, str) or not _iso8601(modified):
            raise ContentError(
                f"{where}.lastModified must be an ISO 8601 timestamp such as '2025-01-12T15:00:58Z', "
                f"got {short(modified)}"
            )
        out["lastModified"] = modified
    return out


def _iso8601(text: str) -> bool:
    try:
        datetime.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def check_icons(value: object, where: str) -> list[dict[str, Any]]:
    """MCP icons: a list of ``{"src": https/http/data URI, "mimeType"?, "sizes"?: ["48x48" | "any"], "theme"?}``."""
    if not isinstance(value, list | tuple):
        raise ContentError(f"{where} must be a list of icons like {{'src': 'https://...', 'mimeType': 'image/png'}}")
    icons = []
    for index, icon in enumerate(value):
        at = f"{where}[{index}]"
        if isinstance(icon, msgspec.Struct):
            icon = msgspec.to_builtins(icon)
        if not isinstance(icon, Mapping):
            raise ContentError(f"{at} must be a dict like {{'src': 'https://...', 'mimeType': 'image/png'}}")
        _unknown_keys(icon, _ICON_KEYS, at)
        src = icon.get("src")
        if not isinstance(src, str) or not src.startswith(("https://", "http://", "data:")):
            raise ContentError(f"{at}.src must be an https:// (or http://) URL or a data: URI, got {short(src)}")
        out: dict[str, Any] = {"src": src}
        mime = icon.get("mimeType")
        if mime is not None:
            if not isinstance(mime, str) or not _MIME.fullmatch(mime):
                raise ContentError(f"{at}.mimeType must be a MIME type such as 'image/png', got {short(mime)}")
            out["mimeType"] = mime
        sizes = icon.get("sizes")
        if sizes is not None:
            if not isinstance(sizes, list | tuple) or not all(
                isinstance(s, str) and _ICON_SIZE.fullmatch(s) for s in sizes
            ):
                raise ContentError(
                    f"{at}.sizes must be a list of 'WxH' strings (like '48x48') or 'any', got {short(sizes)}"
                )
            out["sizes"] = list(sizes)
        theme = icon.get("theme")
        if theme is not None:
            if theme not in ("light", "dark"):
                raise ContentError(f"{at}.theme must be 'light' or 'dark', got {short(theme)}")
            out["theme"] = theme
        icons.append(out)
    return icons


def _unknown_keys(value: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in value:
        if key in known:
            continue
        if not isinstance(key, str):
            raise ContentError(f"{where} has a key that is not a str: {short(key)}")
        spelled = _SNAKE.get(key) or next(iter(difflib.get_close_matches(key, known, n=1)), None)
        hint = f"; did you mean {spelled!r}?" if spelled in known else f"; the keys are {', '.join(known)}"
        raise ContentError(f"{where} has an unknown key {key!r}{hint}")
