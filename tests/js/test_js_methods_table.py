"""The Bun worker's method table (worker/js/methods.ts) against the Python one (worker/protocol/methods.py).

methods.ts is a hand copy of methods.py, and methods.py is the truth. Bun
imports methods.ts and prints what it declares (tiny script below); the test
builds the same description from methods.py's Method/Notice objects and msgspec
Struct fields and compares the two:

1. Every request and notification: its name, sender, allowed states and the
   states it moves to; the State enum's names and values.
2. For every method the host sends but ``initialize`` (decoded by the Python
   launch step before Bun starts): the params fields, in order, and which are
   required (a Struct field without a default).
3. What ``checkParams`` says about params, against what msgspec says decoding
   them into the params Struct: for non-objects, ``{}``, a minimal valid
   object, each required field left out, and each field set to each of a set
   of JSON probes. This holds the field types, not only their names.

Not compared: the params of what the worker sends, and results. methods.ts
declares no shape for them; the host decodes them with methods.py's types
(tests/js/test_js_worker*.py see a field the Bun worker leaves out).

Each difference is one line naming the method and the field and the file to
update. Negative controls feed the comparison mutated tables (and Bun a
mutated copy of methods.ts), so the test cannot pass because it is broken.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests._support.js import BUN, require_bun
from xcsh_run.worker.protocol.methods import WORKER_PROTOCOL, State

require_bun()
pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
JS_DIR = ROOT / "worker" / "js"
METHODS_TS = JS_DIR / "methods.ts"
BUNFIG = JS_DIR / "bunfig.toml"
TS, PY = "worker/js/methods.ts", "worker/protocol/methods.py"
NOT_SHAPED = frozenset({"initialize"})  # decoded by worker/_runtime/handoff.py, before Bun runs

# JSON values each params field is tried with (whole numbers only: JSON.parse reads 1.0 as 1); the
# odd strings are for the words of a refused Literal, which quote the value as Python's repr does.
PROBES: list[Any] = [
    "s", "", "call", "result", "apply", "discard", "it's", 'say "it\'s"', "a\\b\n\t\x01\x7f", "é\u00a0\u2028\U0001f600",
    "x" * 100, None, True, False, 0, -7, 1.5, {}, {"k": 1}, [], [1],
]  # fmt: skip

DUMP = r"""
const m = await import(process.argv[2]);
const cases = JSON.parse(await Bun.stdin.text());
const name = (s) => (s === null ? null : m.State[s] ?? `unknown state ${s}`);
const states = (list) => list.map(name).sort();
const out = {
  states: Object.fromEntries(Object.entries(m.State).filter(([, v]) => typeof v === "number")),
  requests: Object.fromEntries(Object.entries(m.REQUESTS).map(([key, r]) => [key, {
    name: r.name, sender: r.sender, allowed: states(r.allowed),
    on_request: name(r.onRequest), on_result: name(r.onResult),
  }])),
  notices: Object.fromEntries(Object.entries(m.NOTICES).map(([key, n]) => [key, {
    name: n.name, sender: n.sender, allowed: states(n.allowed), on_receive: name(n.onReceive), lenient: n.lenient,
  }])),
  shapes: Object.fromEntries(Object.entries(m.SHAPES).map(([key, shape]) => [
    key, shape.map(([field, , required]) => [field, required]),
  ])),
  checks: cases.map(([method, params]) => m.checkParams(method, params)),
  inherited: ["constructor", "toString", "__proto__", "hasOwnProperty"].filter(
    (k) => m.REQUESTS[k] !== undefined || m.NOTICES[k] !== undefined || m.SHAPES[k] !== undefined),
};
console.log(JSON.stringify(out));
"""


# --- the two sides as one description -------------------------------------------------


def _name(state: State | None) -> str | None:
    return None if state is None else state.name


def python_table() -> dict[str, Any]:
    """methods.py's WORKER_PROTOCOL in the shape the Bun script prints (``checks`` aside)."""
    requests = {
        m.name: {
            "name": m.name,
            "sender": m.sender.value,
            "allowed": sorted(s.name for s in m.allowed),
            "on_request": _name(m.on_request),
            "on_result": _name(m.on_result),
        }
        for m in WORKER_PROTOCOL.requests.values()
    }
    notices = {
        n.name: {
            "name": n.name,
            "sender": n.sender.value,
            "allowed": sorted(s.name for s in n.allowed),
            "on_receive": _name(n.on_receive),
            "lenient": n.lenient,
        }
        for n in WORKER_PROTOCOL.notices.values()
    }
    return {
        "states": {s.name: s.value for s in State},
        "requests": requests,
        "notices": notices,
        "shapes": {name: [[f.encode_name, f.required] for f in fields] for name, fields in _host_params().items()},
    }


