"""The escape suite's probes as TypeScript under `strict`: writing outside, reading /etc/shadow, a TCP connect.

Each probe runs in a real Bun worker through the public API and asserts the
refusal itself (the error code Bun reports and that the effect did not happen
on the host: no file written, no connection accepted), then runs again under
``none`` to prove the probe can detect a leak, as tests/sandbox/test_sandbox.py does
for Python tools. Node's APIs (``node:fs``, ``node:net``) and Bun's own
(``Bun.write``, ``Bun.file``, ``Bun.connect``, ``fetch``) are probed apart:
they reach the kernel through different code in Bun.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests._support.js import BUN, JS_TOOLS, require_bun
from tests.conftest import MACHINE, make_runner, needs_strict
from xcsh_run import SandboxPolicy

require_bun()

ESCAPE = JS_TOOLS / "escape.ts"
STRICT = SandboxPolicy(level="strict")
NONE = SandboxPolicy(level="none")
LEVELS = [pytest.param(STRICT, id="strict"), pytest.param(NONE, id="none")]
# How a refused connect reads in Bun. `socket()` is EPERM under strict (seccomp): fetch says so, but
# node:net and Bun.connect report any failure to open the socket as ECONNREFUSED. Never a timeout,
# and never a connection: the listener below is there and listening, so nothing else can refuse.
NET_REFUSED = {"tcp_net": "ECONNREFUSED", "tcp_bun": "ECONNREFUSED", "tcp_fetch": "EPERM"}

pytestmark = needs_strict


async def run_probe(policy: SandboxPolicy, name: str, **args: Any) -> dict[str, Any]:
    with trio.fail_after(40):
        async with make_runner(ESCAPE, sandbox=policy) as runner:
            assert runner.errors == [], runner.errors
            result = await runner.call_tool("probe", {"name": name, **args})
    assert not result.is_error, result
    details: dict[str, Any] = result.details
    return details


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every allow-list, with a file in it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("secret")
    (folder / "secret.txt").chmod(0o644)
    return folder


# --- files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", LEVELS)
@pytest.mark.parametrize("probe", ["write_outside", "bun_write_outside"])
async def test_writing_outside_is_refused(policy: SandboxPolicy, probe: str, outside: Path) -> None:
    target = outside / f"{probe}.txt"
    out = await run_probe(policy, probe, path=str(target))
    if policy is NONE:
        assert out["ok"] and target.read_text() == "escaped", out
    else:
        assert not out["ok"] and out["code"] == "EACCES", out
        assert "permission denied" in out["error"], out
        assert not target.exists()


@pytest.mark.parametrize("policy", LEVELS)
@pytest.mark.parametrize("probe", ["read_file", "bun_read_file"])
@pytest.mark.parametrize("what", ["/etc/shadow", "secret"])
async def test_reading_outside_is_refused(policy: SandboxPolicy, probe: str, what: str, outside: Path) -> None:
    if what == "/etc/shadow" and policy is NONE and MACHINE.euid != 0:
        pytest.skip("/etc/shadow is root's: the unconfined control needs a root host")
    path = str(outside / "secret.txt") if what == "secret" else what
    out = await run_probe(policy, probe, path=path)
    if policy is NONE:
        assert out["ok"], out
        assert out["value"] == ("secret" if what == "secret" else Path(path).read_text()[:20])
    else:
        assert not out["ok"] and out["code"] == "EACCES", out
        assert f"permission denied, open '{path}'" in out["error"], out


async def test_its_own_tmpdir_stays_writable_under_strict() -> None:
    """The positive control: strict refuses the outside, not everything."""
    out = await run_probe(STRICT, "write_tmp", text="inside")
    assert out["ok"] and out["value"] == "inside", out


# --- network -------------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A host-side TCP listener on 127.0.0.1, non-blocking."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    yield sock
    sock.close()


def _got_connection(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


@pytest.mark.parametrize("policy", LEVELS)
@pytest.mark.parametrize("probe", ["tcp_net", "tcp_bun", "tcp_fetch"])
async def test_a_tcp_connect_is_refused(policy: SandboxPolicy, probe: str, listener: socket.socket) -> None:
    out = await run_probe(policy, probe, port=listener.getsockname()[1])
    connected = _got_connection(listener)
    if policy is NONE:
        # fetch connects, then waits for an HTTP answer the listener never sends: the connection is the proof.
        assert connected, out
        assert out["ok"] or probe == "tcp_fetch", out
    else:
        assert not connected, out
        assert not out["ok"], out
        assert out["code"] == NET_REFUSED[probe], out
        assert "TimeoutError" not in (out["error"] or ""), out


# --- programs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", LEVELS)
async def test_a_program_outside_allow_exec_is_refused(policy: SandboxPolicy, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    out = await run_probe(policy, "exec", program="/bin/sh", args=["-c", f"echo ran > {marker}; echo ok"])
    if policy is NONE:
        assert out["ok"] and out["value"] == {"code": 0, "stdout": "ok\n"}, out
        assert marker.exists()
    else:
        # Bun's spawn fails, and exec rejects as the original's does when a program cannot start.
        assert not out["ok"] and out["code"] == "EACCES", out
        assert 'cannot run "/bin/sh": permission denied (EACCES)' in out["error"], out
        assert (
            "the sandbox does not allow running it: under --sandbox strict, allow it with --allow-exec /bin/sh"
            in out["error"]
        ), out
        assert not marker.exists()


@pytest.mark.parametrize("policy", [STRICT, SandboxPolicy(level="contained")], ids=["strict", "contained"])
async def test_a_second_bun_started_by_the_tool(policy: SandboxPolicy) -> None:
    """Bun may be executed under strict, but only the worker may read its own /proc entry: a child Bun aborts.

    docs/typescript.md says so; this pins it, so that a change either way is seen.
    """
    assert BUN is not None
    out = await run_probe(policy, "exec", program=os.path.realpath(BUN), args=["-e", "console.log(6 * 7)"])
    assert out["ok"], out  # not EACCES: the file may run
    if policy is STRICT:
        assert out["value"]["code"] == -signal.SIGABRT, out
    else:
        assert out["value"] == {"code": 0, "stdout": "42\n"}, out


# --- what a Python worker at the same level has: no dumpable flag, no /proc beyond the needed files ------


@pytest.mark.parametrize(("level", "expected"), [("none", 1), ("contained", 0), ("strict", 0)])
async def test_the_worker_is_not_dumpable_at_contained_and_strict(level: str, expected: int) -> None:
    """exec resets the flag the Python step set; the Bun worker clears it again before any tool code."""
    out = await run_probe(SandboxPolicy(level=level), "dumpable")  # type: ignore[arg-type]
    assert out["ok"] and out["value"] == expected, out


@pytest.mark.parametrize(
    "path", ["/proc/self/net/tcp", "/proc/self/net/unix", "/proc/self/mountinfo", "/proc/self/environ"]
)
async def test_proc_beyond_what_bun_needs_is_refused(path: str) -> None:
    out = await run_probe(STRICT, "read_file", path=path)
    assert not out["ok"] and out["code"] == "EACCES", out
    control = await run_probe(NONE, "read_file", path=path)
    assert control["ok"], control


async def test_the_handoff_reaches_no_child_however_it_is_spawned() -> None:
    out = await run_probe(SandboxPolicy(level="contained"), "spawn_env")
    assert out["ok"] and out["value"] == ["clean", "clean", "clean"], out


async def test_a_lone_surrogate_is_a_replacement_character_not_a_broken_frame() -> None:
    """A string cut inside an emoji (routine in JS) used to reach the host as an invalid escape: protocol_error."""
    out = await run_probe(SandboxPolicy(level="contained"), "surrogate")
    assert out["ok"] and out["value"] == "ab\ufffd", out
