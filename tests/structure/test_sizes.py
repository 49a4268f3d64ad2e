"""Size limits of ``runner/`` and ``worker/``, read from the source with ``ast``.

Small modules with one concept each: a module over :data:`MAX_MODULE_LINES`
lines or a class over :data:`MAX_CLASS_LINES` is a sign that two concepts
share it (the host once grew into one 1,000-line class). The public
``Runner`` is a facade over the registry, pool, calls and bridge, and stays
under :data:`MAX_FACADE_LINES`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 400
MAX_FACADE_LINES = 300


def _sources() -> list[Path]:
    return sorted(path for package in ("runner", "worker") for path in (ROOT / package).rglob("*.py"))


def _classes(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (node.name, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    ]


def test_no_module_is_over_the_limit() -> None:
    over = {
        str(path.relative_to(ROOT)): n
        for path in _sources()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by concept): {over}"


def test_no_class_is_over_the_limit() -> None:
    over = {
        f"{path.relative_to(ROOT)}:{name}": n
        for path in _sources()
        for name, n in _classes(path)
        if n > MAX_CLASS_LINES
    }
    assert not over, f"classes over {MAX_CLASS_LINES} lines: {over}"


def test_the_runner_is_a_thin_facade() -> None:
    sizes = dict(_classes(ROOT / "runner" / "_host.py"))
    assert 0 < sizes["Runner"] < MAX_FACADE_LINES, sizes["Runner"]
