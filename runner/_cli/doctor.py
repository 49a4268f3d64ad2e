"""``xcsh-run doctor``: what this machine can enforce, per sandbox level, and where things are.

The measurements are the runner's own (``_sandbox.probe``, ``check`` and
``weakened``, the cgroup root a runner makes), so what doctor says is what a
run gets. Exit 0 when the default level (``contained``) starts without
``--sandbox-best-effort``; its documented weakenings (listed) do not fail it.
Exit 1 when it would refuse to start.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

import typer

from xcsh_run._cli.app import app
from xcsh_run._cli.options import CwdOpt, JsonOpt
from xcsh_run._project import project_root
from xcsh_run._safe_text import json_text

DEFAULT_LEVEL = "contained"


def _user_namespaces() -> bool:
    """Can this user make a user namespace? (Read from sysctls; nothing is unshared.)"""

    def sysctl(name: str) -> str | None:
        try:
            return Path("/proc/sys", name).read_text().strip()
        except OSError:
            return None

    if sysctl("user/max_user_namespaces") in (None, "0"):
        return False
    if os.geteuid() != 0 and sysctl("kernel/unprivileged_userns_clone") == "0":
        return False
    return not (os.geteuid() != 0 and sysctl("kernel/apparmor_restrict_unprivileged_userns") == "1")


def _pidfd() -> bool:
    try:
        fd = os.pidfd_open(os.getpid())
    except (OSError, AttributeError):
        return False
    os.close(fd)
    return True


def report() -> dict[str, Any]:
    """Everything doctor prints, as JSON-ready data."""
    import msgspec

    from xcsh_run._discovery import default_dir
    from xcsh_run._process import CgroupRoot
    from xcsh_run._sandbox import LEVELS, SandboxPolicy, check, probe, weakened
    from xcsh_run._version import __version__

    cgroups = CgroupRoot.create()
    try:
        found = probe(
            default_dir(),
            cgroup_v2=cgroups is not None,
            memory_cgroup=cgroups is not None and cgroups.memory is not None,
            pids_cgroup=cgroups is not None and cgroups.pids is not None,
        )
    finally:
        if cgroups is not None:
            cgroups.remove()
    levels: dict[str, Any] = {}
    for level in LEVELS:
        policy = SandboxPolicy(level=level)
        weak = weakened(policy, found)
        missing = [m for m in check(policy.replace(best_effort=True), found) if m not in weak]
        levels[level] = {
            "starts": not missing,  # without --sandbox-best-effort
            "fully_enforced": not missing and not weak,
            "missing": missing,
            "weakened": weak,
        }
    machine = msgspec.to_builtins(found)
    return {
        "bun": _bun_report(),
        "version": __version__,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cache_dir": str(default_dir()),
        "cwd": os.getcwd(),
        "project_root": project_root(os.getcwd()),
        "machine": {
            "cgroup_v2": machine["cgroup_v2"],
            "memory_controller": machine["memory_cgroup"],
            "pids_controller": machine["pids_cgroup"],
            "landlock_abi": machine["landlock_abi"],
            "seccomp": machine["seccomp"],
            "user_namespaces": _user_namespaces(),
            "pidfd": _pidfd(),
            "root": machine["euid"] == 0,
            "arch": machine["arch"],
        },
        "levels": levels,
        "default_level": DEFAULT_LEVEL,
        "ok": levels[DEFAULT_LEVEL]["starts"],
    }


def _bun_report() -> dict[str, Any]:
    from xcsh_run._discovery import BunError, locate, missing, version

    runtime = locate()
    if runtime is None:
        return {"path": None, "version": None, "typebox": None, "problem": missing()}
    try:
        got: str | None = version(runtime.bun)
        problem = None
    except BunError as exc:
        got, problem = None, str(exc)
    return {"path": runtime.bun, "version": got, "found_by": runtime.found_by, "typebox": runtime.typebox or None,
            "problem": problem}  # fmt: skip


def _bun_line(bun: dict[str, Any]) -> str:
    if bun["path"] is None or bun["problem"]:
        return f"  Bun (.ts/.js tools):    {bun['problem']}"
    typebox = bun["typebox"] or "not found (the tool API's typebox is unavailable)"
    return f"  Bun (.ts/.js tools):    {bun['version']} at {bun['path']} (from {bun['found_by']}); TypeBox: {typebox}"


def _yes(value: object) -> str:
    return "yes" if value is True else "no" if value is False else str(value)


@app.command("doctor")
def doctor_command(as_json: JsonOpt = False, cwd: CwdOpt = None) -> None:
    """Report what this machine can enforce at each sandbox level (see docs/sandbox.md).

    \b
    Exit codes:
      0  the default level (contained) starts here (weakenings are listed, not failed)
      1  it would refuse to start without --sandbox-best-effort
    """
    data = report()
    if as_json:
        typer.echo(json_text(data, indent=2))
        raise typer.Exit(0 if data["ok"] else 1)
    m = data["machine"]
    abi = m["landlock_abi"]
    lines = [
        f"xcsh-run {data['version']} on Python {data['python']} ({data['executable']})",
        f"  project root: {data['project_root']}",
        f"  module cache: {data['cache_dir']}",
        _bun_line(data["bun"]),
        "",
        "Machine:",
        f"  cgroup v2 (writable):   {_yes(m['cgroup_v2'])}"
        f"   memory controller: {_yes(m['memory_controller'])}   pids controller: {_yes(m['pids_controller'])}",
        f"  Landlock ABI:           {abi if abi else 'none'}",
        f"  seccomp filters:        {_yes(m['seccomp'])}",
        f"  user namespaces:        {_yes(m['user_namespaces'])}",
        f"  pidfd:                  {_yes(m['pidfd'])}",
        f"  root:                   {_yes(m['root'])}   arch: {m['arch']}",
        "",
        "Sandbox levels:",
    ]
    for level, state in data["levels"].items():
        verdict = "fully enforced" if state["fully_enforced"] else "starts, weakened" if state["starts"] else "refused"
        default = " (default)" if level == data["default_level"] else ""
        lines.append(f"  {level}{default}: {verdict}")
        lines += [f"    missing: {item}" for item in state["missing"]]
        lines += [f"    weakened: {item}" for item in state["weakened"]]
    typer.echo("\n".join(lines))
    raise typer.Exit(0 if data["ok"] else 1)