def _host_params() -> dict[str, tuple[msgspec.structs.FieldInfo, ...]]:
    """The params fields of everything the host sends that methods.ts must check."""
    sent = [*WORKER_PROTOCOL.requests.values(), *WORKER_PROTOCOL.notices.values()]
    return {
        m.name: msgspec.structs.fields(m.params) for m in sent if m.sender.value == "host" and m.name not in NOT_SHAPED
    }


def check_cases() -> list[tuple[str, str, Any, str | None]]:
    """(method, what, params, msgspec's error or None) for the params of every host-sent method."""
    cases: list[tuple[str, str, Any, str | None]] = []
    for name, fields in _host_params().items():
        params_type = next(
            m.params for m in [*WORKER_PROTOCOL.requests.values(), *WORKER_PROTOCOL.notices.values()] if m.name == name
        )

        def verdict(params: Any, params_type: Any = params_type) -> str | None:
            try:
                msgspec.json.decode(json.dumps(params).encode(), type=params_type)
            except msgspec.ValidationError as exc:
                return str(exc)
            return None

        # The smallest valid params: each required field with the first probe its type takes.
        base = {f.encode_name: next(p for p in PROBES if _fits(f, p)) for f in fields if f.required}
        cases += [(name, f"params {v!r}", v, verdict(v)) for v in (None, [], "s", 1)]
        cases += [(name, "params {}", {}, verdict({})), (name, f"params {base!r}", base, verdict(base))]
        for field in fields:
            if field.required:
                rest = {k: v for k, v in base.items() if k != field.encode_name}
                cases.append((name, f"field {field.encode_name!r} left out", rest, verdict(rest)))
            for probe in PROBES:
                params = {**base, field.encode_name: probe}
                cases.append((name, f"field {field.encode_name!r} = {probe!r}", params, verdict(params)))
    return cases


def _fits(field: msgspec.structs.FieldInfo, value: Any) -> bool:
    """True when ``value`` decodes as ``field``'s type (msgspec, the field on its own)."""
    try:
        msgspec.json.decode(json.dumps(value).encode(), type=field.type)
    except msgspec.ValidationError:
        return False
    return True


def ts_table(methods_ts: Path, cases: list[tuple[str, str, Any, str | None]], scratch: Path) -> dict[str, Any]:
    """What ``methods_ts`` declares, and its ``checkParams`` verdict on each case, printed by Bun."""
    assert BUN is not None
    script = scratch / "dump_methods.ts"
    script.write_text(DUMP)
    # --config=: Bun 1.4 takes `-c <path>` as the script to run, not as the config.
    argv = [BUN, "--no-install", "--no-env-file", f"--config={BUNFIG}", str(script), str(methods_ts)]
    stdin = json.dumps([[method, params] for method, _, params, _ in cases])
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30, cwd=methods_ts.parent)
    assert proc.returncode == 0, f"bun could not print {methods_ts}'s table ({proc.returncode}):\n{proc.stderr}"
    table: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return table


# --- the comparison -------------------------------------------------------------------


