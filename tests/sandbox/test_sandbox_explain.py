"""`strict` in plain words: denials that name the flag, declared needs, grants, and outbound TCP to granted ports.

Every call runs a real strict worker through the public API or the real CLI.
The tool is written into the test's tmp_path; a TCP listener on 127.0.0.1 in
this process stands for a server the tool wants to reach, and counts the
connections it accepted, so a denied connect is also seen not to arrive.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import XCSH_RUN, make_runner, needs_strict
from xcsh_run import ConfigError, SandboxPolicy, SandboxUnavailable
from xcsh_run._sandbox.policy import Probe, check

STRICT = SandboxPolicy(level="strict")
GREETING = b"hello from the host"

TOOL = """
import socket
import subprocess

from xcsh_run.pi import CustomTool, Requires


def factory(api):
    def execute(tool_call_id, params, on_update, ctx, signal):
        op = params["op"]
        if op == "connect":
            with socket.create_connection(("127.0.0.1", params["port"]), timeout=10) as conn:
                return conn.recv(100).decode()
        if op == "bind":
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            return "bound"
        if op == "fastopen":
            # TCP Fast Open: a connection (and data) from sendto, without connect().
            sock = socket.socket()
            sock.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", params["port"]))
            return "sent"
        if op == "udp":
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            return "udp socket"
        if op == "read":
            with open(params["path"]) as f:
                return f.read()
        if op == "subprocess":
            return subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
        if op == "api_exec":
            return api.exec("git", ["--version"]).stdout
        if op == "mine":
            raise PermissionError("mine")
        if op == "mine_with_errno":
            # A denial just before, caught: the tool's own error after it is still its own.
            try:
                open("/etc/hostname")
            except PermissionError:
                pass
            raise PermissionError(13, "mine, with an errno")
        raise ValueError(op)

    return CustomTool(
        name="probe",
        description="Does what op says",
        parameters={"type": "object", "properties": {"op": {"type": "string"}, "port": {"type": "integer"},
                                                     "path": {"type": "string"}}},
        execute=execute,
        requires=Requires(programs=("git",), read=("/etc/hostname",), network=("tcp:NEEDED_PORT",)),
    )
"""


@contextmanager
def tcp_server() -> Iterator[tuple[int, list[int]]]:
    """A listener on 127.0.0.1 greeting every connection; yields its port and a list counting accepted ones."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            with conn:
                conn.sendall(GREETING)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def write_tool(folder: Path, needed_port: int = 443) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "probe.py"
    path.write_text(TOOL.replace("NEEDED_PORT", str(needed_port)))
    return path


async def call(tool: Path, policy: SandboxPolicy, forkserver: bool = False, **args: Any) -> tuple[bool, str]:
    with trio.fail_after(40):
        async with make_runner(tool, sandbox=policy, forkserver=forkserver) as runner:
            result = await runner.call_tool("probe", args)
    if result.is_error:
        assert result.error is not None
        assert result.error.kind == "tool_error", result
        return True, result.error.message
    return False, result.text


def cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


# --- denials in plain words -------------------------------------------------------------------


@needs_strict
def test_a_blocked_connect_names_the_sandbox_the_operation_and_the_flag(tmp_path: Path) -> None:
    tool = write_tool(tmp_path / "tools")
    with tcp_server() as (port, accepted):
        is_error, message = trio.run(lambda: call(tool, STRICT, op="connect", port=port))
    assert is_error
    assert "Operation not permitted" in message  # the original error is kept
    assert f"the strict sandbox blocked connect to 127.0.0.1:{port} (network is off)" in message, message
    assert f"--allow-connect {port}" in message and "allow_connect" in message
    assert accepted == []


@needs_strict
@pytest.mark.parametrize("forkserver", [False, True], ids=["popen", "forkserver"])
def test_a_granted_port_connects_and_another_is_still_denied(tmp_path: Path, forkserver: bool) -> None:
    tool = write_tool(tmp_path / "tools")
    with tcp_server() as (port, accepted), tcp_server() as (other, other_accepted):
        policy = STRICT.replace(allow_connect=(port,))

        async def main() -> list[tuple[bool, str]]:
            return [
                await call(tool, policy, forkserver, op="connect", port=port),
                await call(tool, policy, forkserver, op="connect", port=other),
                await call(tool, policy, forkserver, op="bind"),
                await call(tool, policy, forkserver, op="udp"),
                await call(tool, policy, forkserver, op="fastopen", port=other),
            ]

        (ok, granted), (denied, refused), (bind_error, bind), (udp_error, udp), (tfo_error, tfo) = trio.run(main)
    assert (ok, granted) == (False, GREETING.decode())
    assert accepted == [1]
    assert denied and "Permission denied" in refused
    assert f"blocked connect to 127.0.0.1:{other} (port {other} is not in allow_connect)" in refused, refused
    assert f"--allow-connect {other}" in refused
    assert other_accepted == []
    assert bind_error and "the strict sandbox blocked bind to 127.0.0.1:0" in bind, bind
    assert udp_error and "the strict sandbox blocked creating a socket (AF_INET, type 2)" in udp, udp
    assert tfo_error and tfo.startswith("[Errno 1] Operation not permitted"), tfo
    assert other_accepted == []


