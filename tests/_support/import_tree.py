"""The source folders as the package they make when installed, as links: for tools that read folders.

runner/ is ``xcsh_run`` and worker/ is ``xcsh_run.worker`` (pyproject's
``package-dir``). An editable install maps them with an import hook, which
mypy cannot follow; a wheel's site-packages holds the real folders. The
Makefile's ``import-tree`` target makes the same tree for ``make check``.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def link_import_tree(dest: Path) -> Path:
    """``dest/xcsh_run``: a link to every entry of runner/, and ``worker`` to worker/; returns ``dest``."""
    package = dest / "xcsh_run"
    package.mkdir(parents=True)
    for entry in (ROOT / "runner").iterdir():
        os.symlink(entry, package / entry.name)
    os.symlink(ROOT / "worker", package / "worker")
    return dest
