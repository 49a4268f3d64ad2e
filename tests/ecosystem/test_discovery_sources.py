"""pi-mono's and oh-my-pi's tool folders are searched, after the original design's sources.

Precedence (documented in ``xcsh_run._discovery.finder``, the CLI's help and
the README): native, Claude, Claude plugins, Codex, entry points, then
oh-my-pi (``<root>/.omp/tools``, ``~/.omp/agent/tools``), then pi-mono
(``<root>/.pi/tools``, ``~/.pi/agent/tools``): each of those two reads its
project folder first, as oh-my-pi and pi-mono do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import trio

from tests._support.faces import FACES, LEVELS, open_face
from tests.conftest import XCSH_RUN
from xcsh_run import discover_custom_tool_paths

SOURCES = Path(__file__).parents[1] / "fixtures" / "ecosystem" / "sources"
TOOL = """from xcsh_run.pi import CustomTool


def factory(api):
    return [CustomTool(name="{name}", description="{label}", parameters={{"type": "object", "properties": {{}}}},
                       execute=lambda *a: {{"content": [{{"type": "text", "text": "{label}"}}]}})]
"""


def place(folder: Path, stem: str, label: str, name: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.py").write_text(TOOL.format(name=name or stem, label=label))


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    home = Path(os.environ["HOME"])  # the test's own empty HOME (tests/conftest.py)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    places = {
        "omp_project": project / ".omp" / "tools",
        "omp_user": home / ".omp" / "agent" / "tools",
        "pi_project": project / ".pi" / "tools",
        "pi_user": home / ".pi" / "agent" / "tools",
    }
    for stem, folder in places.items():
        place(folder, stem, stem)
        place(folder, "twin", f"twin from {stem}")  # the same name everywhere: the first place wins
    place(home / ".codex" / "tools", "elder", "elder from codex")  # an original source comes first
    place(places["omp_project"], "elder", "elder from omp")
    return project, home


def test_pi_and_omp_folders_after_the_original_sources_project_first(tree: tuple[Path, Path]) -> None:
    project, _ = tree
    found = [
        (Path(c.resolved).stem, c.source.provider, c.source.level) for c in discover_custom_tool_paths([], str(project))
    ]
    assert found == [
        ("elder", "codex", "user"),
        ("omp_project", "omp", "project"),
        ("twin", "omp", "project"),
        ("omp_user", "omp", "user"),
        ("pi_project", "pi", "project"),
        ("pi_user", "pi", "user"),
    ]


def test_list_shows_the_sources_and_what_they_shadow(tree: tuple[Path, Path]) -> None:
    project, home = tree
    proc = subprocess.run(
        [XCSH_RUN, "list"], cwd=project, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr
    assert "[omp, project] .omp/tools/twin.py" in proc.stdout
    assert "[pi, user]" in proc.stdout
    assert f"{home}/.pi/agent/tools/twin.py [pi, user]: by .omp/tools/twin.py" in proc.stdout
    assert ".omp/tools/elder.py [omp, project]: by " in proc.stdout  # Codex came first
    listed = subprocess.run(
        [XCSH_RUN, "list", "--json"], cwd=project, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    data = json.loads(listed.stdout)
    tools = {t["name"]: t for t in data["tools"]}
    assert tools["twin"]["description"] == "twin from omp_project"
    assert tools["elder"]["description"] == "elder from codex"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_typescript_tools_in_their_own_layouts_run(face: str, level: str, tmp_path: Path) -> None:
    """oh-my-pi's ``NAME/index.ts`` folder in ``~/.omp/agent/tools``, pi-mono's ``.ts`` file in ``.pi/tools``."""
    home = Path(os.environ["HOME"])
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    shutil.copytree(SOURCES / "greet", home / ".omp" / "agent" / "tools" / "greet")
    (project / ".pi" / "tools").mkdir(parents=True)
    shutil.copy(SOURCES / "tally.ts", project / ".pi" / "tools" / "tally.ts")
    with trio.fail_after(120):
        async with open_face(face, level, cwd=str(project)) as f:
            greeted = await f.call("greet", {"name": "Ada"})
            tallied = await f.call("tally", {"numbers": [1, 2, 3]})
    assert (greeted.is_error, greeted.text, greeted.details) == (False, "Hello, Ada!", {"greeted": "Ada"})
    assert (tallied.is_error, tallied.text, tallied.details) == (False, "6", {"total": 6})