@needs_strict
def test_allow_connect_on_the_command_line(tmp_path: Path) -> None:
    tool = write_tool(tmp_path / "tools")
    with tcp_server() as (port, accepted), tcp_server() as (other, _):
        granted = cli("probe", "--tools", str(tool), "--sandbox", "strict", "--allow-connect", str(port),
                      "--args", json.dumps({"op": "connect", "port": port}), cwd=tmp_path)  # fmt: skip
        refused = cli("probe", "--tools", str(tool), "--sandbox", "strict", "--allow-connect", str(port),
                      "--args", json.dumps({"op": "connect", "port": other}), cwd=tmp_path)  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    assert granted.stdout.strip() == GREETING.decode()
    assert accepted == [1]
    assert refused.returncode == 1
    assert f"the strict sandbox blocked connect to 127.0.0.1:{other}" in refused.stderr, refused.stderr
    assert f"--allow-connect {other}" in refused.stderr


@needs_strict
@pytest.mark.parametrize("op", ["api_exec", "subprocess"])
def test_running_a_program_outside_allow_exec_names_allow_exec(tmp_path: Path, op: str) -> None:
    tool = write_tool(tmp_path / "tools")
    is_error, message = trio.run(lambda: call(tool, STRICT, op=op))
    assert is_error
    assert "Permission denied: 'git'" in message
    assert "the strict sandbox blocked running 'git' (not in allow_exec)" in message, message
    assert message.count("--allow-exec git") == 1, message
    # With the grant it runs.
    is_error, version = trio.run(lambda: call(tool, STRICT.replace(allow_exec=("git",)), op=op))
    assert not is_error and version.startswith("git version"), version


@needs_strict
def test_reading_outside_the_allow_list_names_allow_read(tmp_path: Path) -> None:
    tool = write_tool(tmp_path / "tools")
    is_error, message = trio.run(lambda: call(tool, STRICT, op="read", path="/etc/hostname"))
    assert is_error
    assert "Permission denied: '/etc/hostname'" in message
    assert "the strict sandbox blocked reading /etc/hostname (outside the read allow-list)" in message, message
    assert "--allow-read /etc/hostname" in message and "extra_read_paths" in message
    granted = STRICT.replace(extra_read_paths=("/etc/hostname",))
    is_error, text = trio.run(lambda: call(tool, granted, op="read", path="/etc/hostname"))
    assert not is_error and text == Path("/etc/hostname").read_text()


@needs_strict
@pytest.mark.parametrize(("op", "expected"), [("mine", "mine"), ("mine_with_errno", "[Errno 13] mine, with an errno")])
def test_a_tools_own_permission_error_is_unchanged(tmp_path: Path, op: str, expected: str) -> None:
    tool = write_tool(tmp_path / "tools")
    is_error, message = trio.run(lambda: call(tool, STRICT, op=op))
    assert is_error
    assert message == expected


# --- declared needs and grants ------------------------------------------------------------------


def test_describe_and_list_show_what_a_tool_requires(tmp_path: Path) -> None:
    tool = write_tool(tmp_path / "tools", needed_port=8443)
    expected = {"programs": ["git"], "read": ["/etc/hostname"], "network": ["tcp:8443"]}
    described = cli("describe", "probe", "--tools", str(tool), cwd=tmp_path)
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout)["requires"] == expected
    listed = cli("list", "--json", "--tools", str(tool), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["tools"][0]["requires"] == expected
    text = cli("list", "--tools", str(tool), cwd=tmp_path)
    assert "requires (strict): --allow-exec git --allow-read /etc/hostname --allow-connect 8443" in text.stdout


def test_a_malformed_requires_is_a_load_error_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / "bad.py").write_text(
        "def factory(api):\n"
        "    return {'name': 'bad', 'description': 'd', 'parameters': {'type': 'object'},\n"
        "            'execute': lambda *a: 'x', 'requires': {'network': ['udp:53']}}\n"
    )
    listed = cli("list", "--json", "--tools", str(folder / "bad.py"), cwd=tmp_path)
    errors = json.loads(listed.stdout)["errors"]
    assert any("requires network: 'udp:53' is not 'tcp:PORT'" in e["message"] for e in errors), errors


