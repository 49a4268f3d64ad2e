"""`xcsh-run batch`, as a real CLI process: output lines, resume, stdin, the progress bar, exit codes, Ctrl-C.

The tool (tests/fixtures/tools/batch.py) appends each call's text to a counter file
when asked: that file says which inputs really ran, so a resumed batch is
seen to run only what was missing.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests._support.leftovers import cgroup_dirs, remove_cgroups, workdirs
from tests.conftest import TOOLS, XCSH_RUN

BATCH = str(TOOLS / "batch.py")
DEADLINE = 60.0


def write_inputs(path: Path, n: int, **extra: Any) -> None:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"text": f"t{i}", **extra}) + "\n")


def batch(*args: str, stdin: str | None = None, timeout: float = DEADLINE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, "batch", "batch_echo", "--tools", BATCH, "--grace", "0.5", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def results(text: str) -> dict[int, dict[str, Any]]:
    """index -> result line; every line must be one whole result, and no index twice."""
    out: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        value = json.loads(line)
        assert set(value) >= {"index", "content", "details", "is_error", "error"}, value
        assert value["index"] not in out, f"index {value['index']} twice"
        out[value["index"]] = value
    return out


def counted(path: Path) -> list[str]:
    return sorted(path.read_text().split()) if path.exists() else []


@pytest.mark.timeout(120)
def test_a_batch_writes_one_line_per_input_and_a_summary(tmp_path: Path) -> None:
    inputs = tmp_path / "args.jsonl"
    write_inputs(inputs, 200)
    out = tmp_path / "out.jsonl"
    proc = batch("--input", str(inputs), "--output", str(out), "--concurrency", "4")
    assert proc.returncode == 0, proc.stderr
    got = results(out.read_text())
    assert sorted(got) == list(range(200))
    assert all(v["content"] == [{"type": "text", "text": f"t{i}"}] and v["error"] is None for i, v in got.items())
    # stderr is no terminal: no progress bar, only the summary.
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("xcsh-run batch: 200 calls: 200 ok (200 run now in "), proc.stderr
    assert "calls/s" in lines[0] and "\r" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.timeout(120)
def test_a_rerun_resumes_running_only_the_missing_indices(tmp_path: Path) -> None:
    inputs = tmp_path / "args.jsonl"
    counter = tmp_path / "counter"
    write_inputs(inputs, 120, counter=str(counter))
    out = tmp_path / "out.jsonl"
    assert batch("--input", str(inputs), "--output", str(out)).returncode == 0
    # As a run killed mid-write leaves it: 50 whole lines, then half of the 51st.
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:50]) + lines[50][: len(lines[50]) // 2])
    kept = {json.loads(line)["index"] for line in lines[:50]}
    counter.unlink()

    proc = batch("--input", str(inputs), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert counted(counter) == sorted(f"t{i}" for i in range(120) if i not in kept)
    assert sorted(results(out.read_text())) == list(range(120))  # the cut line is gone, its input ran again
    assert "120 calls: 120 ok (70 run now in" in proc.stderr and f"50 already in {out}" in proc.stderr

    # Nothing left to do: nothing runs, and the verdict is the whole file's.
    counter.unlink()
    again = batch("--input", str(inputs), "--output", str(out))
    assert again.returncode == 0 and not counter.exists()
    assert "120 calls: 120 ok (0 run now" in again.stderr


@pytest.mark.timeout(120)
def test_stdin_in_stdout_out_and_bad_lines_are_invalid_arguments(tmp_path: Path) -> None:
    lines = [json.dumps({"text": f"t{i}"}) for i in range(20)]
    lines[3] = "{not json"
    lines[7] = "[1, 2]"
    lines[11] = json.dumps({"text": 5})  # fails the tool's schema
    lines[15] = json.dumps({"text": "boom", "crash": True})
    proc = batch("--input", "-", "--concurrency", "3", stdin="\n".join(lines) + "\n")
    assert proc.returncode == 1, proc.stderr
    got = results(proc.stdout)
    assert sorted(got) == list(range(20))
    for index in (3, 7, 11):
        assert got[index]["error"]["kind"] == "invalid_arguments", got[index]
    assert got[3]["error"]["message"].startswith("line 4 is not valid JSON")
    assert got[7]["error"]["message"].startswith("line 8 must be a JSON object")
    assert got[15]["error"]["kind"] == "crashed"
    assert all(got[i]["error"] is None for i in got if i not in (3, 7, 11, 15))
    assert "20 calls: 16 ok, 1 crashed, 3 invalid_arguments" in proc.stderr, proc.stderr


@pytest.mark.timeout(60)
def test_usage_errors_exit_2_and_write_nothing(tmp_path: Path) -> None:
    missing = batch("--input", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "cannot read --input" in missing.stderr and missing.stdout == ""
    inputs = tmp_path / "args.jsonl"
    write_inputs(inputs, 3)
    unknown = subprocess.run(
        [XCSH_RUN, "batch", "no_such_tool", "--tools", BATCH, "--input", str(inputs)],
        capture_output=True, text=True, timeout=DEADLINE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert unknown.returncode == 2 and "no tool named 'no_such_tool'" in unknown.stderr and unknown.stdout == ""
    assert batch("--input", str(inputs), "--concurrency", "0").returncode == 2
    # An --output that is not a batch's output (a bad line before the last) is refused, not overwritten.
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"index": 0}\nnot a result\n{"index": 1}\n')
    refused = batch("--input", str(inputs), "--output", str(foreign))
    assert refused.returncode == 2 and "line 2 is not JSON" in refused.stderr, refused.stderr
    assert foreign.read_text() == '{"index": 0}\nnot a result\n{"index": 1}\n'
    # An output that fails to take a line (a full disk) stops the batch: exit 2, and why.
    full = batch("--input", str(inputs), "--output", "/dev/full")
    assert full.returncode == 2 and "cannot write --output '/dev/full'" in full.stderr, full.stderr
    assert "Traceback" not in full.stderr


@pytest.mark.timeout(120)
def test_a_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    import pty

    inputs = tmp_path / "args.jsonl"
    write_inputs(inputs, 30)
    main, sub = pty.openpty()
    proc = subprocess.Popen(
        [XCSH_RUN, "batch", "batch_echo", "--tools", BATCH, "--input", str(inputs), "--output", str(tmp_path / "o")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sub,
    )  # fmt: skip
    os.close(sub)
    shown = b""
    try:
        deadline = time.monotonic() + DEADLINE
        # Read while it runs: a full terminal buffer would block the bar, and the batch with it.
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the process is gone and the terminal drained
                break
            if not chunk:
                break
            shown += chunk
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = shown.decode(errors="replace")
    assert "30/30" in text, text
    assert "calls/s" in text and "30 calls: 30 ok" in text


@pytest.mark.timeout(120)
def test_ctrl_c_stops_cleanly_and_the_output_resumes(tmp_path: Path) -> None:
    inputs = tmp_path / "args.jsonl"
    counter = tmp_path / "counter"
    quick = [{"text": f"t{i}", "counter": str(counter)} for i in range(6)]
    slow = [{"text": f"t{i}", "counter": str(counter), "seconds": 60} for i in range(6, 30)]
    inputs.write_text("".join(json.dumps(args) + "\n" for args in quick + slow))
    out = tmp_path / "out.jsonl"
    tmpdir = tmp_path / "tmpdir"  # the CLI's own: its workdirs land here
    tmpdir.mkdir()
    proc = subprocess.Popen(
        [XCSH_RUN, "batch", "batch_echo", "--tools", BATCH, "--grace", "0.5", "--concurrency", "3",
         "--input", str(inputs), "--output", str(out)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE
        # The six quick calls, then three slow ones running: the calls are other
        # processes, and their file is what this test sees of them.
        while len(counted(counter)) < 9 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert len(counted(counter)) == 9, counted(counter)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)  # far less than the slow calls' 60 s: they were stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left_cgroups = cgroup_dirs([proc.pid])
    remove_cgroups(left_cgroups)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "ExceptionGroup" not in err, err
    assert "stopping 3 running calls" in err and "run the same command again to resume" in err, err
    done = results(out.read_text())  # every line whole
    assert sorted(done) == list(range(6))  # the cancelled calls are not in it: a rerun runs them
    assert workdirs(tmpdir) == [] and left_cgroups == []

    # The rerun, with the slow inputs made quick: only the rest runs, every index ends up once.
    counter.unlink()
    inputs.write_text("".join(json.dumps({"text": f"t{i}", "counter": str(counter)}) + "\n" for i in range(30)))
    rerun = batch("--input", str(inputs), "--output", str(out), "--concurrency", "3")
    assert rerun.returncode == 0, rerun.stderr
    assert counted(counter) == sorted(f"t{i}" for i in range(6, 30))
    assert sorted(results(out.read_text())) == list(range(30))


@pytest.mark.timeout(120)
def test_a_second_ctrl_c_kills_calls_that_ignore_the_first(tmp_path: Path) -> None:
    inputs = tmp_path / "args.jsonl"
    counter = tmp_path / "counter"
    inputs.write_text("".join(json.dumps({"text": f"t{i}", "counter": str(counter)}) + "\n" for i in range(10)))
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        [XCSH_RUN, "batch", "batch_stubborn", "--tools", BATCH, "--grace", "60", "--concurrency", "2",
         "--input", str(inputs), "--output", str(out)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE
        while len(counted(counter)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)  # the calls are other processes: their file is what the test sees
        proc.send_signal(signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)  # the calls ignore it, and their grace is 60 s
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)  # well under the grace: killed now
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    remove_cgroups(cgroup_dirs([proc.pid]))
    assert proc.returncode == 130, err
    assert "killing 2 running calls" in err, err
    assert out.read_text() == ""  # nothing finished: everything runs again on resume
    assert len(counted(counter)) == 2  # the first signal started no new call