def compare(py: dict[str, Any], ts: dict[str, Any]) -> list[str]:
    """One line per difference; methods.py is the truth."""
    diffs: list[str] = []
    fix = f"update {TS}"
    for name in sorted(py["states"].keys() | ts["states"].keys()):
        if py["states"].get(name) != ts["states"].get(name):
            diffs.append(
                f"State.{name}: {py['states'].get(name)} in {PY}, {ts['states'].get(name)} in {TS}: {fix} (State)"
            )
    for kind, table in (("request", "requests"), ("notification", "notices")):
        for name in sorted(py[table].keys() | ts[table].keys()):
            if name not in ts[table]:
                diffs.append(f"{kind} {name!r} is in {PY} but not in {TS}: add it to {TS} ({table.upper()})")
                continue
            if name not in py[table]:
                diffs.append(f"{kind} {name!r} is in {TS} but not in {PY}: remove it from {TS}, or declare it in {PY}")
                continue
            want, got = py[table][name], ts[table][name]
            for key in sorted(want.keys() | got.keys()):
                if want.get(key) != got.get(key):
                    diffs.append(
                        f"{kind} {name!r}: {key} is {want.get(key)!r} in {PY} but {got.get(key)!r} in {TS}: {fix}"
                    )
    for name in sorted(py["shapes"].keys() | ts["shapes"].keys()):
        if name not in ts["shapes"]:
            diffs.append(f"params of {name!r}: the host sends it but {TS} has no shape for it: add it to {TS} (SHAPES)")
            continue
        if name not in py["shapes"]:
            diffs.append(f"params of {name!r}: {TS} has a shape for it, but the host does not send it in {PY}: {fix}")
            continue
        want_fields, got_fields = dict(py["shapes"][name]), dict(ts["shapes"][name])
        for field in [f for f, _ in py["shapes"][name]] + [f for f in got_fields if f not in want_fields]:
            if field not in got_fields:
                diffs.append(f"params of {name!r}: field {field!r} is in {PY} but not in {TS}: {fix} (SHAPES)")
            elif field not in want_fields:
                diffs.append(f"params of {name!r}: field {field!r} is in {TS} but not in {PY}: {fix} (SHAPES)")
            elif want_fields[field] != got_fields[field]:
                how = {True: "required", False: "optional"}
                diffs.append(
                    f"params of {name!r}: field {field!r} is {how[want_fields[field]]} in {PY} "
                    f"but {how[got_fields[field]]} in {TS}: {fix} (SHAPES)"
                )
        if want_fields.keys() == got_fields.keys() and list(want_fields) != list(got_fields):
            diffs.append(
                f"params of {name!r}: fields in the order {list(got_fields)} in {TS}, {list(want_fields)} in {PY} "
                f"(the first missing field named differs): {fix} (SHAPES)"
            )
    return diffs


def compare_checks(cases: list[tuple[str, str, Any, str | None]], verdicts: list[str | None]) -> list[str]:
    """One line per case where checkParams and msgspec disagree."""
    assert len(verdicts) == len(cases), "the Bun script answered a different number of cases"
    return [
        f"params of {method!r}, {what}: {PY} (msgspec) says {want!r}, checkParams in {TS} says {got!r}: "
        f"update the field's check in {TS} (SHAPES)"
        for (method, what, _, want), got in zip(cases, verdicts, strict=True)
        if want != got
    ]


# --- the tests ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cases() -> list[tuple[str, str, Any, str | None]]:
    return check_cases()


