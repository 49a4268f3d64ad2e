"""Which tools the config files' grants reach, whether ``open_runner()`` reads them, and what they may say.

``[tools.NAME]`` grants in ``~/.xcsh/config.toml`` follow a name; a project's
module may take any name and comes first in discovery, so it gets them only
when the user trusts the project. Through the real CLI, with the test's own HOME.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import trio

from tests.conftest import needs_strict
from tests.sandbox.test_sandbox_explain import cli, write_tool
from xcsh_run import SandboxPolicy, open_runner

HOSTNAME = "/etc/hostname"
READ = ["--sandbox", "strict", "--args", json.dumps({"op": "read", "path": HOSTNAME})]


def user_config(text: str) -> Path:
    folder = Path.home() / ".xcsh"
    folder.mkdir(exist_ok=True)
    path = folder / "config.toml"
    path.write_text(text)
    return path


def project_with_probe(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    write_tool(project / ".xcsh" / "tools")
    return project


def read_ok(proc: subprocess.CompletedProcess[str]) -> bool:
    return proc.returncode == 0 and proc.stdout.strip() == Path(HOSTNAME).read_text().strip()


@needs_strict
def test_an_untrusted_projects_tool_does_not_take_the_users_grant_by_name(tmp_path: Path) -> None:
    project = project_with_probe(tmp_path)
    user_tool = write_tool(Path.home() / ".xcsh" / "agent" / "tools")
    user_config(f'[tools.probe]\nallow_read = ["{HOSTNAME}"]\n')
    proc = cli("probe", *READ, cwd=project)
    assert user_tool.exists()
    assert proc.returncode == 1, proc  # denied: the project's probe.py shadows the user's and gets nothing
    assert "does not get the [tools.probe] grants" in proc.stderr, proc.stderr
    assert str(project / ".xcsh" / "tools" / "probe.py") in proc.stderr
    assert "trusted_projects" in proc.stderr


@needs_strict
def test_a_trusted_projects_tool_takes_the_users_grant(tmp_path: Path) -> None:
    project = project_with_probe(tmp_path)
    user_config(f'trusted_projects = ["{project}"]\n[tools.probe]\nallow_read = ["{HOSTNAME}"]\n')
    proc = cli("probe", *READ, cwd=project)
    assert read_ok(proc), proc
    assert "does not get the" not in proc.stderr


@needs_strict
def test_a_user_level_tool_and_a_tools_path_take_the_users_grant_in_an_untrusted_project(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".xcsh").mkdir(parents=True)  # a project, not trusted, without tools of its own
    write_tool(Path.home() / ".xcsh" / "agent" / "tools")
    user_config(f'[tools.probe]\nallow_read = ["{HOSTNAME}"]\n')
    user_level = cli("probe", *READ, cwd=project)
    (Path.home() / ".xcsh" / "agent" / "tools" / "probe.py").unlink()
    given = cli("probe", "--tools", str(write_tool(tmp_path / "elsewhere")), *READ, cwd=project)
    assert read_ok(user_level), user_level
    assert read_ok(given), given


@needs_strict
def test_open_runner_without_paths_reads_the_users_config_file(tmp_path: Path) -> None:
    write_tool(Path.home() / ".xcsh" / "agent" / "tools")
    user_config(f'[sandbox]\nallow_read = ["{HOSTNAME}"]\n')

    async def main() -> str:
        with trio.fail_after(40):
            async with open_runner(
                cwd=tmp_path, sandbox=SandboxPolicy(level="strict"), cache=False, spare_workers=0
            ) as runner:
                assert HOSTNAME in runner.sandbox.extra_read_paths
                assert runner.config.discover_sources is True
                result = await runner.call_tool("probe", {"op": "read", "path": HOSTNAME})
        assert not result.is_error, result
        return result.text

    assert trio.run(main).strip() == Path(HOSTNAME).read_text().strip()


def test_a_port_out_of_range_is_refused_naming_the_file_and_the_key(tmp_path: Path) -> None:
    tool = write_tool(tmp_path / "tools")
    for port, table in ((70000, "[tools.probe]"), (0, "[sandbox]")):
        config = user_config(f"{table}\nallow_connect = [{port}]\n")
        proc = cli("list", "--tools", str(tool), cwd=tmp_path)
        assert proc.returncode == 2, proc
        assert f"{config}: {table} allow_connect: {port} is not a TCP port" in proc.stderr, proc.stderr


@needs_strict
def test_netns_leaves_the_files_allow_connect_out_with_a_warning_and_runs(tmp_path: Path) -> None:
    tool = write_tool(tmp_path / "tools")
    config = user_config("[sandbox]\nallow_connect = [443]\n")
    proc = cli("probe", "--tools", str(tool), "--network", "netns", "--allow-read", HOSTNAME, *READ, cwd=tmp_path)
    assert read_ok(proc), proc
    assert f"allow_connect in {config} is not applied under network='netns'" in proc.stderr, proc.stderr
