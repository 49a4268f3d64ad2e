"""One tool call, or a sequence of them, through each face a user has: the CLI, the embedding API, MCP.

:func:`open_face` yields a :class:`Face` whose ``call(name, args)`` returns
an :class:`Answer`, the same whatever the face:

- ``cli``: every call is its own ``xcsh-run run NAME --args JSON --json``
  process (the CLI is one-shot: nothing lives from one call to the next);
- ``embed``: one :func:`xcsh_run.open_runner` for the whole block;
- ``mcp``: one ``xcsh-run serve`` on stdio with the SDK's client for the
  whole block (one MCP session).

Tests of the tool ecosystem take ``face`` and ``level`` (see ``FACES`` and
``LEVELS``) and run a tool written in another contract's style unchanged
everywhere a user would meet it.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from tests.conftest import XCSH_RUN
from xcsh_run import SandboxPolicy, open_runner

FACES = ("cli", "embed", "mcp")
LEVELS = ("contained", "strict")
DEADLINE = 60  # seconds for one CLI call


@dataclass
class Answer:
    """What a call gave, as any face reports it."""

    is_error: bool
    text: str
    details: Any = None
    exit_code: int | None = None  # the CLI's; None on the other faces
    stderr: str = ""  # the CLI's
    background: list[dict[str, Any]] = field(default_factory=list)  # processes kept after the call


@dataclass
class Face:
    """Calls through one face; ``cli_options`` also go to every CLI and to ``serve``."""

    face: str
    level: str
    tools: Sequence[str]
    cli_options: Sequence[str] = ()
    cwd: str | None = None
    env: dict[str, str] | None = None
    _runner: Any = None
    _session: Any = None
    log: list[str] = field(default_factory=list)

    async def call(self, name: str, args: dict[str, Any] | None = None) -> Answer:
        args = args or {}
        if self.face == "cli":
            return await self._cli(name, args)
        if self.face == "embed":
            result = await self._runner.call_tool(name, args)
            text = "".join(b.get("text", "") for b in result.content if b.get("type") == "text")
            background = [{"pid": b.pid, "command": b.command} for b in result.background]
            return Answer(result.is_error, text, result.details, background=background)
        result = await self._session.call_tool(name, args)
        text = "".join(getattr(b, "text", "") for b in result.content)
        meta = result.meta or {}
        background = meta.get("xcsh-run/background") or []
        return Answer(bool(result.is_error), text, meta.get("xcsh-run/details"), background=background)

    async def _cli(self, name: str, args: dict[str, Any]) -> Answer:
        command = [XCSH_RUN, "run", name, "--args", json.dumps(args), "--json", "--sandbox", self.level]
        for tool in self.tools:
            command += ["--tools", tool]
        command += list(self.cli_options)
        with trio.fail_after(DEADLINE):
            done = await trio.run_process(
                command,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                cwd=self.cwd,
                env=self.env,
                stdin=b"",
            )
        stdout, stderr = done.stdout.decode(), done.stderr.decode()
        self.log.append(stderr)
        try:
            data = json.loads(stdout)
        except json.JSONDecodeError:
            return Answer(True, stdout + stderr, None, done.returncode, stderr)
        text = "".join(b.get("text", "") for b in data.get("content") or [] if b.get("type") == "text")
        background = data.get("background") or []
        return Answer(bool(data.get("is_error")), text, data.get("details"), done.returncode, stderr, background)


@asynccontextmanager
async def open_face(
    face: str,
    level: str,
    *tools: str,
    cli_options: Sequence[str] = (),
    cwd: str | None = None,
    policy: dict[str, Any] | None = None,
    allow_write: Sequence[str] = (),
    mcp_callbacks: dict[str, Any] | None = None,
    **runner_options: Any,
) -> AsyncIterator[Face]:
    """A :class:`Face` over ``tools`` at sandbox ``level``; ``runner_options`` go to ``open_runner``.

    ``policy``: more :class:`SandboxPolicy` fields for the embedding API (the
    CLI and ``serve`` take theirs as flags, in ``cli_options``).
    ``allow_write``: paths a ``strict`` tool may write (``--allow-write``, or the
    policy's ``extra_write_paths``); ``mcp_callbacks``: the MCP client's
    ``ClientSession`` callbacks (``elicitation_callback``, ...).
    """
    assert face in FACES and level in LEVELS, (face, level)
    cli_options = (*cli_options, *(o for path in allow_write for o in ("--allow-write", path)))
    out = Face(face, level, tools, cli_options, cwd)
    if face == "cli":
        yield out
    elif face == "embed":
        fields = dict(policy or {})
        if allow_write:
            fields["extra_write_paths"] = (*fields.get("extra_write_paths", ()), *allow_write)
        async with open_runner(
            tools, cwd=cwd, sandbox=SandboxPolicy(level=level, **fields), **runner_options
        ) as runner:
            out._runner = runner
            yield out
    else:
        from tests._support.mcp_clients import stdio_session

        previous = os.getcwd()
        if cwd is not None:
            os.chdir(cwd)  # serve is started in the test's cwd (stdio_session passes os.getcwd())
        try:
            options = ("--sandbox", level, *cli_options)
            async with stdio_session(*tools, options=options, **(mcp_callbacks or {})) as session:
                out._session = session
                yield out
        finally:
            os.chdir(previous)
