"""Size alarms for ``runner/`` and ``worker/``, read from the source with ``ast``.

A module is the size its concept needs; there is no cap to squeeze under.
What this file does is ask for a look: a module over :data:`MODULE_ALARM`
lines or a function over :data:`FUNCTION_ALARM` lines (its docstring not
counted) fails here until it is split by concept or listed in
:data:`LOOKED_AT` with the reason it is one concept. A folder of the host
over :data:`FOLDER_ALARM` modules asks the same of the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE_ALARM = 600
FUNCTION_ALARM = 80
FOLDER_ALARM = 15

# Looked at and kept whole, each with the reason. "path" for a module, "path:qualname" for a function.
LOOKED_AT: dict[str, str] = {
    "runner/_calls/lifecycle.py:Calls._run": (
        "one try/finally over the three paths of a call (warm, queued for a token, scoped), "
        "whose held worker, token and lock only one finally may give back"
    ),
    "runner/_cli/batch.py:batch_command": "a typer command: its body is the declaration of every option it takes",
    "runner/_host/runner.py:open_runner": (
        "a runner's opening in the order it must happen (the platform, the options into one config, "
        "the probe, fail closed, then the nursery that owns every worker); each step is a call or a keyword"
    ),
    "worker/_runtime/loop.py:main": (
        "the worker's start, in the order its numbered rules require (fds, sandbox, hand-off, loop); "
        "each step is a call, the length is the sequence"
    ),
}


def _sources() -> list[Path]:
    return sorted(path for package in ("runner", "worker") for path in (ROOT / package).rglob("*.py"))


def _functions(path: Path) -> list[tuple[str, int]]:
    """Each function of ``path`` (qualified by its classes), and its length without the docstring."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                body = child.body
                first = body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and len(body) > 1:
                    first = body[1]
                found.append((f"{prefix}{child.name}", (child.end_lineno or child.lineno) - first.lineno + 1))
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text(), filename=str(path)), "")
    return found


def _key(path: Path, name: str | None = None) -> str:
    rel = str(path.relative_to(ROOT))
    return rel if name is None else f"{rel}:{name}"


def test_no_module_is_over_the_alarm_unless_looked_at() -> None:
    over = {
        _key(path): n
        for path in _sources()
        if (n := len(path.read_text().splitlines())) > MODULE_ALARM and _key(path) not in LOOKED_AT
    }
    assert not over, (
        f"modules over {MODULE_ALARM} lines: {over}; split by concept, or add to LOOKED_AT why it is one concept"
    )


def test_no_function_is_over_the_alarm_unless_looked_at() -> None:
    over = {
        _key(path, name): n
        for path in _sources()
        for name, n in _functions(path)
        if n > FUNCTION_ALARM and _key(path, name) not in LOOKED_AT
    }
    assert not over, (
        f"functions over {FUNCTION_ALARM} lines (docstring not counted): {over}; "
        "split them, or add to LOOKED_AT why they are one step"
    )


def test_no_host_folder_holds_more_modules_than_the_alarm() -> None:
    folders = {p.parent for p in (ROOT / "runner").rglob("*.py")}
    crowded = {
        str(folder.relative_to(ROOT)): n for folder in folders if (n := len(list(folder.glob("*.py")))) > FOLDER_ALARM
    }
    assert not crowded, f"folders of the host with more than {FOLDER_ALARM} modules (make a subpackage): {crowded}"


def test_every_entry_of_the_looked_at_list_is_still_over_the_alarm() -> None:
    # An entry whose module or function shrank below the alarm is stale: drop it.
    sizes = {_key(path): len(path.read_text().splitlines()) for path in _sources()}
    sizes |= {_key(path, name): n for path in _sources() for name, n in _functions(path)}
    alarms = {key: FUNCTION_ALARM if ":" in key else MODULE_ALARM for key in LOOKED_AT}
    stale = [key for key in LOOKED_AT if sizes.get(key, 0) <= alarms[key]]
    assert not stale, f"LOOKED_AT entries no longer over their alarm (remove them): {stale}"
