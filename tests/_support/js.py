"""What the TypeScript tool tests share: where Bun is, and the rule that CI never skips them.

conftest.py finds Bun once, as the host does (``XCSH_RUN_BUN``, ``[runtime]``,
the install dir, ``PATH``: runner/_discovery/bun.py), and exports it for every process a
test starts. Without Bun, a developer's run skips these modules with the
reason; under ``CI=true`` a missing Bun fails them instead, so a CI machine
that lost its Bun cannot pass by skipping (conftest's ``bun`` fixture has the
same rule, per test).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import BUN as FOUND
from tests.conftest import FIXTURES
from xcsh_run._discovery import bun as _bun

JS_TOOLS = FIXTURES / "js_tools"
IN_CI = os.environ.get("CI") == "true"
BUN = FOUND if FOUND is not None and os.access(FOUND, os.X_OK) else None


def require_bun(*, module: bool = True) -> None:
    """Skip without Bun, fail under CI: at module level the whole module, inside a test or fixture
    (``module=False``) that test alone (the ``bun`` runtime of tests/contract/)."""
    if BUN is not None:
        return
    why = f"no Bun for the TypeScript tools' tests: {_bun.missing()}"
    if IN_CI:
        pytest.fail(f"CI=true: {why}", pytrace=False)
    pytest.skip(why, allow_module_level=module)


def write_tool(folder: Path, name: str, source: str) -> Path:
    """``source`` as ``folder/name`` (made if needed); returns the path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(source)
    return path


def copy_tool(name: str, folder: Path, as_name: str | None = None) -> Path:
    """A committed fixture of tests/js_tools copied into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / (as_name or name)
    shutil.copyfile(JS_TOOLS / name, target)
    return target
