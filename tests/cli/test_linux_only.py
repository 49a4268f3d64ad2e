"""Linux only, said at start: on another ``sys.platform`` the CLI and ``open_runner`` stop with one sentence.

The seam is ``sys.platform``, read when the command (or the opener) starts:
the CLI runs as a real process whose ``sys.platform`` is set after its
imports and before its entry point runs, as on a Mac, where trio and the rest
import, and nothing of xcsh-run's may start.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import xcsh_run
from tests.conftest import marked_processes

TOOLS = Path(__file__).resolve().parents[1] / "fixtures" / "tools"

# The console script's own entry (pyproject: xcsh_run._cli:main), on a system that says it is PLATFORM.
ENTRY = """
import sys
import xcsh_run._cli as cli
sys.platform = {platform!r}
sys.argv = ["xcsh-run", *sys.argv[1:]]
cli.main()
"""


def _cli_on(platform: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ENTRY.format(platform=platform), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    "args", [["--version"], ["list"], ["add", "--args", '{"a": 1, "b": 2}'], ["serve"]], ids=lambda a: a[0]
)
@pytest.mark.parametrize(("platform", "name"), [("darwin", "macOS"), ("win32", "Windows"), ("freebsd14", "freebsd14")])
def test_the_cli_elsewhere_says_linux_only_in_one_line_and_exits_69(
    tmp_path: Path, args: list[str], platform: str, name: str
) -> None:
    proc = _cli_on(platform, *args, "--tools", str(TOOLS / "basic.py"), cwd=tmp_path)
    assert proc.returncode == 69, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("xcsh-run: xcsh-run runs on Linux only ("), proc.stderr
    assert f"this is {name} (sys.platform {platform!r})" in proc.stderr
    assert "Linux VM or container (on Windows, WSL2)" in proc.stderr and "docs/install.md" in proc.stderr
    assert marked_processes() == []


def test_the_same_entry_on_linux_runs_the_command(tmp_path: Path) -> None:
    """The seam itself changes nothing else: with "linux" the call runs."""
    proc = _cli_on("linux", "add", "--args", '{"a": 1, "b": 2}', "--tools", str(TOOLS / "basic.py"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "3"


async def test_open_runner_elsewhere_raises_unsupported_platform_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(xcsh_run.UnsupportedPlatform) as raised:
        async with xcsh_run.open_runner([str(TOOLS / "basic.py")]):
            pytest.fail("a runner opened on macOS")
    assert isinstance(raised.value, xcsh_run.RunnerError)
    assert str(raised.value).startswith("xcsh-run runs on Linux only (")
    assert "this is macOS (sys.platform 'darwin')" in str(raised.value)
    assert marked_processes() == []


def test_the_blocking_runner_elsewhere_raises_it_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    with pytest.raises(xcsh_run.UnsupportedPlatform, match=r"this is Windows \(sys.platform 'win32'\)"):
        xcsh_run.run_tool_sync("add", {"a": 1, "b": 2}, tool_paths=[str(TOOLS / "basic.py")])
    assert marked_processes() == []
