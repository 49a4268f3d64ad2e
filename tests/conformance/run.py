"""Run the MCP conformance suite against `xcsh-run serve --http`, once per spec revision, and print the verdicts.

    .venv/bin/python tests/conformance/run.py                          # what `make conformance` runs
    .venv/bin/python tests/conformance/run.py --revision 2025-11-25    # one revision only
    .venv/bin/python tests/conformance/run.py --scenario tools-call-audio --verbose
    .venv/bin/python tests/conformance/run.py --url http://127.0.0.1:3000/mcp   # a server already running

Installs the suite and a Node 22 it runs on from the npm registry into .cache/conformance
(pinned by tests/conformance/package-lock.json; skipped when already installed). Then, for each
revision (2025-11-25, then 2026-07-28), starts a fresh server on a free loopback port with
tests/conformance/tools, waits until that process listens, runs the suite's frozen requirement
set for that revision (`server --requirements REV`), stops the server, and reads each
scenario's checks. The table has one row per scenario and a column per revision.

Each scenario's group at a revision comes from the suite's requirements/REV.yaml and from
NOT_OFFERED and EXTENSION below: required, extension (must pass here too), not scored
(reported only) and not offered (xcsh-run serves tools only).

Exit status: 1 if a required or extension scenario failed and tests/conformance/expected-failures/REV.yaml
does not list it, or if that file lists one that now passes (stale: remove it); 2 if the
harness could not run; 0 otherwise. docs/conformance.md says what each scenario asks for.
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
PACKAGE = CACHE / "node_modules" / "@modelcontextprotocol" / "conformance"
SUITE_JS = PACKAGE / "dist" / "index.js"
NODE = CACHE / "node_modules" / ".bin" / "node"
TS_CLIENT = CACHE / "node_modules" / "@modelcontextprotocol" / "client"  # the official TypeScript SDK's client (tests)
YAML_JS = CACHE / "node_modules" / "yaml"  # the suite's own YAML parser (a dependency of it, pinned by the lock)
TOOLS = HERE / "tools"
BASELINES = HERE / "expected-failures"
DEFAULT_SERVER = f"{ROOT / '.venv' / 'bin' / 'xcsh-run'} serve"

# The revisions whose frozen requirement sets (PACKAGE/requirements/REV.yaml) are run, in this order.
REVISIONS = ("2025-11-25", "2026-07-28")

# xcsh-run serves tools only: no resources, prompts or completion. A scenario here is "not
# offered" at every revision, whatever the requirement set says, and never gates:
#   resources-*, prompts-*, completion-*  resources/*, prompts/*, completion/complete
#   sep-2164-*                            resources/read of a missing resource
#   input-required-result-non-tool-request  an InputRequiredResult from prompts/get
NOT_OFFERED = re.compile(r"^(resources-|prompts-|completion-|sep-2164-)|^input-required-result-non-tool-request$")
# The tasks extension (io.modelcontextprotocol/tasks): the suite does not score it, this
# project treats it as must-pass, like a required scenario (with the same baseline).
EXTENSION = re.compile(r"^tasks-")

GROUPS = ("required", "extension", "not scored", "not offered")  # table order
GATING = ("required", "extension")

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
SUITE_TIMEOUT = 600.0  # per revision
NODE_TIMEOUT = 30.0  # a YAML file parsed by Node


class HarnessError(Exception):
    """The harness itself could not run (install, server start, suite crash)."""


# --- install -----------------------------------------------------------------------------------


def install(*, quiet: bool = False) -> None:
    """Install the pinned suite and Node into CACHE, unless that exact install is already there."""
    manifest = [HERE / "package.json", HERE / "package-lock.json"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in manifest)).hexdigest()[:16]
    stamp = CACHE / f".installed-{digest}"
    if stamp.exists() and NODE.exists() and SUITE_JS.exists() and TS_CLIENT.exists():
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


# --- requirement sets and baselines -------------------------------------------------------------


def read_yaml(path: Path) -> object:
    """`path` parsed by the suite's own `yaml` package, run on the installed Node (the stdlib has no YAML)."""
    script = (
        "const YAML = require(process.argv[1]);"
        "const text = require('fs').readFileSync(process.argv[2], 'utf8');"
        "process.stdout.write(JSON.stringify(YAML.parse(text) ?? null));"
    )
    try:
        done = subprocess.run(
            [str(NODE), "-e", script, str(YAML_JS), str(path)],
            capture_output=True,
            text=True,
            timeout=NODE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise HarnessError(f"Node did not parse {path} within {NODE_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        raise HarnessError(f"cannot parse {path}:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


@dataclass
class Requirements:
    """The server leg of one revision's frozen requirement set."""

    revision: str
    scored: list[str]
    not_scored: dict[str, str]  # scenario -> reason (extension, added-after-release, pending)

    def group(self, name: str) -> str | None:
        """The scenario's group at this revision; None when the revision does not run it."""
        if name not in self.scored and name not in self.not_scored:
            return None
        if NOT_OFFERED.search(name):
            return "not offered"
        if EXTENSION.search(name):
            return "extension"
        return "required" if name in self.scored else "not scored"

    @property
    def scenarios(self) -> list[str]:
        return [*self.scored, *self.not_scored]


def load_requirements(revision: str) -> Requirements:
    path = PACKAGE / "requirements" / f"{revision}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (PACKAGE / "requirements").glob("*.yaml"))
        raise HarnessError(f"the installed suite has no requirement set {revision} (it has: {', '.join(known)})")
    data = read_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("server"), list):
        raise HarnessError(f"{path}: no `server:` list of scenarios")
    not_scored = {
        entry["scenario"]: str(entry.get("reason", "?"))
        for entry in data.get("not_scored") or []
        if isinstance(entry, dict) and entry.get("leg") == "server" and "scenario" in entry
    }
    return Requirements(revision, [str(s) for s in data["server"]], not_scored)


@dataclass
class Baseline:
    """tests/conformance/expected-failures/REV.yaml, the suite's --expected-failures format (server leg)."""

    path: Path
    scenarios: set[str] = field(default_factory=set)  # `- scenario`: any of its checks may fail
    checks: dict[str, set[str]] = field(default_factory=dict)  # `- scenario:check-id`: only that check

    def entries(self, name: str) -> list[str]:
        return [name] if name in self.scenarios else [f"{name}:{c}" for c in sorted(self.checks.get(name, ()))]


def load_baseline(revision: str) -> Baseline:
    baseline = Baseline(BASELINES / f"{revision}.yaml")
    if not baseline.path.exists():
        return baseline
    data = read_yaml(baseline.path)
    entries = data.get("server") if isinstance(data, dict) else [] if data is None else None
    if entries is not None and not isinstance(entries, list):
        entries = None
    if entries is None:
        raise HarnessError(f"{baseline.path}: expected `server:` and a list of scenario or scenario:check-id")
    for entry in entries or []:
        if not isinstance(entry, str) or not entry.strip(":"):
            raise HarnessError(
                f"{baseline.path}: {entry!r} is not `scenario` or `scenario:check-id` (no space after ':')"
            )
        name, _, check = entry.partition(":")
        if check:
            baseline.checks.setdefault(name, set()).add(check)
        else:
            baseline.scenarios.add(name)
    return baseline


# --- the suite ---------------------------------------------------------------------------------


@dataclass
class Scenario:
    """One scenario's checks at one revision."""

    name: str
    passed: int = 0
    failed: int = 0
    warnings: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)
    verdicts: dict[str, str] = field(default_factory=dict)  # check id -> its most severe status

    @property
    def ran(self) -> bool:
        """False when every check was skipped (the suite could not exercise anything)."""
        return self.passed + self.failed + self.warnings > 0


