"""pi-mono extensions: tools registered with ``pi.registerTool`` load as a tool module.

A registered tool's ``execute`` is called in the extension order
``(toolCallId, params, signal, onUpdate, ctx)``; the hooks an extension also
registers (``pi.on``, ``registerCommand``) are accepted, never run, and named
once in a load warning; an extension that registers nothing is a load error
that says what a tool module and an extension must do.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import trio

from tests._support.faces import FACES, LEVELS, open_face
from tests.conftest import XCSH_RUN

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "ecosystem" / "extensions"
COUNTDOWN = str(HERE / "countdown.ts")
SILENT = str(HERE / "silent.ts")
MIXED = str(HERE / "mixed.ts")
IGNORED = 'registers on("session_start"), registerCommand("countdown-stats")'


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_registered_tools_run_with_their_own_argument_order(face: str, level: str) -> None:
    with trio.fail_after(120):
        async with open_face(face, level, COUNTDOWN) as f:
            order = await f.call("order", {})
            tick = await f.call("tick", {"from": 3})
            bad = await f.call("tick", {"from": "x"})
    assert (order.is_error, order.text) == (False, "string,object,AbortSignal,function,context"), order
    assert not tick.is_error and tick.text == "liftoff after 3", tick
    assert tick.details == {"seen": [3, 2, 1], "signal": True, "aborted": False}
    assert bad.is_error  # the registered schema is the one validated


async def test_progress_reaches_the_host_through_on_update() -> None:
    from xcsh_run import SandboxPolicy, open_runner

    updates: list[str] = []
    with trio.fail_after(60):
        async with open_runner([COUNTDOWN], sandbox=SandboxPolicy(level="strict")) as runner:
            result = await runner.call_tool(
                "tick",
                {"from": 4},
                on_update=lambda p: updates.append("".join(b.get("text", "") for b in p["content"])),
            )
    assert not result.is_error
    assert updates == ["4...", "3...", "2...", "1..."]


@pytest.mark.parametrize("level", LEVELS)
async def test_the_hooks_that_do_not_run_are_named_once(level: str) -> None:
    with trio.fail_after(60):
        # list first: a listing the module cache answers starts no worker, so it logs nothing
        listed = await trio.run_process(
            [XCSH_RUN, "list", "--sandbox", level, "--tools", COUNTDOWN, "-v"],
            capture_stdout=True, capture_stderr=True, check=False, stdin=b"",
        )  # fmt: skip
        run = await trio.run_process(
            [XCSH_RUN, "run", "order", "--args", "{}", "--json", "--sandbox", level, "--tools", COUNTDOWN, "-v"],
            capture_stdout=True, capture_stderr=True, check=False, stdin=b"",
        )  # fmt: skip
    stderr = run.stderr.decode()
    assert run.returncode == 0 and json.loads(run.stdout)["details"]["signal"] == "AbortSignal", stderr
    assert stderr.count(IGNORED) == 1, stderr
    assert "never run" in stderr
    out, err = listed.stdout.decode(), listed.stderr.decode()
    assert listed.returncode == 0 and "tick" in out and "order" in out, out + err
    assert err.count(IGNORED) == 1, err


async def test_the_warning_reaches_the_embedding_hosts_log() -> None:
    from xcsh_run import SandboxPolicy, open_runner

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("xcsh_run.tool")
    log.addHandler(handler)
    try:
        with trio.fail_after(60):
            async with open_runner([COUNTDOWN], sandbox=SandboxPolicy(level="contained")) as runner:
                await runner.call_tool("order", {})
                await runner.call_tool("tick", {"from": 1})
    finally:
        log.removeHandler(handler)
    assert sum(IGNORED in r for r in records) == 1, records


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_an_extension_that_registers_nothing_says_what_to_do(face: str, level: str) -> None:
    with trio.fail_after(120):
        async with open_face(face, level, SILENT, COUNTDOWN) as f:
            missing = await f.call("silent", {})
            bystander = await f.call("order", {})
    assert not bystander.is_error  # the other module still loads
    assert missing.is_error and "returned nothing and registered no tool" in missing.text, missing
    assert "pi.registerTool(" in missing.text


@pytest.mark.parametrize("level", LEVELS)
async def test_the_load_error_names_both_contracts(level: str) -> None:
    with trio.fail_after(60):
        listed = await trio.run_process(
            [XCSH_RUN, "list", "--sandbox", level, "--tools", SILENT],
            capture_stdout=True, capture_stderr=True, check=False, stdin=b"",
        )  # fmt: skip
    text = listed.stdout.decode() + listed.stderr.decode()
    assert "registered no tool" in text, text
    assert "a tool module returns its tools" in text and "pi.registerTool(" in text


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_a_factory_may_also_register_tools(face: str, level: str) -> None:
    with trio.fail_after(120):
        async with open_face(face, level, MIXED) as f:
            returned = await f.call("returned", {})
            registered = await f.call("registered", {})
    assert (returned.is_error, returned.text) == (False, "returned:function:true"), returned
    assert (registered.is_error, registered.text) == (False, "registered:true"), registered
