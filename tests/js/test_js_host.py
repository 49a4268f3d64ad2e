"""The host side of JavaScript workers: the Python launch step that hands over to Bun, through the real runner.

The JS worker here is a stub (``tests/fixtures/js_stub/main.ts``, given as
``XCSH_RUN_JS_MAIN``): it answers ``initialize`` from ``XCSH_WORKER_INIT``,
loads one fixed tool whatever the module says, and answers a call with what
its process sees. So these tests check what the host and the Python step do:
the handshake and sandbox before ``exec``, the same pid, the handover state,
the argv and environment, and the refusals that stay in Python.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, XCSH_RUN, make_runner, needs_strict
from xcsh_run import SandboxPolicy
from xcsh_run._discovery import bun as bun_mod
from xcsh_run.worker._runtime import handoff as _handoff

STUB = ROOT / "tests" / "fixtures" / "js_stub" / "main.ts"
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def stub_main(bun: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(bun_mod.MAIN_ENV, str(STUB))
    return bun


def _tool_dir(tmp_path: Path) -> Path:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "echo.ts").write_text("export default () => ({});\n")
    (tools / "py_tool.py").write_text(
        "from xcsh_run.pi import CustomTool\n\n"
        "def factory(api):\n"
        "    return CustomTool(name='py_add', label='add', description='adds',\n"
        "                      parameters={'type': 'object'}, execute=lambda *a: 'three')\n"
    )
    return tools


def _policy(level: str) -> SandboxPolicy:
    return SandboxPolicy(level=level)  # type: ignore[arg-type]


@pytest.mark.parametrize("level", ["none", "contained", pytest.param("strict", marks=needs_strict)])
async def test_a_js_module_runs_on_bun_after_the_python_handshake(stub_main: str, tmp_path: Path, level: str) -> None:
    tools = _tool_dir(tmp_path)
    async with make_runner(tools / "echo.ts", tools / "py_tool.py", sandbox=_policy(level)) as runner:
        assert not runner.errors, runner.errors
        assert {t.name for t in runner.tools} == {"stub_echo", "py_add"}
        result = await runner.call_tool("stub_echo", {"text": "hi", "spawn": level != "strict"})
        assert result.kind is None, result.text
        seen: dict[str, Any] = result.details
        slots = [s for s in runner._pool.slots() if s.module == str(tools / "echo.ts")]
        assert len(slots) == 1
        worker = slots[0].worker
        # Bun replaced the Python step in the same process: the pid the host spawned and supervises.
        assert seen["pid"] == worker.pid
        assert seen["module"] == str(tools / "echo.ts")
        assert seen["load_params"] == ["path"]  # a JS module is loaded by path alone
        assert seen["arguments"] == {"text": "hi", "spawn": level != "strict"}
        # What Python handed over is what the host was told.
        init = seen["init"]
        assert init["unenforced"] == worker.unenforced
        assert init["supervisor"] == worker.supervisor_pid
        assert (init["supervisor"] != 0) == (level != "none")
        assert init["params"]["sandbox"].get("level", "none") == level
        assert init["params"]["protocol_version"] == 1
        # strict's uid drop, applied by Python, holds in Bun (and where it is not applied, the host's uid).
        assert seen["uid"] == init["params"]["sandbox"].get("drop_uid", os.geteuid())
        assert init["buffered"] == ""
        assert isinstance(init["fd_in"], int) and isinstance(init["fd_out"], int)
        assert (init["kill_fd"] >= 0) == (init["params"].get("cgroup_kill_path") is not None)
        assert init["typebox"] == (bun_mod.locate() or pytest.fail("no bun")).typebox
        # Started as the contract says, with the worker's own empty bunfig.
        assert seen["argv"][1:] == [str(STUB)]
        assert seen["init_visible"] is False
        assert int(seen["sig_ign"], 16) & (1 << (signal.SIGINT - 1))  # SIGINT ignored, across exec: the host's
        assert "XCSH_WORKER_INIT" not in seen["env_keys"]
        # The names of what the sandbox left out come in the handover, not in the environment.
        assert "XCSH_RUN_DROPPED_ENV" not in seen["env_keys"]
        assert (level == "none") == (init["dropped"] == [])
        assert not set(init["dropped"]) & set(seen["env_keys"])
        if level != "none":
            assert seen["home"] != os.environ["HOME"]  # the private HOME of contained and strict
        protocol = {str(init["fd_in"]), str(init["fd_out"]), str(init["kill_fd"])}
        for child in (seen["child"], seen["bun_child"]) if level != "strict" else ():
            fds, _, env = child.partition("---")
            assert not protocol & set(fds.split()), fds  # Bun closes every fd past 2 in a child
            assert "XCSH_RUN_JS_MAIN=" in env  # the child's environment was listed
        if level != "strict":
            assert "XCSH_WORKER_INIT=" not in seen["child"].partition("---")[2]
        # Python tools are unaffected by the JS module beside them.
        assert (await runner.call_tool("py_add", {})).text == "three"


async def test_bun_startup_variables_never_reach_a_js_worker(
    stub_main: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "preload.ts").write_text("process.exit(9);\n")
    monkeypatch.setenv("BUN_OPTIONS", f"--preload {tmp_path / 'preload.ts'}")
    monkeypatch.setenv("NODE_OPTIONS", f"--require {tmp_path / 'preload.ts'}")
    tools = _tool_dir(tmp_path)
    # At none the worker gets the host's environment: these alone are taken out.
    async with make_runner(tools / "echo.ts", sandbox=_policy("none")) as runner:
        result = await runner.call_tool("stub_echo", {})
    assert result.kind is None, result.text
    assert "BUN_OPTIONS" not in result.details["env_keys"]
    assert "NODE_OPTIONS" not in result.details["env_keys"]
    assert "HOME" in result.details["env_keys"]


async def test_without_bun_a_js_module_is_a_load_error_saying_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(bun_mod.BUN_ENV, str(tmp_path / "no-bun"))
    monkeypatch.setenv("PATH", "/nonexistent")
    tools = _tool_dir(tmp_path)
    async with make_runner(tools / "echo.ts", tools / "py_tool.py", sandbox=_policy("contained")) as runner:
        assert [t.name for t in runner.tools] == ["py_add"]
        [error] = runner.errors
        assert error.path == str(tools / "echo.ts")
        assert "no Bun to run JavaScript/TypeScript tools with" in error.message
        assert f"XCSH_RUN_BUN names {tmp_path / 'no-bun'}" in error.message
        assert "xcsh-run install-bun" in error.message and "make bun" in error.message
        assert "PATH" in error.message
        result = await runner.call_tool("stub_echo", {})
        assert result.kind == "load_error"
        assert (await runner.call_tool("py_add", {})).text == "three"


async def test_a_bun_that_cannot_be_executed_is_refused_by_the_python_step(
    stub_main: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bun"
    fake.write_bytes(b"\x00not a program\n")
    fake.chmod(0o755)
    monkeypatch.setenv(bun_mod.BUN_ENV, str(fake))
    tools = _tool_dir(tmp_path)
    async with make_runner(tools / "echo.ts", sandbox=_policy("contained")) as runner:
        [error] = runner.errors
    assert "the worker refused to start" in error.message
    assert f"could not start Bun {fake}" in error.message
    assert "Exec format error" in error.message


# --- the Python step alone, driven over its pipes -----------------------------------------------


class Driven:
    """``python -m xcsh_run.worker`` with a JS launch, on pipes this test writes and reads frame by frame."""

    def __init__(self, bun: str, main: str = str(STUB)) -> None:
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        argv = [sys.executable, "-I", "-m", "xcsh_run.worker", "--fd-in", str(to_r), "--fd-out", str(from_w),
                "--bun", bun, "--js-main", main]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, pass_fds=(to_r, from_w), stderr=subprocess.PIPE, start_new_session=True, cwd=ROOT
        )
        os.close(to_r)
        os.close(from_w)

    def send(self, *messages: dict[str, Any]) -> None:
        data = b""
        for message in messages:
            body = json.dumps({**message, "jsonrpc": "2.0"}).encode()
            data += struct.pack(">I", len(body)) + body
        os.write(self.to_w, data)  # in one write: whatever follows initialize is read with it

    def receive(self) -> dict[str, Any] | None:
        header = self._exactly(4)
        if header is None:
            return None
        body = self._exactly(struct.unpack(">I", header)[0])
        assert body is not None
        result: dict[str, Any] = json.loads(body)
        return result

    def _exactly(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = os.read(self.from_r, n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> tuple[int, str]:
        os.close(self.to_w)
        try:
            code = self.proc.wait(10)
        finally:
            self.proc.kill()
            self.proc.wait()
            os.close(self.from_r)
        assert self.proc.stderr is not None
        with self.proc.stderr:
            return code, self.proc.stderr.read().decode(errors="replace")


def _initialize(version: int = 1) -> dict[str, Any]:
    return {"id": 1, "method": "initialize", "params": {"protocol_version": version, "host_pid": os.getpid(),
                                                         "cwd": str(ROOT)}}  # fmt: skip


def test_a_request_read_with_initialize_is_handed_to_bun(bun: str) -> None:
    driven = Driven(bun)
    driven.send(_initialize(), {"id": 2, "method": "load", "params": {"path": "/x/y.ts"}})
    answer = driven.receive()
    assert answer is not None and answer["result"]["pid"] == driven.proc.pid
    assert answer["result"]["python"].startswith("bun ")
    loaded = driven.receive()  # answered by Bun from the bytes Python had read past initialize
    assert loaded is not None and loaded["id"] == 2
    assert loaded["result"]["tools"][0]["name"] == "stub_echo"
    code, _ = driven.close()
    assert code == 4  # the stub's lifeline exit: EOF on fd_in


def test_a_protocol_version_mismatch_is_refused_in_python_before_bun_runs(bun: str) -> None:
    driven = Driven(bun)
    driven.send(_initialize(version=99))
    answer = driven.receive()
    assert answer is not None and answer["error"]["code"] == -32006
    assert "host asked for 99" in answer["error"]["message"]
    code, _ = driven.close()
    assert code == 3


def test_an_exec_failure_is_a_sandbox_refusal_naming_the_bun(tmp_path: Path) -> None:
    driven = Driven(str(tmp_path / "missing-bun"))
    driven.send(_initialize())
    answer = driven.receive()
    assert answer is not None and answer["error"]["code"] == -32007
    assert f"could not start Bun {tmp_path / 'missing-bun'}: No such file or directory" in answer["error"]["message"]
    code, stderr = driven.close()
    assert code == 3
    assert f"could not start Bun {tmp_path / 'missing-bun'}" in stderr


def test_the_handover_json_is_the_contracts() -> None:
    launch = _handoff.JsLaunch(bun="/b/bun", main="/w/js/main.ts", typebox="/t/typebox")
    from xcsh_run.worker.protocol import methods as m

    params = m.InitializeParams(protocol_version=1, host_pid=7, cwd="/c")
    text = _handoff.init_env(
        launch, init_id="i1", params=params, unenforced=["x"], supervisor=5, fds=(3, 4, -1), buffered=b"\x00\x01"
    )
    assert " " not in text  # compact
    data = json.loads(text)
    assert data == {"id": "i1", "params": {"protocol_version": 1, "host_pid": 7, "cwd": "/c"}, "unenforced": ["x"],
                    "supervisor": 5, "fd_in": 3, "fd_out": 4, "kill_fd": -1,
                    "buffered": base64.b64encode(b"\x00\x01").decode(), "typebox": "/t/typebox",
                    "dropped": []}  # fmt: skip
    assert launch.argv()[:4] == ["/b/bun", "--no-install", "--no-env-file", f"--config={launch.bunfig}"]
    assert launch.argv()[4] == "/w/js/main.ts"
    assert Path(launch.bunfig) == ROOT / "worker" / "js" / "bunfig.toml"
    assert Path(launch.bunfig).is_file()


REAL_TOOL = """
import { spawnSync } from "node:child_process";
export default (pi: any) => ({
  name: "real_hello",
  label: "Hello",
  description: "says hello, and what a child process inherits",
  parameters: { type: "object", properties: { name: { type: "string" }, spawn: { type: "boolean" } } },
  async execute(id: string, params: { name: string; spawn?: boolean }) {
    const children = params.spawn ? [
      Bun.spawnSync(["/bin/sh", "-c", "env"]).stdout.toString(),
      spawnSync("/bin/sh", ["-c", "env"]).stdout.toString(),
    ] : [];
    return { content: [{ type: "text", text: `hello ${params.name}` }],
             details: { pid: process.pid, init: process.env.XCSH_WORKER_INIT ?? null, children } };
  },
});
"""


@pytest.mark.parametrize("level", ["none", "contained", pytest.param("strict", marks=needs_strict)])
async def test_the_real_js_worker_behind_the_launch_step(bun: str, tmp_path: Path, level: str) -> None:
    main = bun_mod.worker_main()  # worker/js/main.ts, or XCSH_RUN_JS_MAIN
    if not os.path.isfile(main) or Path(main) == STUB:
        pytest.skip(f"no JS worker at {main}")
    # In a folder of its own: strict grants a tool's folder whole unless it holds a home directory
    # (tmp_path holds this test's HOME), and Bun must read the folder to import a file from it.
    module = tmp_path / "tools" / "hello.ts"
    module.parent.mkdir()
    module.write_text(REAL_TOOL)
    async with make_runner(module, sandbox=_policy(level)) as runner:
        assert not runner.errors, [e.message for e in runner.errors]
        result = await runner.call_tool("real_hello", {"name": "js", "spawn": level != "strict"})  # no sh there
        [slot] = runner._pool.slots()
    assert result.kind is None, result.text
    assert result.text == "hello js"
    assert result.details["pid"] == slot.worker.pid
    assert result.details["init"] is None
    assert len(result.details["children"]) == (2 if level != "strict" else 0)
    for child in result.details["children"]:
        assert "XCSH_RUN_TEST_MARK=" in child and "XCSH_WORKER_INIT=" not in child


@needs_strict
async def test_a_js_module_in_a_folder_holding_a_home_says_why_strict_cannot_import_it(
    bun: str, tmp_path: Path
) -> None:
    main = bun_mod.worker_main()
    if not os.path.isfile(main) or Path(main) == STUB:
        pytest.skip(f"no JS worker at {main}")
    module = tmp_path / "hello.ts"  # tmp_path holds this test's HOME: strict grants the file alone
    module.write_text(REAL_TOOL)
    async with make_runner(module, sandbox=_policy("strict")) as runner:
        [error] = runner.errors
    assert f"Bun must read the folder {tmp_path} to import the module" in error.message
    assert "move the module into a folder of its own" in error.message


# --- finding and installing Bun -----------------------------------------------------------------


def test_install_bun_without_npm_says_what_to_do(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path / "empty")}
    proc = subprocess.run(
        [XCSH_RUN, "install-bun", "--prefix", str(tmp_path / "bun")], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "npm is not on PATH" in proc.stderr
    assert "install Node.js/npm" in proc.stderr and "XCSH_RUN_BUN" in proc.stderr
    assert not (tmp_path / "bun" / "node_modules").exists()


def test_bun_is_found_in_the_order_documented(bun: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = Path(os.environ["HOME"])
    configured = tmp_path / "configured" / "bun"
    configured.parent.mkdir()
    configured.symlink_to(bun)
    installed = bun_mod.bun_in(bun_mod.default_prefix())
    installed.parent.mkdir(parents=True)
    installed.symlink_to(bun)
    on_path = tmp_path / "path" / "bun"
    on_path.parent.mkdir()
    on_path.symlink_to(bun)
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv(bun_mod.BUN_ENV, bun)
    (home / ".xcsh").mkdir()
    (home / ".xcsh" / "config.toml").write_text(f'[runtime]\nbun = "{configured}"\n')
    found = bun_mod.locate()
    assert found is not None and found.found_by == bun_mod.BUN_ENV
    assert found.bun == os.path.realpath(bun)
    # TypeBox: beside the real Bun (an npm install puts both in one node_modules).
    assert found.typebox == str(Path(os.path.realpath(bun)).parents[2] / "@sinclair" / "typebox")
    monkeypatch.delenv(bun_mod.BUN_ENV)
    assert (bun_mod.locate() or pytest.fail("none")).found_by == "[runtime] bun in ~/.xcsh/config.toml"
    (home / ".xcsh" / "config.toml").write_text("[runtime]\n")
    bun_mod._cache.clear()  # remembered per process: files are not read again
    assert (bun_mod.locate() or pytest.fail("none")).found_by == "the xcsh-run install dir"
    installed.unlink()
    bun_mod._cache.clear()
    assert (bun_mod.locate() or pytest.fail("none")).found_by == "PATH"
    on_path.unlink()
    bun_mod._cache.clear()
    assert bun_mod.locate() is None


def test_the_runtime_table_is_not_a_grant_and_does_not_break_the_config_file(tmp_path: Path) -> None:
    from xcsh_run._sandbox.grants import load

    home = tmp_path / "h"
    (home / ".xcsh").mkdir(parents=True)
    (home / ".xcsh" / "config.toml").write_text('[runtime]\nbun = "/opt/bun"\n\n[sandbox]\nallow_read = ["/data"]\n')
    loaded = load(str(tmp_path), str(home))
    assert loaded.every.allow_read == ("/data",)
    assert bun_mod.configured(str(home)) == "/opt/bun"


# --- what the handshake hands over -----------------------------------------------------------------


def _frames(*sizes: int) -> list[bytes]:
    out = []
    for i, size in enumerate(sizes):
        body = json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"pad": "p" * size, "i": i}}).encode()
        out.append(struct.pack(">I", len(body)) + body)
    return out


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
@pytest.mark.parametrize("sizes", [(10, 10), (10, 3_000_000), (3_000_000, 50, 10), (10, 1_500_000, 10), (10,)])
def test_the_decoder_gives_back_every_byte_past_the_first_message(chunk: int, sizes: tuple[int, ...]) -> None:
    from xcsh_run.worker.protocol.frames import NEED_DATA, FrameDecoder

    frames = _frames(*sizes)
    stream = b"".join(frames)
    decoder = FrameDecoder(max_frame_bytes=1 << 24)
    sent = 0
    message: object = NEED_DATA
    while message is NEED_DATA:
        view = decoder.receive_buffer(chunk)  # straight into a large frame's own buffer, when it is one
        n = min(len(view), len(stream) - sent)
        view[:n] = stream[sent : sent + n]
        del view
        decoder.received(n)
        sent += n
        message = decoder.next_message()
    # Two more reads, as a reader may have made before the handover (the first may move a
    # large frame's start into a buffer of its own, the second overfill it).
    for _ in range(2):
        view = decoder.receive_buffer(chunk)
        n = min(len(view), len(stream) - sent)
        view[:n] = stream[sent : sent + n]
        del view
        if n:
            decoder.received(n)
        sent += n
    assert decoder.unread() == stream[len(frames[0]) : sent]


def test_doctor_names_the_bun_or_how_to_get_one(bun: str, tmp_path: Path) -> None:
    proc = subprocess.run([XCSH_RUN, "doctor", "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(proc.stdout)["bun"]
    assert report["path"] == os.path.realpath(bun) and report["problem"] is None
    assert report["version"] == bun_mod.version(bun)
    assert report["found_by"] == bun_mod.BUN_ENV  # conftest sets it when it finds Bun elsewhere
    env = {**os.environ, bun_mod.BUN_ENV: str(tmp_path / "none"), "PATH": "/nonexistent"}
    text = subprocess.run([XCSH_RUN, "doctor"], capture_output=True, text=True, timeout=60, env=env).stdout
    [line] = [line for line in text.splitlines() if line.strip().startswith("Bun")]
    assert "no Bun" in line and "xcsh-run install-bun" in line


def test_strict_gains_what_bun_needs_in_js_workers_only(bun: str, tmp_path: Path) -> None:
    from tests.conftest import MACHINE
    from xcsh_run._sandbox.policy import for_javascript, worker_config

    module = tmp_path / "t.ts"
    module.write_text("export default () => ({});\n")
    runtime = bun_mod.locate()
    assert runtime is not None

    def config(level: str) -> Any:
        return worker_config(_policy(level), MACHINE, module=str(module), cwd=str(tmp_path), workdir=None, env={})

    python = config("strict")
    js = for_javascript(python, runtime.bun, runtime.read_paths())
    assert "/proc/self/maps" in js.read_paths and not any(p.startswith("/proc") for p in python.read_paths)
    # Files of /proc/<pid>, never the folder (its net/, mountinfo, environ) nor Bun's folder (it may be a home).
    assert "/proc/self" not in js.read_paths and os.path.dirname(runtime.bun) not in js.read_paths
    assert runtime.bun in js.exec_paths and runtime.bun not in python.exec_paths
    assert set(python.read_paths) < set(js.read_paths) and set(python.exec_paths) < set(js.exec_paths)
    assert os.path.dirname(runtime.main) in js.read_paths
    if runtime.typebox:
        assert runtime.typebox in js.read_paths
    # Nothing else of the level changes, and below strict nothing at all.
    for field in ("write_paths", "network", "connect_ports", "cpu_seconds", "open_files", "file_size_bytes"):
        assert getattr(js, field) == getattr(python, field), field
    for level in ("none", "contained"):
        assert for_javascript(config(level), runtime.bun, runtime.read_paths()) == config(level)


def test_a_memory_limit_bun_cannot_start_under_is_refused_with_the_fix() -> None:
    from xcsh_run._errors import ConfigError
    from xcsh_run._sandbox.policy import BUN_MIN_DATA_MB, for_javascript
    from xcsh_run.worker.protocol.methods import SandboxConfig

    # Only without a memory cgroup is memory_mb sent as RLIMIT_DATA (data_bytes).
    small = SandboxConfig(level="contained", data_bytes=256 << 20)
    with pytest.raises(ConfigError, match=r"memory_mb=256 .* raise memory_mb to 320 or more"):
        for_javascript(small, sys.executable, [])
    enough = SandboxConfig(level="contained", data_bytes=BUN_MIN_DATA_MB << 20)
    assert for_javascript(enough, sys.executable, []) == enough


def test_a_bun_installed_after_a_miss_is_found_without_a_restart(
    bun: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running `serve` must see a Bun installed meanwhile: a miss is not remembered."""
    later = tmp_path / "bin" / "bun"
    monkeypatch.setenv("XCSH_RUN_BUN", str(later))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert bun_mod.locate() is None
    later.parent.mkdir()
    later.symlink_to(bun)
    found = bun_mod.locate()
    assert found is not None and found.bun == os.path.realpath(bun)
