"""What the TypeScript tool tests share: where Bun is, and the rule that CI never skips them.

The host finds Bun through ``XCSH_RUN_BUN``, then ``PATH`` (docs/typescript.md);
these tests look in the same places. Without Bun, a developer's run skips them
with the reason; under ``CI=true`` a missing Bun fails the module instead, so
a CI machine that lost its Bun cannot pass by skipping.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .conftest import TESTS

JS_TOOLS = TESTS / "js_tools"
IN_CI = os.environ.get("CI", "").lower() == "true"


def bun_path() -> str | None:
    """The Bun the host will run, or None."""
    configured = os.environ.get("XCSH_RUN_BUN")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("bun")


BUN = bun_path()


def require_bun() -> None:
    """Call at module level: skip the module without Bun, fail it under CI."""
    if BUN is not None:
        return
    where = os.environ.get("XCSH_RUN_BUN") or "PATH"
    why = f"no runnable Bun (looked at {where}); run `make bun` or `xcsh-run install-bun`, or set XCSH_RUN_BUN"
    if IN_CI:
        pytest.fail(f"CI=true: the TypeScript tests must run: {why}", pytrace=False)
    pytest.skip(why, allow_module_level=True)


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
