"""The one-shot loaders of the original API: discover and load tools, report ``{tools, errors}``, keep no worker."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from xcsh_run._discovery import LoadError, ToolInfo
from xcsh_run._host.runner import open_runner


class CustomToolsLoadResult(msgspec.Struct, frozen=True):
    """What :func:`discover_and_load_custom_tools` found: tools, and every error with its source."""

    tools: list[ToolInfo]
    errors: list[LoadError]


async def discover_and_load_custom_tools(
    configured_paths: Sequence[str], cwd: str, builtin_tool_names: Iterable[str] = (), **options: Any
) -> CustomToolsLoadResult:
    """Discover every source, load each module in a worker, and return ``{tools, errors}``.

    The workers are stopped before this returns; use :func:`open_runner` to
    keep them for calls. ``options`` are those of :func:`open_runner`.
    """
    async with open_runner(
        configured_paths, cwd=cwd, builtin_tool_names=builtin_tool_names, discover_sources=True, **options
    ) as runner:
        return CustomToolsLoadResult(tools=runner.tools, errors=runner.errors)


async def load_custom_tools(
    paths: Sequence[str], cwd: str, builtin_tool_names: Iterable[str] = (), **options: Any
) -> CustomToolsLoadResult:
    """Load exactly ``paths`` (no discovery), each in a worker, and return ``{tools, errors}``."""
    async with open_runner(
        paths, cwd=cwd, builtin_tool_names=builtin_tool_names, discover_sources=False, **options
    ) as runner:
        return CustomToolsLoadResult(tools=runner.tools, errors=runner.errors)
