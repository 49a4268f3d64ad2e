"""The library is quiet in a program that configured no logging, and speaks in one that did.

The host logs what it does (a call that timed out, a worker that crashed) on
the ``xcsh_run`` loggers. An application that never configured logging must
not get those records on its stderr through logging's last resort (the call's
result already says it); ``logging.basicConfig()`` shows them. The CLI is an
application and keeps the last resort: a warning no handler of its takes
(here: no log file could be opened) still reaches stderr. Real processes
throughout: the last resort is per process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import XCSH_RUN

SLOW_TOOL = """
import time

from xcsh_run.pi import CustomTool


def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        time.sleep(60)
        return "done"

    return [CustomTool(name="slow_count", description="sleeps", parameters={"type": "object"}, execute=execute)]
"""

EMBEDDING = """
import asyncio
import sys

from xcsh_run import open_asyncio_runner

{configure}


async def main() -> None:
    async with open_asyncio_runner([sys.argv[1]], grace=0.5, spare_workers=0) as runner:
        result = await runner.call_tool("slow_count", {{}}, timeout=0.5)
    print(result.kind)


asyncio.run(main())
"""
WARNING = "'slow_count' ended timeout"


def embed(tmp_path: Path, configure: str) -> subprocess.CompletedProcess[str]:
    tool = tmp_path / "slow_count.py"
    tool.write_text(SLOW_TOOL)
    script = tmp_path / "embedding.py"
    script.write_text(textwrap.dedent(EMBEDDING.format(configure=configure)))
    return subprocess.run(
        [sys.executable, str(script), str(tool)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )


def test_an_embedding_program_without_logging_gets_nothing_on_stderr(tmp_path: Path) -> None:
    quiet = embed(tmp_path, configure="")
    assert (quiet.returncode, quiet.stdout) == (0, "timeout\n"), quiet.stderr
    assert quiet.stderr == ""


def test_an_embedding_program_that_configures_logging_sees_the_warning(tmp_path: Path) -> None:
    told = embed(tmp_path, configure="import logging\nlogging.basicConfig()")
    assert (told.returncode, told.stdout) == (0, "timeout\n"), told.stderr
    assert f"WARNING:xcsh_run:{WARNING}" in told.stderr


def test_the_cli_still_prints_a_warning_that_no_handler_of_its_takes(tmp_path: Path) -> None:
    tool = tmp_path / "slow_count.py"
    tool.write_text(SLOW_TOOL)
    unwritable = tmp_path / "a-file" / "xcsh-run.log"  # its parent is a file: the log cannot be opened
    (tmp_path / "a-file").write_text("")
    run = subprocess.run(
        [XCSH_RUN, "run", "slow_count", "--tools", str(tool), "--timeout", "0.5", "--grace", "0.5",
         "--log-file", str(unwritable)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 124, run.stderr
    assert "cannot write the log file" in run.stderr
    assert f"\n{WARNING}: " in run.stderr, run.stderr  # as logging's last resort prints it: the message alone