@needs_strict
def test_a_config_file_grant_works_and_a_missing_grant_is_reported(tmp_path: Path) -> None:
    tool = write_tool(tmp_path / "tools")
    home = Path.home()  # the test's own (conftest)
    args = ["probe", "--tools", str(tool), "--sandbox", "strict"]
    with tcp_server() as (port, accepted):
        tool.write_text(tool.read_text().replace("tcp:443", f"tcp:{port}"))
        connect = json.dumps({"op": "connect", "port": port})
        ungranted = cli(*args, "--args", connect, cwd=tmp_path)
        (home / ".xcsh").mkdir()
        (home / ".xcsh" / "config.toml").write_text(f"[tools.probe]\nallow_connect = [{port}]\n")
        granted = cli(*args, "--args", connect, cwd=tmp_path)
    assert ungranted.returncode == 1
    assert "tool 'probe' declares needs the strict sandbox does not grant" in ungranted.stderr, ungranted.stderr
    assert f"--allow-exec git --allow-read /etc/hostname --allow-connect {port}" in ungranted.stderr
    assert granted.returncode == 0, granted.stderr
    assert granted.stdout.strip() == GREETING.decode()
    assert accepted == [1]
    # Still reported: what the file does not grant.
    assert "--allow-exec git --allow-read /etc/hostname (or [tools.probe]" in granted.stderr, granted.stderr


@needs_strict
def test_a_projects_config_file_grants_only_when_the_user_trusts_the_project(tmp_path: Path) -> None:
    project = tmp_path / "project"
    tool = write_tool(project / ".xcsh" / "tools")
    (project / ".xcsh" / "config.toml").write_text('[tools.probe]\nallow_read = ["/etc/hostname"]\n')
    args = ["probe", "--sandbox", "strict", "--args", json.dumps({"op": "read", "path": "/etc/hostname"})]
    untrusted = cli(*args, cwd=project)
    (Path.home() / ".xcsh").mkdir()
    (Path.home() / ".xcsh" / "config.toml").write_text(f'trusted_projects = ["{project}"]\n')
    trusted = cli(*args, cwd=project)
    deeper = project / "src" / "pkg"
    deeper.mkdir(parents=True)
    from_below = cli(*args, cwd=deeper)  # the project's file is found at its root, as its tools are
    assert tool.exists()
    assert untrusted.returncode == 1
    assert "grants sandbox access that is ignored" in untrusted.stderr, untrusted.stderr
    assert "--allow-read /etc/hostname" in untrusted.stderr
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stdout.strip() == Path("/etc/hostname").read_text().strip()
    assert from_below.returncode == 0, from_below.stderr
    assert from_below.stdout == trusted.stdout


def test_a_malformed_config_file_is_refused_naming_it(tmp_path: Path) -> None:
    (Path.home() / ".xcsh").mkdir()
    config = Path.home() / ".xcsh" / "config.toml"
    config.write_text("[tools.probe]\nallow_conect = [443]\n")
    tool = write_tool(tmp_path / "tools")
    proc = cli("list", "--tools", str(tool), cwd=tmp_path)
    assert proc.returncode == 2, proc
    assert str(config) in proc.stderr and "allow_conect" in proc.stderr, proc.stderr


# --- the policy field -----------------------------------------------------------------------------


def test_allow_connect_is_checked() -> None:
    with pytest.raises(ConfigError, match="from 1 to 65535"):
        SandboxPolicy(level="strict", allow_connect=(0,))
    with pytest.raises(ConfigError, match="network='off'"):
        SandboxPolicy(level="strict", network="netns", allow_connect=(443,))


def test_allow_connect_without_landlock_tcp_rules_is_refused_unless_best_effort() -> None:
    old_kernel = Probe(arch="x86_64", euid=0, landlock_abi=3, seccomp=True, cgroup_v2=True, memory_cgroup=True,
                       pids_cgroup=True, drop_uid_ok=True)  # fmt: skip
    policy = SandboxPolicy(level="strict", allow_connect=(443,))
    with pytest.raises(SandboxUnavailable, match="allow_connect"):
        check(policy, old_kernel)
    unenforced = check(policy.replace(best_effort=True), old_kernel)
    assert any("the granted ports stay closed" in item for item in unenforced)


def test_mcp_tools_list_carries_requires_in_meta(tmp_path: Path) -> None:
    from xcsh_run._mcp.render import META_REQUIRES, render_tools

    tool = write_tool(tmp_path / "tools", needed_port=8443)

    async def main() -> list[dict[str, Any]]:
        with trio.fail_after(30):
            async with make_runner(tool) as runner:
                return render_tools(runner.tools, "2025-11-25")

    (entry,) = [t for t in trio.run(main) if t["name"] == "probe"]
    assert entry["_meta"][META_REQUIRES] == {"programs": ["git"], "read": ["/etc/hostname"], "network": ["tcp:8443"]}


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--allow-connect", "70000"], "--allow-connect takes a TCP port from 1 to 65535"),
        (["--allow-connect", "443", "--network", "netns"], "--allow-connect needs --network off"),
    ],
)
def test_allow_connect_flag_errors_exit_2(tmp_path: Path, flags: list[str], fragment: str) -> None:
    tool = write_tool(tmp_path / "tools")
    proc = cli("probe", "--tools", str(tool), "--sandbox", "strict", *flags, "--args", "{}", cwd=tmp_path)
    assert proc.returncode == 2, proc
    assert fragment in proc.stderr, proc.stderr
