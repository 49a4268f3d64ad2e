"""Many ``xcsh-run`` processes at once: what each one did, and for one that hung, its tree and its stacks.

The load tests start tens of cold CLIs together and wait for all of them
within one deadline; a CLI still running then is a hang, reported with its
process tree (states, what each waits in) and every thread's Python stack
(SIGABRT, faulthandler's), never left running.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass

import psutil


@dataclass
class Outcome:
    index: int
    pid: int
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    hung: bool = False
    tree: str = ""


def tree_of(pid: int) -> str:
    """The process tree under ``pid``: pids, states, what each waits in, command lines."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return f"  {pid}: gone"
    lines = []
    for proc in procs:
        try:
            with open(f"/proc/{proc.pid}/wchan") as f:
                wchan = f.read().strip()
        except OSError:
            wchan = "?"
        try:
            lines.append(f"  {proc.pid} [{proc.status()}, wchan {wchan}] {' '.join(proc.cmdline())[:200]}")
        except psutil.Error:
            lines.append(f"  {proc.pid}: gone")
    return "\n".join(lines)


def collect(procs: list[subprocess.Popen[str]], started: float, deadline: float) -> list[Outcome]:
    """Wait for every process until ``started + deadline``; the ones still running then are hangs, killed."""
    outcomes: list[Outcome] = []
    try:
        for i, proc in enumerate(procs):
            try:
                out, err = proc.communicate(timeout=max(0.1, started + deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                tree = tree_of(proc.pid)
                proc.send_signal(signal.SIGABRT)  # every thread's Python stack, on its stderr
                try:
                    out, err = proc.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, err = proc.communicate(timeout=10)
                outcomes.append(Outcome(i, proc.pid, None, out, err, time.monotonic() - started, True, tree))
                continue
            outcomes.append(Outcome(i, proc.pid, proc.returncode, out, err, time.monotonic() - started))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outcomes


def describe(outcome: Outcome) -> str:
    what = "HUNG" if outcome.hung else f"exit {outcome.returncode}"
    text = f"CLI #{outcome.index} (pid {outcome.pid}): {what} after {outcome.seconds:.1f} s"
    if outcome.tree:
        text += f"\n process tree at the deadline:\n{outcome.tree}"
    if outcome.stdout:
        text += f"\n stdout: {outcome.stdout[-500:]!r}"
    if outcome.stderr:
        text += "\n stderr:\n" + "\n".join("  " + line for line in outcome.stderr.splitlines()[-60:])
    return text
