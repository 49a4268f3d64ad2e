"""What installing xcsh-run adds to a Python environment: one import name of its own, and nothing it can collide with.

The repository's source folders are runner/ and worker/; installed, they are
``xcsh_run`` and ``xcsh_run.worker`` (pyproject's ``package-dir``). These
tests check the build configuration against the folders, then build the
wheel, install it into a fresh venv and use it from a project that has its
own ``runner.py`` and ``worker/`` package (common names that would shadow a
top-level ``runner`` or ``worker``): a call, the MCP server through the
official SDK client, and the fuzzer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import marked_processes

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"runner": "xcsh_run", "worker": "xcsh_run.worker"}

TOOL = """\
from xcsh_run.pi import CustomTool, ToolResult, TextContent

def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        return ToolResult(content=[TextContent(text="hello " + params["name"])], details={"name": params["name"]})

    return CustomTool(name="hello", label="Hello", description="Greets someone by name",
                      parameters={"type": "object", "properties": {"name": {"type": "string"}},
                                  "required": ["name"], "additionalProperties": False},
                      execute=execute)
"""
# A project of the user's, beside which xcsh-run runs: importing either of these is a bug of ours.
SHADOWS = {
    "runner.py": 'raise ImportError("the project\'s own runner.py was imported")\n',
    "worker/__init__.py": 'raise ImportError("the project\'s own worker package was imported")\n',
}


def _package_folders() -> list[str]:
    found = []
    for folder, name in FOLDERS.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / folder)
            found.append(".".join([name, *rel.parts]))
    return found


def test_the_build_configuration_names_every_package_folder() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {name: folder for folder, name in FOLDERS.items()}
    listed = set(config["packages"])
    # The JavaScript worker's folder ships as data of its own package (no __init__).
    assert listed - {"xcsh_run.worker.js"} == set(_package_folders()), (
        "pyproject.toml's [tool.setuptools] packages must list every folder with an __init__.py "
        f"of runner/ and worker/: missing {sorted(set(_package_folders()) - listed)}, "
        f"extra {sorted(listed - set(_package_folders()) - {'xcsh_run.worker.js'})}"
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True, timeout=300, cwd=out, capture_output=True,
    )  # fmt: skip
    (built,) = out.glob("xcsh_run-*.whl")
    return built


def test_the_wheel_adds_one_top_level_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    top = {name.split("/", 1)[0] for name in names if ".dist-info/" not in name and ".data/" not in name}
    assert top == {"xcsh_run"}, top
    assert "xcsh_run/worker/js/main.ts" in names  # the Bun worker's sources ship too
    assert "xcsh_run/pi.py" in names and "xcsh_run/worker/__main__.py" in names


def _metadata(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as whl:
        (name,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        return whl.read(name).decode().splitlines()


def test_a_plain_install_brings_the_fuzzer_and_the_fuzz_extra_still_resolves(wheel: Path) -> None:
    """Hypothesis is a dependency without a marker (`xcsh-run fuzz` works after `pip install xcsh-run`)."""
    metadata = _metadata(wheel)
    requires = [line.removeprefix("Requires-Dist: ") for line in metadata if line.startswith("Requires-Dist: ")]
    assert "hypothesis>=6.100" in requires, requires
    # `pip install 'xcsh-run[fuzz]'` from older instructions still names an extra the wheel provides.
    assert "Provides-Extra: fuzz" in metadata
    assert not [line for line in requires if 'extra == "fuzz"' in line]


def test_the_wheel_says_it_runs_on_linux(wheel: Path) -> None:
    assert "Classifier: Operating System :: POSIX :: Linux" in _metadata(wheel)


@pytest.fixture(scope="module")
def fresh_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the wheel installed; its dependencies are this venv's, by path (no network)."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, capture_output=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--no-index",
         str(wheel)],
        check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    site = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        text=True, timeout=60).strip())  # fmt: skip
    # A path line, not a site dir: this venv's own .pth files (its editable install of the
    # checkout among them) are not run there, so only the wheel provides xcsh_run.
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for rel, text in SHADOWS.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "hello.py").write_text(TOOL)
    return tmp_path


def _run(python: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # `python -m` puts the working folder first on sys.path: the project's runner.py and
    # worker/ are then what a bare `import runner` or `import worker` would find.
    return subprocess.run(
        [str(python), "-m", "xcsh_run", *args], cwd=project, capture_output=True, text=True, timeout=120,
        env={**os.environ, "HOME": str(project)},
    )  # fmt: skip


@pytest.mark.slow
def test_a_call_from_the_wheel_beside_a_project_with_its_own_runner_and_worker(
    fresh_python: Path, project: Path
) -> None:
    where = subprocess.run(
        [str(fresh_python), "-c", "import xcsh_run, xcsh_run.worker; print(xcsh_run.__file__)"],
        cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert str(fresh_python.parent.parent) in where.stdout, where.stdout  # the wheel's, not the checkout's
    done = _run(fresh_python, project, "hello", "--args", '{"name": "ada"}', "--tools", "tools/hello.py", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["details"] == {"name": "ada"} and not result["is_error"], result
    assert marked_processes() == []


@pytest.mark.slow
def test_the_fuzzer_from_the_wheel_beside_a_project_with_its_own_runner_and_worker(
    fresh_python: Path, project: Path
) -> None:
    done = _run(fresh_python, project, "fuzz", "hello", "--tools", "tools/hello.py", "--examples", "10", "--seed", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hello" in done.stdout + done.stderr
    assert marked_processes() == []


@pytest.mark.slow
async def test_the_mcp_server_from_the_wheel_beside_a_project_with_its_own_runner_and_worker(
    fresh_python: Path, project: Path
) -> None:
    server = StdioServerParameters(
        command=str(fresh_python), args=["-m", "xcsh_run", "serve", "--tools", "tools/hello.py"], cwd=str(project),
        env={**os.environ, "HOME": str(project)},
    )  # fmt: skip
    with trio.fail_after(60):
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            assert [tool.name for tool in listed.tools] == ["hello"]
            called = await session.call_tool("hello", {"name": "ada"})
            assert not called.is_error and called.content[0].text == "hello ada", called  # type: ignore[union-attr]
    assert marked_processes() == []
