"""The import layers of ``runner/`` and ``worker/`` by package, read from the source with ``ast``.

Every import counts: module-level, inside functions, and under ``TYPE_CHECKING``
(a cycle there is still a cycle in the design). Relative imports are resolved.
Module names are the installed ones: runner/ is ``xcsh_run`` and worker/ is
``xcsh_run.worker`` (pyproject's ``package-dir``).

A *unit* is a package (a folder with an ``__init__``), or one of the
top-level modules of ``xcsh_run`` or of ``xcsh_run.worker`` (the vocabulary
every layer shares: errors, results, the config record, safe reads and
texts, the project root, the platform check; the authoring types), each a unit of its own.
The rules, each failure naming the modules and the rule:

1. no import cycle between modules, nor between units;
2. a unit imports only units of its own rank or lower (:data:`RANKS`);
3. the worker's packages (and ``xcsh_run.pi``, the authoring API's public
   name) import only the standard library, msgspec and the worker: never the
   host, never trio (they run in the tool's process);
4. across units, a module imports a package only through its face (the
   ``__init__``, or a submodule the face lists in ``__all__``), never a private
   module behind it; the vocabulary modules are imported directly, and a
   subpackage may use its parent package's modules (they are private to it);
5. every unit has exactly one rank: a new package is placed in the table.
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Source folder -> the import name it installs as.
PACKAGES: dict[str, str] = {"runner": "xcsh_run", "worker": "xcsh_run.worker"}

# Units, lowest first.
RANKS: tuple[tuple[int, tuple[str, ...]], ...] = (
    # The worker process: the sans-io protocol both sides share, then the worker's own layers.
    (0, ("xcsh_run.worker.protocol",)),
    (1, ("xcsh_run.worker._sandbox",)),
    (2, ("xcsh_run.worker._tool_api",)),
    (3, ("xcsh_run.worker", "xcsh_run.worker.pi", "xcsh_run.pi")),
    (4, ("xcsh_run.worker._runtime",)),
    (5, ("xcsh_run.worker.__main__",)),
    # The host's vocabulary.
    (
        6,
        (
            "xcsh_run._version",
            "xcsh_run._startup",
            "xcsh_run._errors",
            "xcsh_run._results",
            "xcsh_run._safe_text",
            "xcsh_run._safe_read",
            "xcsh_run._colour",
            "xcsh_run._terminal",
            "xcsh_run._project",
            "xcsh_run._platform",
            "xcsh_run._daemon",
        ),
    ),
    (7, ("xcsh_run._sandbox",)),
    (8, ("xcsh_run._config",)),
    (9, ("xcsh_run._discovery",)),
    (10, ("xcsh_run._process",)),
    (11, ("xcsh_run._pool",)),
    (12, ("xcsh_run._calls",)),
    # The Runner facade and the host API.
    (13, ("xcsh_run._host",)),
    # Front ends over the library.
    (14, ("xcsh_run._embed", "xcsh_run._mcp")),
    (15, ("xcsh_run._mcp.http",)),
    (16, ("xcsh_run.ray",)),
    (17, ("xcsh_run.fuzz",)),
    # The CLI, then the package's public face.
    (18, ("xcsh_run._cli",)),
    # The daemon's side runs the CLI's commands; the console script picks it or the CLI.
    (19, ("xcsh_run._daemon.hosting",)),
    (20, ("xcsh_run", "xcsh_run.__main__", "xcsh_run._entry")),
)
WORKER_UNITS = ("xcsh_run.worker*", "xcsh_run.pi")

# Violations in modules still being restructured, exactly as :func:`violations`
# names them. Each entry must still occur (a fixed one fails until removed),
# so this set only shrinks; the goal is an empty set.
KNOWN_VIOLATIONS: frozenset[str] = frozenset()

WORKER_MAY_IMPORT = frozenset({"msgspec"})


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # a module of PACKAGES, or a top-level name for anything else
    line: int


def module_name(path: Path) -> str:
    """The installed name of a module of ``runner/`` or ``worker/``."""
    folder, *parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGES[folder], *parts])


def find_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            modules[module_name(path)] = path
    return modules


ROOTS = frozenset(PACKAGES.values())


def unit_of(name: str, modules: dict[str, Path]) -> str:
    """The unit of a module: its package, or itself for a top-level module of a root package."""
    if modules[name].name == "__init__.py":
        return name
    package = name.rpartition(".")[0]
    return name if package in ROOTS else package


def face_lists(package: str, member: str, modules: dict[str, Path]) -> bool:
    """Whether ``package``'s ``__init__`` lists ``member`` in its ``__all__``."""
    tree = ast.parse(modules[package].read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return isinstance(node.value, ast.List) and member in {
                e.value for e in node.value.elts if isinstance(e, ast.Constant)
            }
    return False


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` if it is one of ours, else its longest prefix that is (``xcsh_run._x.attr`` -> ``xcsh_run._x``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import in the module, resolved: ours by module name, anything else by its top-level name."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: list[Import] = []

    def add(target: str, line: int) -> None:
        ours = _known(target, modules)
        found.append(Import(name, ours if ours is not None else target.partition(".")[0], line))

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, node.module] if node.module else base_parts)
            else:
                base = node.module or ""
            for alias in node.names:
                # `from pkg import name`: a submodule when there is one, else an attribute of pkg.
                candidate = f"{base}.{alias.name}"
                add(candidate if candidate in modules else base, node.lineno)
    return found


def rank_of(name: str) -> set[int]:
    return {rank for rank, patterns in RANKS if any(fnmatch.fnmatchcase(name, pat) for pat in patterns)}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def violations() -> dict[str, str]:
    """Every violation: a stable key (as in :data:`KNOWN_VIOLATIONS`) -> a message for people."""
    modules = find_modules()
    found: dict[str, str] = {}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    units = {unit_of(name, modules) for name in modules}
    unit_graph: dict[str, set[str]] = {unit: set() for unit in units}
    for unit in sorted(units):
        ranks = rank_of(unit)
        if len(ranks) != 1:
            why = "no rank" if not ranks else f"ranks {sorted(ranks)}"
            found[f"unranked: {unit}"] = f"{unit} has {why} in RANKS: place it in exactly one layer"
    for name, path in modules.items():
        mine = unit_of(name, modules)
        in_worker = any(fnmatch.fnmatchcase(mine, pat) for pat in WORKER_UNITS)
        for imp in imports_of(name, path, modules):
            if imp.imported in modules:
                if imp.imported != name:  # a package's `from . import attr` names the package itself
                    graph[name].add(imp.imported)
                theirs = unit_of(imp.imported, modules)
                if theirs == mine:
                    continue
                unit_graph[mine].add(theirs)
                low, high = rank_of(mine), rank_of(theirs)
                if len(low) == 1 and len(high) == 1 and min(high) > min(low):
                    found[f"upward: {name} -> {imp.imported}"] = (
                        f"{name} ({mine}, rank {min(low)}) imports {imp.imported} ({theirs}, rank {min(high)}) "
                        f"at line {imp.line}: a unit may import only units of its own rank or lower"
                    )
                is_face = imp.imported == theirs
                vocabulary = theirs.rpartition(".")[0] in ROOTS and modules[theirs].name != "__init__.py"
                listed = face_lists(theirs, imp.imported.rpartition(".")[2], modules)
                parent = mine.startswith(theirs + ".")
                if not (is_face or vocabulary or listed or parent):
                    found[f"private: {name} -> {imp.imported}"] = (
                        f"{name} imports {imp.imported} at line {imp.line}, a private module of {theirs}: "
                        f"import what it needs from {theirs} (its face), adding it to the face's __all__ if missing"
                    )
            top = imp.imported.partition(".")[0]
            if in_worker and not (
                fnmatch.fnmatchcase(imp.imported, "xcsh_run.worker*")
                or top in WORKER_MAY_IMPORT
                or top in sys.stdlib_module_names
            ):
                found[f"worker imports: {name} -> {imp.imported}"] = (
                    f"{name} imports {imp.imported} at line {imp.line}: the worker's packages import only the "
                    "standard library, msgspec and the worker (never the host, never trio)"
                )
    for kind, which in (("modules", graph), ("units", unit_graph)):
        for component in _cycles(which):
            edges = [f"{a} -> {b}" for a in component for b in sorted(which[a]) if b in component]
            found[f"cycle: {', '.join(component)}"] = (
                f"import cycle between {kind} {', '.join(component)} ({'; '.join(edges)}): no cycle at all, "
                "TYPE_CHECKING and function-level imports included"
            )
    return found


def test_the_import_layers_hold() -> None:
    found = violations()
    new = sorted(message for key, message in found.items() if key not in KNOWN_VIOLATIONS)
    assert not new, "import layering broken:\n  " + "\n  ".join(new)


def test_known_violations_are_still_there() -> None:
    """A violation that was fixed leaves KNOWN_VIOLATIONS, so that it cannot come back unnoticed."""
    fixed = sorted(KNOWN_VIOLATIONS - violations().keys())
    assert not fixed, f"fixed, remove from KNOWN_VIOLATIONS: {fixed}"


def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Relative, absolute, function-level and TYPE_CHECKING imports, and `from pkg import module`."""
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import xcsh_run.worker.protocol\n"
        "from . import _errors\n"
        "from ._results import ToolResult\n"
        "from xcsh_run import pi\n"
        "if TYPE_CHECKING:\n"
        "    from ._host import Runner\n"
        "def f():\n"
        "    from ._cli.run import main\n"
    )
    path = tmp_path / "runner" / "_probe.py"
    path.parent.mkdir()
    path.write_text(source)
    modules = {
        name: Path()
        for name in ("xcsh_run", "xcsh_run._errors", "xcsh_run._results", "xcsh_run._host", "xcsh_run._cli.run")
    }
    modules |= {"xcsh_run.worker.protocol": Path(), "xcsh_run.pi": Path(), "xcsh_run._probe": path}
    got = {imp.imported for imp in imports_of("xcsh_run._probe", path, modules)}
    assert got == {
        "__future__",
        "typing",
        "xcsh_run.worker.protocol",
        "xcsh_run._errors",
        "xcsh_run._results",
        "xcsh_run.pi",
        "xcsh_run._host",
        "xcsh_run._cli.run",
    }


def test_the_rules_catch_what_they_forbid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private module imported across units, an upward import and a worker importing the host all fail."""
    for folder, files in {
        "runner": {
            "__init__.py": "",
            "_errors.py": "",
            "_low/__init__.py": "",
            "_low/inner.py": "from xcsh_run._high import thing\n",
            "_high/__init__.py": "",
            "_high/thing.py": "from xcsh_run._low.inner import x\n",
        },
        "worker": {"__init__.py": "import trio\n"},
    }.items():
        for rel, text in files.items():
            path = tmp_path / folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(
        sys.modules[__name__],
        "RANKS",
        (
            (0, ("xcsh_run.worker",)),
            (1, ("xcsh_run._errors", "xcsh_run")),
            (2, ("xcsh_run._low",)),
            (3, ("xcsh_run._high",)),
        ),
    )
    found = violations()
    assert "private: xcsh_run._high.thing -> xcsh_run._low.inner" in found
    assert "upward: xcsh_run._low.inner -> xcsh_run._high.thing" in found
    assert "worker imports: xcsh_run.worker -> trio" in found
    assert any(key.startswith("cycle: xcsh_run._high, xcsh_run._low") for key in found), found


def test_the_architecture_map_names_every_package_and_rank() -> None:
    """docs/architecture.md is the map of the tree: each package folder is in its table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    folders = sorted(
        f"{init.parent.relative_to(ROOT)}/"
        for folder in PACKAGES
        for init in (ROOT / folder).rglob("__init__.py")
        if init.parent != ROOT / folder
    )
    missing = [folder for folder in folders if f"`{folder}`" not in text]
    assert not missing, f"docs/architecture.md's map does not name {missing}: add a row for each"
