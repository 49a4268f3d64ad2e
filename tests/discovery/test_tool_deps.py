"""Per-tool dependencies: a PEP 723 ``# /// script`` block gives a tool its own cached environment.

Through the real ``xcsh-run`` command, with real installs from the package
index (``six`` is small and pure Python). Builds are few: one module-scoped
project, loaded by two ``xcsh-run list`` processes at once on one empty cache,
builds both of its dependency sets, and the tests that follow read what it
built. Tests that need the index skip, saying so, when it cannot be reached.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import textwrap
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import XCSH_RUN, needs_strict

BUILD_LINE = "xcsh-run: building environment for "
# Cold builds on a loaded machine: minutes at worst, never a hang.
CLI_SECONDS = 400
pytestmark = pytest.mark.timeout(900)


@functools.cache
def _index_unreachable() -> str | None:
    """Why the package index cannot be reached from here, or None (asked once per session)."""
    url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/").rstrip("/") + "/six/"
    try:
        with urllib.request.urlopen(url, timeout=15) as reply:
            reply.read(1)
    except OSError as exc:
        return f"the package index is unreachable from here ({url}: {exc}); CI runs these tests"
    return None


@pytest.fixture(scope="module")
def index() -> None:
    reason = _index_unreachable()
    if reason is not None:
        pytest.skip(reason)


def tool(name: str, dependencies: list[str] | None, *, requires_python: str | None = None) -> str:
    """A tool module that reports where it runs and the ``six`` it sees (or that it sees none)."""
    block = ""
    if dependencies is not None:
        lines = [f"dependencies = {json.dumps(dependencies)}"]
        if requires_python is not None:
            lines.append(f"requires-python = {json.dumps(requires_python)}")
        block = "# /// script\n" + "".join(f"# {line}\n" for line in lines) + "# ///\n"
    return block + textwrap.dedent(
        f"""
        import ctypes
        import json
        import sys


        def factory(api):
            def execute(tool_call_id, params, on_update, ctx, signal):
                try:
                    import six
                except ImportError:
                    six = None
                # PR_GET_SECCOMP: 2 when the sandbox's filter (contained and strict) is on.
                seccomp = ctypes.CDLL(None).prctl(21, 0, 0, 0, 0)
                seen = {{"prefix": sys.prefix, "six": six.__version__ if six else None, "seccomp": seccomp}}
                return {{"content": [{{"type": "text", "text": json.dumps(seen)}}], "details": None}}

            return api.pi.CustomTool(name={name!r}, label={name!r}, description="where it runs",
                                     parameters={{"type": "object"}}, execute=execute)
        """
    )


def cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=CLI_SECONDS,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def seen(proc: subprocess.CompletedProcess[str]) -> dict[str, str | None]:
    assert proc.returncode == 0, proc.stderr
    result: dict[str, str | None] = json.loads(proc.stdout)
    return result


@dataclass
class Project:
    root: Path
    env: dict[str, str]
    first_stderr: str  # both loading processes' stderr

    @property
    def envs(self) -> Path:
        return Path(self.env["XDG_CACHE_HOME"]) / "xcsh-run" / "envs"

    def built(self) -> list[Path]:
        return sorted(p for p in self.envs.iterdir() if p.is_dir())

    def run(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return cli(name, *args, cwd=self.root, env=self.env)


@pytest.fixture(scope="module")
def project(index: None, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """Four tools: two of one set (spelled differently), one of another, one with none; two processes build them."""
    base = tmp_path_factory.mktemp("deps")
    root = base / "proj"
    tools = root / ".xcsh" / "tools"
    tools.mkdir(parents=True)
    (tools / "six_a.py").write_text(tool("six_a", ["six==1.16.0"]))
    (tools / "six_b.py").write_text(tool("six_b", ["Six == 1.16.0"], requires_python=">=3.11"))
    (tools / "six_old.py").write_text(tool("six_old", ["six==1.15.0"]))
    (tools / "plain.py").write_text(tool("plain", None))
    (base / "home").mkdir()
    env = {**os.environ, "HOME": str(base / "home"), "XDG_CACHE_HOME": str(base / "cache")}
    procs = [
        subprocess.Popen(
            [XCSH_RUN, "list", "--json"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    stderr = ""
    for proc in procs:
        out, err = proc.communicate(timeout=CLI_SECONDS)
        assert proc.returncode == 0, err
        listed = json.loads(out)
        assert listed["errors"] == [], listed["errors"]
        assert sorted(t["name"] for t in listed["tools"]) == ["plain", "six_a", "six_b", "six_old"]
        stderr += err
    return Project(root, env, stderr)


def test_each_dependency_set_is_built_once_by_one_of_two_processes(project: Project) -> None:
    # Two processes, each loading two modules of one set at once: one build per set, and both see it.
    builds = [line for line in project.first_stderr.splitlines() if line.startswith(BUILD_LINE)]
    assert len(builds) == 2, project.first_stderr
    assert any("(six==1.16.0): " in line and "install six==1.16.0 msgspec==" in line for line in builds), builds
    assert any("(six==1.15.0): " in line for line in builds), builds
    assert len(project.built()) == 2


def test_a_tool_runs_in_its_environment_and_imports_its_dependency(project: Project) -> None:
    proc = project.run("six_a")
    got = seen(proc)
    assert got["six"] == "1.16.0"
    assert Path(str(got["prefix"])).parent == project.envs
    assert got["seccomp"] == 2  # the environment's worker applies the same sandbox
    assert BUILD_LINE not in proc.stderr  # built while listing


def test_a_second_tool_with_the_same_set_reuses_the_environment(project: Project) -> None:
    a, b = seen(project.run("six_a")), seen(project.run("six_b"))
    assert a["prefix"] == b["prefix"]
    marker = Path(str(b["prefix"])) / "xcsh-run-env.json"
    built = json.loads(marker.read_text())["built"]
    again = project.run("six_b")
    assert seen(again)["prefix"] == b["prefix"]
    assert BUILD_LINE not in again.stderr
    assert json.loads(marker.read_text())["built"] == built  # not rebuilt
    assert len(project.built()) == 2


def test_a_different_set_gets_its_own_environment(project: Project) -> None:
    new, old = seen(project.run("six_a")), seen(project.run("six_old"))
    assert old["six"] == "1.15.0" and new["six"] == "1.16.0"
    assert old["prefix"] != new["prefix"]
    assert {Path(str(old["prefix"])), Path(str(new["prefix"]))} == set(project.built())


def test_a_tool_without_a_block_does_not_see_the_packages(project: Project) -> None:
    got = seen(project.run("plain"))
    assert got["six"] is None
    assert Path(str(got["prefix"])).parent != project.envs


@needs_strict
def test_a_tool_with_dependencies_runs_at_strict(project: Project) -> None:
    proc = project.run("six_a", "--sandbox", "strict", "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(json.loads(proc.stdout)["content"][0]["text"])
    assert got["six"] == "1.16.0"
    assert Path(got["prefix"]).parent == project.envs
    assert got["seccomp"] == 2


def test_a_half_built_environment_is_built_again_not_used(project: Project, tmp_path: Path) -> None:
    # What a build killed halfway leaves: the folder, no interpreter yet, no marker.
    name = Path(str(seen(project.run("six_a"))["prefix"])).name
    cache = tmp_path / "cache"
    shutil.copytree(Path(project.env["XDG_CACHE_HOME"]), cache, symlinks=True)
    half = cache / "xcsh-run" / "envs" / name
    (half / "xcsh-run-env.json").unlink()
    (half / "bin" / "python").unlink()
    # With -v, where every record reaches stderr anyway, the build is still said once.
    proc = cli("six_a", "-v", cwd=project.root, env={**project.env, "XDG_CACHE_HOME": str(cache)})
    assert seen(proc) == {"prefix": str(half), "six": "1.16.0", "seccomp": 2}
    assert proc.stderr.count("building environment for six_a (six==1.16.0)") == 1, proc.stderr
    assert (half / "xcsh-run-env.json").is_file()


def test_an_install_that_fails_when_a_call_needs_it_is_a_load_error(project: Project, tmp_path: Path) -> None:
    # The module cache knows six_a, so the call itself starts its worker; its
    # environment is gone and the index unreachable: the call's result says why.
    cache = tmp_path / "cache"
    shutil.copytree(Path(project.env["XDG_CACHE_HOME"]), cache, symlinks=True)
    shutil.rmtree(cache / "xcsh-run" / "envs")
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    env = {**project.env, "XDG_CACHE_HOME": str(cache), "XCSH_RUN_ENV_INSTALLER": "pip", "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(empty), "PIP_CONFIG_FILE": os.devnull}  # fmt: skip
    proc = cli("six_a", "--json", cwd=project.root, env=env)
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["kind"] == "load_error"
    assert "pip install six==1.16.0 msgspec==" in error["message"]
    assert "No matching distribution found for six==1.16.0" in error["message"]  # pip's own words
    assert BUILD_LINE + "six_a (six==1.16.0)" in proc.stderr
    assert not any(p.is_dir() for p in (cache / "xcsh-run" / "envs").iterdir())  # the half-built one is removed


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_each_installer_builds_a_working_environment(index: None, installer: str, tmp_path: Path) -> None:
    if installer == "uv" and shutil.which("uv") is None and not (Path(sys.executable).parent / "uv").exists():
        pytest.skip("uv is neither on PATH nor beside xcsh-run's interpreter (`make test` installs it)")
    _write_tool(tmp_path, "six_a", tool("six_a", ["six==1.16.0"]))
    proc = cli("six_a", cwd=tmp_path, env={**os.environ, "XCSH_RUN_ENV_INSTALLER": installer})
    got = seen(proc)
    assert got["six"] == "1.16.0"
    assert f"): {'uv pip' if installer == 'uv' else 'pip'} install six==1.16.0 msgspec==" in proc.stderr
    marker = json.loads((Path(str(got["prefix"])) / "xcsh-run-env.json").read_text())
    assert marker["installer"] == installer


def _write_tool(folder: Path, name: str, text: str) -> Path:
    tools = folder / ".xcsh" / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    (tools / f"{name}.py").write_text(text)
    return tools / f"{name}.py"


def _load_errors(cwd: Path) -> dict[str, str]:
    env = dict(os.environ)  # HOME and XDG_CACHE_HOME: this test's own (conftest)
    proc = cli("list", "--json", cwd=cwd, env=env)
    errors = {Path(e["path"]).stem: e["message"] for e in json.loads(proc.stdout)["errors"]}
    assert proc.returncode == (1 if errors else 0), proc.stderr  # a module that failed to load fails `list`
    return errors


def test_an_unresolvable_requirement_is_a_load_error_quoting_the_resolver(index: None, tmp_path: Path) -> None:
    _write_tool(tmp_path, "missing_dep", tool("missing_dep", ["xcsh-run-no-such-package-zz==1"]))
    _write_tool(tmp_path, "plain", tool("plain", None))
    errors = _load_errors(tmp_path)
    message = errors["missing_dep"]
    assert "could not install the dependencies of its `# /// script` block (line 1)" in message
    quoted = [line for line in message.splitlines() if line.startswith("  ")]  # the resolver's own lines
    assert any("xcsh-run-no-such-package-zz" in line for line in quoted), message
    assert "then run again" in message
    assert list(errors) == ["missing_dep"]  # the other tool loads
    envs = Path(os.environ["XDG_CACHE_HOME"]) / "xcsh-run" / "envs"
    assert not any(p.is_dir() for p in envs.iterdir())  # nothing half-built is left to be used
    # Run by name, the tool the failed module would define is its load error (exit 1), not "no such tool".
    run = cli("missing_dep", "--json", cwd=tmp_path, env=dict(os.environ))
    assert run.returncode == 1, (run.stdout, run.stderr)
    error = json.loads(run.stdout)["error"]
    assert error["kind"] == "load_error"
    assert "xcsh-run-no-such-package-zz" in error["message"]


def test_a_malformed_block_is_a_load_error_naming_the_line(tmp_path: Path) -> None:
    broken = '"""A tool."""\nimport json\n\n# /// script\n# dependencies = [\n#   "six==1.16.0",\n#   = 1\n# ]\n# ///\n'
    _write_tool(tmp_path, "bad_toml", broken + tool("bad_toml", None))
    _write_tool(tmp_path, "bad_type", '# /// script\n# dependencies = "six"\n# ///\n' + tool("bad_type", None))
    _write_tool(tmp_path, "bad_req", tool("bad_req", ["six=>1"]))
    _write_tool(tmp_path, "bad_python", tool("bad_python", ["six"], requires_python="<3"))
    errors = _load_errors(tmp_path)
    assert "line 7: the `# /// script` block (line 4) is not valid TOML" in errors["bad_toml"]
    assert "`dependencies` must be a list of strings" in errors["bad_type"]
    assert "dependency 'six=>1' is not a valid requirement" in errors["bad_req"]
    assert "requires-python '<3' excludes Python 3." in errors["bad_python"]
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "xcsh-run" / "envs").exists()  # nothing was built
