"""The import layers of ``runner/`` and ``worker/``, read from the source with ``ast``.

Every import counts: module-level, inside functions, and under ``TYPE_CHECKING``
(a cycle there is still a cycle in the design). Relative imports are resolved.
The rules, each failure naming the modules and the rule:

1. no import cycle;
2. a module imports only modules of its own rank or lower (:data:`RANKS`);
3. ``worker/`` imports only the standard library, msgspec and itself: never
   ``runner``, never trio (it runs in the tool's process, and is the protocol
   layer both sides share);
4. every module has exactly one rank: a new module is placed in the table.
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runner", "worker")

# Lowest first. A package's ``__init__`` is named by the package ("runner").
RANKS: tuple[tuple[int, tuple[str, ...]], ...] = (
    # The protocol layer and the worker process: stdlib + msgspec.
    (0, ("worker", "worker.*")),
    (
        1,
        (
            "xcsh_run._version",
            "xcsh_run._errors",
            "xcsh_run._results",
            "xcsh_run._process.faults",
            "xcsh_run._safe_text",
            "xcsh_run._safe_read",
            "xcsh_run._terminal",
            "xcsh_run._startup",
            "xcsh_run._host.statistics",
        ),
    ),
    (
        2,
        (
            "xcsh_run._config",
            "xcsh_run._process.boundary",
            "xcsh_run._sandbox.policy*",
            "xcsh_run._sandbox.grants",
            "xcsh_run._process.workdir",
            "xcsh_run._discovery.finder",
            "xcsh_run._discovery.unknown_tool",
            "xcsh_run._discovery.cache",
            "xcsh_run._host.quotas",
            "xcsh_run._discovery.schemas",
            "xcsh_run._process.supervised",
            "xcsh_run._process.usage",
            "xcsh_run._process.forkserver",
            "xcsh_run._process.output",
            "xcsh_run._process.teardown",
            "xcsh_run._host.signals",
            "xcsh_run._discovery.tool_envs",
            "xcsh_run._discovery.script_meta",
            "xcsh_run._discovery.bun",
        ),
    ),
    # WorkerProcess: the trio adapter over the protocol's connection.
    (3, ("xcsh_run._pool.link", "xcsh_run._pool.interface")),
    (
        4,
        (
            "xcsh_run._pool.worker_pool",
            "xcsh_run._discovery.catalog",
            "xcsh_run._pool.load_deadline",
            "xcsh_run._pool.factory",
            "xcsh_run._pool.housekeeping",
            "xcsh_run._calls.deadlines",
        ),
    ),
    (
        5,
        (
            "xcsh_run._calls.lifecycle",
            "xcsh_run._calls.table",
            "xcsh_run._calls.outcome",
            "xcsh_run._host.host_api",
            "xcsh_run._host.host_limits",
        ),
    ),
    # The Runner facade and open_runner.
    (6, ("xcsh_run._host.runner",)),
    # Front ends over the library.
    (
        7,
        (
            "xcsh_run._embed.openers*",
            "xcsh_run.fuzz._campaign*",
            "xcsh_run._mcp.session*",
            "xcsh_run._host.oneshot",
            "xcsh_run._embed.batch",
            "xcsh_run.ray._launch*",
        ),
    ),
    # The CLI and the package's public face.
    (8, ("xcsh_run._cli.run*", "runner", "runner.__main__")),
)

# Violations in modules still being restructured, exactly as :func:`violations`
# names them. Each entry must still occur (a fixed one fails until removed),
# so this set only shrinks; the goal is an empty set.
KNOWN_VIOLATIONS: frozenset[str] = frozenset()

WORKER_MAY_IMPORT = frozenset({"msgspec", "worker"})


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # a module of PACKAGES, or a top-level name for anything else
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            modules[module_name(path)] = path
    return modules


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` if it is one of ours, else its longest prefix that is (``runner._x.attr`` -> ``runner._x``)."""
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
    for name, path in modules.items():
        ranks = rank_of(name)
        if len(ranks) != 1:
            why = "no rank" if not ranks else f"ranks {sorted(ranks)}"
            found[f"unranked: {name}"] = (
                f"{name} ({path.relative_to(ROOT)}) has {why} in RANKS: place it in exactly one layer"
            )
        for imp in imports_of(name, path, modules):
            if imp.imported in modules:
                if imp.imported != name:  # a package's `from . import attr` names the package itself
                    graph[name].add(imp.imported)
                mine, theirs = rank_of(name), rank_of(imp.imported)
                if len(mine) == 1 and len(theirs) == 1 and min(theirs) > min(mine):
                    found[f"upward: {name} -> {imp.imported}"] = (
                        f"{name} (rank {min(mine)}) imports {imp.imported} (rank {min(theirs)}) at line {imp.line}: "
                        "a module may import only modules of its own rank or lower"
                    )
            if name.partition(".")[0] == "worker" and imp.imported.partition(".")[0] not in WORKER_MAY_IMPORT:
                top = imp.imported.partition(".")[0]
                if top not in sys.stdlib_module_names:
                    found[f"worker imports: {name} -> {top}"] = (
                        f"{name} imports {imp.imported} at line {imp.line}: worker/ imports only the standard "
                        "library, msgspec and itself (never runner, never trio)"
                    )
    for component in _cycles(graph):
        edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in component]
        found[f"cycle: {', '.join(component)}"] = (
            f"import cycle between {', '.join(component)} ({'; '.join(edges)}): no cycle at all, "
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
        "    from ..runner._cli import main\n"
    )
    path = tmp_path / "runner" / "_probe.py"
    path.parent.mkdir()
    path.write_text(source)
    modules = {
        name: Path()
        for name in (
            "runner",
            "xcsh_run._errors",
            "xcsh_run._results",
            "xcsh_run._host.runner",
            "xcsh_run._cli.run",
            "worker",
        )
    }
    modules |= {"xcsh_run.worker.protocol": Path(), "xcsh_run.pi": Path(), "runner._probe": path}
    got = {imp.imported for imp in imports_of("runner._probe", path, modules)}
    assert got == {
        "__future__",
        "typing",
        "xcsh_run.worker.protocol",
        "xcsh_run._errors",
        "xcsh_run._results",
        "xcsh_run.pi",
        "xcsh_run._host.runner",
        "xcsh_run._cli.run",
    }
