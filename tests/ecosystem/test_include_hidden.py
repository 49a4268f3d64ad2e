"""``serve --include-hidden NAME``: a hidden tool listed over MCP, on request, and only that one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from tests._support.faces import LEVELS, open_face
from tests.conftest import XCSH_RUN

BACKSTAGE = Path(__file__).parents[1] / "fixtures" / "ecosystem" / "hidden" / "backstage.py"


@pytest.mark.parametrize("level", LEVELS)
async def test_include_hidden_lists_the_named_hidden_tool(level: str) -> None:
    with trio.fail_after(90):
        async with open_face("mcp", level, str(BACKSTAGE), cli_options=("--include-hidden", "rebuild_index")) as f:
            listed = {t.name for t in (await f._session.list_tools()).tools}
            called = await f.call("rebuild_index")
            still_callable = await f.call("flush_cache")
        async with open_face("mcp", level, str(BACKSTAGE)) as plain:
            by_default = {t.name for t in (await plain._session.list_tools()).tools}
    assert {"status", "rebuild_index"} <= listed
    assert "flush_cache" not in listed  # not named: still hidden
    assert (called.is_error, called.text) == (False, "rebuilt")
    assert (still_callable.is_error, still_callable.text) == (False, "flushed")
    assert "status" in by_default and not {"rebuild_index", "flush_cache"} & by_default  # the control


async def test_include_hidden_resolve_is_listed_before_any_action_waits() -> None:
    with trio.fail_after(90):
        async with open_face("mcp", "contained", str(BACKSTAGE), cli_options=("--include-hidden", "resolve")) as f:
            listed = {t.name for t in (await f._session.list_tools()).tools}
    assert "resolve" in listed


@pytest.mark.parametrize("name", ["status", "no_such_tool"])
def test_include_hidden_of_a_tool_that_is_not_hidden_is_a_usage_error(name: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [XCSH_RUN, "serve", "--tools", str(BACKSTAGE), "--include-hidden", name],
        cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"no hidden tool named {name!r}" in proc.stderr
    assert "flush_cache, rebuild_index, resolve" in proc.stderr  # names the hidden tools there are
    assert proc.stdout == ""  # no server was started
