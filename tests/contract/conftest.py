"""The ``runtime`` every contract test takes: ``python`` or ``bun``, and the tool file it picks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests._support.js import JS_TOOLS, require_bun
from tests.conftest import TOOLS

# Where each runtime's twin of a tool module is, and its suffix.
RUNTIMES: dict[str, tuple[Path, str]] = {"python": (TOOLS, ".py"), "bun": (JS_TOOLS, ".ts")}


@pytest.fixture(params=list(RUNTIMES))
def runtime(request: pytest.FixtureRequest) -> str:
    """The worker runtime of this run of the test; ``bun`` is skipped (failed under CI) without Bun."""
    name: str = request.param
    if name == "bun":
        require_bun(module=False)
    return name


def tool_file(runtime: str, stem: str) -> Path:
    """The tool module ``stem`` of ``runtime``: tests/fixtures/tools/STEM.py or js_tools/STEM.ts."""
    folder, suffix = RUNTIMES[runtime]
    return folder / f"{stem}{suffix}"


def only(runtime: str) -> pytest.MarkDecorator:
    """A test of one runtime alone (say why beside it): ``runtime`` stays the fixture, with its skip."""
    return pytest.mark.parametrize("runtime", [runtime], indirect=True)


def on(runtime: str, *values: Any, marks: Any = ()) -> Any:
    """A row of a test parametrized over ``("runtime", ...)`` with ``indirect=["runtime"]``, named
    by the runtime and the row's first value where that is a name (a tool, a level)."""
    name = [values[0]] if values and isinstance(values[0], str) else []
    return pytest.param(runtime, *values, marks=marks, id="-".join([runtime, *name]))
