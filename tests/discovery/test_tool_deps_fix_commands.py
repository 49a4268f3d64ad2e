"""A tool environment that cannot be built ends its error with the exact command that fixes or checks it.

Offline: the installers see only a folder of wheels repacked from this venv
(packaging, msgspec), with the index off. A dependency that is nowhere fails
the build through the real ``xcsh-run``; the command its error ends with is
run as printed, in a shell. The missing-installer cases go through the
installer's choice itself, at its seam (``_uv``, pip's presence): this venv
has both.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests._support.wheelhouse import offline_env, repack
from tests.conftest import XCSH_RUN

pytestmark = pytest.mark.timeout(300)
CLI_SECONDS = 240
MISSING = "nosuchpkg-xcsh-run==1.0"
TOOL = f"""# /// script
# dependencies = [{json.dumps(MISSING)}]
# ///
def factory(api):
    return api.pi.CustomTool(name="needs", description="needs a package that is nowhere",
                             parameters={{"type": "object"}}, execute=lambda *args: "unreachable")
"""


@pytest.fixture
def offline(tmp_path: Path) -> dict[str, str]:
    links = tmp_path / "wheels"
    links.mkdir()
    for name in ("packaging", "msgspec"):
        repack(name, links)
    return offline_env(links, dict(os.environ))


def last_command(message: str) -> str:
    """The command in backquotes that the message ends with."""
    found = re.search(r"`([^`]+)`$", message.rstrip())
    assert found, f"the message does not end with a command in backquotes: {message}"
    return found.group(1)


def shell(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command], env=env, capture_output=True, text=True, timeout=CLI_SECONDS, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_failed_install_ends_with_the_command_that_checks_a_set(
    installer: str, tmp_path: Path, offline: dict[str, str]
) -> None:
    project = tmp_path / "project"
    (project / ".xcsh" / "tools").mkdir(parents=True)
    (project / ".xcsh" / "tools" / "needs.py").write_text(TOOL)
    env = {**offline, "XCSH_RUN_ENV_INSTALLER": installer}
    proc = subprocess.run(
        [XCSH_RUN, "list", "--json"], cwd=project, env=env, capture_output=True, text=True, timeout=CLI_SECONDS,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # list fails when a module failed to load
    (error,) = json.loads(proc.stdout)["errors"]
    message = error["message"]
    assert "could not install the dependencies of its `# /// script` block (line 1)" in message
    assert ("uv does not read pip.conf" in message) == (installer == "uv")
    command = last_command(message)
    assert shlex.quote(sys.executable) in command and MISSING in command
    assert "install --dry-run" in command if installer == "pip" else "pip compile --no-build" in command
    # Run as printed, it resolves the set as the build did: the same package is missing ...
    checked = shell(command, env)
    assert checked.returncode != 0
    assert "nosuchpkg-xcsh-run" in checked.stdout + checked.stderr
    # ... and a set that can be installed passes it, installing nothing.
    fixed = shell(command.replace(MISSING, "'packaging>=22'"), env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "packaging" in fixed.stdout
    assert not any(p.is_dir() for p in (Path(env["XDG_CACHE_HOME"]) / "xcsh-run" / "envs").glob("*"))


def test_uv_asked_for_and_missing_ends_with_the_command_that_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from xcsh_run._discovery import tool_envs as _envs

    monkeypatch.setenv("XCSH_RUN_ENV_INSTALLER", "uv")
    monkeypatch.setattr(_envs, "_uv", lambda: None)
    with pytest.raises(_envs.EnvError) as raised:
        _envs._installer()
    message = str(raised.value)
    assert message.startswith("XCSH_RUN_ENV_INSTALLER=uv, but there is no `uv` on PATH nor beside")
    assert message.endswith(f"install uv beside xcsh-run: `{shlex.quote(sys.executable)} -m pip install 'uv>=0.4'`")


def test_no_installer_at_all_ends_with_the_command_that_gives_python_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    from xcsh_run._discovery import tool_envs as _envs

    real_find_spec = importlib.util.find_spec
    monkeypatch.delenv("XCSH_RUN_ENV_INSTALLER", raising=False)
    monkeypatch.setattr(_envs, "_uv", lambda: None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "pip" else real_find_spec(name))
    with pytest.raises(_envs.EnvError) as raised:
        _envs._installer()
    message = str(raised.value)
    assert "need an installer, and there is no `uv` on PATH nor beside" in message
    assert f"and no pip in {sys.prefix}" in message
    assert message.endswith(f"give xcsh-run's Python pip: `{shlex.quote(sys.executable)} -m ensurepip`")
