"""The blocking and asyncio openers take ``open_runner``'s options, typed, and name a misspelt one.

``open_blocking_runner``, ``open_asyncio_runner`` and ``run_tool_sync`` take
``**options: Unpack[RunnerOptions]``. A misspelt option is a ``TypeError``
raised where the opener is called, naming that opener (not ``open_runner``,
which the user never called) and the option it was meant to be; mypy
(strict) reports the same misspelling before anything runs. A correctly
spelt option reaches the runner: a real worker's call ends as it says.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests._support.typecheck import mypy_strict
from tests.conftest import TOOLS
from xcsh_run import open_asyncio_runner, open_blocking_runner, run_tool_sync

HOSTILE = TOOLS / "hostile.py"
SUGGESTION = "did you mean 'default_timeout'?"


def test_a_misspelt_option_of_the_blocking_opener_names_it_and_the_right_one() -> None:
    with pytest.raises(TypeError) as raised:
        open_blocking_runner([str(HOSTILE)], default_timout=30)  # type: ignore[call-arg]
    message = str(raised.value)
    assert message.startswith("open_blocking_runner() got an unexpected keyword argument 'default_timout'")
    assert message.endswith(SUGGESTION)
    assert "open_runner()" not in message.split(";")[0]


def test_a_misspelt_option_of_the_asyncio_opener_names_it_and_the_right_one() -> None:
    with pytest.raises(TypeError, match=r"^open_asyncio_runner\(\) got an unexpected keyword argument") as raised:
        open_asyncio_runner([str(HOSTILE)], default_timout=30)  # type: ignore[call-arg]
    assert str(raised.value).endswith(SUGGESTION)
    with pytest.raises(TypeError, match=r"^run_tool_sync\(\) .* 'spare_worker'; did you mean 'spare_workers'\?$"):
        run_tool_sync("sleeper", tool_paths=[str(HOSTILE)], spare_worker=0)  # type: ignore[call-arg]


def test_an_option_far_from_every_name_lists_them() -> None:
    with pytest.raises(TypeError, match="its options are those of open_runner\\(\\): cwd, builtin_tool_names, "):
        open_blocking_runner([str(HOSTILE)], zzzz=1)  # type: ignore[call-arg]


def test_the_options_reach_the_runner_on_both_faces() -> None:
    with open_blocking_runner([str(HOSTILE)], default_timeout=0.5, grace=0.5, spare_workers=0) as runner:
        blocked = runner.call_tool("sleeper", {"seconds": 30})

    async def main() -> str | None:
        async with open_asyncio_runner([str(HOSTILE)], default_timeout=0.5, grace=0.5, spare_workers=0) as runner:
            return (await runner.call_tool("sleeper", {"seconds": 30})).kind

    assert blocked.kind == "timeout", blocked.text
    assert "after 0.5 s" in blocked.text
    assert asyncio.run(asyncio.wait_for(main(), 60)) == "timeout"


TYPED = """
import asyncio
from typing import Unpack

from xcsh_run import RunnerOptions, open_asyncio_runner, open_blocking_runner


def plain() -> str:
    with open_blocking_runner(["tools/"], default_timeout=30.0, max_workers=2) as runner:
        return runner.call_tool("hello").text


def passed_on(**options: Unpack[RunnerOptions]) -> None:
    with open_blocking_runner(["tools/"], **options) as runner:
        runner.call_tool("hello")


async def in_asyncio() -> None:
    async with open_asyncio_runner(["tools/"], grace=1.0) as runner:
        await runner.call_tool("hello")


passed_on(spare_workers=0)
asyncio.run(in_asyncio())
"""


@pytest.mark.slow
def test_mypy_knows_the_openers_options_and_reports_a_misspelt_one(tmp_path: Path) -> None:
    good = mypy_strict(tmp_path, TYPED)
    assert good.returncode == 0, good.stdout + good.stderr
    bad = mypy_strict(
        tmp_path,
        TYPED.replace("default_timeout=30.0", "default_timout=30.0")
        .replace("grace=1.0", 'grace="long"')
        .replace("spare_workers=0", "spare_worker=0"),
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert 'Unexpected keyword argument "default_timout" for "open_blocking_runner"' in bad.stdout, bad.stdout
    assert 'Argument "grace" to "open_asyncio_runner" has incompatible type "str"' in bad.stdout, bad.stdout
    assert 'Unexpected keyword argument "spare_worker" for "passed_on"' in bad.stdout, bad.stdout
