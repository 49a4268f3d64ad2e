"""The blocking API for plain programs: a wrapper over the async one, with no logic of its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import trio

from ._host import UpdateCallback, open_runner
from ._results import ToolResult


def run_tool_sync(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    tool_paths: Sequence[str] = (),
    on_update: UpdateCallback | None = None,
    timeout: float | None = None,
    **runner_options: Any,
) -> ToolResult:
    """Discover tools, run one call and stop every worker; blocks the calling thread.

    ``runner_options`` are those of :func:`open_runner`. The result is the
    call's single terminal result; nothing is left running when this returns.
    """

    async def main() -> ToolResult:
        async with open_runner(tool_paths, **runner_options) as runner:
            return await runner.call_tool(name, arguments, on_update=on_update, timeout=timeout)

    return trio.run(main)
