"""Attacks on `strict`'s filesystem, exec, namespace and uid promises (docs/sandbox.md, "What `strict` guarantees").

Each attack runs in a real worker through the public API and asserts the errno
and, where it is cheap, that the same attack works under a weaker level, so a
test cannot pass because the attack itself is broken. The tool is written into
the test's tmp_path; its one tool, ``probe``, returns
``{"ok", "errno", "error", "value"}`` and never raises.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import ROOT, TOOLS, make_runner, needs_strict
from xcsh_run import SandboxPolicy

STRICT = SandboxPolicy(level="strict")
CONTAINED = SandboxPolicy(level="contained")
NONE = SandboxPolicy(level="none")
LDSO = "/lib64/ld-linux-x86-64.so.2"
# A binary strict can read (it is under /usr/lib, which the worker needs for shared libraries) but must not run.
GIT_CORE = "/usr/lib/git-core/git"

# The attack tool, copied into each test's tmp_path beside the program bytes it runs (payload.bin).
ATTACK = TOOLS / "strict_attack.py"


def _write_tool(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    tool = folder / "attack.py"
    shutil.copyfile(ATTACK, tool)
    tool.chmod(0o644)
    shutil.copyfile(os.path.realpath(shutil.which("true") or "/bin/true"), folder / "payload.bin")
    (folder / "payload.bin").chmod(0o644)
    return tool


@pytest.fixture
def attack(tmp_path: Path) -> Path:
    return _write_tool(tmp_path / "tools")


async def probe(tool: Path, policy: SandboxPolicy, name: str, **args: Any) -> dict[str, Any]:
    with trio.fail_after(40):
        async with make_runner(tool, sandbox=policy) as runner:
            result = await runner.call_tool("probe", {"name": name, **args})
    assert not result.is_error, result
    details: dict[str, Any] = result.details
    return details


# --- 2. the read allow-list ----------------------------------------------------------------


HOST_SCRIPT = """
import json, sys, trio
from xcsh_run import SandboxPolicy, open_runner

async def main():
    tool, secret, level = sys.argv[1:4]
    async with open_runner([tool], sandbox=SandboxPolicy(level=level), spare_workers=0) as runner:
        result = await runner.call_tool("probe", {"name": "read", "path": secret})
    print(json.dumps(result.details), flush=True)

trio.run(main)
"""


@needs_strict
@pytest.mark.parametrize("level", ["strict", "contained"])
@pytest.mark.parametrize("started", ["as-script", "from-home", "tool-in-home"])
def test_the_hosts_home_is_not_readable(tmp_path: Path, level: str, started: str) -> None:
    """~ is closed to a strict tool as the host script's folder (on sys.path), as cwd, and as the tool's folder."""
    home = tmp_path / "agent-home"
    home.mkdir()
    (home / "agent.py").write_text(HOST_SCRIPT)
    (home / ".ssh").mkdir()
    secret = home / ".ssh" / "id_ed25519"
    secret.write_text("PRIVATE KEY")
    (tmp_path / "project").mkdir()
    tool = _write_tool(home if started == "tool-in-home" else tmp_path / "project" / "tools")
    proc = subprocess.run(
        [sys.executable, str(home / "agent.py"), str(tool), str(secret), level],
        cwd=home if started == "from-home" else tmp_path / "project",
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    if level == "contained":
        assert out["value"] == "PRIVATE KEY"
    else:
        assert out["errno"] == errno.EACCES, out


def test_host_sys_path_is_not_the_read_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the host put on its own sys.path (a script's folder, PYTHONPATH, sys.path.insert) is not granted."""
    from xcsh_run._sandbox.strict_paths import python_paths

    home = tmp_path / "agent-home"
    home.mkdir()
    monkeypatch.setattr(sys, "path", [str(home), *sys.path, "/usr"])
    granted = python_paths()
    assert not any(p == str(home) or str(home).startswith(p + "/") for p in granted), granted
    assert "/usr" not in granted and "/" not in granted
    assert os.path.dirname(sys.modules["xcsh_run.worker"].__file__ or "") in granted
    # Of the host's own package, only the three files a worker imports (its lazy face, its version
    # and the authoring API's name) are readable: never its folder, and so none of the host's code.
    host = os.path.dirname(sys.modules["xcsh_run"].__file__ or "")
    assert host not in granted, granted
    mine = sorted(p for p in granted if p.startswith(host + os.sep))
    assert {os.path.basename(p) for p in mine if p.endswith(".py")} == {"__init__.py", "_version.py", "pi.py"}, mine
    assert all(os.path.dirname(p) in (host, os.path.join(host, "__pycache__")) for p in mine), mine


