"""CLI tests: the real `xcsh-run` console script as a subprocess, with real workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, TOOLS, XCSH_RUN


def run(
    *args: str, cwd: Path | None = None, input: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def test_readme_example_works_exactly_as_written(git_repo: Path) -> None:
    proc = run("repo_stats", "--args", '{"glob":"*.py"}', cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Found 3 files\n"


def test_json_output(git_repo: Path) -> None:
    proc = run("repo_stats", "--args", '{"glob":"*.txt"}', "--json", cwd=git_repo)
    assert proc.returncode == 0
    out = json.loads(proc.stdout)
    assert out == {
        "content": [{"type": "text", "text": "Found 1 files"}],
        "details": {"count": 1, "sample": ["notes.txt"]},
        "is_error": False,
        "error": None,
    }


def test_stream_prints_updates_then_result_as_ndjson(git_repo: Path) -> None:
    proc = run("repo_stats", "--stream", cwd=git_repo)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["update", "result"]
    assert lines[0]["details"] == {"phase": "scan"}
    assert lines[1]["details"] == {"count": 1, "sample": ["pkg/c.py"]}  # the default glob is **/*.py


def test_args_file_and_stdin(git_repo: Path, tmp_path: Path) -> None:
    args = tmp_path / "args.json"
    args.write_text('{"glob": "*.txt"}')
    assert run("repo_stats", "--args-file", str(args), cwd=git_repo).stdout == "Found 1 files\n"
    assert run("repo_stats", "--args-file", "-", cwd=git_repo, input='{"glob": "*.py"}').stdout == "Found 3 files\n"
    assert run("repo_stats", "--args", "-", cwd=git_repo, input='{"glob": "*.py"}').stdout == "Found 3 files\n"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--args", '{"glob" "*.py"}'], "Expecting ':' delimiter at line 1, column 9"),
        (["--args", "[1]"], "must be a JSON object"),
        (["--args", "{}", "--args-file", "x"], "not both"),
        (["--args-file", "/nonexistent/args.json"], "cannot read --args-file"),
        (["--timeout", "-1"], "--timeout must be a positive number"),
        (["--no-such-flag"], "No such option"),
    ],
)
def test_usage_errors_exit_2_and_say_where(git_repo: Path, args: list[str], fragment: str) -> None:
    proc = run("repo_stats", *args, cwd=git_repo)
    assert proc.returncode == 2
    assert fragment in proc.stderr


def test_malformed_json_points_at_the_column(git_repo: Path) -> None:
    proc = run("repo_stats", "--args", '{"glob" "*.py"}', cwd=git_repo)
    lines = proc.stderr.splitlines()
    assert lines[1].strip() == '{"glob" "*.py"}'
    assert lines[2].index("^") == lines[1].index('"*.py"')


@pytest.mark.parametrize(
    ("tool", "args", "code", "kind"),
    [
        ("add", '{"a": 1}', 0, None),
        ("raises", "{}", 1, "tool_error"),
        ("add", '{"a": "x"}', 2, "invalid_arguments"),
        ("nope", "{}", 2, "not_found"),
        ("os_exit", "{}", 1, "crashed"),
        ("busy_loop", "{}", 124, "timeout"),
    ],
)
def test_exit_codes(tool: str, args: str, code: int, kind: str | None) -> None:
    proc = run(
        tool,
        "--args",
        args,
        "--json",
        "--timeout",
        "1",
        "--grace",
        "0.3",
        "--tools",
        str(TOOLS / "basic.py"),
        "--tools",
        str(TOOLS / "hostile.py"),
    )
    assert proc.returncode == code, proc.stderr
    result = json.loads(proc.stdout)
    assert result["is_error"] is (kind is not None)
    assert (result["error"] or {}).get("kind") == kind


def test_text_mode_reports_errors_on_stderr() -> None:
    proc = run("segfault", "--tools", str(TOOLS / "hostile.py"))
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "crashed: the worker running 'segfault' was killed by SIGSEGV" in proc.stderr
    assert "worker stderr (last lines)" in proc.stderr


@pytest.mark.parametrize("tool", ["busy_loop", "ignore_sigterm", "long_c_call", "fork_then_hang"])
def test_cli_returns_within_timeout_plus_grace_plus_one_second(tool: str) -> None:
    timeout, grace = 2.0, 0.5
    start = time.monotonic()
    proc = run(tool, "--timeout", str(timeout), "--grace", str(grace), "--tools", str(TOOLS / "hostile.py"))
    elapsed = time.monotonic() - start
    assert proc.returncode == 124
    # Process start-up (interpreter, imports, discovery) is on top of the call itself.
    assert elapsed < timeout + grace + 1.0 + 1.5, elapsed


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("tool", ["sleeper", "ignore_sigterm", "many_setsid"])
def test_signal_cancels_through_the_ladder(sig: signal.Signals, tool: str) -> None:
    proc = subprocess.Popen(
        [
            XCSH_RUN,
            tool,
            "--args",
            '{"hang": true, "count": 5}',
            "--stream",
            "--grace",
            "0.5",
            "--tools",
            str(TOOLS / "hostile.py"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # the tool is running once it streamed
        assert first["type"] == "update"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    result = json.loads(out.splitlines()[-1])
    assert result["error"]["kind"] == "cancelled"
    assert signal.Signals(sig).name in result["error"]["message"]


def test_list_shows_tools_and_failures(tmp_path: Path) -> None:
    proc = run("list", "--tools", str(TOOLS / "basic.py"), "--tools", str(TOOLS.parent / "broken" / "exits.py"))
    assert proc.returncode == 1  # a module failed to load
    assert "add" in proc.stdout and "Failed to load" in proc.stdout and "sys.exit(7)" in proc.stdout
    data = json.loads(run("list", "--json", "--tools", str(TOOLS / "basic.py")).stdout)
    assert {"name", "label", "description", "parameters", "module", "source"} <= set(data["tools"][0])
    assert data["errors"] == []


def test_describe_prints_the_schema() -> None:
    out = json.loads(run("describe", "add", "--tools", str(TOOLS / "basic.py")).stdout)
    assert out["parameters"]["properties"]["a"] == {"type": "integer"}
    assert out["parameters"]["required"] == ["a"]
    missing = run("describe", "nope", "--tools", str(TOOLS / "basic.py"))
    assert missing.returncode == 2 and "no tool named 'nope'" in missing.stderr


def test_help_documents_exit_codes() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    assert "124  timeout" in proc.stdout and "130  cancelled" in proc.stdout
    run_help = run("run", "--help").stdout
    for flag in ("--args", "--args-file", "--timeout", "--json", "--stream", "--tools"):
        assert flag in run_help


def test_no_cgroup_left_behind_by_the_cli(git_repo: Path) -> None:
    proc = subprocess.Popen([XCSH_RUN, "repo_stats"], cwd=git_repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.communicate(timeout=30)
    assert not list(Path("/sys/fs/cgroup/unified").glob(f"**/xcsh-run.{proc.pid}.*"))
    assert proc.returncode == 0
    assert os.path.exists(git_repo)


def test_partial_results_show_live_on_a_terminal(git_repo: Path) -> None:
    """On a tty, each partial result redraws one status line on stderr, cleared before the result."""
    import pty

    main, sub = pty.openpty()
    try:
        proc = subprocess.run(
            [XCSH_RUN, "repo_stats"],
            cwd=git_repo,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=sub,
            timeout=30,
        )
        os.close(sub)
        sub = -1
        shown = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if sub >= 0:
            os.close(sub)
        os.close(main)
    assert proc.returncode == 0
    assert b"Scanning files..." in shown
    assert shown.endswith(b"\x1b[2K")  # the status line is erased
    assert proc.stdout == b"Found 1 files\n"


def test_list_shows_sources_shadowed_modules_and_warnings(tmp_path: Path) -> None:
    home = tmp_path / "home"
    project = tmp_path / "project"
    for folder in (project / ".xcsh" / "tools", home / ".codex" / "tools"):
        folder.mkdir(parents=True)
        (folder / "twin.py").write_text((TOOLS / "basic.py").read_text())
    (home / ".claude" / "plugins").mkdir(parents=True)
    (home / ".claude" / "plugins" / "installed_plugins.json").write_text("[]")
    env = {**os.environ, "HOME": str(home)}
    proc = subprocess.run([XCSH_RUN, "list"], cwd=project, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "[native, project] .xcsh/tools/twin.py" in proc.stdout
    assert "Shadowed (not loaded):" in proc.stdout
    assert f"{home}/.codex/tools/twin.py [codex, user]: by .xcsh/tools/twin.py" in proc.stdout
    assert "warning: " in proc.stderr and 'has no "plugins" object' in proc.stderr


def test_sandbox_flags_reach_the_worker(git_repo: Path) -> None:
    denied = run(
        "probe",
        "--tools",
        str(TOOLS / "escape.py"),
        "--sandbox",
        "strict",
        "--json",
        "--args",
        '{"name": "read_file", "path": "/etc/passwd"}',
    )
    assert json.loads(denied.stdout)["details"]["error"] == "EACCES"
    allowed = run(
        "probe",
        "--tools",
        str(TOOLS / "escape.py"),
        "--sandbox",
        "strict",
        "--allow-read",
        "/etc/passwd",
        "--json",
        "--args",
        '{"name": "read_file", "path": "/etc/passwd"}',
    )
    assert json.loads(allowed.stdout)["details"]["ok"] is True
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    strict_git = subprocess.run(
        [
            XCSH_RUN,
            "repo_stats",
            "--args",
            '{"glob": "*.py"}',
            "--sandbox",
            "strict",
            "--allow-exec",
            "git",
            "--allow-env",
            "GIT_CONFIG_NOSYSTEM",
        ],
        cwd=git_repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert strict_git.stdout == "Found 3 files\n", strict_git.stderr


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--sandbox", "tight"], "--sandbox must be one of none, contained, strict"),
        (["--memory-mb", "0"], "--memory-mb must be a positive number"),
        (["--network", "wifi"], "--network must be off or netns"),
        (["--sandbox", "strict", "--allow-exec", "no-such-program-here"], "not found on PATH"),
    ],
)
def test_bad_sandbox_flags_are_usage_errors(git_repo: Path, flags: list[str], fragment: str) -> None:
    proc = run("repo_stats", *flags, cwd=git_repo)
    assert proc.returncode in (1, 2), proc
    assert fragment in proc.stderr


@pytest.mark.parametrize(("resolve", "after"), [("apply", "a\nb\n"), ("discard", "a  \nb\n")])
def test_example_tidy_previews_then_resolves(tmp_path: Path, resolve: str, after: str) -> None:
    (tmp_path / "notes.txt").write_text("a  \nb\n")
    proc = run(
        "tidy",
        "--tools",
        str(ROOT / "examples" / "tidy.py"),
        "--args",
        '{"path": "notes.txt"}',
        "--resolve",
        resolve,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Preview: lines 1 of notes.txt")
    assert f"resolve ({resolve})" in proc.stderr
    assert (tmp_path / "notes.txt").read_text() == after


def test_terminal_ui_answers_the_tools_prompts(tmp_path: Path) -> None:
    """At a terminal, ui.confirm prompts on stderr and reads stdin; --resolve ask asks too."""
    import pty
    import select

    (tmp_path / "notes.txt").write_text("a  \n")
    main, sub = pty.openpty()
    proc = subprocess.Popen(
        [
            XCSH_RUN,
            "tidy",
            "--tools",
            str(ROOT / "examples" / "tidy.py"),
            "--args",
            '{"path": "notes.txt"}',
        ],
        cwd=tmp_path,
        stdin=sub,
        stdout=subprocess.PIPE,
        stderr=sub,
    )
    os.close(sub)
    seen = b""
    answered = 0
    deadline = time.monotonic() + 30
    try:
        while answered < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1)
            if ready:
                seen += os.read(main, 4096)
            if seen.count(b"[y/N]") > answered:
                os.write(main, b"y\n")
                answered += 1
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
        os.close(main)
    assert b"Prepare a fix for 1 lines of notes.txt? [y/N]" in seen
    assert b"apply: strip trailing whitespace from 1 lines of notes.txt? [y/N]" in seen
    assert proc.returncode == 0 and out.startswith(b"Preview:")
    assert (tmp_path / "notes.txt").read_text() == "a\n"


def test_log_file_gets_tool_records(tmp_path: Path) -> None:
    log = tmp_path / "xcsh.log"
    proc = run("log", "--tools", str(TOOLS / "hostapi.py"), "--args", '{"count": 2}', "--log-file", str(log))
    assert proc.returncode == 0
    lines = [line for line in log.read_text().splitlines() if "record " in line]
    assert len(lines) == 2
    assert "WARNING xcsh_run.tool [tool=log call=cli-" in lines[0]
    call_id = lines[0].split("call=", 1)[1].split()[0]
    assert lines[0].endswith(f"record 0 from {call_id}")


def test_list_and_describe_start_no_spare_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """They never call a tool: a spare worker would be started only to be stopped."""
    from xcsh_run._cli import app as _app
    from xcsh_run._cli import run as _cli

    asked: list[object] = []
    real = _app.open_runner

    def recording(*args: object, **options: object) -> object:
        asked.append(options.get("spare_workers", "default"))
        return real(*args, **options)

    # list and describe (like TOOL --help) open their runners through app.open_cli_runner.
    monkeypatch.setattr(_app, "open_runner", recording)
    monkeypatch.setattr(_cli, "configure_log_file", lambda *_, **__: None)  # no handler on this process's logger
    for argv in (["list", "--tools", str(TOOLS / "basic.py")], ["describe", "add", "--tools", str(TOOLS / "basic.py")]):
        with pytest.raises(SystemExit) as exited:
            _cli.main(argv)
        assert exited.value.code == 0, argv
    assert asked == [0, 0]


def test_ctrl_c_before_any_command_runs_exits_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A KeyboardInterrupt while typer builds the command (before trio, before any worker) is a plain exit 130."""
    from xcsh_run._cli import run as _cli

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_cli, "_command_tree", lambda: interrupted)
    with pytest.raises(SystemExit) as exited:
        _cli.main(["add", "--args", "{}"])
    assert exited.value.code == 130
    assert capsys.readouterr().err == "xcsh-run: interrupted by SIGINT\n"


def test_every_command_is_known_to_the_tool_shorthand() -> None:
    """`xcsh-run NAME` runs a tool unless NAME is a command: the list it checks (and reproducers use) is complete."""
    from xcsh_run._cli import run as _cli

    assert {command.name for command in _cli.app.registered_commands} == set(_cli.COMMANDS)
