"""`xcsh-run --daemon`: real daemons in private folders, real clients (the console script), real workers.

Each test has a daemon folder of its own and stops its daemon before the leak
check runs; the suite-wide daemon of ``XCSH_RUN_TEST_DAEMON=1`` is not used here.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import XCSH_RUN
from xcsh_run import _daemon
from xcsh_run._daemon import wire

pytestmark = pytest.mark.slow

TOOL = """
import os, time
from xcsh_run.pi import CustomTool

def factory(api):
    def where(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": f"{os.getcwd()} {os.environ.get('PROBE', '-')}"}]}

    def pid(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": str(os.getpid())}]}

    def wait(tool_call_id, params, on_update, ctx, signal):
        on_update({"content": [], "details": {"waiting": True}})
        signal.wait()  # until the call is stopped
        return {"content": [{"type": "text", "text": "stopped"}]}

    def read(tool_call_id, params, on_update, ctx, signal):
        with open(params["path"]) as f:
            return {"content": [{"type": "text", "text": f.read()}]}

    return [
        CustomTool(name="where", description="cwd and $PROBE", parameters={"type": "object"}, execute=where),
        CustomTool(name="pid", description="the worker's pid", parameters={"type": "object"}, execute=pid),
        CustomTool(name="wait", description="wait for a stop", parameters={"type": "object"}, execute=wait),
        CustomTool(name="read", description="read a file", execute=read,
                   parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    ]
"""


def wait_gone(pid: int, timeout: float = 30.0) -> bool:
    """Whether ``pid`` ended within ``timeout`` (a pidfd: it is not our child, the daemon detaches)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


@pytest.fixture
def daemon_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private daemon folder (short: a socket path has 107 bytes), the daemon opted in; stopped after the test."""
    folder = tempfile.mkdtemp(prefix="xd", dir="/tmp")
    os.rmdir(folder)  # the client makes it, 0700
    monkeypatch.setenv("XCSH_RUN_DAEMON_DIR", folder)
    monkeypatch.setenv("XCSH_RUN_DAEMON", "1")
    yield folder
    state = _daemon.status()
    _daemon.stop()
    if state is not None:
        assert wait_gone(state["pid"]), "the daemon did not end after stop"
    subprocess.run(["rm", "-rf", folder], check=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".xcsh" / "tools").mkdir(parents=True)
    (root / ".xcsh" / "tools" / "probe.py").write_text(TOOL)
    return root


def xcsh(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60, input: str | None = None):
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
        input=input, stdin=None if input is not None else subprocess.DEVNULL,
    )  # fmt: skip


def test_a_repeated_call_is_served_by_the_same_warm_host_and_worker(daemon_dir: str, project: Path) -> None:
    first = xcsh("pid", cwd=project)
    second = xcsh("pid", cwd=project)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout  # the same worker answered both: the module was imported once
    assert xcsh("where", cwd=project).stdout == f"{project} -\n"
    state = _daemon.status()
    assert state is not None and state["current"]
    assert [h["runners"] for h in state["hosts"]] == [1]


@pytest.mark.parametrize(
    "args",
    [
        ["where"],
        ["where", "--json"],
        ["where", "--stream"],
        ["wait", "--timeout", "0.5"],
        ["read", "--args", '{"path": 3}'],
        ["read", "--path", "/nonexistent/x"],
        ["nosuch"],
        ["where", "--no-such-flag"],
        ["where", "--help"],
        ["list"],
        ["list", "--json"],
        ["describe", "read"],
        ["--version"],
    ],
)
def test_output_and_exit_code_are_those_of_the_cli(daemon_dir: str, project: Path, args: list[str]) -> None:
    through = xcsh("--daemon", *args, cwd=project)
    alone = xcsh("--no-daemon", *args, cwd=project)
    assert (through.returncode, through.stdout, through.stderr) == (alone.returncode, alone.stdout, alone.stderr)


def test_a_call_sees_its_own_cwd_environment_and_stdin(daemon_dir: str, project: Path) -> None:
    sub = project / "sub"
    sub.mkdir()
    env = {**os.environ, "PROBE": "one"}
    where = ("where", "--pass-env", "PROBE")  # the sandbox passes an allow-list of the environment
    assert xcsh(*where, cwd=project, env=env).stdout == f"{project} one\n"
    assert xcsh(*where, cwd=project, env={**env, "PROBE": "two"}).stdout == f"{project} two\n"
    assert xcsh(*where, cwd=sub, env=env).stdout == f"{sub} one\n"
    assert xcsh(*where, "--cwd", str(sub), cwd=project, env=env).stdout == f"{sub} one\n"
    assert xcsh("where", cwd=project, env=env).stdout == f"{project} -\n"  # not passed: as without the daemon
    secret = project / "secret.txt"
    secret.write_text("s3cret")
    piped = xcsh("read", "--args", "-", cwd=project, input=json.dumps({"path": str(secret)}), env=env)
    assert piped.stdout == "s3cret\n", piped.stderr


def test_a_policy_is_never_widened_by_another_clients_call(daemon_dir: str, project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("granted")
    args = json.dumps({"path": str(outside / "data.txt")})
    strict = ["--sandbox", "strict"]
    granted = xcsh("read", "--args", args, *strict, "--allow-read", str(outside), cwd=project)
    assert granted.returncode == 0 and granted.stdout == "granted\n", granted.stderr
    refused = xcsh("read", "--args", args, *strict, cwd=project)
    assert refused.returncode == 1 and "granted" not in refused.stdout
    state = _daemon.status()
    assert state is not None and sum(h["runners"] for h in state["hosts"]) == 2  # one per policy


def test_a_grant_taken_out_of_the_config_file_is_taken_from_the_next_call(
    daemon_dir: str, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("granted")
    config = Path(os.environ["HOME"]) / ".xcsh" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"[sandbox]\nallow_read = [{str(outside)!r}]\n")
    args = ["read", "--args", json.dumps({"path": str(outside / "data.txt")}), "--sandbox", "strict"]
    granted = xcsh(*args, cwd=project)
    assert granted.returncode == 0 and granted.stdout == "granted\n", granted.stderr
    config.write_text("[sandbox]\n")
    refused = xcsh(*args, cwd=project)
    assert refused.returncode == 1 and "granted" not in refused.stdout


def test_a_changed_tool_file_is_reloaded_before_the_next_call(daemon_dir: str, project: Path) -> None:
    tool = project / ".xcsh" / "tools" / "probe.py"
    assert xcsh("where", cwd=project).returncode == 0
    tool.write_text(TOOL.replace('"where"', '"here"'))
    os.utime(tool, ns=(time.time_ns(), time.time_ns() + 10**9))  # a second later, whatever the clock's grain
    moved = xcsh("here", cwd=project)
    assert moved.returncode == 0, moved.stderr
    assert xcsh("where", cwd=project).returncode == 2  # not_found: the old module is gone


def test_ctrl_c_stops_the_call_through_the_ladder_and_a_second_kills(daemon_dir: str, project: Path) -> None:
    assert xcsh("where", cwd=project).returncode == 0  # the daemon is up: the call below starts at once
    proc = subprocess.Popen(
        [XCSH_RUN, "wait", "--stream", "--grace", "30"], cwd=project, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["type"] == "update"  # the tool runs
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert json.loads(out.splitlines()[-1])["error"]["kind"] == "cancelled"
    assert "stopping wait" in err


def test_ctrl_c_while_the_command_reads_its_arguments_from_a_terminal_is_exit_130(
    daemon_dir: str, project: Path
) -> None:
    """The host's thread reads the terminal, outside any trio body: answered 130 at once, and the host ends."""
    import pty

    assert xcsh("where", cwd=project).returncode == 0
    main, sub = pty.openpty()
    try:
        proc = subprocess.Popen(
            [XCSH_RUN, "where", "--args", "-"], cwd=project, stdin=sub, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until a host has the call (it then blocks reading the terminal)
            state = _daemon.status()
            if state is not None and any(h["busy"] for h in state["hosts"]):
                break
            time.sleep(0.01)  # a poll of a condition, not a wait standing in for one
        busy = [h["pid"] for h in state["hosts"] if h["busy"]] if state is not None else []
        assert len(busy) == 1
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        os.close(main)
        os.close(sub)
    assert (proc.returncode, out, err) == (130, "", "xcsh-run: interrupted by SIGINT\n")
    assert wait_gone(busy[0])  # its thread could not be stopped: the host ended
    assert xcsh("where", cwd=project).stdout == f"{project} -\n"


def test_forty_concurrent_calls_with_an_empty_cache_all_answer(daemon_dir: str, project: Path, tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "empty-cache")}
    procs = [
        subprocess.Popen(
            [XCSH_RUN, "where", "--json", "--pass-env", "PROBE"],
            cwd=project,
            env={**env, "PROBE": str(i % 4)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(40)
    ]
    for i, proc in enumerate(procs):
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        assert json.loads(out)["content"][0]["text"] == f"{project} {i % 4}"


PLUGIN = """
from xcsh_run.pi import CustomTool

def factory(api):
    def hello(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": "hello"}]}

    return [CustomTool(name="from_pythonpath", description="says hello", parameters={"type": "object"}, execute=hello)]
"""


def test_installed_tools_are_found_on_the_clients_path_as_without_the_daemon(
    daemon_dir: str, project: Path, tmp_path: Path
) -> None:
    """Entry points are read on the client's sys.path (its PYTHONPATH); the scan's record is the one cold calls read.

    The record is keyed on the searched path: were it the host's own, each call with the daemon
    and each without would find the other's record stale, scan every installed distribution again
    and write their own over it.
    """
    on_path = tmp_path / "on-pythonpath"
    info = on_path / "xcsh_pp_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: xcsh-pp-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[xcsh.tools]\nhello = xcsh_pp_plugin:factory\n")
    (on_path / "xcsh_pp_plugin.py").write_text(PLUGIN)
    with_path = {**os.environ, "PYTHONPATH": str(on_path)}
    served = xcsh("from_pythonpath", cwd=project, env=with_path)
    assert (served.returncode, served.stdout) == (0, "hello\n"), served.stderr
    assert "from_pythonpath" not in xcsh("list", cwd=project).stdout  # another client's path: not there
    listed = xcsh("list", cwd=project, env=with_path)
    record = Path(os.environ["XDG_CACHE_HOME"]) / "xcsh-run" / "entry-points.json"
    written = (record.stat().st_mtime_ns, record.stat().st_ino)
    cold = xcsh("--no-daemon", "list", cwd=project, env=with_path)
    assert cold.stdout == listed.stdout and "from_pythonpath" in cold.stdout, cold.stderr
    assert xcsh("list", cwd=project, env=with_path).stdout == listed.stdout
    assert (
        record.stat().st_mtime_ns,
        record.stat().st_ino,
    ) == written  # neither side scanned again (a rewrite replaces it)


def test_the_client_imports_the_standard_library_only(daemon_dir: str, project: Path) -> None:
    """Not trio, typer or the host, and of the standard library only C modules, ``os`` and ``stat``.

    Compared with what the interpreter had imported before the console script's first line (what
    ``site`` and an editable install's finder import differs from one install to the next).
    """
    assert xcsh("where", cwd=project).returncode == 0
    code = (
        "import sys; sys.argv = ['xcsh-run', 'where']; import os; real = os._exit; before = set(sys.modules)\n"
        "def done(code):\n"
        "    print(sorted(set(sys.modules) - before), file=sys.stderr); real(code)\n"
        "os._exit = done\n"
        "from xcsh_run._entry import main; main()"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == f"{project} -\n", proc.stderr
    imported = json.loads(proc.stderr.strip().replace("'", '"'))
    ours = {name for name in imported if name.split(".")[0] == "xcsh_run"}
    assert ours == {
        f"xcsh_run.{m}" for m in ("_entry", "_daemon", "_daemon.client", "_daemon.paths", "_daemon.wire", "_version")
    } | {"xcsh_run"}
    assert set(imported) - ours <= {"_socket", "_signal", "_json", "stat", "_stat"}, imported


def connect_as_nobody(where: str) -> str:
    """Connect to ``where`` as uid 65534: ``connect ERRNO``, or ``answer JSON`` (the daemon's first frame).

    A forked child drops its privileges (no exec: the venv's interpreter may sit
    where that user cannot read it) and reports through a pipe.
    """
    nobody = 65534
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child)
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(nobody)
            os.setuid(nobody)
            sock = socket.socket(socket.AF_UNIX)
            sock.settimeout(10)
            try:
                sock.connect(where)
            except OSError as exc:
                os.write(write_end, f"connect {exc.errno}".encode())
            else:
                # The daemon answers a refused peer as it accepts it, before any frame of its own.
                os.write(write_end, b"answer " + sock.recv(4096)[4:])
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as f:
            return f.read().decode()
    finally:
        os.waitpid(pid, 0)


def test_another_uid_cannot_connect(daemon_dir: str, project: Path) -> None:
    assert xcsh("where", cwd=project).returncode == 0
    where = os.path.join(daemon_dir, "daemon.sock")
    # The folder is 0700: another user cannot even reach the socket.
    assert connect_as_nobody(where) == "connect 13"  # EACCES
    # Opened up (a misconfigured folder): the daemon itself refuses by the peer's uid.
    os.chmod(daemon_dir, 0o755)
    os.chmod(where, 0o777)
    try:
        refused = connect_as_nobody(where)
        # And a client refuses such a folder rather than trust it.
        unsafe = xcsh("where", cwd=project)
    finally:
        os.chmod(daemon_dir, 0o700)
    assert refused.startswith("answer "), refused
    assert json.loads(refused.removeprefix("answer "))["refused"] == "this daemon serves uid 0 only, not uid 65534"
    assert unsafe.returncode == _daemon.DAEMON_FAILED
    assert "is open to other users (mode 0755, not 0700)" in unsafe.stderr


def test_a_daemon_killed_mid_call_is_a_clear_error_and_the_next_call_starts_another(
    daemon_dir: str, project: Path
) -> None:
    assert xcsh("where", cwd=project).returncode == 0
    proc = subprocess.Popen(
        [XCSH_RUN, "wait", "--stream"], cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["type"] == "update"
    state = _daemon.status()
    assert state is not None
    busy = [h["pid"] for h in state["hosts"] if h["busy"]]
    assert len(busy) == 1
    for pid in (state["pid"], *busy):
        os.kill(pid, signal.SIGKILL)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == _daemon.DAEMON_FAILED
    assert "the daemon ended during the call, and its result is lost" in err
    assert wait_gone(busy[0]) and wait_gone(state["pid"])
    again = xcsh("where", cwd=project)
    assert again.returncode == 0, again.stderr
    after = _daemon.status()
    assert after is not None and after["pid"] != state["pid"]


def test_a_stale_socket_or_another_install_is_replaced_never_trusted(daemon_dir: str, project: Path) -> None:
    os.makedirs(daemon_dir, mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(os.path.join(daemon_dir, "daemon.sock"))
    stale.close()  # a socket file nobody listens on
    assert xcsh("where", cwd=project).returncode == 0
    first = _daemon.status()
    assert first is not None
    # A client of another configuration (an import-time setting differs): the daemon is replaced.
    other = xcsh("where", cwd=project, env={**os.environ, "XCSH_RUN_FORKSERVER": "1"})
    assert other.returncode == 0, other.stderr
    assert wait_gone(first["pid"])
    second = _daemon.status()
    assert second is not None and second["pid"] != first["pid"] and not second["current"]


def test_status_start_and_stop(daemon_dir: str, project: Path) -> None:
    off = xcsh("daemon", "status", cwd=project)
    assert off.returncode == 1 and "no daemon running" in off.stdout
    on = xcsh("daemon", "start", cwd=project)
    assert on.returncode == 0 and "hosts: 0" in on.stdout, on.stderr
    state = json.loads(xcsh("daemon", "status", "--json", cwd=project).stdout)
    assert state["running"] and state["current"] and state["hosts"] == []
    stopped = xcsh("daemon", "stop", cwd=project)
    assert stopped.returncode == 0 and stopped.stdout == f"daemon {state['pid']} stopped\n"
    assert wait_gone(state["pid"])
    assert xcsh("daemon", "stop", cwd=project).stdout == "no daemon was running\n"
    assert xcsh("daemon", "restart", cwd=project).returncode == 2


def test_frames_are_checked() -> None:
    reader = wire.FrameReader()
    reader.feed(wire.encode({"a": 1})[:3])
    assert not reader.ready and reader.partial
    with pytest.raises(wire.FrameError, match="not a JSON object"):
        wire.FrameReader().feed(struct.pack(">I", 2) + b"[]")
    with pytest.raises(wire.FrameError, match="over the"):
        wire.FrameReader().feed(struct.pack(">I", wire.MAX_FRAME + 1))


_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=20)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT, _JSON, max_size=6))
def test_frames_are_the_json_of_the_standard_library(frame: dict[str, object]) -> None:
    """The client's codec writes what ``json.dumps`` writes (ASCII, compact) and reads it back, surrogates too."""
    data = wire.encode(frame)
    assert data[4:].decode() == json.dumps(frame, separators=(",", ":"))
    reader = wire.FrameReader()
    reader.feed(data[:5])
    reader.feed(data[5:])
    assert reader.take() == json.loads(data[4:]) and not reader.ready


_REFUSED = r"""
import sys
from xcsh_run._daemon import wire
assert "json" not in sys.modules, "this check is of the client's interpreter: json not imported"
bodies = [b"{", b'{"a" 1}', b'{"a":1,}', b'{"a":NaN}', b'{"a":Infinity}', b'{"a":1e400}', b'{"a":1} x',
          b" {}", b"\xff", b"[" * 100_000, b'{"a":"\x01"}', b'{"a":"\\x"}']
for body in bodies:
    try:
        wire.decode(body)
    except wire.FrameError:
        continue
    sys.exit(f"accepted {body[:20]!r}")
for frame in ({"a": float("nan")}, {"a": float("inf")}, {"a": object()}, {1: 2}):
    try:
        wire.encode(frame)
    except (ValueError, TypeError):
        continue
    sys.exit(f"encoded {frame!r}")
print("ok")
"""


def test_frames_that_are_not_json_are_refused() -> None:
    """In a fresh interpreter, as the client's: 3.11's scanner finds its error class only once json is imported."""
    proc = subprocess.run([sys.executable, "-c", _REFUSED], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "ok\n"), proc.stderr


def test_a_daemon_that_never_idles_out_says_so(daemon_dir: str, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XCSH_RUN_DAEMON_IDLE", "inf")
    assert xcsh("daemon", "start", cwd=project).returncode == 0
    text = xcsh("daemon", "status", cwd=project)
    assert text.returncode == 0 and "never ends on its own" in text.stdout, text.stderr
    assert json.loads(xcsh("daemon", "status", "--json", cwd=project).stdout)["idle_seconds"] is None
    assert xcsh("where", cwd=project).stdout == f"{project} -\n"  # and it still serves


def test_the_opt_in_flag_environment_and_config_key(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"HOME": str(home)}
    assert _daemon.route(["echo"], env) == (False, ["echo"])
    assert _daemon.route(["--daemon", "echo", "--json"], env) == (True, ["echo", "--json"])
    assert _daemon.route(["echo", "--daemon", "--no-daemon"], env) == (False, ["echo"])  # the last one wins
    assert _daemon.route(["echo", "--", "--daemon"], env) == (False, ["echo", "--", "--daemon"])
    assert _daemon.route(["echo"], {**env, "XCSH_RUN_DAEMON": "yes"}) == (True, ["echo"])
    assert _daemon.route(["--daemon", "serve"], env) == (False, ["serve"])  # a local command
    assert _daemon.route(["--daemon", "--version"], env) == (False, ["--version"])
    (home / ".xcsh").mkdir(parents=True)
    (home / ".xcsh" / "config.toml").write_text("[daemon]\nenabled = true\n")
    assert _daemon.route(["list"], env) == (True, ["list"])
    assert _daemon.route(["list"], {**env, "XCSH_RUN_DAEMON": "0"}) == (False, ["list"])
    assert _daemon.route(["list"], {**env, "_XCSH_RUN_COMPLETE": "complete_bash"})[0] is False
    # The CLI reads the same file for its grants: the table is known there, not an error.
    listed = subprocess.run(
        [XCSH_RUN, "--no-daemon", "list", "--check"], env={**os.environ, "HOME": str(home)}, cwd=tmp_path,
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr


def test_every_command_is_served_or_local() -> None:
    from xcsh_run.fuzz import COMMANDS

    assert set(_daemon.SERVED) | set(_daemon.LOCAL) == set(COMMANDS)
    assert not set(_daemon.SERVED) & set(_daemon.LOCAL)