# --- 3. exec -------------------------------------------------------------------------------


@needs_strict
async def test_readable_binary_cannot_be_run(attack: Path) -> None:
    """Read access no longer implies execute: /usr/lib is readable, its programs are not runnable."""
    if not os.path.exists(GIT_CORE):
        pytest.skip(f"{GIT_CORE} (git) is not installed")
    denied = await probe(attack, STRICT, "exec", argv=[GIT_CORE, "--version"])
    allowed = await probe(attack, NONE, "exec", argv=[GIT_CORE, "--version"])
    assert denied["errno"] == errno.EACCES, denied
    assert allowed["ok"] and allowed["value"].startswith("git version"), allowed


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, STRICT.replace(allow_exec=("git",)), NONE], ids=["strict", "git", "none"])
async def test_program_written_to_tmpdir_cannot_be_run(attack: Path, policy: SandboxPolicy) -> None:
    out = await probe(attack, policy, "exec_tmp_copy")
    if policy is NONE:
        assert out["ok"], out
    else:
        assert out["errno"] == errno.EACCES, out


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_memfd_program_cannot_be_run(attack: Path, policy: SandboxPolicy) -> None:
    out = await probe(attack, policy, "memfd_exec")
    if policy is NONE:
        assert out["ok"] and out["value"] == 0, out
    else:
        assert out["errno"] == errno.EPERM, out


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
async def test_programs_outside_allow_exec_cannot_be_run(attack: Path, policy: SandboxPolicy) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    git = await probe(attack, policy, "exec", argv=["git", "--version"])
    true = await probe(attack, policy, "exec", argv=["/bin/true"])
    if policy is NONE:
        assert git["ok"] and true["ok"], (git, true)
    else:
        assert git["errno"] == errno.ENOENT or git["errno"] == errno.EACCES, git
        assert true["errno"] == errno.EACCES, true


