"""What ``xcsh-run new`` writes: each template's tool, its test, and the command that tries it.

Rules of the templates:

1. **Each works as written**: the tool loads and runs with its ``try`` arguments,
   and its test passes under pytest, as generated.
2. **Each type-checks**: the Python tools annotate ``api``, ``on_update``,
   ``ctx`` and ``signal`` with the authoring API's own types
   (:mod:`xcsh_run.pi`), and tool and test pass ``mypy --strict``.
3. **Nothing needs the network but the ``script`` template's first load**,
   which builds the environment its ``# /// script`` block asks for.

``$name`` and ``$label`` are filled in with :class:`string.Template`: the
tools' own braces and dicts stay as they are.
"""

from __future__ import annotations

from string import Template
from typing import Final, NamedTuple


class Scaffold(NamedTuple):
    """A template: the tool's text, its test's, the flags that try it (``$tool``: its file), and what it shows."""

    tool: str
    test: str
    try_flags: str
    about: str


_BASIC_TOOL = '''"""$name: a tool for xcsh-run.

Run it: xcsh-run $name --text hello --repeat 2; its flags: xcsh-run $name --help.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import msgspec

from xcsh_run.pi import AbortSignal, CustomTool, ToolAPI, ToolContext, ToolResult

# What execute's on_update takes: a partial result, streamed to the caller before the final one.
OnUpdate = Callable[[dict[str, Any] | ToolResult], None]


class Params(msgspec.Struct, forbid_unknown_fields=True):
    """The arguments, checked in the worker before execute runs; flags and --help come from them."""

    text: Annotated[str, msgspec.Meta(description="The text to echo.")]
    repeat: Annotated[int, msgspec.Meta(ge=1, le=10, description="How many times.")] = 1


def factory(api: ToolAPI) -> CustomTool:
    def execute(
        tool_call_id: str, params: Params, on_update: OnUpdate, ctx: ToolContext, signal: AbortSignal
    ) -> ToolResult:
        text = " ".join([params.text] * params.repeat)
        return ToolResult(content=[{"type": "text", "text": text}], details={"length": len(text)})

    return CustomTool(
        name="$name",
        label="$label",
        description="Echo a text, repeated. (Say here what the tool does: this is what the model reads.)",
        parameters=Params,
        execute=execute,
    )
'''

_BASIC_TEST = '''"""Tests of the $name tool: a call through a real worker, then fuzzing from its schema."""

from pathlib import Path

from xcsh_run import assert_fuzz_clean, run_tool_sync

TOOL = str(Path(__file__).resolve().parent.parent / ".xcsh" / "tools" / "$name.py")


def test_${name}_echoes() -> None:
    result = run_tool_sync("$name", {"text": "hi", "repeat": 2}, tool_paths=[TOOL], timeout=30)
    assert not result.is_error, result.error
    assert result.text == "hi hi"
    assert result.details == {"length": 5}


def test_${name}_survives_fuzzing() -> None:
    assert_fuzz_clean("$name", tool_paths=[TOOL], examples=30, seed=0)
'''

_ASYNC_TOOL = '''"""$name: an async tool for xcsh-run, that reports its progress and stops when cancelled.

Run it: xcsh-run $name --text "one two three" --seconds 1 (--stream prints each partial result as it comes);
its flags: xcsh-run $name --help.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

import msgspec

from xcsh_run.pi import AbortSignal, CustomTool, ToolAPI, ToolContext, ToolResult

# What execute's on_update takes: a partial result, streamed to the caller before the final one.
OnUpdate = Callable[[dict[str, Any] | ToolResult], None]


class Params(msgspec.Struct, forbid_unknown_fields=True):
    """The arguments, checked in the worker before execute runs; flags and --help come from them."""

    text: Annotated[str, msgspec.Meta(max_length=200, description="The words to shout, one at a time.")]
    seconds: Annotated[float, msgspec.Meta(ge=0, le=1, description="How long the work takes, in all.")] = 0.0


def factory(api: ToolAPI) -> CustomTool:
    async def execute(
        tool_call_id: str, params: Params, on_update: OnUpdate, ctx: ToolContext, signal: AbortSignal
    ) -> ToolResult:
        words = params.text.split()
        shouted: list[str] = []
        for done, word in enumerate(words, 1):
            # A cancel or a timeout sets the signal (and cancels this task at its next await): stop between steps.
            signal.throw_if_aborted()
            await asyncio.sleep(params.seconds / len(words))  # stands for real work: a request, a query, ...
            shouted.append(word.upper())
            on_update({"content": [{"type": "text", "text": f"{done}/{len(words)}: {word}"}],
                       "details": {"done": done, "total": len(words)}})  # fmt: skip
        return ToolResult(content=[{"type": "text", "text": " ".join(shouted)}], details={"words": len(words)})

    return CustomTool(
        name="$name",
        label="$label",
        description="Shout each word of a text, one at a time. (Say here what the tool does: the model reads it.)",
        parameters=Params,
        execute=execute,
    )
'''

