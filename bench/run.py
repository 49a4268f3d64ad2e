"""``make bench``: xcsh-run and its peers measured side by side, in one run, with ratios and targets.

Usage: python -m bench.run [--rounds R] [--warm-n N] [--memory-calls N] [--only a,b,...] [--peers p,q,...]
                           [--quick] [--json PATH]

Every peer runs in its own process (``bench._driver``), all of them alive at
once, and the orchestrator (this module) interleaves them: each round visits
the peers in a new random order, so that a noisy neighbour (this is a shared
2-core VM) weighs on all of them alike. Ratios are to reference rows measured
in the same run. Sections:

  (a) warm echo call, 1 in flight, pinned to one CPU and unpinned;
  (b) 2000 echo calls over 2 workers;            (c) a 10 MiB result;
  (d) first call on a never-used worker;        (e) cancel -> terminal result;
  (f) cold CLI call, whole process;             (g) idle worker RSS, host RSS over many calls;
  (h) worker start per sandbox level (spawn to module loaded), paired against ``none``;
  (i) local batch: ``run_batch`` against a nursery of ``call_tool`` tasks, same runner and concurrency;
  (j) the Ray path: overhead per call (1 local node) and batch throughput on a local runner, 1 and 2 Ray nodes
      (skipped, with a note, without Ray).

The Bun worker (TypeScript tools) has a warm-call row in (a) and first-call
rows in (d), beside the Python worker's: a TypeScript echo with a TypeBox
schema, its note giving the ratio to the Python worker's JSON Schema echo.
``--peers floor,xcsh,xcsh-bun --only ad`` runs just those rows.

xcsh-run is driven only through its public API (``open_runner``,
``Runner.call_tool``, ``Runner.cancel``, ``Runner.statistics``, ``Runner.grace``)
and the ``xcsh-run`` command. Its workers are found from the outside (children
of the host process, with psutil) for the memory rows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import batch, batch_ray, cold
from bench._control import ROOT, Driver, PeerFailed, start_all
from bench._placement import all_cpus, pin_tree
from bench._stats import median
from bench._table import Row, Section, Target, ratio, render_section, render_targets

PEERS: dict[str, tuple[str, dict[str, Any]]] = {
    "floor": ("bench.peers.floor:Floor", {}),
    "xcsh": ("bench.peers.xcsh:Xcsh", {"sandbox": "contained"}),
    "xcsh-none": ("bench.peers.xcsh:Xcsh", {"sandbox": "none"}),
    "xcsh-bun": ("bench.peers.xcsh:Xcsh", {"sandbox": "contained", "language": "bun"}),
    "pool": ("bench.peers.pools:MpPool", {}),
    "executor": ("bench.peers.pools:Executor", {}),
    "pebble": ("bench.peers.pools:Pebble", {}),
    "loky": ("bench.peers.pools:Loky", {}),
    "trio-parallel": ("bench.peers.trio_par:TrioParallel", {}),
    "mcp": ("bench.peers.mcp_sdk:Mcp", {}),
}

# (peer, op kwargs, row label, share of --warm-n)
Subject = tuple[str, dict[str, Any], str, float]

FLOOR_WARM = "floor: msgspec JSON-RPC frames over os.pipe, blocking"
XCSH = "xcsh-run call_tool, sandbox contained"
XCSH_NONE = "xcsh-run call_tool, sandbox none"
POOL_WARM = "multiprocessing Pool(1).apply (fork)"
MCP_WARM = "MCP SDK ClientSession.call_tool -> SDK MCPServer"
XCSH_SCHEMA = XCSH + ", JSON Schema params (validated in host)"
XCSH_BUN = XCSH + ", Bun worker: TypeScript echo, TypeBox params (validated in host)"
WARM: list[Subject] = [
    ("floor", {}, FLOOR_WARM, 1.0),
    ("xcsh", {"tool": "echo"}, XCSH + " (Struct params)", 1.0),
    ("xcsh", {"tool": "echo_schema"}, XCSH_SCHEMA, 0.5),
    ("xcsh-bun", {"tool": "echo"}, XCSH_BUN, 0.5),
    ("xcsh-none", {"tool": "echo"}, XCSH_NONE + " (Struct params)", 1.0),
    ("pool", {}, POOL_WARM, 1.0),
    ("executor", {}, "ProcessPoolExecutor(1).submit().result()", 1.0),
    ("pebble", {}, "pebble ProcessPool(1).schedule().result()", 1.0),
    ("loky", {}, "loky ProcessPoolExecutor(1).submit().result()", 1.0),
    ("trio-parallel", {}, "trio_parallel.run_sync (trio host)", 1.0),
    ("mcp", {}, MCP_WARM + " (asyncio)", 0.2),
]

FLOOR_TP = "floor: 2 workers, blocking, 1 in flight per worker"
POOL_TP = "multiprocessing Pool(2).apply_async x N, then get"
XCSH_QUEUED = XCSH + ": max_workers=2, 64 tasks keep calls in flight"
THROUGHPUT: list[Subject] = [
    ("floor", {"window": 1}, FLOOR_TP, 1.0),
    ("floor", {"window": 32}, "floor: 2 workers, blocking, pipelined (32 in flight per worker)", 1.0),
    ("xcsh", {}, XCSH + ": 2 tasks, 1 call in flight each", 1.0),
    ("xcsh-none", {}, XCSH_NONE + ": 2 tasks, 1 call in flight each", 1.0),
    ("xcsh", {"in_flight": 64}, XCSH_QUEUED, 1.0),
    ("pool", {}, POOL_TP, 1.0),
    ("executor", {}, "ProcessPoolExecutor(2).submit x N", 1.0),
    ("pebble", {}, "pebble ProcessPool(2).schedule x N", 1.0),
    ("loky", {}, "loky ProcessPoolExecutor(2).submit x N", 1.0),
    ("trio-parallel", {}, "trio_parallel.run_sync, 2 tasks, limiter 2", 1.0),
    ("mcp", {}, "MCP SDK: 2 servers, <=32 call_tool in flight each", 1.0),
]

FLOOR_BIG = "floor: msgspec frame over os.pipe (64 KiB pipe)"
BIG: list[Subject] = [
    ("floor", {}, FLOOR_BIG, 1.0),
    ("floor", {"pipe_bytes": 1 << 20}, "floor: msgspec frame over os.pipe (1 MiB pipe, F_SETPIPE_SZ)", 1.0),
    ("xcsh", {}, XCSH + ", 10 MiB text block", 1.0),
    ("xcsh-none", {}, XCSH_NONE + ", 10 MiB text block", 1.0),
    ("pool", {}, "multiprocessing Pool(1).apply (pickle)", 1.0),
    ("executor", {}, "ProcessPoolExecutor(1) (pickle)", 1.0),
    ("pebble", {}, "pebble ProcessPool(1) (pickle)", 1.0),
    ("loky", {}, "loky ProcessPoolExecutor(1) (pickle)", 1.0),
    ("trio-parallel", {}, "trio_parallel.run_sync (pickle)", 1.0),
    ("mcp", {}, "MCP SDK call_tool -> MCPServer (TextContent + structuredContent)", 0.0),
]


def _header(args: argparse.Namespace) -> str:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "runner", "worker"], cwd=ROOT, capture_output=True, text=True
    )
    changed = len(dirty.stdout.splitlines())
    versions = ", ".join(
        f"{d} {version(d)}" for d in ("msgspec", "trio", "psutil", "typer", "mcp", "pebble", "loky", "trio-parallel")
    )
    return "\n".join(
        [
            f"xcsh-run bench, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            f"machine: {os.cpu_count()} cores (affinity {sorted(os.sched_getaffinity(0))}), {model}, "
            f"Linux {platform.release()}",
            f"python {platform.python_version()} ({sys.executable}); {versions}",
            f"xcsh-run tree: git {git.stdout.strip() or '?'}"
            + (f" + {changed} uncommitted file(s) in runner/ worker/" if changed else " (clean)"),
            f"settings: rounds {args.rounds}, warm n {args.warm_n} per round and placement"
            f" (MCP {int(args.warm_n * 0.2)}),"
            f" throughput n {args.tp_n}, host-memory calls {args.memory_calls}, cold reps {args.cold_reps}"
            f" (MCP {args.mcp_cold_reps})",
            _load_line("start"),
        ]
    )


def _load_line(when: str) -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average at {when}: {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min), {os.cpu_count()} cores"


def _round(
    drivers: dict[str, Driver],
    subjects: list[Subject],
    rows: dict[str, Row],
    measure: Callable[[Driver, dict[str, Any], float], list[float]],
) -> None:
    """One round: every subject once, in a random order; samples go to its row."""
    order = list(subjects)
    random.shuffle(order)
    for peer, kwargs, label, share in order:
        row = rows[label]
        if row.error is not None:
            continue
        try:
            samples = measure(drivers[peer], kwargs, share)
        except PeerFailed as exc:
            row.error = str(exc)[:300]
            continue
        row.samples += samples
        row.rounds.append(median(samples))


def _started(subjects: list[Subject], drivers: dict[str, Driver]) -> list[Subject]:
    """The subjects whose peer was started (all of them, unless --peers left some out)."""
    return [subject for subject in subjects if subject[0] in drivers]


def _rows(section: Section, subjects: list[Subject], unit: str, p90: bool = True) -> dict[str, Row]:
    rows = {}
    for i, (_, _, label, _) in enumerate(subjects):
        rows[label] = section.add(Row(label, unit=unit, p90=p90, ref=i == 0))
    return rows


class _Drivers(dict[str, Driver]):
    """The started peers; a peer left out with --peers fails as a peer that did not start."""

    def __missing__(self, name: str) -> Driver:
        raise PeerFailed(f"{name} not started (--peers)")


# --- sections ------------------------------------------------------------------------------------------------


def warm(drivers: dict[str, Driver], args: argparse.Namespace) -> list[Section]:
    pinned = Section(
        "a",
        "Warm echo call, 1 in flight; host and workers pinned to ONE CPU (cpu 0)",
        "vs the msgspec pipe floor, same placement",
    )
    free = Section(
        "a",
        "Warm echo call, 1 in flight; no pinning (the scheduler's choice over both CPUs)",
        "vs the msgspec pipe floor, same placement",
    )
    subjects = _started(WARM, drivers)
    placements = [({0}, pinned, _rows(pinned, subjects, "us")), (all_cpus(), free, _rows(free, subjects, "us"))]

    spawned: dict[tuple[str, str], int] = {}
    placement = ""

    def measure(driver: Driver, kwargs: dict[str, Any], share: float) -> list[float]:
        value = driver.call("warm", n=max(50, int(args.warm_n * share)), **kwargs)
        if isinstance(value, dict):  # xcsh-run also says how many workers it started meanwhile
            key = (placement, driver.name + str(kwargs))
            spawned[key] = spawned.get(key, 0) + int(value["spawned"])
            value = value["samples"]
        return [float(v) for v in value]

    try:
        for _ in range(args.rounds):
            for cpus, section, rows in placements:
                placement = section.title
                pin_tree(cpus)
                _round(drivers, subjects, rows, measure)
    finally:
        pin_tree(all_cpus())
    for _, section, rows in placements:
        for peer, kwargs, label, _ in subjects:
            count = spawned.get((section.title, peer + str(kwargs)))
            if count is not None:
                rows[label].note = f"workers started while timed: {count}"
        if XCSH_BUN in rows and XCSH_SCHEMA in rows:
            _versus_python(rows[XCSH_BUN], rows[XCSH_SCHEMA], "the Python worker's JSON Schema echo")
    return [pinned, free]


def _versus_python(bun: Row, python: Row, what: str) -> None:
    """Say, in the Bun row's note, how it compares with the Python worker's row beside it."""
    value = ratio(bun, python)
    if value is not None:
        bun.note = f"{value:.2f}x {what}" + (f"; {bun.note}" if bun.note else "")


def throughput(drivers: dict[str, Driver], args: argparse.Namespace) -> Section:
    n = args.tp_n
    section = Section(
        "b",
        f"Throughput: {n} echo calls over 2 workers, us per call (one sample per round)",
        "vs the floor with 1 call in flight per worker",
    )
    subjects = _started(THROUGHPUT, drivers)
    rows = _rows(section, subjects, "us", p90=False)
    spawned: dict[str, int] = {}

    def measure(driver: Driver, kwargs: dict[str, Any], share: float) -> list[float]:
        value = driver.call("throughput", n=n, **kwargs)
        if isinstance(value, dict):
            spawned[driver.name] = spawned.get(driver.name, 0) + int(value["spawned"])
            value = value["seconds"]
        return [value / n * 1e6]

    for _ in range(args.rounds):
        _round(drivers, subjects, rows, measure)
    for row in section.rows:
        if row.median:
            row.note = f"{1e6 / row.median:,.0f} calls/s" + (f"; {row.note}" if row.note else "")
    for label in (XCSH, XCSH_NONE):
        row = next((r for r in section.rows if r.case.startswith(label + ":")), None)
        if row is None:
            continue
        peer = "xcsh" if label == XCSH else "xcsh-none"
        row.note += f"; workers spawned while timed: {spawned.get(peer, 0)}"
    return section


def big(drivers: dict[str, Driver], args: argparse.Namespace) -> Section:
    section = Section("c", "One 10 MiB string result, ms per call", "vs the msgspec floor with the default 64 KiB pipe")
    subjects = _started(BIG, drivers)
    rows = _rows(section, subjects, "ms")

    def measure(driver: Driver, kwargs: dict[str, Any], share: float) -> list[float]:
        reps = args.big_reps if share else 1
        return [float(v) for v in driver.call("big", reps=reps, **kwargs)]

    for _ in range(args.big_rounds):
        _round(drivers, subjects, rows, measure)
    for row in section.rows:
        if row.median:
            row.note = f"{10 / (row.median / 1e3):,.0f} MiB/s" + (f"; {row.note}" if row.note else "")
    return section


def first_call(drivers: dict[str, Driver], args: argparse.Namespace) -> Section:
    section = Section(
        "d",
        "First call on a never-used worker: start -> first reply, ms",
        "vs subprocess.Popen of a msgspec worker until its first reply",
    )
    popen = section.add(Row("floor: subprocess.Popen python -c msgspec worker, first reply", unit="ms", ref=True))
    fork = section.add(Row("floor: os.fork of a warm parent (msgspec loaded), first reply", unit="ms"))
    xcsh = {
        ("xcsh", True): section.add(Row(XCSH + ": first call_tool, new runner, default settings", unit="ms")),
        ("xcsh-none", True): section.add(Row(XCSH_NONE + ": first call_tool, new runner, default settings", unit="ms")),
        ("xcsh", False): section.add(Row(XCSH + ": first call_tool, new runner, spare_workers=0", unit="ms")),
        ("xcsh", "forkserver"): section.add(
            Row(XCSH + ": first call, never-used worker (spare_workers=0, forkserver)", unit="ms")
        ),
        ("xcsh-bun", False): section.add(
            Row(XCSH + ", Bun worker: first call_tool, new runner, spare_workers=0", unit="ms")
        ),
    }
    # Only the peers that were started (--peers) have rows.
    xcsh = {key: row for key, row in xcsh.items() if key[0] in drivers}
    section.rows = [r for r in section.rows if r in (popen, fork) or r in xcsh.values()]
    per_round = max(1, args.spawn_reps // 2)
    for _ in range(2):
        try:
            got = drivers["floor"].call("spawn", reps=per_round)
            popen.samples += got["popen"]
            fork.samples += got["fork"]
        except PeerFailed as exc:
            popen.error = fork.error = str(exc)[:300]
        for (peer, spares), row in xcsh.items():
            if row.error is not None:
                continue
            try:
                if spares == "forkserver":
                    got = drivers[peer].call("first_call", reps=per_round, spares=False, forkserver=True)
                else:
                    got = drivers[peer].call("first_call", reps=per_round, spares=spares)
            except PeerFailed as exc:
                row.error = str(exc)[:300]
                continue
            row.samples += got["samples"]
            if got["cache_misses"]:
                row.note = f"{got['cache_misses']} cache misses (module loaded at open)"
    for (peer, spares), row in xcsh.items():
        what = (
            "fork + load + call, the zygote ready"
            if spares == "forkserver"
            else "a spare worker, once ready (<= 1 s)"
            if spares
            else "spawn + load + call"
            if peer != "xcsh-bun"
            else "spawn + Python handshake and sandbox + exec of Bun + load + call (a JS worker has no spare)"
        )
        row.note = (row.note + "; " if row.note else "") + f"call_tool -> result: {what}"
    if ("xcsh-bun", False) in xcsh and ("xcsh", False) in xcsh:
        _versus_python(xcsh[("xcsh-bun", False)], xcsh[("xcsh", False)], "the Python worker's spawn + load + call")
    return section


def cancel(drivers: dict[str, Driver], args: argparse.Namespace) -> Section:
    section = Section(
        "e",
        "Cancellation: cancel -> terminal result (xcsh-run) or exit observed (floors), ms",
        "vs SIGKILL of a busy msgspec worker until its exit is seen (pidfd)",
    )
    kill = section.add(Row("floor: busy msgspec worker, SIGKILL -> exit seen via pidfd", unit="ms", ref=True))
    term = section.add(Row("floor: busy msgspec worker, SIGTERM handler raises -> exit seen", unit="ms"))
    try:
        got = drivers["floor"].call("cancel", reps=args.cancel_reps)
        kill.samples, term.samples = got["sigkill"], got["sigterm_raises"]
    except PeerFailed as exc:
        kill.error = term.error = str(exc)[:300]
    cases = [
        ("xcsh", "busy", XCSH + ": busy Python loop", args.cancel_reps),
        ("xcsh-none", "busy", XCSH_NONE + ": busy Python loop", args.cancel_reps),
        ("xcsh", "ignore_sigterm", XCSH + ": busy loop ignoring SIGTERM", args.cancel_ignore_reps),
    ]
    for peer, tool, label, reps in cases:
        row = section.add(Row(label, unit="ms"))
        try:
            got = drivers[peer].call("cancel", reps=reps, tool=tool)
        except PeerFailed as exc:
            row.error = str(exc)[:300]
            continue
        row.samples = got["samples"]
        rungs = sorted(set(map(str, got["rungs"])))
        kinds = sorted(set(map(str, got["kinds"])))
        row.note = f"grace {got['grace']:g} s; kind {'/'.join(kinds)}, rung {'/'.join(rungs)}"
    row = section.add(Row("trio_parallel.run_sync(busy, kill_on_cancel=True): cancel -> return", unit="ms"))
    try:
        row.samples = drivers["trio-parallel"].call("cancel", reps=args.cancel_reps)["samples"]
    except PeerFailed as exc:
        row.error = str(exc)[:300]
    section.add(
        Row(
            "Pool / ProcessPoolExecutor / loky / pebble / MCP",
            unit="ms",
            error="no comparable figure: cannot stop a running task, or (pebble) reports "
            "cancelled before its worker is gone",
        )
    )
    return section


def memory(drivers: dict[str, Driver], args: argparse.Namespace) -> Section:
    section = Section("g", "Memory, MiB", "vs an idle bare `python -c 'import msgspec; <block>'`")
    bare = section.add(Row("idle bare python -c 'import msgspec; sys.stdin.read()': RSS", unit="MiB", ref=True))
    try:
        got = drivers["floor"].call("idle_rss")
        bare.value, bare.note = got["rss"], f"USS {got['uss']:.1f} MiB"
    except PeerFailed as exc:
        bare.error = str(exc)[:300]
    for peer, label in (("xcsh", XCSH), ("xcsh-none", XCSH_NONE)):
        row = section.add(Row(f"{label}: an idle worker's RSS (echo tool loaded)", unit="MiB"))
        try:
            got = drivers[peer].call("idle_rss")
            row.value = got["rss"]
            others = ", ".join(f"{r:.1f}" for r in got["others"])
            row.note = f"USS {got['uss']:.1f} MiB; after 200 echo calls in a new runner" + (
                f"; its other idle process(es), {got['spares']} spare: {others} MiB" if others else ""
            )
        except PeerFailed as exc:
            row.error = str(exc)[:300]
    n = args.memory_calls
    try:
        got = drivers["xcsh"].call("host_memory", n=n)
    except PeerFailed as exc:
        section.add(Row(f"{XCSH}: host RSS over {n} calls", error=str(exc)[:300]))
        return section
    per_call = (got["rss_end"] - got["rss_half"]) * 2**20 / (n // 2)
    section.add(Row(f"{XCSH}: host RSS after warm-up (1000 calls)", unit="MiB", value=got["rss0"], compare=False))
    section.add(Row(f"{XCSH}: host RSS after {n // 2:,} more calls", unit="MiB", value=got["rss_half"], compare=False))
    section.add(
        Row(
            f"{XCSH}: host RSS after {n:,} more calls",
            unit="MiB",
            value=got["rss_end"],
            compare=False,
            note=f"first half {got['rss_half'] - got['rss0']:+.2f} MiB, second half "
            f"{got['rss_end'] - got['rss_half']:+.2f} MiB ({per_call:+.0f} B/call, "
            f"{per_call * 1e5 / 2**20:+.1f} MiB per 100k calls); {n / got['seconds']:,.0f} calls/s",
        )
    )
    return section


def cold_section(args: argparse.Namespace, work: Path) -> Section:
    section = Section(
        "f",
        "Cold call: whole-process wall time, ms (PYTHONDONTWRITEBYTECODE unset unless stated)",
        "vs the two-interpreter floor",
    )
    try:
        for i, v in enumerate(cold.measure(work, args.cold_reps, args.mcp_cold_reps)):
            section.add(Row(v.case, samples=v.samples, unit="ms", ref=i == 1, error=v.error))
        rounds = max(1, args.cold_reps // 3)
        try:
            for case, samples in cold.concurrent(work, rounds).items():
                section.add(Row(case, samples=samples, unit="ms"))
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            for case in (cold.CONCURRENT_ALONE, cold.CONCURRENT_DAEMON):
                section.add(Row(case, unit="ms", error=str(exc)))
    finally:
        cold.stop_daemon(work)
    return section


def sandbox_section(args: argparse.Namespace) -> Section:
    import trio

    from bench import sandbox_spawn

    section = Section(
        "h",
        "Worker start per sandbox level: spawn to 'module loaded', ms (xcsh-run only; rounds in shuffled order)",
        "vs none (the added cost of each level's layers: supervisor, mount namespace, Landlock, seccomp)",
    )
    samples = trio.run(sandbox_spawn.measure, args.spawn_rounds)
    for name, values in samples.items():
        section.add(Row(name, samples=values, unit="ms", ref=name == "none"))
    return section


# --- targets -----------------------------------------------------------------------------------------------------


def targets(sections: dict[str, Section], grace: float | None, memory_calls: int) -> list[Target]:
    out: list[Target] = []

    def row(key: str, prefix: str) -> Row | None:
        section = sections.get(key)
        return section.find(prefix) if section is not None else None

    for key, where in (("a1", "1 CPU"), ("a2", "unpinned")):
        x = row(key, XCSH + " (Struct")
        out.append(Target(f"warm echo ({where}): xcsh-run / Pool.apply", ratio(x, row(key, POOL_WARM)), 0.8))
        out.append(Target(f"warm echo ({where}): xcsh-run / MCP call_tool", ratio(x, row(key, MCP_WARM)), 0.15))
    out.append(
        Target(
            "2000 calls / 2 workers, many in flight: xcsh-run calls/s / Pool(2) calls/s",
            _inverse(ratio(row("b", XCSH_QUEUED), row("b", POOL_TP))),
            1.0,
            higher_is_better=True,
            detail="xcsh-run: 64 tasks, max_workers=2; Pool: all queued at once",
        )
    )
    out.append(
        Target("10 MiB result: xcsh-run / msgspec pipe floor (64 KiB)", ratio(row("c", XCSH), row("c", FLOOR_BIG)), 1.3)
    )
    popen = row("d", "floor: subprocess.Popen")
    for how in ("default settings", "spare_workers=0"):
        first = row("d", f"{XCSH}: first call_tool, new runner, {how}")
        out.append(Target(f"first call, never-used worker ({how}): xcsh-run / Popen", ratio(first, popen), 0.25))
    forked = row("d", f"{XCSH}: first call, never-used worker (spare_workers=0, forkserver)")
    out.append(Target("first call, never-used worker (forkserver): xcsh-run / Popen", ratio(forked, popen), 0.25))
    busy = row("e", XCSH + ": busy Python loop")
    out.append(Target("cancel -> result, busy loop (contained)", busy.median if busy else None, 20, "ms"))
    ignoring = row("e", XCSH + ": busy loop ignoring SIGTERM")
    bound = (grace or 0) * 1e3 + 20
    out.append(
        Target(
            "cancel -> result, ignores SIGTERM (contained)",
            ignoring.median if ignoring else None,
            bound,
            "ms",
            detail=f"grace {grace:g} s + 20 ms" if grace is not None else "",
        )
    )
    cli = row("f", "xcsh-run echo --args ... (contained")
    out.append(Target("cold CLI: xcsh-run / two-interpreter floor", ratio(cli, row("f", "two-interpreter")), 1.5))
    out.append(Target("cold CLI: xcsh-run / MCP cold", ratio(cli, row("f", "MCP SDK")), 0.15))
    warm = row("f", cold.DAEMON_CASE)
    out.append(
        Target("repeated CLI call, daemon: xcsh-run / two-interpreter floor", ratio(warm, row("f", "two-")), 0.5)
    )
    out.append(
        Target(
            f"{cold.CONCURRENT} concurrent CLI calls: through the daemon / without it",
            ratio(row("f", cold.CONCURRENT_DAEMON), row("f", cold.CONCURRENT_ALONE)),
            0.5,
            detail="wall time for all of them",
        )
    )
    out.append(
        Target(
            "idle worker RSS: xcsh-run / bare msgspec python",
            ratio(row("g", XCSH + ": an idle"), row("g", "idle bare")),
            1.3,
        )
    )
    out.append(
        Target(
            "local batch: run_batch / the embedding API's call_tool nursery",
            paired.median if (paired := row("i", batch.PAIRED)) is not None else None,
            1.2,
            detail="us per call, 2000 echo calls, concurrency = max_workers, same runner; median of per-round ratios",
        )
    )
    half, end = _host_rows(sections["g"]) if "g" in sections else (None, None)
    growth = end.median - half.median if half and end and half.median and end.median else None
    out.append(
        Target(
            "host memory flat: RSS growth over the second half",
            growth,
            1.0,
            "MiB",
            detail=f"between N/2 and N calls, N = {memory_calls:,} (--memory-calls 100000 for a longer soak)",
        )
    )
    return out


def _host_rows(section: Section) -> tuple[Row | None, Row | None]:
    host = [r for r in section.rows if "host RSS after" in r.case and "warm-up" not in r.case]
    return (host[0], host[1]) if len(host) == 2 else (None, None)


def _inverse(value: float | None) -> float | None:
    return 1 / value if value else None


# --- main --------------------------------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the warm and throughput sections [3]")
    parser.add_argument("--warm-n", type=int, default=2000, help="warm calls per peer, round and placement [2000]")
    parser.add_argument("--tp-n", type=int, default=2000, help="calls per throughput sample [2000]")
    parser.add_argument(
        "--memory-calls",
        type=int,
        default=20000,
        help="host-memory calls (20000 keeps the run short; 100000 for a soak) [20000]",
    )
    parser.add_argument("--cold-reps", type=int, default=10, help="cold runs per variant [10]")
    parser.add_argument("--mcp-cold-reps", type=int, default=3, help="cold MCP runs (seconds each) [3]")
    parser.add_argument("--spawn-rounds", type=int, default=20, help="rounds of the sandbox start section [20]")
    parser.add_argument("--only", default="abcdefghij", help="sections to run, e.g. 'af' [abcdefghij]")
    parser.add_argument(
        "--peers",
        default=",".join(PEERS),
        help="peers to start, e.g. 'floor,xcsh,xcsh-bun' (the others' rows are left out) [all]",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny counts, numbers not meaningful")
    parser.add_argument("--json", type=Path, help="also write every row and target as JSON here")
    args = parser.parse_args(argv)
    args.peers = [name.strip() for name in args.peers.split(",") if name.strip()]
    unknown = sorted(set(args.peers) - set(PEERS))
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    args.big_rounds, args.big_reps, args.spawn_reps = 2, 3, 10
    args.cancel_reps, args.cancel_ignore_reps, args.batch_rounds = 8, 4, 8
    args.ray_rounds, args.ray_sequential = 3, 500
    if args.quick:
        args.rounds, args.warm_n, args.tp_n, args.memory_calls = 1, 200, 200, 2000
        args.cold_reps, args.mcp_cold_reps, args.big_rounds, args.big_reps = 2, 1, 1, 1
        args.spawn_reps, args.cancel_reps, args.cancel_ignore_reps, args.spawn_rounds = 2, 2, 1, 2
        args.batch_rounds = 1
        args.ray_rounds, args.ray_sequential = 1, 50
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    started = time.perf_counter()
    print(_header(args), flush=True)
    sections: dict[str, Section] = {}
    grace: float | None = None
    with tempfile.TemporaryDirectory(prefix="xcsh-bench-") as tmp:
        work = Path(tmp)
        if set(args.only) & set("abcdeg"):
            drivers = _Drivers(start_all({name: PEERS[name] for name in args.peers}, work))
            failed = {name: d.error for name, d in drivers.items() if not d.ok}
            for name, error in failed.items():
                print(f"peer {name} did not start: {error}", flush=True)
            try:
                if "xcsh" in drivers and drivers["xcsh"].ok:
                    grace = drivers["xcsh"].call("info")["grace"]
                steps: list[tuple[str, Callable[[], Any]]] = [
                    ("a", lambda: warm(drivers, args)),
                    ("b", lambda: throughput(drivers, args)),
                    ("c", lambda: big(drivers, args)),
                    ("d", lambda: first_call(drivers, args)),
                    ("e", lambda: cancel(drivers, args)),
                    ("g", lambda: memory(drivers, args)),
                ]
                for key, step in steps:
                    if key not in args.only:
                        continue
                    t0 = time.perf_counter()
                    result = step()
                    if key == "a":
                        sections["a1"], sections["a2"] = result
                    else:
                        sections[key] = result
                    print(f"  ({key}) done in {time.perf_counter() - t0:.0f} s; {_load_line('this point')}", flush=True)
            finally:
                for driver in drivers.values():
                    driver.close()
        if "f" in args.only:
            t0 = time.perf_counter()
            sections["f"] = cold_section(args, work)
            print(f"  (f) done in {time.perf_counter() - t0:.0f} s; {_load_line('this point')}", flush=True)
    if "h" in args.only:
        t0 = time.perf_counter()
        sections["h"] = sandbox_section(args)
        print(f"  (h) done in {time.perf_counter() - t0:.0f} s; {_load_line('this point')}", flush=True)
    if "i" in args.only:
        t0 = time.perf_counter()
        sections["i"] = batch.measure(args.tp_n, args.batch_rounds)
        print(f"  (i) done in {time.perf_counter() - t0:.0f} s; {_load_line('this point')}", flush=True)
    if "j" in args.only:
        t0 = time.perf_counter()
        sections["j"] = batch_ray.measure(args.tp_n, args.ray_rounds, args.ray_sequential)
        print(f"  (j) done in {time.perf_counter() - t0:.0f} s; {_load_line('this point')}", flush=True)
    print()
    for key in ("a1", "a2", "b", "c", "d", "e", "f", "g", "h", "i", "j"):
        if key in sections:
            print(render_section(sections[key]))
            print()
    goals = targets(sections, grace, args.memory_calls)
    print(render_targets(goals))
    print()
    print(_load_line("end"))
    print(f"total {time.perf_counter() - started:.0f} s")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "sections": {k: asdict(s) for k, s in sections.items()},
                    "targets": [asdict(t) | {"verdict": t.verdict} for t in goals],
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