@needs_strict
async def test_allow_exec_runs_that_program_only(attack: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    policy = STRICT.replace(allow_exec=("git",))
    git = await probe(attack, policy, "exec", argv=["git", "--version"])
    true = await probe(attack, policy, "exec", argv=["/bin/true"])
    assert git["ok"] and git["value"].startswith("git version"), git
    assert true["errno"] == errno.EACCES, true


# Closed only by a noexec mount of the writable paths (the dynamic loader maps
# the file PROT_EXEC, which Landlock does not govern; ld.so itself must stay
# executable as every dynamic program's interpreter). The worker's mount
# namespace needs CAP_SYS_ADMIN: a host that is not root goes without it.
@needs_strict
@pytest.mark.skipif(os.geteuid() != 0, reason="the noexec workdir mount needs a root host (mount namespace)")
async def test_loader_cannot_run_a_program_written_to_tmpdir(attack: Path) -> None:
    out = await probe(attack, STRICT, "ldso_tmp_copy", ldso=LDSO)
    assert out["ok"] and out["value"] != 0, out


@needs_strict
async def test_loader_attack_works_without_the_sandbox(attack: Path) -> None:
    """The positive control of the loader attack above."""
    out = await probe(attack, NONE, "ldso_tmp_copy", ldso=LDSO)
    assert out["ok"] and out["value"] == 0, out


@needs_strict
@pytest.mark.parametrize("name", ["spawn_process", "thread", "fork"])
async def test_processes_and_threads_still_work(attack: Path, name: str) -> None:
    """Positive controls: the interpreter re-executes itself (spawn), threads (clone3 -> clone), fork."""
    out = await probe(attack, STRICT, name)
    assert out["ok"], out
    assert out["value"] == {"spawn_process": 7, "thread": 1, "fork": 5}[name]


@needs_strict
async def test_subprocess_of_an_allowed_program_still_works(attack: Path) -> None:
    out = await probe(attack, STRICT.replace(allow_exec=("true",)), "exec", argv=["true"])
    assert out["ok"], out


# --- 4. namespaces -------------------------------------------------------------------------


@needs_strict
@pytest.mark.parametrize("policy", [STRICT, NONE], ids=["strict", "none"])
@pytest.mark.parametrize("name", ["clone_ns", "clone3_ns", "unshare_ns"])
async def test_no_new_namespaces(attack: Path, policy: SandboxPolicy, name: str) -> None:
    # Positive control at none: contained drops every capability, so it refuses these too.
    out = await probe(attack, policy, name)
    if policy is NONE:
        # The child, in its new namespaces, could set the hostname (it exits 0).
        assert out["ok"] and out["value"] in (0, None), out
        if name == "unshare_ns":
            # The worker itself moved: nothing to undo, the worker ends with the runner.
            return
    else:
        expected = errno.ENOSYS if name == "clone3_ns" else errno.EPERM
        assert out["errno"] == expected, out


@needs_strict
@pytest.mark.parametrize("name", ["sethostname", "setdomainname"])
async def test_no_hostname_changes(attack: Path, name: str) -> None:
    before = os.uname()
    out = await probe(attack, STRICT, name)
    assert out["errno"] == errno.EPERM, out
    assert os.uname() == before


# --- 8. strict as nobody ---------------------------------------------------------------------


DEBIAN_PYTHON = "/usr/bin/python3.11"
# What a host needs from the main venv to run `open_runner` (and the worker its msgspec).
HOST_DEPS = ("msgspec", "trio", "outcome", "sniffio", "sortedcontainers", "attr", "attrs", "idna",
             "typing_extensions", "psutil", "jsonschema", "jsonschema_specifications", "referencing", "rpds",
             "h11", "exceptiongroup")  # fmt: skip


@pytest.fixture(scope="session")
def world_python() -> Iterator[Path]:
    """A venv built from a world-runnable interpreter, with world-readable copies of the project and its deps."""
    if not os.path.exists(DEBIAN_PYTHON):
        pytest.skip(f"needs {DEBIAN_PYTHON}, a Python 3.11 that an unprivileged user can run")
    if os.geteuid() != 0:
        pytest.skip("the uid drop to nobody happens only on a root host")
    base = _world_dir()
    venv, lib = base / "venv", base / "lib"
    subprocess.run([DEBIAN_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    lib.mkdir()
    # As a wheel installs them: runner/ is the package xcsh_run, worker/ its subpackage xcsh_run.worker.
    shutil.copytree(ROOT / "runner", lib / "xcsh_run", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "worker", lib / "xcsh_run" / "worker", ignore=shutil.ignore_patterns("__pycache__"))
    import importlib.util

    for name in HOST_DEPS:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, lib / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(origin, lib / origin.name)
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    (site / "xcsh_run_test.pth").write_text(f"{lib}\n")
    subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
    python = venv / "bin" / "python"
    check = subprocess.run([str(python), "-I", "-c", "import xcsh_run, xcsh_run.worker, msgspec, trio, psutil"],
                           capture_output=True, timeout=60)  # fmt: skip
    if check.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"the main venv's packages do not load in {DEBIAN_PYTHON}: {check.stderr.decode()[-500:]}")
    yield python
    shutil.rmtree(base, ignore_errors=True)


def _world_dir() -> Path:
    """A folder an unprivileged uid can reach (pytest's tmp dirs are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="xcsh-test-world-", dir="/tmp"))
    path.chmod(0o755)
    return path


# World-readable, under /usr but outside /usr/lib: strict must not open it.
USR_FILE = "/usr/include/stdio.h" if os.path.exists("/usr/include/stdio.h") else "/usr/share/common-licenses/GPL-3"

NOBODY_HOST = """
import json, sys, trio
from xcsh_run import SandboxPolicy, open_runner

async def main():
    tool, secret, usr_file, forkserver = sys.argv[1:5]
    out = {}
    async with open_runner([tool], sandbox=SandboxPolicy(level="strict"), spare_workers=0,
                           forkserver=forkserver == "forkserver") as runner:
        for name, args in (("home_and_tmp", {}), ("read", {"path": secret}),
                           ("exec", {"argv": ["/usr/bin/true"]}), ("read", {"path": usr_file})):
            out[name + str(len(out))] = (await runner.call_tool("probe", {"name": name, **args})).details
        forked = runner.statistics().workers_forked
    print(json.dumps([forked, out]), flush=True)

trio.run(main)
"""


@needs_strict
@pytest.mark.parametrize("spawn", ["popen", "forkserver"])
def test_strict_as_nobody(world_python: Path, spawn: str) -> None:
    """From a world-runnable interpreter, strict runs the tool as nobody, which keeps a working HOME and TMPDIR."""
    world = _world_dir()
    try:
        tool = _write_tool(world / "tools")
        (world / "host.py").write_text(NOBODY_HOST)
        secret = world / "root-only.txt"
        secret.write_text("root only")
        secret.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["TMPDIR"] = str(world)  # the workdirs' parent: reachable by nobody
        proc = subprocess.run([str(world_python), str(world / "host.py"), str(tool), str(secret), USR_FILE, spawn],
                              cwd=world, capture_output=True, timeout=90, env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()[-3000:]
        forked, out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        assert (forked > 0) == (spawn == "forkserver"), forked  # not a silent fallback to Popen
        home_and_tmp, secret_read, usr_bin, usr_share = out.values()
        assert home_and_tmp["ok"] and home_and_tmp["value"] == [65534, 65534, True], home_and_tmp
        assert secret_read["errno"] == errno.EACCES, secret_read
        # A venv of /usr/bin/python3.11 has base_prefix /usr: that is no reason to open all of /usr.
        assert usr_bin["errno"] == errno.EACCES, usr_bin
        assert usr_share["errno"] == errno.EACCES, usr_share
        assert not list(world.glob("xcsh-run-w*")), "the host left a workdir behind"
    finally:
        shutil.rmtree(world, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a workdir to nobody needs root")
def test_a_workdir_handed_to_nobody_is_still_removed_and_swept(tmp_path: Path) -> None:
    """The host removes what nobody made in it; the sweep after a dead host still takes it (the top stays ours)."""
    from xcsh_run._process.workdir import _workdir_host, hand_over_workdir, make_workdir, remove_workdir

    for sweep in (False, True):
        workdir = make_workdir()
        hand_over_workdir(workdir, 65534, 65534)
        assert (workdir / "tmp").stat().st_uid == 65534 and workdir.stat().st_uid == 0
        deep = workdir / "tmp" / "a" / "b"
        deep.mkdir(parents=True)
        (deep / "f").write_text("x")
        for path in (deep.parent, deep, deep / "f"):
            os.chown(path, 65534, 65534)
        deep.chmod(0)
        if not sweep:
            assert remove_workdir(workdir)
        else:
            # As if its host died: renamed to a dead pid's name, then swept.
            from xcsh_run._process.workdir import sweep_stale_workdirs

            dead = workdir.with_name(workdir.name.replace(f"w{os.getpid()}-", "w999999999-"))
            workdir.rename(dead)
            assert (_workdir_host(dead.name) or (0,))[0] == 999999999
            assert sweep_stale_workdirs(dead.parent) == []
            workdir = dead
        assert not workdir.exists()