_ASYNC_TEST = '''"""Tests of the $name tool: its progress, a timeout that stops it, and fuzzing from its schema."""

from pathlib import Path
from typing import Any

from xcsh_run import assert_fuzz_clean, run_tool_sync

TOOL = str(Path(__file__).resolve().parent.parent / ".xcsh" / "tools" / "$name.py")


def test_${name}_reports_each_word() -> None:
    updates: list[dict[str, Any]] = []
    result = run_tool_sync("$name", {"text": "a b c"}, tool_paths=[TOOL], on_update=updates.append, timeout=30)
    assert not result.is_error, result.error
    assert result.text == "A B C"
    assert [update["details"] for update in updates] == [{"done": n, "total": 3} for n in (1, 2, 3)]


def test_${name}_stops_at_its_timeout() -> None:
    result = run_tool_sync("$name", {"text": "a b c", "seconds": 1}, tool_paths=[TOOL], timeout=0.3)
    assert result.is_error and result.error is not None
    assert result.error.kind == "timeout"


def test_${name}_survives_fuzzing() -> None:
    assert_fuzz_clean("$name", tool_paths=[TOOL], examples=30, seed=0)
'''

_EXEC_TOOL = '''"""$name: a tool for xcsh-run that runs a program (`wc`) and reads its output.

Run it, from the project's folder: xcsh-run $name --path .xcsh/tools/$name.py; its flags: xcsh-run $name --help.
Under --sandbox strict, allow the program: xcsh-run $name --sandbox strict --allow-exec wc --path ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import msgspec

from xcsh_run.pi import AbortSignal, CustomTool, ExecResult, ToolAPI, ToolContext, ToolError, ToolResult

# What execute's on_update takes: a partial result, streamed to the caller before the final one.
OnUpdate = Callable[[dict[str, Any] | ToolResult], None]


class Params(msgspec.Struct, forbid_unknown_fields=True):
    """The arguments, checked in the worker before execute runs; flags and --help come from them."""

    path: Annotated[str, msgspec.Meta(min_length=1, description="A file, relative to the project.")]


def factory(api: ToolAPI) -> CustomTool:
    async def execute(
        tool_call_id: str, params: Params, on_update: OnUpdate, ctx: ToolContext, signal: AbortSignal
    ) -> ToolResult:
        if "\\0" in params.path:
            raise ToolError("a path cannot hold a NUL character")  # no program could be given it
        # No shell: the arguments reach wc as they are ("--": a path may start with "-"). The signal kills wc
        # (its process group) if the call is cancelled or times out; timeout bounds wc itself.
        done: ExecResult = await api.exec("wc", ["--", params.path], cwd=api.cwd, signal=signal, timeout=5)
        if done.killed:
            raise ToolError(f"wc was stopped before it finished counting {params.path}")
        if done.code != 0:
            raise ToolError(done.stderr.strip() or f"wc exited with status {done.code}")
        lines, words, size = (int(field) for field in done.stdout.split()[:3])
        text = f"{params.path}: {lines} lines, {words} words, {size} bytes"
        return ToolResult(content=[{"type": "text", "text": text}], details={"lines": lines, "words": words})

    return CustomTool(
        name="$name",
        label="$label",
        description="Count the lines and words of a file. (Say here what the tool does: this is what the model reads.)",
        parameters=Params,
        execute=execute,
        requires={"programs": ["wc"]},  # what --sandbox strict must allow (--allow-exec wc): shown by describe
    )
'''

_EXEC_TEST = '''"""Tests of the $name tool: a real `wc` run through a real worker, a refusal, and fuzzing."""

from pathlib import Path

from xcsh_run import assert_fuzz_clean, run_tool_sync

TOOL = str(Path(__file__).resolve().parent.parent / ".xcsh" / "tools" / "$name.py")


def test_${name}_counts_a_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("one two\\nthree\\n")
    result = run_tool_sync("$name", {"path": "notes.txt"}, tool_paths=[TOOL], cwd=str(tmp_path), timeout=30)
    assert not result.is_error, result.error
    assert result.details == {"lines": 2, "words": 3}


def test_${name}_says_why_a_file_cannot_be_counted(tmp_path: Path) -> None:
    result = run_tool_sync("$name", {"path": "missing.txt"}, tool_paths=[TOOL], cwd=str(tmp_path), timeout=30)
    assert result.is_error and result.error is not None
    assert result.error.kind == "tool_error" and "missing.txt" in result.error.message


def test_${name}_survives_fuzzing(tmp_path: Path) -> None:
    assert_fuzz_clean("$name", tool_paths=[TOOL], cwd=str(tmp_path), examples=30, seed=0)
'''

