"""Shell completion, from the module cache alone: completing never starts a worker.

The protocol is click's: the script that ``xcsh-run --show-completion SHELL``
prints runs ``xcsh-run`` with ``_XCSH_RUN_COMPLETE=complete_bash`` (or
``complete_zsh``, ...) and the words typed so far in the environment, and
offers what it prints. What completes:

1. The first word: the commands, and the tool names.
2. After a tool's name (``xcsh-run TOOL --ti``, as ``xcsh-run run TOOL``): the
   run options and the tool's own flags, the ones ``xcsh-run TOOL --help``
   lists (a flag given once is not offered again, unless it repeats).
3. A value: the choices of a run option that has them (``--sandbox``), and of a
   tool's enum flag (``--mode``), after a space (in bash, after ``=`` too).

A module the cache does not know (new, or edited since it was last loaded)
is left out, its tools and their flags with it; any command that loads it
(``xcsh-run list``) fills the cache. Completion prints no error into the
user's shell: whatever fails completes nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from typer.core import TyperCommand, TyperGroup, TyperOption

if TYPE_CHECKING:
    from xcsh_run.worker import protocol as p

# Where RunCommand keeps, while completing, the words typed after `run` (ctx.meta is the whole line's).
_TYPED: Final = "xcsh_run.completion.typed"
# The run's own option that `xcsh-run TOOL --help` becomes: never offered.
_TOOL_HELP: Final = "--xcsh-run-tool-help"


def cached_tools(tool_paths: Sequence[str] = ()) -> Iterator[p.ToolDescription]:
    """The tools of every module discovered from here whose cache entry is current, in precedence order."""
    from xcsh_run._discovery import Candidate, ModuleCache, default_dir, fingerprint, walk
    from xcsh_run._version import __version__

    warnings: list[str] = []
    cache = ModuleCache(default_dir(), warnings)
    for found in walk(tool_paths, os.getcwd(), warnings, cache_dir=default_dir()):
        if not isinstance(found, Candidate):
            continue
        fp = fingerprint(found, __version__)
        entry = cache.get(found, fp) if fp is not None else None
        if entry is not None and entry.result is not None:
            # A tool whose schema is invalid is a load error, not a tool.
            yield from (tool for tool in entry.result.tools if tool.name not in entry.schema_errors)


def cached_tool_names(tool_paths: Sequence[str] = ()) -> list[str]:
    """The names of the visible tools :func:`cached_tools` finds, each once."""
    return list(dict.fromkeys(tool.name for tool in cached_tools(tool_paths) if not tool.hidden))


def _tool_paths(ctx: Any) -> list[str]:
    paths = ctx.params.get("tools") if ctx is not None else None
    return [path for path in paths or () if isinstance(path, str)]


def complete_tool(ctx: Any, incomplete: str) -> list[str]:
    """Tool names starting with ``incomplete`` (the ``autocompletion`` of a TOOL argument)."""
    try:
        return [name for name in cached_tool_names(_tool_paths(ctx)) if name.startswith(incomplete)]
    except Exception:  # completion must never print a traceback into the user's shell
        return []


def complete_choices(*choices: str) -> Callable[[str], list[str]]:
    """The ``autocompletion`` of an option whose values are ``choices``."""

    def complete(incomplete: str) -> list[str]:
        return [choice for choice in choices if choice.startswith(incomplete)]

    return complete


def _choice_text(choice: Any) -> str:
    # As the flag takes it: a string as it is, anything else as JSON (`--size 2`).
    return choice if isinstance(choice, str) else json.dumps(choice)


class RunCommand(TyperCommand):
    """The ``run`` command; completing, it also offers the tool's own flags and their choices."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if ctx.resilient_parsing:  # completing: the last words typed say what the value is for
            ctx.meta[_TYPED] = list(args)
        return super().parse_args(ctx, args)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        from typer._click.shell_completion import CompletionItem

        results: list[Any] = [item for item in super().shell_complete(ctx, incomplete) if item.value != _TOOL_HELP]
        typed: list[str] = ctx.meta.get(_TYPED, [])
        # Bash splits `--mode=w` into the words `--mode`, `=` and `w`: the value is for the word before `=`.
        split = typed[-1:] == ["="] and len(typed) > 1
        after = typed[-2] if split else typed[-1] if typed else ""
        if split and not incomplete.startswith("-"):
            # Click finds the option of a value only right before it, which is `=` here.
            for param in self.get_params(ctx):
                if isinstance(param, TyperOption) and after in param.opts and not (param.is_flag or param.count):
                    return list(param.shell_complete(ctx, incomplete))
        tool = ctx.params.get("tool")
        if not isinstance(tool, str) or not tool:
            return results
        try:
            fields = self._tool_fields(ctx, tool)
        except Exception:  # completion must never print a traceback into the user's shell
            return results
        if incomplete.startswith("-"):
            given = set(typed)
            own = [
                CompletionItem(flag, help=field.description or None)
                for field in fields
                if field.kind == "array" or not given.intersection(field.flags)
                for flag in (field.flag, *([f"--no-{field.flag[2:]}"] if field.kind == "boolean" else []))
                if flag.startswith(incomplete)
            ]
            return own + results
        for field in fields:
            if after in field.flags and (field.kind == "enum" or field.item == "enum"):
                texts = [_choice_text(choice) for choice in field.choices or ()]
                return [CompletionItem(text) for text in texts if text.startswith(incomplete)]
        return results

    def _tool_fields(self, ctx: Any, tool: str) -> list[Any]:
        """The fields of ``tool`` that get flags (as ``xcsh-run TOOL --help`` shows them); none if not cached."""
        from xcsh_run._cli.tool_schema import fields_of, split_reserved

        info = next((t for t in cached_tools(_tool_paths(ctx)) if t.name == tool), None)
        if info is None:
            return []
        run_options = [opt for param in self.params for opt in (*param.opts, *param.secondary_opts)]
        free, _ = split_reserved(fields_of(info.parameters), [o for o in run_options if o.startswith("--")])
        return free


class CompletingGroup(TyperGroup):
    """The top level: tool names complete beside the commands, and ``xcsh-run TOOL ...`` as ``run TOOL ...``."""

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        # Completing only: a run resolves `xcsh-run TOOL` before click sees it (`_with_default_command`).
        if ctx.resilient_parsing and args and args[0] not in self.commands and not args[0].startswith("-"):
            return "run", self.commands["run"], args
        return super().resolve_command(ctx, args)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        results: list[Any] = super().shell_complete(ctx, incomplete)
        if incomplete.startswith("-"):
            return results
        from typer._click.shell_completion import CompletionItem

        commands = {item.value for item in results}
        names = complete_tool(ctx, incomplete)
        results.extend(CompletionItem(name, help="tool") for name in names if name not in commands)
        return results
