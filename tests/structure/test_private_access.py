"""No module of ``runner/`` or ``worker/`` reaches into another module's private (``_name``) members.

Read with ``ast``: an attribute ``x._name`` (one underscore, not a dunder) is
allowed on ``self``, ``cls`` and ``super()``, and on anything else only when
``_name`` is a private name of the same module (an attribute it assigns, a
method or class it defines, a ``__slots__`` entry): code may use the privates
of the classes it holds, never those of another module's. What a module of
ours needs of another is a public name, documented as internal where it is.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Private names of other libraries used on purpose, each with the reason.
OUTSIDE: dict[str, str] = {
    "os._exit": "leave a worker (or a fork) without running the interpreter's teardown",
    "atexit._run_exitfuncs": "the CLI runs the exit handlers itself before os._exit",
    "ray._private": "Ray's own upload of a working_dir, for a cluster this runner did not open",
}


def _own_privates(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_"):
            names.add(node.value)  # __slots__ entries, and names given to getattr/setattr
    return {name for name in names if name.startswith("_")}


def reaches(source: str) -> list[tuple[int, str]]:
    """Each access of another module's private member in ``source``: (line, the expression)."""
    tree = ast.parse(source)
    own = _own_privates(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            continue
        text = ast.unparse(node)
        if node.attr in own or text in OUTSIDE:
            continue
        found.append((node.lineno, text))
    return found


def test_no_module_reaches_into_another_modules_privates() -> None:
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for folder in ("runner", "worker")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, text in reaches(path.read_text())
    ]
    assert not problems, (
        "private members of another module used (give the owner a public name for it, or move the code "
        "next to the owner):\n  " + "\n  ".join(problems)
    )


def test_the_reader_finds_a_reach_and_allows_a_modules_own_privates() -> None:
    source = (
        "class A:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "def f(a: A, b):\n"
        "    return a._mine, b._theirs, b.blocking._runner, self_like._x\n"
    )
    assert reaches(source) == [(5, "b._theirs"), (5, "b.blocking._runner"), (5, "self_like._x")]