@pytest.fixture(scope="module")
def ts(cases: list[tuple[str, str, Any, str | None]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return ts_table(METHODS_TS, cases, tmp_path_factory.mktemp("methods_ts"))


def test_methods_ts_declares_what_methods_py_declares(ts: dict[str, Any]) -> None:
    diffs = compare(python_table(), ts)
    assert not diffs, "\n".join(diffs)


def test_names_of_object_members_are_not_methods(ts: dict[str, Any]) -> None:
    """The host may send any method name: `toString` must be unknown, not Object.prototype's."""
    assert ts["inherited"] == [], f"{TS}'s tables find {ts['inherited']}: give them no prototype"


def test_check_params_says_what_msgspec_says(cases: list[tuple[str, str, Any, str | None]], ts: dict[str, Any]) -> None:
    # Both kinds of verdict occur, or the probes test nothing.
    assert any(want is None for *_, want in cases) and any(want is not None for *_, want in cases)
    diffs = compare_checks(cases, ts["checks"])
    assert not diffs, "\n".join(diffs)


def test_every_host_field_is_probed_both_ways(cases: list[tuple[str, str, Any, str | None]]) -> None:
    """Each field takes some probe and refuses another (Any aside), so its type is really compared."""
    for name, fields in _host_params().items():
        for field in fields:
            probe = f"field {field.encode_name!r} ="
            verdicts = {want is None for method, what, _, want in cases if method == name and what.startswith(probe)}
            if field.type is not Any and field.type is not msgspec.Raw:
                assert verdicts == {True, False}, f"{name} {field.encode_name}: every probe gives {verdicts}"


# --- negative controls: the comparison sees each kind of difference -------------------


def _mutations(ts: dict[str, Any]) -> list[tuple[str, dict[str, Any], list[str]]]:
    """(what, a mutated copy of ``ts``, words the report must contain)."""
    out: list[tuple[str, dict[str, Any], list[str]]] = []

    def mutated(what: str, words: list[str], change: Any) -> None:
        table = copy.deepcopy(ts)
        change(table)
        out.append((what, table, words))

    mutated("method dropped", ["'render'", "not in worker/js/methods.ts"], lambda t: t["requests"].pop("render"))
    mutated("method added", ["'frobnicate'", "not in worker/protocol/methods.py"],
            lambda t: t["requests"].update(frobnicate=dict(t["requests"]["call"], name="frobnicate")))  # fmt: skip
    mutated("notice dropped", ["'log'", "notification"], lambda t: t["notices"].pop("log"))
    mutated("sender changed", ["'update'", "sender", "'host'"], lambda t: t["notices"]["update"].update(sender="host"))
    mutated("state added", ["'call'", "allowed", "CLOSING"],
            lambda t: t["requests"]["call"].update(allowed=["CLOSING", "LOADED", "READY"]))  # fmt: skip
    mutated(
        "transition lost", ["'shutdown'", "on_request"], lambda t: t["requests"]["shutdown"].update(on_request=None)
    )
    mutated("enum value", ["State.CLOSED"], lambda t: t["states"].update(CLOSED=7))
    mutated("field dropped", ["'load'", "'factory'", "not in worker/js/methods.ts"],
            lambda t: t["shapes"].update(load=[f for f in t["shapes"]["load"] if f[0] != "factory"]))  # fmt: skip
    mutated("field added", ["'session'", "'extra'", "not in worker/protocol/methods.py"],
            lambda t: t["shapes"]["session"].append(["extra", False]))  # fmt: skip
    mutated("required flipped", ["'$/cancel'", "'reason'", "required in", "optional in worker/js"],
            lambda t: t["shapes"]["$/cancel"].__setitem__(1, ["reason", False]))  # fmt: skip
    mutated("order changed", ["'call'", "order"], lambda t: t["shapes"]["call"].reverse())
    mutated("shape dropped", ["'ui/changed'", "no shape"], lambda t: t["shapes"].pop("ui/changed"))
    return out


def test_the_comparison_reports_every_kind_of_difference(ts: dict[str, Any]) -> None:
    py = python_table()
    base = set(compare(py, ts))  # the real verdict is the first test's: here only what each mutation adds counts
    for what, table, words in _mutations(ts):
        new = [line for line in compare(py, table) if line not in base]
        assert new, f"{what}: the comparison saw no difference"
        assert any(all(word in line for word in words) for line in new), f"{what}: {words} not in {new}"


def test_the_check_comparison_reports_a_changed_verdict(
    cases: list[tuple[str, str, Any, str | None]], ts: dict[str, Any]
) -> None:
    verdicts = list(ts["checks"])
    at = next(i for i, (method, what, _, want) in enumerate(cases) if method == "render" and "'kind' = 'call'" in what)
    assert cases[at][3] is None
    verdicts[at] = "Invalid enum value 'call' - at `$.kind`"
    diffs = [line for line in compare_checks(cases, verdicts) if line not in compare_checks(cases, ts["checks"])]
    assert len(diffs) == 1 and "'render'" in diffs[0] and "'kind'" in diffs[0] and TS in diffs[0]


def test_bun_reads_a_mutated_methods_ts(tmp_path: Path, cases: list[tuple[str, str, Any, str | None]]) -> None:
    """The table comes from the TS itself: a copy with `factory` required and `call` out of LOADED disagrees."""
    for name in ("methods.ts", "frames.ts"):
        shutil.copyfile(JS_DIR / name, tmp_path / name)
    source = (tmp_path / "methods.ts").read_text()
    edits = [
        ('["factory", str, false]', '["factory", str, true]'),
        ('method("call", "host", SERVING)', 'method("call", "host", [S.READY])'),
    ]
    for old, new in edits:
        assert source.count(old) == 1, f"the control's edit target {old!r} is no longer in {TS}: update this test"
        source = source.replace(old, new)
    (tmp_path / "methods.ts").write_text(source)
    diffs = compare(python_table(), ts_table(tmp_path / "methods.ts", cases, tmp_path))
    assert any("'load'" in d and "'factory'" in d and "optional in worker/protocol" in d for d in diffs), diffs
    assert any("'call'" in d and "allowed" in d for d in diffs), diffs
