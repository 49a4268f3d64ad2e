"""mypy (strict) on a snippet of user code, against the package as a wheel would install it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests._support.import_tree import link_import_tree


def mypy_strict(tmp_path: Path, source: str, name: str = "snippet.py") -> subprocess.CompletedProcess[str]:
    """``mypy --strict`` on ``source`` (dedented) written to ``tmp_path/name``; its findings are on stdout."""
    module = tmp_path / name
    module.write_text(textwrap.dedent(source))
    tree = tmp_path / "import-tree"
    config = tmp_path / "mypy.ini"
    if not tree.exists():
        link_import_tree(tree)
        # As mypy treats an installed package (a wheel's, in site-packages): its own modules are
        # analysed for the types they give the snippet, and their own problems are not the snippet's.
        config.write_text("[mypy]\n\n[mypy-xcsh_run.*]\nfollow_imports = silent\n")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--strict", "--no-error-summary",
         "--cache-dir", str(tmp_path / "mypy"), str(module)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        # An editable install is an import hook mypy cannot follow; a wheel's site-packages needs no MYPYPATH.
        env={**os.environ, "MYPYPATH": str(tree)},
    )  # fmt: skip
