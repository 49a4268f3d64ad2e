"""Run the MCP conformance suite against `xcsh-run serve --http` and print which scenarios pass.

    .venv/bin/python tests/conformance/run.py             # what `make conformance` runs
    .venv/bin/python tests/conformance/run.py --scenario tools-call-audio --verbose
    .venv/bin/python tests/conformance/run.py --url http://127.0.0.1:3000/mcp   # a server already running

Installs the suite and a Node 22 it runs on from the npm registry into .cache/conformance
(pinned by tests/conformance/package-lock.json; skipped when already installed), starts the
server on a free loopback port with tests/conformance/tools, waits until that process listens,
runs the suite's server scenarios, stops the server, and prints one row per scenario.

Exit status: 1 if a scenario the server must pass failed (every one but the resources,
prompts and completion scenarios, which xcsh-run does not offer, and those the suite itself
keeps pending), 2 if the harness could not run, 0 otherwise. docs/conformance.md says what
each scenario asks for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CACHE = Path(os.environ.get("XCSH_CONFORMANCE_CACHE", ROOT / ".cache" / "conformance"))
SUITE_JS = CACHE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
NODE = CACHE / "node_modules" / ".bin" / "node"
TOOLS = HERE / "tools"
DEFAULT_SERVER = f"{ROOT / '.venv' / 'bin' / 'xcsh-run'} serve"

# What xcsh-run serves tools only, so a failure here means "not offered", not "broken".
NOT_OFFERED = re.compile(r"^(resources-|prompts-|completion-)")
# The suite's own pending list (0.1.16): run by `--suite all`, not by its default suite.
PENDING = {"json-schema-2020-12", "server-sse-polling"}

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
SUITE_TIMEOUT = 600.0


class HarnessError(Exception):
    """The harness itself could not run (install, server start, suite crash)."""


# --- install -----------------------------------------------------------------------------------


def install(*, quiet: bool = False) -> None:
    """Install the pinned suite and Node into CACHE, unless that exact install is already there."""
    manifest = [HERE / "package.json", HERE / "package-lock.json"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in manifest)).hexdigest()[:16]
    stamp = CACHE / f".installed-{digest}"
    if stamp.exists() and NODE.exists() and SUITE_JS.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise HarnessError("npm is needed to install the conformance suite (it brings its own Node 22)")
    started = time.monotonic()
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in CACHE.glob(".installed-*"):
        old.unlink()
    for path in manifest:
        shutil.copyfile(path, CACHE / path.name)
    # `npm ci` installs exactly the lock; the lock pins Node as node-linux-<arch>, a plain
    # package with the binary inside (no install script, nothing fetched outside the registry).
    cmd = [npm, "ci", "--prefix", str(CACHE), "--no-audit", "--no-fund", "--loglevel=error"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise HarnessError(f"npm ci failed ({done.returncode}):\n{done.stderr.strip()}")
    if not NODE.exists():
        raise HarnessError(f"no Node binary for this platform in {NODE.parent} (the lock has linux x64 and arm64)")
    version = subprocess.run([str(NODE), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 22:
        raise HarnessError(f"the installed Node is {version}; the suite needs 22 or newer")
    stamp.touch()
    if not quiet:
        print(f"installed the conformance suite and Node {version} in {time.monotonic() - started:.1f} s")


# --- the server under test ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process `pid` (or any of its descendants) listens on, read from /proc.

    This ties the port to the server we started: a connect() alone would also succeed if
    some other process had taken the port between our pick and the server's bind.
    """
    inodes: set[str] = set()
    for proc in [pid, *_descendants(pid)]:
        try:
            for fd in os.listdir(f"/proc/{proc}/fd"):
                try:
                    target = os.readlink(f"/proc/{proc}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in map(int, children):
        found += [child, *_descendants(child)]
    return found


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    stderr_path: Path
    started_in: float


def start_server(command: list[str], workdir: Path, path: str | None) -> Server:
    """Start `command --http 127.0.0.1:PORT --tools TOOLS` and wait until it listens on PORT."""
    for attempt in range(3):
        port = free_port()
        argv = [*command, "--http", f"127.0.0.1:{port}", "--tools", str(TOOLS)]
        stderr_path = workdir / f"server-{attempt}.stderr"
        started = time.monotonic()
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen(
                argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            listening = wait_listening(proc, port, started + START_TIMEOUT)
        except BaseException:
            stop_server(proc)  # Ctrl-C while waiting: never leave it running
            raise
        if listening:
            url = f"http://127.0.0.1:{port}{path or announced_path(stderr_path, port) or '/mcp'}"
            return Server(proc, url, stderr_path, time.monotonic() - started)
        if proc.poll() is None:
            stop_server(proc)
            raise HarnessError(f"the server did not listen on {port} within {START_TIMEOUT:.0f} s: {' '.join(argv)}")
        text = stderr_path.read_text(errors="replace")
        if "in use" in text.lower() and attempt < 2:
            continue  # lost the port between our pick and its bind
        raise HarnessError(f"the server exited with {proc.returncode} before listening:\n$ {' '.join(argv)}\n{text}")
    raise AssertionError("unreachable")


def announced_path(stderr_path: Path, port: int) -> str | None:
    """The path of the URL the server printed for `port`, waiting briefly: it may print just after its bind."""
    pattern = re.compile(rf"https?://(?:127\.0\.0\.1|localhost|\[::1\]):{port}(/[^\s'\"]*)?")
    deadline = time.monotonic() + 0.5
    while True:
        found = pattern.search(stderr_path.read_text(errors="replace"))
        if found or time.monotonic() > deadline:
            return found.group(1).rstrip(".,;:)") if found and found.group(1) else None
        time.sleep(0.05)


def wait_listening(proc: subprocess.Popen[bytes], port: int, deadline: float) -> bool:
    """True once `proc` listens on `port`; False if it exits first or the deadline passes."""
    while time.monotonic() < deadline and proc.poll() is None:
        if port in listening_ports(proc.pid):
            return True
        time.sleep(0.05)
    return False


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then its own bounded wait, then a kill of its whole process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"the server ignored SIGTERM for {STOP_TIMEOUT:.0f} s; killing it", file=sys.stderr)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything it left behind in its session
    except ProcessLookupError:
        pass
    proc.wait(STOP_TIMEOUT)


# --- the suite ---------------------------------------------------------------------------------


@dataclass
class Scenario:
    name: str
    passed: int = 0
    failed: int = 0
    warnings: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def group(self) -> str:
        if NOT_OFFERED.match(self.name):
            return "not offered"
        return "pending" if self.name in PENDING else "required"

    @property
    def result(self) -> str:
        if self.failed == 0:
            return "pass" + (f" ({self.warnings} warnings)" if self.warnings else "")
        return "not offered" if self.group == "not offered" else "FAIL"


def run_suite(url: str, scenarios: list[str], outdir: Path, verbose: bool) -> tuple[dict[str, Scenario], float]:
    """Run the suite's server scenarios (all of them, or those named); its log goes to outdir/suite.log."""
    base = [str(NODE), str(SUITE_JS), "server", "--url", url, "-o", str(outdir)]
    runs = [[*base, "--scenario", name] for name in scenarios] or [[*base, "--suite", "all"]]
    started = time.monotonic()
    log_path = outdir / "suite.log"
    summary: dict[str, Scenario] = {}
    with open(log_path, "w") as log:
        for argv in runs:
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            try:
                done = subprocess.run(
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=SUITE_TIMEOUT,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise HarnessError(f"the suite did not finish within {SUITE_TIMEOUT:.0f} s (log: {log_path})")
            log.write(done.stdout)
            if verbose:
                print(done.stdout)
            # The summary lines of a whole-suite run also name scenarios that threw (those have no checks.json).
            for m in re.finditer(r"^[✓✗] (\S+): (\d+) passed, (\d+) failed$", done.stdout, re.M):
                summary[m.group(1)] = Scenario(m.group(1), int(m.group(2)), int(m.group(3)))
            if "--scenario" in argv and done.returncode not in (0, 1):
                raise HarnessError(f"the suite exited with {done.returncode} (log: {log_path})")
    elapsed = time.monotonic() - started
    results: dict[str, Scenario] = {}
    for checks_file in sorted(outdir.glob("server-*/checks.json")):
        name = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", checks_file.parent.name)
        checks = json.loads(checks_file.read_text())
        scenario = Scenario(name)
        for check in checks:
            status = check.get("status")
            scenario.passed += status == "SUCCESS"
            scenario.warnings += status == "WARNING"
            if status == "FAILURE":
                scenario.failed += 1
                scenario.errors.append(f"{check.get('name')}: {check.get('errorMessage') or check.get('description')}")
        results[name] = scenario
    for name, scenario in summary.items():
        results.setdefault(name, scenario)
    for name in scenarios:  # a scenario that threw, or a name the suite does not know
        results.setdefault(name, Scenario(name, failed=1, errors=[f"no result from the suite (see {log_path})"]))
    if not results:
        raise HarnessError(f"the suite reported no scenario (log: {log_path})")
    return results, elapsed


def print_table(results: dict[str, Scenario]) -> None:
    order = {"required": 0, "pending": 1, "not offered": 2}
    rows = sorted(results.values(), key=lambda s: (order[s.group], s.name))
    width = max(len("scenario"), *(len(s.name) for s in rows))
    print(f"\n{'scenario':<{width}}  {'group':<11}  {'checks':>6}  result")
    for s in rows:
        checks = f"{s.passed}/{s.passed + s.failed}"
        print(f"{s.name:<{width}}  {s.group:<11}  {checks:>6}  {s.result}")
        if s.failed and s.group != "not offered":
            for error in s.errors[:3]:
                print(f"{'':<{width}}  {'':<11}  {'':>6}    {error[:160]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="test a server already running there instead of starting one")
    parser.add_argument(
        "--server-cmd",
        default=DEFAULT_SERVER,
        help="the server command; `--http 127.0.0.1:PORT --tools DIR` is appended [%(default)s]",
    )
    parser.add_argument("--path", help="the MCP endpoint's path [the one the server prints, else /mcp]")
    parser.add_argument("--scenario", action="append", default=[], help="run only this scenario (repeatable)")
    parser.add_argument("--allow-fail", action="append", default=[], help="a scenario whose failure is not fatal")
    parser.add_argument("--results", type=Path, help="keep the suite's log and checks.json files under this folder")
    parser.add_argument("--install-only", action="store_true", help="install the suite and Node, then stop")
    parser.add_argument("--verbose", action="store_true", help="print the suite's own output too")
    args = parser.parse_args()
    # A SIGTERM (make killed, CI timeout) unwinds like Ctrl-C, so the server is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    try:
        install()
        if args.install_only:
            return 0
        if args.results:  # a fresh folder inside, so that results of earlier runs are not read again
            args.results.mkdir(parents=True, exist_ok=True)
        outdir = Path(tempfile.mkdtemp(prefix="xcsh-conformance-", dir=args.results))
        server = None
        if args.url:
            url = args.url
        else:
            command = shlex.split(args.server_cmd)
            if args.server_cmd == DEFAULT_SERVER:
                command += ["--log-file", str(outdir / "xcsh-run.log")]
            server = start_server(command, outdir, args.path)
            url = server.url
            print(f"server listening at {url} after {server.started_in:.2f} s")
        try:
            results, elapsed = run_suite(url, args.scenario, outdir, args.verbose)
        finally:
            if server is not None:
                stop_server(server.proc)
    except HarnessError as e:
        print(f"conformance: {e}", file=sys.stderr)
        return 2

    print_table(results)
    gating = [s for s in results.values() if s.group == "required"]
    failed = [s.name for s in gating if s.failed and s.name not in args.allow_fail]
    tolerated = [s.name for s in gating if s.failed and s.name in args.allow_fail]
    skipped = len(results) - len(gating) + len(tolerated)
    print(f"\nsuite run: {elapsed:.1f} s; log and checks.json files in {outdir}")
    if tolerated:
        print(f"failures allowed by --allow-fail: {', '.join(tolerated)}")
    print(f"conformance: {len(gating) - len(failed) - len(tolerated)} passed, {len(failed)} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