SEVERITY = {"FAILURE": 0, "WARNING": 1, "SUCCESS": 2, "INFO": 3, "SKIPPED": 4}


def read_checks(name: str, checks: list[dict[str, object]]) -> Scenario:
    scenario = Scenario(name)
    for check in checks:
        status = str(check.get("status"))
        scenario.passed += status == "SUCCESS"
        scenario.warnings += status == "WARNING"
        scenario.skipped += status == "SKIPPED"
        if status == "FAILURE":
            scenario.failed += 1
            text = str(check.get("errorMessage") or check.get("description") or "").strip().splitlines()
            scenario.errors.append(f"{check.get('id') or check.get('name')}: {text[0] if text else ''}")
        check_id = str(check.get("id") or check.get("name"))
        known = scenario.verdicts.get(check_id)
        if known is None or SEVERITY.get(status, 5) < SEVERITY.get(known, 5):
            scenario.verdicts[check_id] = status
    return scenario


def run_suite(
    url: str, requirements: Requirements, names: list[str], baseline: Baseline, outdir: Path, verbose: bool
) -> tuple[dict[str, Scenario], float]:
    """One revision: its whole requirement set (`--requirements REV`), or the scenarios named.

    The suite's output goes to outdir/suite.log, its checks.json files under outdir.
    """
    base = [str(NODE), str(SUITE_JS), "server", "--url", url, "-o", str(outdir)]
    if baseline.path.exists():
        base += ["--expected-failures", str(baseline.path)]
    # --force as --requirements does: the set decides membership, not the scenario's own window.
    runs = [[*base, "--scenario", n, "--spec-version", requirements.revision, "--force"] for n in names]
    runs = runs or [[*base, "--requirements", requirements.revision]]
    started = time.monotonic()
    deadline = started + SUITE_TIMEOUT
    log_path = outdir / "suite.log"
    summary: dict[str, Scenario] = {}
    thrown: dict[str, str] = {}
    with open(log_path, "w") as log:
        for argv in runs:
            log.write(f"$ {shlex.join(argv)}\n")
            log.flush()
            try:
                done = subprocess.run(
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=max(deadline - time.monotonic(), 1.0),
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise HarnessError(
                    f"the {requirements.revision} run did not finish within {SUITE_TIMEOUT:.0f} s (log: {log_path})"
                ) from None
            log.write(done.stdout)
            if verbose:
                print(done.stdout)
            # The summary also names scenarios that threw (those leave no checks.json), and the
            # log says why.
            for m in re.finditer(r"^[✓✗] (\S+): (\d+) passed, (\d+) failed$", done.stdout, re.M):
                summary[m.group(1)] = Scenario(m.group(1), int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^Failed to run scenario (\S+): (.*)$", done.stdout, re.M):
                thrown[m.group(1)] = m.group(2).strip()
            if done.returncode not in (0, 1):
                raise HarnessError(f"the suite exited with {done.returncode} (log: {log_path})")
    elapsed = time.monotonic() - started
    results: dict[str, Scenario] = {}
    for checks_file in sorted(outdir.glob("server-*/checks.json")):
        name = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", checks_file.parent.name)
        results[name] = read_checks(name, json.loads(checks_file.read_text()))
    for name, scenario in summary.items():
        if name not in results:
            scenario.failed = max(scenario.failed, 1)
            scenario.errors = [f"{name}: the scenario threw: {thrown.get(name, f'see {log_path}')}"]
            scenario.verdicts = {name: "FAILURE"}  # the suite reports a throw as one check named after it
            results[name] = scenario
    for name in names or requirements.scenarios:  # a name the suite does not know, or a crash mid-run
        results.setdefault(
            name, Scenario(name, failed=1, errors=[f"no result from the suite (see {log_path})"], verdicts={})
        )
    if not summary and not any(s.passed or s.warnings for s in results.values()):
        raise HarnessError(f"the suite reported no scenario (log: {log_path})")
    return results, elapsed


# --- verdicts ----------------------------------------------------------------------------------


@dataclass
class Cell:
    """One scenario at one revision: its group, what the table shows, and whether it gates."""

    group: str
    text: str
    unexpected: bool = False  # a gating failure the baseline does not list
    baselined: bool = False
    stale: list[str] = field(default_factory=list)  # baseline entries that now pass
    errors: list[str] = field(default_factory=list)


def judge(group: str, scenario: Scenario, baseline: Baseline) -> Cell:
    failed = scenario.failed > 0
    if group == "not offered":
        return Cell(group, "not offered")
    if group == "not scored":
        return Cell(group, "not scored: " + ("FAIL" if failed else "pass" if scenario.ran else "skipped"))
    if not scenario.ran:
        return Cell(group, "skipped")  # every check skipped: nothing passed, nothing failed
    passing = "pass" + (f" ({scenario.warnings} warnings)" if scenario.warnings else "")
    if scenario.name in baseline.scenarios:  # the whole scenario may fail
        if failed:
            return Cell(group, "FAIL (baseline)", baselined=True)
        return Cell(group, passing, stale=[scenario.name])
    listed = baseline.checks.get(scenario.name, set())
    # A listed check that passes is stale; one absent or skipped is tolerated (a scenario that
    # bails early never reaches its later checks), as the suite does it.
    stale = [f"{scenario.name}:{c}" for c in sorted(listed) if scenario.verdicts.get(c) in ("SUCCESS", "WARNING")]
    if not failed:
        return Cell(group, passing, stale=stale)
    unlisted = [e for e in scenario.errors if e.split(":", 1)[0] not in listed]
    if unlisted or not listed:
        return Cell(group, "FAIL", unexpected=True, stale=stale, errors=unlisted or scenario.errors)
    return Cell(group, "FAIL (baseline)", baselined=True, stale=stale)


def print_table(cells: dict[str, dict[str, Cell]], revisions: list[str]) -> None:
    def rank(name: str) -> tuple[int, str]:
        return min(GROUPS.index(c.group) for c in cells[name].values()), name

    names = sorted(cells, key=rank)
    width = max(len("scenario"), *(len(n) for n in names))
    groups = {n: " / ".join(dict.fromkeys(cells[n][r].group for r in revisions if r in cells[n])) for n in names}
    gwidth = max(len("group"), *(len(g) for g in groups.values()))
    col = max(22, *(len(c.text) for row in cells.values() for c in row.values()))
    print(f"\n{'scenario':<{width}}  {'group':<{gwidth}}  " + "  ".join(f"{r:<{col}}" for r in revisions).rstrip())
    for name in names:
        row = cells[name]
        texts = "  ".join(f"{row[r].text if r in row else '-':<{col}}" for r in revisions).rstrip()
        print(f"{name:<{width}}  {groups[name]:<{gwidth}}  {texts}")
        for r in revisions:
            if r in row and row[r].unexpected:
                for error in row[r].errors[:3]:
                    print(f"{'':<{width}}    {r}: {error[:160]}")
                if len(row[r].errors) > 3:
                    print(f"{'':<{width}}    {r}: ... {len(row[r].errors) - 3} more failing checks")


def totals(revision: str, row: list[Cell]) -> str:
    gating = [c for c in row if c.group in GATING]
    passed = sum(c.text.startswith("pass") for c in gating)
    failed = sum(c.unexpected for c in gating)
    baselined = sum(c.baselined for c in gating)
    skipped = sum(c.text == "skipped" for c in gating)
    offered = sum(c.group == "not offered" for c in row)
    scored = [c for c in row if c.group == "not scored"]
    scored_failing = sum(c.text.endswith("FAIL") for c in scored)
    parts = [f"{passed} passed", f"{failed} failed", f"{baselined} baseline"]
    parts += [f"{skipped} skipped"] if skipped else []
    parts += [f"{offered} not offered", f"{len(scored)} not scored ({scored_failing} failing)"]
    return f"{revision}: {', '.join(parts)}"


# --- main --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--url", help="test a server already running there (for every revision) instead of starting one"
    )
    parser.add_argument(
        "--server-cmd",
        default=DEFAULT_SERVER,
        help="the server command; `--http 127.0.0.1:PORT --tools DIR` is appended [%(default)s]",
    )
    parser.add_argument("--path", help="the MCP endpoint's path [the one the server prints, else /mcp]")
    parser.add_argument(
        "--revision",
        action="append",
        default=[],
        choices=REVISIONS,
        help="run only this revision's requirement set (repeatable) [all: %(choices)s]",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        help="run only this scenario (repeatable), at each revision whose set has it",
    )
    parser.add_argument("--results", type=Path, help="keep the suite's logs and checks.json files under this folder")
    parser.add_argument("--install-only", action="store_true", help="install the suite and Node, then stop")
    parser.add_argument("--verbose", action="store_true", help="print the suite's own output too")
    args = parser.parse_args()
    # A SIGTERM (make killed, CI timeout) unwinds like Ctrl-C, so the server is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    started = time.monotonic()
    revisions = [r for r in REVISIONS if r in args.revision] or list(REVISIONS)
    cells: dict[str, dict[str, Cell]] = {}
    baselines: dict[str, Baseline] = {}
    timings: list[str] = []
    try:
        install()
        if args.install_only:
            return 0
        plan = [(load_requirements(r), load_baseline(r)) for r in revisions]
        unknown = [n for n in args.scenario if not any(req.group(n) for req, _ in plan)]
        if unknown:
            raise HarnessError(f"not in the requirement set of {' or '.join(revisions)}: {', '.join(unknown)}")
        if args.results:  # a fresh folder inside, so that results of earlier runs are not read again
            args.results.mkdir(parents=True, exist_ok=True)
        outdir = Path(tempfile.mkdtemp(prefix="xcsh-conformance-", dir=args.results))
        for requirements, baseline in plan:
            revision = requirements.revision
            names = [n for n in args.scenario if requirements.group(n)]
            if args.scenario and not names:
                continue
            results, elapsed, server_time = run_revision(args, requirements, names, baseline, outdir / revision)
            baselines[revision] = baseline
            for name, scenario in results.items():
                group = requirements.group(name)
                if group is not None:
                    cells.setdefault(name, {})[revision] = judge(group, scenario, baseline)
            timings.append(f"{revision} {elapsed:.1f} s" + (f" (+ server {server_time:.1f} s)" if server_time else ""))
    except HarnessError as e:
        print(f"conformance: {e}", file=sys.stderr)
        return 2

    ran = [r for r in revisions if r in baselines]
    print_table(cells, ran)
    print()
    for revision in ran:
        print(totals(revision, [row[revision] for row in cells.values() if revision in row]))
    unexpected = [f"{n} ({r})" for n, row in cells.items() for r, c in row.items() if c.unexpected]
    stale = [(entry, r) for row in cells.values() for r, c in row.items() for entry in c.stale]
    for entry, revision in stale:
        print(f"remove {entry} from {baselines[revision].path.relative_to(ROOT)}: it passes now")
    if unexpected:
        print(f"failed, not in the baseline: {', '.join(unexpected)}")
    print(f"\nsuite runs: {', '.join(timings)}; {time.monotonic() - started:.1f} s in all; logs in {outdir}")
    verdict = 1 if unexpected or stale else 0
    print(f"conformance: {'FAIL' if verdict else 'ok'}")
    return verdict


def run_revision(
    args: argparse.Namespace, requirements: Requirements, names: list[str], baseline: Baseline, outdir: Path
) -> tuple[dict[str, Scenario], float, float]:
    """One revision against its own fresh server (or the --url one); the server is stopped before returning."""
    outdir.mkdir(parents=True)
    if args.url:
        return (*run_suite(args.url, requirements, names, baseline, outdir, args.verbose), 0.0)
    command = shlex.split(args.server_cmd)
    if args.server_cmd == DEFAULT_SERVER:
        command += ["--log-file", str(outdir / "xcsh-run.log")]
    server = start_server(command, outdir, args.path)
    print(f"{requirements.revision}: server listening at {server.url} after {server.started_in:.2f} s", flush=True)
    try:
        results, elapsed = run_suite(server.url, requirements, names, baseline, outdir, args.verbose)
    finally:
        stop_server(server.proc)
    return results, elapsed, server.started_in


if __name__ == "__main__":
    sys.exit(main())
