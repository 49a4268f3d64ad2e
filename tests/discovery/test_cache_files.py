"""Files a tool can replace never make a later host hang, read forever or run out of memory.

A ``contained`` tool runs as the user and can replace what the host reads
next run: a module-cache entry, the probe cache, a file beside a tool. Each
test replaces one (a FIFO, a link to ``/dev/zero``, a link to a valid entry
elsewhere, a huge sparse file, a directory) and runs the next host in a
subprocess under ``timeout`` and an address-space limit, so that a regression
(a read that blocks or never ends) fails the test instead of stalling or
exhausting the machine. The host must open, answer the call, say what it
found, and leave a regular file in its place.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import XCSH_RUN, make_runner
from xcsh_run._safe_read import UnsafeFile, read_capped

GiB = 1 << 30
DEADLINE = 60  # seconds for a whole host run, far above a healthy one (about a second)

TOOL = """
    from xcsh_run.pi import CustomTool

    def factory(api):
        return [CustomTool(name="hello", description="says hi", execute=lambda *a: "hi", parameters={"type": "object"})]
"""

HOST = """
import json, sys, trio
from xcsh_run import open_runner

async def main():
    with trio.fail_after(float(sys.argv[1])):
        async with open_runner(sys.argv[2:], grace=0.5, load_timeout=10.0, spare_workers=0) as runner:
            result = await runner.call_tool("hello", {})
            print(json.dumps({"kind": result.kind, "text": result.text, "warnings": runner.warnings}))

trio.run(main)
"""

HELPER = """
import os, sys
from xcsh_run._safe_read import UnsafeFile, read_capped
for path, follow in [(p, p.endswith("+follow")) for p in sys.argv[1:]]:
    path = path.removesuffix("+follow")
    try:
        print(len(read_capped(path, 1 << 20, follow=follow)))
    except UnsafeFile as exc:
        print("refused:", exc.strerror)
