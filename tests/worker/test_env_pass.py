"""The client's environment and the sandbox: what reaches tools, and what a tool is told when it does not.

The ``contained`` and ``strict`` levels give workers an allow-list of the
host's environment. A variable is passed by name (``--pass-env NAME``,
``SandboxPolicy(env_allow=...)``) or by prefix (``--pass-env-prefix``); a tool
that reads one that was not passed, then fails, gets an error that names it
and says how to pass it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import trio

from tests.conftest import XCSH_RUN, make_runner
from xcsh_run import SandboxPolicy

TOOL = """
import os
from xcsh_run.pi import CustomTool

def factory(api):
    def needs(tcid, params, on_update, ctx, signal):
        return os.environ[params["name"]]

    def peeks(tcid, params, on_update, ctx, signal):
        return str(os.environ.get(params["name"], "(unset)"))

    def fails(tcid, params, on_update, ctx, signal):
        raise RuntimeError("broken for its own reasons")

    def environ_holds(tcid, params, on_update, ctx, signal):
        # What the process started with, and still holds in memory (a forked worker: the zygote's).
        with open("/proc/self/environ", "rb") as f:
            return str(params["value"].encode() in f.read())

    obj = {"type": "object"}
    return [
        CustomTool(name="needs", description="returns a variable, KeyError if unset", parameters=obj, execute=needs),
        CustomTool(name="peeks", description="returns a variable or (unset)", parameters=obj, execute=peeks),
        CustomTool(name="fails", description="always raises", parameters=obj, execute=fails),
        CustomTool(name="environ_holds", description="is a value in /proc/self/environ", parameters=obj,
                   execute=environ_holds),
    ]
"""

AT_IMPORT = """
import os
from xcsh_run.pi import CustomTool

TOKEN = os.environ["XCSH_TEST_API_TOKEN"]

def factory(api):
    return CustomTool(name="tokened", description="d", parameters={"type": "object"}, execute=lambda *a: TOKEN)
