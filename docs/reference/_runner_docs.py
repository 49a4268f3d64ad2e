"""Griffe extension: the reference shows the runner faces' members with the docstrings they have at run time.

The faces of the runner (``BlockingRunner``, ``AsyncioRunner``, ``RayRunner``)
take each member's docstring from :class:`Runner` when their module is
imported (``xcsh_run._embed.surface.runner_doc``), so the source holds none
for griffe to read. Rules:

1. In a module that imports ``runner_doc``, a public member of a class with
   no docstring in the source gets the one Python gives it (``inspect.getdoc``
   on the imported class): the reference then says what ``help()`` says.
2. An instance attribute set in ``__init__`` without a docstring, which a
   base class declares with one (``RunnerSettings.config``), gets the base's.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import griffe


class RunnerDocs(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "xcsh_run":
            return
        for cls in _classes(pkg):
            shared = "runner_doc" in cls.module.imports
            runtime: type | None = None
            for name, member in cls.members.items():
                if name.startswith("_") or member.is_alias or member.docstring is not None:
                    continue
                text = _from_bases(cls, name) if "instance-attribute" in member.labels else None
                if text is None and shared:
                    runtime = runtime or getattr(importlib.import_module(cls.module.path), cls.name)
                    text = inspect.getdoc(inspect.getattr_static(runtime, name, None))
                if text:
                    member.docstring = griffe.Docstring(
                        text, parent=member, parser=loader.docstring_parser, parser_options=loader.docstring_options
                    )


def _classes(module: griffe.Module) -> list[griffe.Class]:
    found: list[griffe.Class] = []
    for member in module.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Module):
            found.extend(_classes(member))
        elif isinstance(member, griffe.Class):
            found.append(member)
    return found


def _from_bases(cls: griffe.Class, name: str) -> str | None:
    for base in cls.mro():
        declared = base.members.get(name)
        if declared is not None and not declared.is_alias and declared.docstring is not None:
            return declared.docstring.value
    return None
