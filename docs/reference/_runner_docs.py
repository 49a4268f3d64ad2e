"""Griffe extension: the reference shows what Python shows, not the source's shorthand for it.

The faces of the runner (``BlockingRunner``, ``AsyncioRunner``, ``RayRunner``)
take each member's docstring from ``Runner`` when their module is imported
(``xcsh_run._embed.surface.runner_doc``), so the source holds none for griffe
to read; and a signature's defaults name module constants (``DEFAULT_TIMEOUT``)
whose values the reader would have to look up. Rules:

1. In a module that imports ``runner_doc``, a public member of a class with
   no docstring in the source gets the one Python gives it (``inspect.getdoc``
   on the imported class): the reference then says what ``help()`` says.
2. An instance attribute set in ``__init__`` without a docstring, which a
   base class declares with one (``RunnerSettings.config``), gets the base's.
3. A parameter whose default names an upper-case module constant shows the
   constant's value instead: its source when that is made of literals alone
   (``64 * 1024 * 1024``), else the value Python computed when the docs were
   built (``DEFAULT_FORKSERVER``, read from the environment, so ``make docs``
   builds without ``XCSH_RUN_FORKSERVER``). The site check
   (``_site_check.py``) fails on any such name left in a signature.
4. An instance attribute set in ``__init__`` shows no value: what the
   constructor assigns (``config = config``) is its own plumbing.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from typing import Any

import griffe

_CONSTANT = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_LITERAL_NODES = (ast.Expression, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop)
_PLAIN_VALUES = (bool, int, float, str, type(None))


class RunnerDocs(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "xcsh_run":
            return
        for cls in _classes(pkg):
            shared = "runner_doc" in cls.module.imports
            runtime: type | None = None
            for name, member in cls.members.items():
                if name.startswith("_") or member.is_alias:
                    continue
                if isinstance(member, griffe.Attribute):
                    if "class-attribute" not in member.labels:
                        member.value = None  # rule 4: set in __init__ alone
                    else:
                        member.value = _constant_value(member.value, loader.modules_collection) or member.value
                if member.docstring is not None:
                    continue
                text = _from_bases(cls, name) if "instance-attribute" in member.labels else None
                if text is None and shared:
                    runtime = runtime or getattr(importlib.import_module(cls.module.path), cls.name)
                    text = inspect.getdoc(inspect.getattr_static(runtime, name, None))
                if text:
                    member.docstring = griffe.Docstring(
                        text, parent=member, parser=loader.docstring_parser, parser_options=loader.docstring_options
                    )
        for function in _functions(pkg):
            for parameter in function.parameters:
                value = _constant_value(parameter.default, loader.modules_collection)
                if value is not None:
                    parameter.default = value  # rule 3


def _members(module: griffe.Module) -> list[griffe.Object]:
    found: list[griffe.Object] = []
    for member in module.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Module):
            found.extend(_members(member))
        else:
            found.append(member)
    return found


def _classes(module: griffe.Module) -> list[griffe.Class]:
    return [member for member in _members(module) if isinstance(member, griffe.Class)]


def _functions(module: griffe.Module) -> list[griffe.Function]:
    found: list[griffe.Function] = []
    for member in _members(module):
        if isinstance(member, griffe.Function):
            found.append(member)
        elif isinstance(member, griffe.Class):
            found.extend(m for m in member.members.values() if not m.is_alias and isinstance(m, griffe.Function))
    return found


def _constant_value(default: str | griffe.Expr | None, collection: griffe.ModulesCollection) -> str | None:
    """The value to show for a default that names a module constant (rule 3); None for any other default."""
    if not isinstance(default, griffe.ExprName | griffe.ExprAttribute):
        return None
    path = default.canonical_path
    if not _CONSTANT.fullmatch(path.rpartition(".")[2]):
        return None
    try:
        target = collection.get_member(path)
        if target.is_alias:
            target = target.final_target
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    source = str(target.value) if isinstance(target, griffe.Attribute) and target.value is not None else ""
    try:
        literal = all(isinstance(node, _LITERAL_NODES) for node in ast.walk(ast.parse(source, mode="eval")))
    except SyntaxError:
        literal = False
    if literal:
        return source
    value = getattr(importlib.import_module(target.module.path), target.name, None)
    return repr(value) if isinstance(value, _PLAIN_VALUES) else None


def _from_bases(cls: griffe.Class, name: str) -> str | None:
    for base in cls.mro():
        declared = base.members.get(name)
        if declared is not None and not declared.is_alias and declared.docstring is not None:
            return declared.docstring.value
    return None