"""


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "envtools.py"
    path.write_text(TOOL)
    return path


def cli(
    tools: Path, tool: str, name: str, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, tool, "--tools", str(tools), "--json", "--args", json.dumps({"name": name}), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def test_an_unpassed_variable_read_by_a_failing_tool_is_named_with_the_flag_to_pass_it(tools: Path) -> None:
    proc = cli(tools, "needs", "MY_SETTING", env={"MY_SETTING": "on"})
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["error"]["kind"] == "tool_error"
    assert "KeyError: 'MY_SETTING'" in result["error"]["traceback"]
    text = result["content"][0]["text"]
    assert "the tool read the environment variable MY_SETTING, which the sandbox does not pass" in text
    assert "--pass-env MY_SETTING" in text and "SandboxPolicy(env_allow=('MY_SETTING',))" in text
    assert "on" not in text.split("MY_SETTING")[-1]  # the value never travels


def test_pass_env_passes_a_variable_by_name_secret_looking_ones_included(tools: Path) -> None:
    env = {"MY_SETTING": "on", "GITHUB_TOKEN": "ghp_x"}
    proc = cli(tools, "needs", "MY_SETTING", "--pass-env", "MY_SETTING", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["content"][0]["text"] == "on"
    proc = cli(tools, "needs", "GITHUB_TOKEN", "--pass-env", "GITHUB_TOKEN", env=env)
    assert json.loads(proc.stdout)["content"][0]["text"] == "ghp_x"
    # The old spelling still works.
    proc = cli(tools, "needs", "MY_SETTING", "--allow-env", "MY_SETTING", env=env)
    assert json.loads(proc.stdout)["content"][0]["text"] == "on"


def test_pass_env_prefix_passes_every_variable_under_it_and_nothing_else(tools: Path) -> None:
    env = {"MYAPP_URL": "http://x", "MYAPP_API_KEY": "k", "OTHER_SETTING": "o"}
    flags = ("--pass-env-prefix", "MYAPP_")
    assert json.loads(cli(tools, "needs", "MYAPP_URL", *flags, env=env).stdout)["content"][0]["text"] == "http://x"
    assert json.loads(cli(tools, "needs", "MYAPP_API_KEY", *flags, env=env).stdout)["content"][0]["text"] == "k"
    other = json.loads(cli(tools, "peeks", "OTHER_SETTING", *flags, env=env).stdout)
    assert other["content"][0]["text"] == "(unset)"


def test_an_empty_prefix_is_a_usage_error(tools: Path) -> None:
    proc = cli(tools, "needs", "X", "--pass-env-prefix", "")
    assert proc.returncode == 2
    assert "--pass-env-prefix needs a non-empty prefix" in proc.stderr


async def test_a_successful_read_leaves_no_hint_on_a_later_unrelated_failure(
    tools: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SETTING", "on")
    with trio.fail_after(30):
        async with make_runner(tools, max_workers=1) as runner:
            peeked = await runner.call_tool("peeks", {"name": "MY_SETTING"})
            failed = await runner.call_tool("fails", {})  # same worker, read nothing this time
    assert peeked.text == "(unset)" and not peeked.is_error
    assert failed.kind == "tool_error" and "environment variable" not in failed.text


async def test_a_module_that_reads_an_unpassed_variable_at_import_names_it_in_its_load_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XCSH_TEST_API_TOKEN", "secret-value")
    path = tmp_path / "tokened.py"
    path.write_text(AT_IMPORT)
    with trio.fail_after(30):
        async with make_runner(path, cache=False) as runner:
            errors = [e.message for e in runner.errors]
        policy = SandboxPolicy(env_allow=("XCSH_TEST_API_TOKEN",))
        async with make_runner(path, cache=False, sandbox=policy) as runner:
            passed = await runner.call_tool("tokened", {})
    assert len(errors) == 1, errors
    assert "KeyError" in errors[0] and "XCSH_TEST_API_TOKEN, which the sandbox does not pass" in errors[0]
    assert "secret-value" not in errors[0]
    assert passed.text == "secret-value"


def test_an_empty_prefix_in_a_policy_is_a_config_error() -> None:
    from xcsh_run import ConfigError

    with pytest.raises(ConfigError, match="empty prefix"):
        SandboxPolicy(env_allow_prefixes=("",))


async def test_an_mcp_clients_env_reaches_tools_it_names_with_pass_env(
    tools: Path, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    from tests._support.mcp_clients import DEADLINE, open_session
    from tests.mcp.test_mcp import text_of

    # What a client's "env" map in its server registration becomes: serve's own environment.
    monkeypatch.setenv("MY_SETTING", "from-the-client")
    with trio.fail_after(DEADLINE):
        async with open_session(transport, str(tools), options=("--pass-env", "MY_SETTING")) as s:
            passed = await s.call_tool("needs", {"name": "MY_SETTING"})
        async with open_session(transport, str(tools)) as s:
            dropped = await s.call_tool("needs", {"name": "MY_SETTING"})
    assert not passed.is_error and text_of(passed) == "from-the-client"
    assert dropped.is_error and "--pass-env MY_SETTING" in text_of(dropped)


@pytest.mark.parametrize("forkserver", ["0", "1"])
@pytest.mark.parametrize("level", ["none", "contained"])
def test_the_mcp_servers_token_is_never_in_a_tools_environment(tools: Path, level: str, forkserver: str) -> None:
    # With it, a tool could call the server's other tools (perhaps under a looser policy) over HTTP.
    # (Its own environment only: under none/contained the host's /proc/PID/environ is readable; docs/sandbox.md.)
    env = {"XCSH_RUN_MCP_TOKEN": "t0ken-value", "XCSH_RUN_OTHER": "passes", "XCSH_RUN_FORKSERVER": forkserver}
    flags = ("--sandbox", level, "--pass-env", "XCSH_RUN_MCP_TOKEN")
    token = json.loads(cli(tools, "peeks", "XCSH_RUN_MCP_TOKEN", *flags, env=env).stdout)
    other = json.loads(cli(tools, "peeks", "XCSH_RUN_OTHER", *flags, env=env).stdout)
    proc = subprocess.run(
        [XCSH_RUN, "environ_holds", "--tools", str(tools), "--json", "--args", '{"value": "t0ken-value"}', *flags],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env={**os.environ, **env},
    )  # fmt: skip
    assert token["content"][0]["text"] == "(unset)"
    assert other["content"][0]["text"] == "passes"
    assert json.loads(proc.stdout)["content"][0]["text"] == "False", proc.stdout + proc.stderr