_SCRIPT_TOOL = '''# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "packaging>=22",
# ]
# ///
"""$name: a tool for xcsh-run with a dependency of its own, declared in the PEP 723 block above.

Its worker runs in an environment built for that block (once, then shared and cached: docs/install.md).
Run it: xcsh-run $name --a 1.10 --b 1.9; its flags: xcsh-run $name --help.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import msgspec
from packaging.version import InvalidVersion, Version

from xcsh_run.pi import AbortSignal, CustomTool, ToolAPI, ToolContext, ToolError, ToolResult

# What execute's on_update takes: a partial result, streamed to the caller before the final one.
OnUpdate = Callable[[dict[str, Any] | ToolResult], None]


class Params(msgspec.Struct, forbid_unknown_fields=True):
    """The arguments, checked in the worker before execute runs; flags and --help come from them."""

    a: Annotated[str, msgspec.Meta(description="A version number, e.g. 1.10.")]
    b: Annotated[str, msgspec.Meta(description="Another version number, e.g. 1.9.")]


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise ToolError(f"{text!r} is not a version number (PEP 440), such as 1.10 or 2.0rc1") from None


def factory(api: ToolAPI) -> CustomTool:
    def execute(
        tool_call_id: str, params: Params, on_update: OnUpdate, ctx: ToolContext, signal: AbortSignal
    ) -> ToolResult:
        a, b = _version(params.a), _version(params.b)
        order = "<" if a < b else ">" if a > b else "=="
        return ToolResult(content=[{"type": "text", "text": f"{a} {order} {b}"}], details={"order": order})

    return CustomTool(
        name="$name",
        label="$label",
        description="Compare two version numbers. (Say here what the tool does: this is what the model reads.)",
        parameters=Params,
        execute=execute,
    )
'''

_SCRIPT_TEST = '''"""Tests of the $name tool, in the environment its `# /// script` block asks for, then fuzzing."""

from pathlib import Path

from xcsh_run import assert_fuzz_clean, run_tool_sync

TOOL = str(Path(__file__).resolve().parent.parent / ".xcsh" / "tools" / "$name.py")


def test_${name}_compares_versions() -> None:
    result = run_tool_sync("$name", {"a": "1.10", "b": "1.9"}, tool_paths=[TOOL], timeout=30)
    assert not result.is_error, result.error
    assert result.text == "1.10 > 1.9"


def test_${name}_refuses_what_is_not_a_version() -> None:
    result = run_tool_sync("$name", {"a": "one", "b": "1"}, tool_paths=[TOOL], timeout=30)
    assert result.is_error and result.error is not None
    assert result.error.kind == "tool_error" and "not a version number" in result.error.message


def test_${name}_survives_fuzzing() -> None:
    assert_fuzz_clean("$name", tool_paths=[TOOL], examples=30, seed=0)
'''

_TS_TOOL = """// $name: a TypeScript tool, run by Bun in its own sandboxed worker (docs/typescript.md).
// The factory gets the tool API (`pi`); the schema is TypeBox, validated by the host as JSON Schema.
// The type-only import below is erased when Bun loads the file: nothing needs to be installed for it.
import type { CustomToolFactory } from "@f5-sales-demo/xcsh";

const factory: CustomToolFactory = (pi) => ({
  name: "$name",
  label: "$label",
  description: "Echo a text, repeated. (Say here what the tool does: this is what the model reads.)",
  parameters: pi.typebox.Type.Object({
    text: pi.typebox.Type.String({ description: "The text to echo." }),
    repeat: pi.typebox.Type.Optional(pi.typebox.Type.Integer({ minimum: 1, maximum: 10, default: 1 })),
  }),
  async execute(toolCallId, params, onUpdate, ctx, signal) {
    const text = Array(params.repeat ?? 1).fill(params.text).join(" ");
    return { content: [{ type: "text", text }], details: { length: text.length } };
  },
});

export default factory;
"""

# The Python test runs the TypeScript tool as users will: through xcsh-run, its worker and its sandbox.
_TS_TEST = _BASIC_TEST.replace('"$name.py"', '"$name.ts"')

TEMPLATES: Final[dict[str, Scaffold]] = {
    "basic": Scaffold(_BASIC_TOOL, _BASIC_TEST, "--text hello --repeat 2", "a sync tool that echoes its text"),
    "async": Scaffold(
        _ASYNC_TOOL, _ASYNC_TEST, '--text "one two three" --seconds 1',
        "an async tool that streams its progress (on_update) and stops when cancelled (signal)",
    ),
    "exec": Scaffold(
        _EXEC_TOOL, _EXEC_TEST, "--path $tool", "runs a program (wc) with api.exec, passing the signal"
    ),
    "script": Scaffold(
        _SCRIPT_TOOL, _SCRIPT_TEST, "--a 1.10 --b 1.9",
        "a PEP 723 `# /// script` block with a dependency (packaging), installed in an environment of its own",
    ),
}  # fmt: skip
"""The Python templates, by the name ``--template`` takes; ``basic`` is the default."""

TYPESCRIPT: Final = Scaffold(_TS_TOOL, _TS_TEST, "--text hello --repeat 2", "the basic tool, in TypeScript")
"""``--ts``: the basic tool in TypeScript, with a Python test that runs it through xcsh-run."""


def render(text: str, **fields: str) -> str:
    """``text`` with ``$name``, ``$label`` (and for ``try_flags``, ``$tool``) filled in."""
    return Template(text).substitute(fields)
