"""(f) Cold calls: whole-process wall time of one command, from ``Popen`` to exit.

Every variant runs with ``PYTHONDONTWRITEBYTECODE`` unset, as on a user's
machine, after one untimed warm-up run (which writes the ``.pyc`` files and
fills xcsh-run's module cache); one more xcsh-run row keeps the variable set
(``=1``, as in this environment and in CI), which makes every cold start
compile the project's own modules again. The xcsh-run rows run in an empty
project folder with a private HOME and cache, so that discovery finds only
the benchmark's tool.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench._control import ROOT, child_env
from bench.peers.floor import WORKER_MAIN

# The two-interpreter floor: a tiny host (subprocess + msgspec) starts a msgspec
# worker, exchanges one JSON-RPC frame with it, and exits.
FLOOR_HOST = """
import os, subprocess, sys
import msgspec

class Resp(msgspec.Struct):
    id: int
    result: dict
    jsonrpc: str = "2.0"

def read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf

proc = subprocess.Popen([sys.executable, "-c", sys.argv[1], "0", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
body = msgspec.json.encode({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"x": 1}})
os.write(proc.stdin.fileno(), len(body).to_bytes(4, "big") + body)
fd = proc.stdout.fileno()
reply = msgspec.json.decode(read_exact(fd, int.from_bytes(read_exact(fd, 4), "big")), type=Resp)
assert reply.result == {"x": 1}
proc.stdin.close()
proc.wait()
"""


@dataclass
class Variant:
    case: str
    argv: list[str]
    reps: int
    env: dict[str, str]
    cwd: str
    check_json: bool = False
    samples: list[float] = field(default_factory=list)
    error: str | None = None

    def run_once(self) -> float:
        start = time.perf_counter()
        done = subprocess.run(self.argv, env=self.env, cwd=self.cwd, capture_output=True, text=True)
        elapsed = (time.perf_counter() - start) * 1e3
        if done.returncode != 0:
            raise RuntimeError(f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}")
        if self.check_json and json.loads(done.stdout).get("is_error"):
            raise RuntimeError(f"error result: {done.stdout[:300]}")
        return elapsed


def variants(work: Path, reps: int, mcp_reps: int) -> list[Variant]:
    python = sys.executable
    xcsh = str(Path(python).parent / "xcsh-run")
    project = work / "project"
    project.mkdir(parents=True, exist_ok=True)
    env = child_env(PYTHONDONTWRITEBYTECODE=None, HOME=str(work / "home"), XDG_CACHE_HOME=str(work / "cache"))
    plain = child_env(PYTHONDONTWRITEBYTECODE=None)
    tool = str(ROOT / "bench" / "tools" / "echo_tool.py")
    cli = [xcsh, "echo", "--args", '{"x": 1}', "--tools", tool, "--json"]
    return [
        Variant("python -c pass (venv interpreter)", [python, "-c", "pass"], reps, plain, str(ROOT)),
        Variant(
            "two-interpreter floor: subprocess+msgspec host -> msgspec worker, 1 frame",
            [python, "-c", FLOOR_HOST, WORKER_MAIN],
            reps,
            plain,
            str(ROOT),
        ),
        Variant("xcsh-run echo --args ... (contained, module cached)", cli, reps, env, str(project), True),
        Variant("xcsh-run echo --args ... --sandbox none", [*cli, "--sandbox", "none"], reps, env, str(project), True),
        Variant(
            "xcsh-run echo (contained), PYTHONDONTWRITEBYTECODE=1 as in this env",
            cli,
            reps,
            {**env, "PYTHONDONTWRITEBYTECODE": "1"},
            str(project),
            True,
        ),
        Variant(DAEMON_CASE, [*cli, "--daemon"], reps, {**env, **daemon_env(work)}, str(project), True),
        Variant(
            "MCP SDK: client spawns SDK MCPServer, initialize + 1 call_tool",
            [python, str(ROOT / "bench" / "peers" / "mcp_cold.py")],
            mcp_reps,
            plain,
            str(ROOT),
        ),
    ]


DAEMON_CASE = "xcsh-run --daemon echo --args ... (contained, repeated: the daemon warm)"
CONCURRENT = 40
CONCURRENT_ALONE = f"{CONCURRENT} concurrent xcsh-run echo, no daemon: wall time for all {CONCURRENT}"
CONCURRENT_DAEMON = f"{CONCURRENT} concurrent xcsh-run --daemon echo (daemon up): wall time for all {CONCURRENT}"


def daemon_env(work: Path) -> dict[str, str]:
    """The benchmark's own daemon folder (short: a socket path has 107 bytes); the variant's first run starts it."""
    folder = work / "d"
    if len(str(folder)) > 80:
        raise ValueError(f"the work folder {work} is too long for a daemon socket path")
    return {"XCSH_RUN_DAEMON_DIR": str(folder)}


def stop_daemon(work: Path) -> None:
    subprocess.run(
        [str(Path(sys.executable).parent / "xcsh-run"), "daemon", "stop"],
        env=child_env(**daemon_env(work)), capture_output=True, timeout=60, check=False,
    )  # fmt: skip


def concurrent(work: Path, rounds: int) -> dict[str, list[float]]:
    """Wall time of 40 CLI calls started at once, with and without the daemon, rounds alternating.

    Each call has its own cache folder's worth of nothing new: the module cache is warm (the cold
    variants filled it), the daemon is up (its variant started it); what differs is 40 hosts and 40
    workers started against one warm host pool.
    """
    xcsh = str(Path(sys.executable).parent / "xcsh-run")
    project = work / "project"
    env = child_env(PYTHONDONTWRITEBYTECODE=None, HOME=str(work / "home"), XDG_CACHE_HOME=str(work / "cache"))
    tool = str(ROOT / "bench" / "tools" / "echo_tool.py")
    argv = [xcsh, "echo", "--args", '{"x": 1}', "--tools", tool, "--json"]
    cases = {CONCURRENT_ALONE: (argv, env), CONCURRENT_DAEMON: ([*argv, "--daemon"], {**env, **daemon_env(work)})}
    samples: dict[str, list[float]] = {case: [] for case in cases}
    for _ in range(rounds):
        for case, (command, case_env) in cases.items():
            start = time.perf_counter()
            procs = [
                subprocess.Popen(command, env=case_env, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(CONCURRENT)
            ]
            outputs = [proc.communicate(timeout=300) for proc in procs]
            elapsed = (time.perf_counter() - start) * 1e3
            failed = [err for proc, (_out, err) in zip(procs, outputs, strict=True) if proc.returncode != 0]
            if failed:
                raise RuntimeError(f"{case}: {len(failed)} calls failed: {failed[0].decode()[-300:]}")
            samples[case].append(elapsed)
    return samples


def measure(work: Path, reps: int, mcp_reps: int) -> list[Variant]:
    """Run every variant once untimed, then ``reps`` times each, round-robin."""
    todo = variants(work, reps, mcp_reps)
    for v in todo:
        try:
            v.run_once()
        except (RuntimeError, OSError, ValueError) as exc:
            v.error = str(exc)
    for i in range(max(v.reps for v in todo)):
        for v in todo:
            if v.error is None and i < v.reps:
                try:
                    v.samples.append(v.run_once())
                except (RuntimeError, OSError, ValueError) as exc:
                    v.error = str(exc)
    return todo
