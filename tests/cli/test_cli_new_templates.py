"""`xcsh-run new --template`: each template's tool runs as `new` says to try it, its test passes, both type-check.

Through the real CLI in subprocesses, the generated tests under pytest, and
mypy --strict on what was generated. The ``script`` template's environment is
built offline, from wheels of this venv's own packaging and msgspec, in a
cache of the test's own.
"""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests._support.import_tree import link_import_tree
from tests._support.wheelhouse import offline_env, repack
from tests.conftest import XCSH_RUN

TEMPLATES = ("basic", "async", "exec", "script")
# What each template's printed `try:` command prints ({tool}: the tool file, relative to the project).
TRIED = {
    "basic": "hello hello\n",
    "async": "ONE TWO THREE\n",
    "exec": "{tool}: {lines} lines, {words} words, {size} bytes\n",
    "script": "1.10 > 1.9\n",
}
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose tool-environment builds install from local wheels only, into a cache of its own."""
    base = tmp_path_factory.mktemp("offline")
    links = base / "wheels"
    links.mkdir()
    for name in ("packaging", "msgspec"):
        repack(name, links)
    return offline_env(links, {**os.environ, "XDG_CACHE_HOME": str(base / "cache")})


def run(*args: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def new_project(root: Path) -> Path:
    (root / ".git").mkdir(parents=True)
    return root


def tried_command(stdout: str) -> list[str]:
    """The `try:` line's command, as a shell would split it, with the CLI under test for `xcsh-run`."""
    line = next(line for line in stdout.splitlines() if line.startswith("try: "))
    words = shlex.split(line.removeprefix("try: ").split("    (and:")[0])
    assert words[0] == "xcsh-run", line
    return [XCSH_RUN, *words[1:]]


@pytest.mark.slow
@pytest.mark.parametrize("template", TEMPLATES)
def test_each_template_runs_as_new_says_and_its_test_passes(
    template: str, tmp_path: Path, offline: dict[str, str]
) -> None:
    project = new_project(tmp_path / "project")
    name = f"my_{template}"
    made = run("new", name, "--template", template, cwd=project, env=offline)
    assert made.returncode == 0, made.stderr
    tool = project / ".xcsh" / "tools" / f"{name}.py"
    assert f"created {tool}" in made.stdout
    assert f"test: python -m pytest {Path('tests') / f'test_{name}.py'}" in made.stdout

    tried = subprocess.run(
        tried_command(made.stdout), cwd=project, env=offline, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert tried.returncode == 0, tried.stderr
    data = tool.read_bytes()
    expected = TRIED[template].format(
        tool=Path(".xcsh") / "tools" / f"{name}.py",
        lines=data.count(b"\n"),
        words=len(data.split()),
        size=len(data),
    )
    assert tried.stdout == expected
    if template == "script":  # its first load built the block's environment, offline, and said so
        assert f"xcsh-run: building environment for {name} (packaging>=22)" in tried.stderr

    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/test_{name}.py"],
        cwd=project, env=offline, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert f"{3 if template != 'basic' else 2} passed" in tested.stdout


@pytest.mark.slow
def test_every_generated_tool_and_test_pass_mypy_strict_with_the_api_types(tmp_path: Path) -> None:
    project = new_project(tmp_path / "project")
    for template in TEMPLATES:
        made = run("new", f"my_{template}", "-t", template, cwd=project, env=dict(os.environ))
        assert made.returncode == 0, made.stderr
    tools = sorted((project / ".xcsh" / "tools").glob("*.py"))
    tests = sorted((project / "tests").glob("test_*.py"))
    assert len(tools) == len(tests) == len(TEMPLATES)
    for tool in tools:  # annotated with the authoring API's own types, not `object`
        tree = ast.parse(tool.read_text())
        factory = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "factory")
        execute = next(n for n in factory.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
        annotations = {a.arg: ast.unparse(a.annotation) for a in [*factory.args.args, *execute.args.args]
                       if a.annotation is not None}  # fmt: skip
        assert annotations == {
            "api": "ToolAPI", "tool_call_id": "str", "params": "Params", "on_update": "OnUpdate",
            "ctx": "ToolContext", "signal": "AbortSignal",
        }, tool.name  # fmt: skip
    tree_dir = link_import_tree(tmp_path / "import-tree")
    config = tmp_path / "mypy.ini"
    # As mypy treats an installed xcsh-run (a wheel's, in site-packages): its types are the tool's, its own
    # problems are not.
    config.write_text("[mypy]\n\n[mypy-xcsh_run.*]\nfollow_imports = silent\n")

    def mypy(*paths: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(config), "--strict", "--cache-dir",
             str(tmp_path / "mypy-cache"), *map(str, paths)],
            cwd=project, capture_output=True, text=True, timeout=400,
            # An editable install is an import hook mypy cannot follow.
            env={**os.environ, "MYPYPATH": str(tree_dir)},
        )  # fmt: skip

    checked = mypy(*tools, *tests)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"no issues found in {2 * len(TEMPLATES)} source files" in checked.stdout
    # The types are real: a misuse of the signal is caught, by its type's name.
    basic = project / ".xcsh" / "tools" / "my_basic.py"
    basic.write_text(basic.read_text().replace("text = ", "signal.abortedd\n        text = ", 1))
    misused = mypy(basic)
    assert misused.returncode == 1
    assert '"AbortSignal" has no attribute "abortedd"' in misused.stdout, misused.stdout