"""


def _limited() -> None:
    # A regression reading /dev/zero or a sparse file dies of MemoryError here, not of the OOM killer.
    resource.setrlimit(resource.RLIMIT_AS, (4 * GiB, 4 * GiB))


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=DEADLINE + 30, preexec_fn=_limited)


async def _host(*tool_paths: Path) -> dict[str, Any]:
    proc = await trio.to_thread.run_sync(_run, sys.executable, "-c", HOST, str(DEADLINE), *map(str, tool_paths))
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    assert (answer["kind"], answer["text"]) == (None, "hi"), answer  # kind: None for a success
    return answer


def _tool(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "hello.py"
    path.write_text(textwrap.dedent(TOOL))
    return path


def _cache(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "xcsh-run"


async def _warm(module: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with make_runner(module) as runner:
            assert (await runner.call_tool("hello", {})).text == "hi"


def _replace(path: Path, how: str, tmp_path: Path) -> None:
    """Put ``how`` where the file ``path`` was, as a tool running as the user could."""
    real = path.read_bytes()
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    elif how == "dev_zero":
        path.symlink_to("/dev/zero")
    elif how == "link_elsewhere":
        # A valid entry, but not where this host wrote it: a link is never followed in the cache.
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_bytes(real)
        path.symlink_to(elsewhere)
    elif how == "sparse":
        with open(path, "wb") as f:
            f.truncate(64 * GiB)
    elif how == "directory":
        path.mkdir()
        (path / "inside").write_bytes(real)
    else:
        raise AssertionError(how)


KINDS = ["fifo", "dev_zero", "link_elsewhere", "sparse", "directory"]
SAYS = {
    "fifo": "a FIFO",
    "dev_zero": "a symbolic link",
    "link_elsewhere": "a symbolic link",
    "sparse": "larger than",
    "directory": "a directory",
}


@pytest.mark.parametrize("how", KINDS)
async def test_a_replaced_module_cache_entry_is_a_miss_and_is_healed(tmp_path: Path, how: str) -> None:
    module = _tool(tmp_path / "tools")
    await _warm(module)
    (entry,) = (_cache(tmp_path) / "modules").glob("*.json")
    good = json.loads(entry.read_bytes())
    _replace(entry, how, tmp_path)

    answer = await _host(module)

    (warning,) = [w for w in answer["warnings"] if w.startswith("module cache:")]
    assert str(entry) in warning and SAYS[how] in warning and "writing the entry again" in warning, warning
    assert entry.is_file() and not entry.is_symlink(), how
    assert json.loads(entry.read_bytes())["result"] == good["result"]
    assert not any("module cache:" in w for w in (await _host(module))["warnings"])  # healed: the next host is quiet


@pytest.mark.parametrize("how", ["fifo", "dev_zero", "sparse", "directory"])
async def test_a_replaced_probe_cache_is_measured_again_and_healed(tmp_path: Path, how: str) -> None:
    module = _tool(tmp_path / "tools")
    await _warm(module)
    (probe,) = _cache(tmp_path).glob("probe-*.json")
    good = json.loads(probe.read_bytes())
    _replace(probe, how, tmp_path)

    answer = await _host(module)

    (warning,) = [w for w in answer["warnings"] if w.startswith("probe cache:")]
    assert str(probe) in warning and SAYS[how] in warning, warning
    assert probe.is_file() and not probe.is_symlink() and json.loads(probe.read_bytes()) == good


async def test_the_cli_answers_past_a_fifo_entry_and_heals_it(tmp_path: Path) -> None:
    module = _tool(tmp_path / "tools")
    await _warm(module)
    (entry,) = (_cache(tmp_path) / "modules").glob("*.json")
    _replace(entry, "fifo", tmp_path)
    proc = await trio.to_thread.run_sync(_run, XCSH_RUN, "run", "--tools", str(module), "hello")
    assert proc.returncode == 0 and proc.stdout.strip() == "hi", (proc.stdout, proc.stderr)
    assert "a FIFO" in proc.stderr and str(entry) in proc.stderr, proc.stderr
    assert entry.is_file()


async def test_fifos_beside_a_tool_and_inside_a_package_block_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    _tool(folder)
    os.mkfifo(folder / "hello.md")  # metadata beside the tool: never read
    package = folder / "pkgtool"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(TOOL).replace('"hello"', '"pkg_hello"'))
    os.mkfifo(package / "helper.py")  # a source the fingerprint would hash: no fingerprint, no cache entry
    for _ in range(2):  # cold, then with whatever the first run cached
        await _host(folder)
    names = {json.loads(p.read_bytes())["result"]["tools"][0]["name"] for p in (_cache(tmp_path) / "modules").iterdir()}
    assert names == {"hello"}, names  # the package, unfingerprintable, is loaded in a worker every run


def test_the_helper_refuses_what_is_not_a_small_regular_file(tmp_path: Path) -> None:
    regular = tmp_path / "regular"
    regular.write_bytes(b"x" * 10)
    link = tmp_path / "link"
    link.symlink_to(regular)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(64 * GiB)
    paths = [regular, link, f"{link}+follow", fifo, f"{fifo}+follow", "/dev/zero+follow", tmp_path, sparse]
    proc = _run(sys.executable, "-c", HELPER, *map(str, paths))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "10",
        "refused: a symbolic link, which is never followed here",
        "10",
        "refused: a FIFO, not a regular file",
        "refused: a FIFO, not a regular file",
        "refused: a character device, not a regular file",
        "refused: a directory, not a regular file",
        "refused: larger than the 1048576 bytes such a file may have",
    ]
    with pytest.raises(FileNotFoundError):
        read_capped(tmp_path / "missing", 1)
    assert issubclass(UnsafeFile, OSError)  # every caller's `except OSError` already treats it as unreadable


SCAN = """
import sys
from pathlib import Path
from xcsh_run._discovery.finder import cached_entry_point_candidates
warnings: list[str] = []
cached_entry_point_candidates(Path(sys.argv[1]), warnings, Path(sys.argv[2]))
print("\\n".join(warnings))
"""

CONFIG = """
import sys
from xcsh_run._errors import ConfigError
from xcsh_run._sandbox.grants import load
try:
    load(sys.argv[1], sys.argv[1])
except ConfigError as exc:
    print(exc)
"""


@pytest.mark.parametrize("how", ["fifo", "dev_zero", "directory"])
def test_a_replaced_entry_point_scan_is_scanned_again_and_healed(tmp_path: Path, how: str) -> None:
    home, cache = tmp_path / "home", _cache(tmp_path)
    home.mkdir(exist_ok=True)  # the autouse fixture may have made it
    assert _run(sys.executable, "-c", SCAN, str(home), str(cache)).returncode == 0
    scan = cache / "entry-points.json"
    good = scan.read_bytes()
    _replace(scan, how, tmp_path)
    proc = _run(sys.executable, "-c", SCAN, str(home), str(cache))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"entry-point cache: {scan} is {SAYS[how]}" in proc.stdout, proc.stdout
    assert scan.is_file() and not scan.is_symlink() and json.loads(scan.read_bytes()) == json.loads(good)


def test_a_fifo_config_is_a_config_error_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / ".xcsh").mkdir()
    os.mkfifo(tmp_path / ".xcsh" / "config.toml")
    proc = _run(sys.executable, "-c", CONFIG, str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "config.toml: cannot be read: a FIFO, not a regular file" in proc.stdout, proc.stdout
