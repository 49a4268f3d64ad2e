"""The Bun worker's tool API (worker/js/api.ts, worker/js/exec.ts), through its HostLink seam.

Each test runs Bun on tests/fixtures/js_api/harness.ts, which builds ``makeApi`` with a
fake HostLink (it records the notifications and requests the API sends and
answers ``ui`` requests from a script), runs one case and prints a JSON report.
The processes ``exec`` starts are real; the tree tests check by pid that none
survives.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "fixtures" / "js_api" / "harness.ts"
BUNFIG = ROOT / "worker" / "js" / "bunfig.toml"
_CACHE = ROOT / ".cache" / "bun" / "node_modules"
BUN = os.environ.get("XCSH_RUN_BUN") or str(_CACHE / "bun" / "bin" / "bun.exe")
TYPEBOX = _CACHE / "@sinclair" / "typebox"

pytestmark = [
    pytest.mark.skipif(not os.access(BUN, os.X_OK), reason=f"no Bun at {BUN} (run `make bun` or set XCSH_RUN_BUN)"),
    pytest.mark.timeout(60),
]

LOG_DROPPED = "log records dropped (a call may log 1000 records or 262144 characters)"


def run_case(name: str, arg: str = "", *, deadline: float = 30.0) -> Any:
    """Run one harness case and return its JSON report."""
    env = {**os.environ, "XCSH_JSAPI_TYPEBOX": str(TYPEBOX), "XCSH_JSAPI_PROBE": "probe"}
    # --config=: Bun 1.4 takes `-c <path>` as the script to run, not as the config.
    argv = [BUN, "--no-install", "--no-env-file", f"--config={BUNFIG}", str(HARNESS), name, arg]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=deadline, env=env, cwd=ROOT)
    assert proc.returncode == 0, f"harness {name} failed ({proc.returncode}):\n{proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    assert lines, f"harness {name} printed nothing; stderr:\n{proc.stderr}"
    return json.loads(lines[-1])


def _alive(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie waiting to be reaped is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def assert_all_dead(pids: list[int], within: float = 5.0) -> None:
    # A SIGKILLed process is dead at once, but reaping its zombie (by init)
    # and the harness's own exit may lag: wait for it, with a deadline.
    deadline = time.monotonic() + within
    while (alive := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive, f"processes started by exec survived: {alive}"


# ---------------------------------------------------------------- exec


def test_exec_captures_output_and_exit_code_without_a_shell() -> None:
    report = run_case("basic")
    assert report["mixed"] == {"stdout": "out\n", "stderr": "err\n", "code": 3, "killed": False}
    # No shell: spaces, globs and $VARS reach the program as they are.
    assert report["ok"]["stdout"] == "a b|*|$HOME|"
    # UTF-8, with replacement for invalid bytes.
    assert report["utf8"]["stdout"] == "café \ufffd"


def test_exec_reports_a_signal_death_as_minus_the_signal_not_killed() -> None:
    report = run_case("signal_code")
    assert report["kill9"] == {"stdout": "", "stderr": "", "code": -9, "killed": False}
    assert report["term"]["code"] == -15
    assert report["term"]["killed"] is False


def test_exec_options_env_input_cwd(tmp_path: Path) -> None:
    report = run_case("options", str(tmp_path))
    # env is the whole environment (HOME is not inherited), as in the Python worker.
    assert report["env"]["stdout"] == "bar|unset\n"
    assert report["inherit"]["stdout"] == "probe\n"
    assert report["input"]["stdout"] == "line1\nline2"
    assert report["bytes"]["stdout"].split() == ["00", "ff", "0a"]
    # Without input, stdin is /dev/null: cat ends at once instead of waiting.
    assert report["noInput"] == {"stdout": "", "stderr": "", "code": 0, "killed": False}
    assert report["cwd"]["stdout"] == "/\n"
    # The default working directory is api.cwd (the link's), as in the original.
    assert report["defaultCwd"]["stdout"] == f"{tmp_path}\n"


def test_exec_rejects_when_the_program_cannot_start(tmp_path: Path) -> None:
    report = run_case("enoent", str(tmp_path))
    assert report["program"]["code"] == "ENOENT"
    assert "no-such-program-xcsh" in report["program"]["message"]
    assert "no such program on PATH" in report["program"]["message"]
    assert "no such program" in report["path"]["message"]
    assert "working directory" in report["cwd"]["message"]
    assert str(tmp_path / "missing") in report["cwd"]["message"]
    assert report["args"]["name"] == "TypeError"


def _check_tree(report: dict[str, Any]) -> None:
    pids = report["pids"]
    group_child, setsid_child, shell = pids
    before = report["before"]
    assert all(info is not None for info in before), f"the tree was not all alive before the kill: {before}"
    # The setsid() grandchild really had left the program's session.
    assert before[1]["session"] == setsid_child != shell
    assert before[0]["session"] == shell
    assert report["result"]["killed"] is True
    assert_all_dead([group_child, setsid_child, shell])


def test_exec_timeout_kills_the_tree(tmp_path: Path) -> None:
    report = run_case("timeout", str(tmp_path))
    assert report["result"] == {"stdout": "", "stderr": "", "code": -15, "killed": True}
    assert 1900 <= report["ms"] < 8000
    _check_tree(report)


def test_exec_abort_kills_the_tree_with_a_daemon_grandchild(tmp_path: Path) -> None:
    report = run_case("abort_tree", str(tmp_path))
    assert report["result"]["code"] == -15
    assert report["ms"] < 8000
    _check_tree(report)


def test_exec_abort_escalates_to_sigkill_for_a_tree_ignoring_sigterm(tmp_path: Path) -> None:
    report = run_case("abort_tree_stubborn", str(tmp_path))
    # SIGTERM is ignored by the whole tree: SIGKILL after the grace second.
    assert report["result"]["code"] == -9
    assert 900 <= report["ms"] < 8000
    _check_tree(report)


def test_exec_with_an_aborted_signal_runs_nothing(tmp_path: Path) -> None:
    report = run_case("pre_aborted", str(tmp_path))
    assert report == {"result": {"stdout": "", "stderr": "", "code": -15, "killed": True}, "ran": False}


def test_exec_does_not_wait_for_a_grandchild_holding_stdout() -> None:
    report = run_case("daemon")
    assert report["alive"] is True  # the daemon still held the pipe when exec returned
    assert report["result"]["code"] == 0
    assert report["result"]["killed"] is False
    assert report["result"]["stdout"].strip().isdigit()
    assert report["ms"] < 5000
    assert_all_dead([int(report["result"]["stdout"])])


# ------------------------------------------------------------------ ui


def test_ui_without_a_host_ui_answers_the_no_op_values_and_sends_nothing() -> None:
    report = run_case("ui_noop")
    assert report == {
        "hasUI": False,
        "select": "undefined",
        "confirm": False,
        "input": "undefined",
        "editor": "undefined",
        "editorTextIsString": True,  # "" at once, not a promise, as the original's no-op UI
        "editorText": "",
        "notify": "undefined",
        "setStatus": "undefined",
        "setEditorText": "undefined",
        "custom": "undefined",
        "elicit": {"action": "cancel", "content": None},
        "themed": "text",
        "sent": [],
        "sample": "undefined",  # the host's null: no client can sample
        "sampleSent": [
            {"kind": "request", "method": "ui", "params": {"call_id": None, "method": "sample", "args": [
                {"messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}],
                 "maxTokens": 5, "temperature": 0}]}},
        ],
    }  # fmt: skip


def test_ui_with_a_host_ui_sends_requests_and_notifications_in_protocol_shape() -> None:
    report = run_case("ui_bridged")
    assert report["hasUI"] is True
    assert report["select"] == "b"
    assert report["confirm"] is True
    assert report["input"] == "undefined"  # the host's null
    assert report["editor"] == "edited"
    assert report["editorText"] == "draft"
    assert report["refused"] == "the host refused ui: no terminal"
    assert report["elicit"] == {"action": "accept", "content": {"city": "Oslo"}}
    assert report["sample"]["content"] == {"type": "text", "text": "hi"}
    sent = [(s["kind"], s["method"], s["params"]["method"], s["params"]["args"]) for s in report["sent"]]
    assert sent == [
        ("request", "ui", "select", ["Pick", ["a", "b"]]),
        ("request", "ui", "confirm", ["Sure?", "Delete it?"]),
        ("request", "ui", "input", ["Name", None]),
        ("request", "ui", "editor", ["Body", None]),
        ("request", "ui", "get_editor_text", []),
        ("request", "ui", "elicit", ["Where?", {"type": "object", "properties": {"city": {"type": "string"}}}]),
        (
            "request",
            "ui",
            "sample",
            [
                {
                    "messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}],
                    "maxTokens": 1000,
                    "systemPrompt": "terse",
                    "stopSequences": ["\n"],
                }
            ],
        ),
        ("notify", "ui", "notify", ["hello", "info"]),
        ("notify", "ui", "notify", ["bad", "error"]),
        ("notify", "ui", "set_status", ["k", None]),
        ("notify", "ui", "set_status", ["k", "busy"]),
        ("notify", "ui", "set_editor_text", ["new text"]),
        ("request", "ui", "confirm", ["a", "b"]),
    ]
    assert {s["params"]["call_id"] for s in report["sent"]} == {"c1"}
    # hasUI follows the link (ui/changed), also for a call already running.
    assert report["hasUIAfter"] is False
    assert report["selectAfter"] == "undefined"
    assert report["sentAfterDetach"] == 0


# -------------------------------------------------------------- logger


def test_logger_levels_formatting_and_per_call_bounds() -> None:
    report = run_case("logger")
    first = [(s["method"], s["params"]) for s in report["first"]]
    assert first == [
        ("log", {"call_id": "c1", "level": 10, "logger": "xcsh.tool", "message": "d"}),
        ("log", {"call_id": "c1", "level": 20, "logger": "xcsh.tool", "message": "a=1"}),
        ("log", {"call_id": "c1", "level": 30, "logger": "xcsh.tool", "message": "w { k: [ 1, 2 ] }"}),
        ("log", {"call_id": "c1", "level": 40, "logger": "xcsh.tool", "message": "boom"}),
        ("log", {"call_id": "c1", "level": 20, "logger": "xcsh.tool", "message": "plain"}),
    ]
    # 1005 records: 1000 sent, 5 counted and reported once the call ends.
    assert report["firstCall"] == 1000
    assert [s["params"] for s in report["afterEnd"]] == [
        {"call_id": "c1", "level": 30, "logger": "xcsh", "message": f"5 {LOG_DROPPED}"}
    ]
    # A new call has its own budget; a record over 256 Ki characters is dropped, and the ones after it.
    assert report["secondCall"] == 0
    dropped, outside = (s["params"] for s in report["tail"])
    assert dropped == {"call_id": "c2", "level": 30, "logger": "xcsh", "message": f"2 {LOG_DROPPED}"}
    assert outside == {"call_id": None, "level": 20, "logger": "xcsh.tool", "message": "outside"}


# ------------------------------------------------------ pending actions


def test_push_pending_action_ids_notifications_validation_and_bound() -> None:
    report = run_case("pending")
    assert report["ids"] == ["a1", "a2"]
    assert [s["params"] for s in report["sent"]] == [
        {"call_id": "c1", "action_id": "a1", "label": "first", "source_tool_name": "custom_tool"},
        {"call_id": "c1", "action_id": "a2", "label": "second", "source_tool_name": "editor",
         "details": {"diff": "+1"}},
    ]  # fmt: skip
    assert {s["method"] for s in report["sent"]} == {"pending/push"}
    errors = report["errors"]
    assert errors["notObject"]["name"] == "TypeError"
    assert errors["noLabel"]["message"] == "pushPendingAction: 'label' must be a non-empty string"
    assert errors["labelType"]["name"] == "TypeError"
    assert "'apply' must be a function" in errors["noApply"]["message"]
    assert "'reject' must be a function or absent" in errors["badReject"]["message"]
    assert "'details' must be JSON-serialisable" in errors["cyclic"]["message"]
    assert "'details' must be JSON-serialisable" in errors["bigint"]["message"]
    assert errors["tooBig"]["name"] == "RangeError"
    assert "1048576-byte limit" in errors["tooBig"]["message"]
    assert report["taken"] == {"label": "second", "sourceToolName": "editor", "details": {"diff": "+1"},
                               "apply": "applied: ok", "reject": "no"}  # fmt: skip
    assert report["afterTake"] == {"size": 1, "again": "undefined"}
    # 16 per worker: a1 is still held, so 15 more fit (a3..a17), then a refusal.
    filled = report["filled"]
    assert [f["returned"] for f in filled[:-1]] == [f"a{i}" for i in range(3, 18)]
    assert filled[-1]["name"] == "RangeError"
    assert "holds 16 pending actions already" in filled[-1]["message"]
    # Refused pushes send nothing: 2 + 15 notifications.
    assert report["sentTotal"] == 17


# -------------------------------------------------------------- typebox


def test_typebox_is_the_real_module_and_its_schemas_are_json_schema() -> None:
    if not (TYPEBOX / "package.json").is_file():
        pytest.skip(f"no TypeBox at {TYPEBOX} (run `make bun`)")
    report = run_case("typebox")
    assert report["schema"] == {
        "type": "object",
        "required": ["a"],
        "properties": {"a": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
    }
    assert report["kind"] == "Object"  # TypeBox's own Kind symbol: the real module
    assert report["same"] is True
    assert report["enum"] == {"type": "string", "enum": ["add", "remove"], "description": "op", "default": "add"}
    helpers = ["StringEnum", "ToolError", "Type", "logger", "events", "zod", "arktype"]
    tui = ["Text", "TruncatedText", "Spacer", "Container", "Box", "Markdown"]
    assert report["piKeys"] == sorted([*helpers, *tui, "visibleWidth", "truncateToWidth", "wrapTextWithAnsi"])
    assert report["toolError"] is True
    assert report["loggerShared"] is True


def test_a_missing_typebox_fails_only_where_it_is_used(tmp_path: Path) -> None:
    report = run_case("typebox_missing", str(tmp_path / "absent"))
    for key, where in (("empty", ""), ("absent", f" in {tmp_path / 'absent'}")):
        case = report[key]
        message = case["typebox"]["message"]
        assert message.startswith(f"TypeBox (@sinclair/typebox) was not found{where}:")
        assert "xcsh-run install-bun" in message
        assert "make bun" in message
        assert case["piType"]["message"] == message
        # The rest of the API works: a tool that does not use TypeBox still loads.
        assert case["enum"] == {"type": "string", "enum": ["a"]}
        assert case["hasUI"] is False
        assert case["cwd"] == str(ROOT)
