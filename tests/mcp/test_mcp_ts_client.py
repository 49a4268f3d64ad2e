"""The official TypeScript SDK's client (``@modelcontextprotocol/client``, v2) lists and calls tools.

The client runs on the Node 22 that ``make test`` installs with it into
``.cache/conformance`` (``make node-mcp``), in each of its version modes:
``legacy`` (the 2025 handshake), ``auto`` (``server/discover`` first, so
2026-07-28 here) and pinned to 2026-07-28; over a real ``serve --http`` and
over stdio, where the client starts ``xcsh-run serve`` itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from tests._support.mcp_clients import BASIC, DEADLINE, http_server, serve_args
from tests.conftest import ROOT, XCSH_RUN, marked_processes

CACHE = Path(os.environ.get("XCSH_CONFORMANCE_CACHE", ROOT / ".cache" / "conformance"))
NODE = CACHE / "node_modules" / ".bin" / "node"
CLIENT = CACHE / "node_modules" / "@modelcontextprotocol" / "client"
SCRIPT = Path(__file__).parent / "ts_client" / "list_and_call.mjs"
ERAS = {"legacy": "2025-11-25", "auto": "2026-07-28", "2026-07-28": "2026-07-28"}


@pytest.fixture
def ts_client(tmp_path: Path) -> Path:
    """The script beside the installed packages (ESM resolves ``node_modules`` from the script's folder)."""
    if not (NODE.exists() and CLIENT.exists()):
        why = f"no TypeScript SDK client in {CACHE}: `make test` (or `make node-mcp`) installs it"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    (tmp_path / "node_modules").symlink_to(CACHE / "node_modules")
    script = tmp_path / SCRIPT.name
    script.write_text(SCRIPT.read_text())
    return script


async def run_client(script: Path, where: str, era: str) -> dict[str, Any]:
    done = await trio.run_process(
        [str(NODE), str(script), where, era], capture_stdout=True, capture_stderr=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return answer


def check(answer: dict[str, Any], era: str) -> None:
    assert answer["version"] == ERAS[era]
    assert {"echo", "add", "raises"} <= set(answer["tools"])
    assert answer["echo"] == [{"type": "text", "text": "from TypeScript"}]
    assert answer["error"] == {"isError": True, "text": "raises failed: ValueError: the tool failed on purpose"}


@pytest.mark.parametrize("era", list(ERAS))
async def test_the_typescript_client_lists_and_calls_over_http(ts_client: Path, era: str) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(BASIC) as server:
            check(await run_client(ts_client, server.url, era), era)


@pytest.mark.parametrize("era", list(ERAS))
async def test_the_typescript_client_lists_and_calls_over_stdio(ts_client: Path, era: str) -> None:
    command = json.dumps([XCSH_RUN, *serve_args(BASIC)])
    with trio.fail_after(DEADLINE):
        check(await run_client(ts_client, command, era), era)
    # The client closed the server's stdin: the server and its workers are gone with the client.
    assert marked_processes() == []
