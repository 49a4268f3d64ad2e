"""The trio, blocking, asyncio and Ray runners have one surface: compared by introspection, then used.

The introspection half checks that every public member of :class:`Runner`
exists on :class:`BlockingRunner` and :class:`AsyncioRunner` (on
:class:`RayRunner`, all but what it deliberately lacks) with the same
parameters (names, kinds, defaults), async where it should be, and with the
Runner's own docstring: a face may add a note after it, never keep a copy of
its own. The behavioural half drives ``cancel`` and ``set_context`` through
the asyncio runner on a real worker.
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest

from xcsh_run import AsyncioRunner, BlockingRunner, RayRunner, Runner, open_asyncio_runner, open_blocking_runner
from xcsh_run._config import RunnerSettings

# Members of Runner the wrappers deliberately lack. Keep it short; each entry says why.
NOT_ON_WRAPPERS: dict[str, str] = {
    # A wrapper is closed by leaving its context manager, which also ends the runner's thread;
    # closing only the runner inside would leave that thread waiting for the block's end.
    "aclose": "closed by its context manager",
    # open_runner loads the tools; the wrappers' open_* functions take the same options and do it.
    "load": "loaded when opened",
    # The listener runs on the runner's own trio thread, which a wrapper's caller never is.
    "set_log_listener": "runs on the runner's thread",
}
# Members of Runner the Ray runner deliberately lacks, by reason. Keep it short.
NOT_ON_RAY: dict[str, str] = {
    **dict.fromkeys(
        ("cwd", "project_root", "sandbox", "default_timeout", "grace", "load_timeout", "max_frame_bytes", "policy_for"),
        "settings: each node's runner has its own (its cwd is the node's working_dir)",
    ),
    "load": "each node loads when the runner opens",
    **dict.fromkeys(
        (
            "context",
            "set_context",
            "set_ui_context",
            "pending_actions",
            "emit_session_event",
            "set_log_listener",
            "set_session_history",
            "session_history",
        ),
        "the host API stays on each node: ctx crosses per call (call_tool's ctx=), the nodes' tools have no UI",
    ),
    **dict.fromkeys(("render_call", "render_result"), "renders are for a UI beside the runner: the driver has none"),
    "statistics": "per node: in_flight() and worker_limit are the cluster's",
}
# Read-only state of every config-backed face, set when it is made (RunnerSettings declares them).
SETTINGS_ATTRIBUTES = ("config", "unenforced")
FACES = [(BlockingRunner, NOT_ON_WRAPPERS), (AsyncioRunner, NOT_ON_WRAPPERS), (RayRunner, NOT_ON_RAY)]


def _public(cls: type) -> dict[str, Any]:
    return {name: inspect.getattr_static(cls, name) for name in dir(cls) if not name.startswith("_")}


def _params(fn: Any) -> list[tuple[str, Any, Any]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def _same_parameters(face: type, runner: Any, other: Any) -> bool:
    ours, theirs = _params(runner), _params(other)
    if face is not RayRunner:
        return ours == theirs
    # Over Ray a member may take more (aclose's timeout), only with a default: every Runner call still works.
    return theirs[: len(ours)] == ours and all(
        default is not inspect.Parameter.empty for *_, default in theirs[len(ours) :]
    )


def _doc(member: Any) -> str | None:
    return inspect.getdoc(member.fget if isinstance(member, property) else member)


@pytest.mark.parametrize(("face", "lacks"), FACES, ids=lambda value: getattr(value, "__name__", ""))
def test_every_public_member_of_runner_is_on_each_face_with_the_same_parameters(
    face: type, lacks: dict[str, str]
) -> None:
    theirs = _public(face)
    problems: list[str] = []
    for name, member in _public(Runner).items():
        if name in lacks:
            assert name not in theirs, f"{name} is on {face.__name__} now: drop it from its allow-list"
            continue
        other = theirs.get(name)
        if other is None:
            problems.append(f"{face.__name__}.{name} is missing")
        elif isinstance(member, property):
            if not isinstance(other, property):
                problems.append(f"{face.__name__}.{name} is not a property")
            elif (member.fset is None) != (other.fset is None):
                problems.append(f"{face.__name__}.{name}: settable on one side only")
        elif not _same_parameters(face, member, other):
            problems.append(
                f"{face.__name__}.{name}{inspect.signature(other)} != Runner.{name}{inspect.signature(member)}"
            )
        else:
            # The blocking face blocks; the asyncio and Ray faces are async exactly where the trio runner is.
            want_async = face is not BlockingRunner and inspect.iscoroutinefunction(member)
            if inspect.iscoroutinefunction(other) != want_async:
                problems.append(f"{face.__name__}.{name} should {'' if want_async else 'not '}be async")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("face", "lacks"), FACES, ids=lambda value: getattr(value, "__name__", ""))
def test_each_face_member_has_the_runners_docstring_not_a_copy(face: type, lacks: dict[str, str]) -> None:
    """The Runner's text, then at most a note of the face's own (``xcsh_run._embed.surface.runner_doc``)."""
    problems: list[str] = []
    theirs = _public(face)
    for name, member in _public(Runner).items():
        other = theirs.get(name)
        if name in lacks or other is None:
            continue
        want, got = _doc(member), _doc(other)
        assert want, f"Runner.{name} has no docstring: it is the one place the member is documented"
        if got != want and not (got or "").startswith(want + "\n\n"):
            problems.append(f"{face.__name__}.{name}'s docstring is not Runner.{name}'s: share it with runner_doc")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("face", [Runner, BlockingRunner, AsyncioRunner])
def test_the_settings_are_one_base_shared_by_every_config_backed_face(face: type) -> None:
    assert issubclass(face, RunnerSettings)
    for name, member in vars(RunnerSettings).items():
        if isinstance(member, property):
            assert inspect.getattr_static(face, name) is member, f"{face.__name__}.{name} redeclares a setting"
    assert all(name in RunnerSettings.__annotations__ for name in SETTINGS_ATTRIBUTES)


def test_the_allow_lists_name_real_runner_members() -> None:
    public = _public(Runner)
    assert all(name in public for name in NOT_ON_WRAPPERS)
    assert all(name in public for name in NOT_ON_RAY)


def test_the_openers_take_exactly_open_runners_options_with_its_types() -> None:
    """``RunnerOptions`` (what the blocking and asyncio openers take) is ``open_runner``'s keywords, typed alike."""
    import typing

    from xcsh_run import RunnerOptions, open_runner, run_tool_sync

    opener = inspect.unwrap(open_runner)
    keywords = [p.name for p in inspect.signature(opener).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert list(RunnerOptions.__annotations__) == keywords
    assert RunnerOptions.__required_keys__ == frozenset()
    hints = typing.get_type_hints(opener)
    assert typing.get_type_hints(RunnerOptions) == {name: hints[name] for name in keywords}
    for face in (open_blocking_runner, open_asyncio_runner, run_tool_sync):
        options = list(inspect.signature(face).parameters.values())[-1]
        assert options.kind is options.VAR_KEYWORD, face
        assert typing.get_type_hints(face)[options.name] == typing.Unpack[RunnerOptions], face


TOOL = """
from xcsh_run.pi import CustomTool

OBJ = {"type": "object"}

def factory(api):
    def who(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": str(ctx.get("user"))}], "details": ctx.state}

    def wait(tool_call_id, params, on_update, ctx, signal):
        on_update({"content": [{"type": "text", "text": "waiting"}]})
        signal.wait(60)
        return "not cancelled"

    return [
        CustomTool(name="who", description="the user in ctx", parameters=OBJ, execute=who),
        CustomTool(name="wait", description="waits until cancelled", parameters=OBJ, execute=wait),
    ]
"""


def _tool(tmp_path: Path) -> str:
    path = tmp_path / "parity_tools.py"
    path.write_text(TOOL)
    return str(path)


def test_cancel_and_set_context_through_the_asyncio_runner(tmp_path: Path) -> None:
    tools = _tool(tmp_path)

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with open_asyncio_runner([tools], grace=0.5, spare_workers=0) as runner:
            runner.set_context({"user": "ada"})
            out["context"] = runner.context
            out["who"] = (await runner.call_tool("who")).text
            runner.context = {"user": "grace"}
            out["who_after_setter"] = (await runner.call_tool("who")).text

            loop = asyncio.get_running_loop()
            started = asyncio.Event()
            call = asyncio.ensure_future(
                runner.call_tool("wait", tool_call_id="w1", on_update=lambda _: loop.call_soon_threadsafe(started.set))
            )
            await started.wait()
            out["unknown_cancel"] = runner.cancel("no-such-call")
            out["cancel"] = runner.cancel("w1", "stopped by the parity test")
            result = await call
            out["kind"], out["text"] = result.kind, result.text
            out["busy"] = runner.statistics().busy_workers
            out["tool"] = getattr(runner.get_tool("wait"), "name", None)
            out["rendered"] = await runner.render_call("who", {})
        out["closed"] = runner.closed
        return out

    async def bounded() -> dict[str, Any]:
        return await asyncio.wait_for(main(), 60)

    out = asyncio.run(bounded())
    assert out["context"] == {"user": "ada"}
    assert out["who"] == "ada"
    assert out["who_after_setter"] == "grace"
    assert out["unknown_cancel"] is False
    assert out["cancel"] is True
    assert out["kind"] == "cancelled" and "stopped by the parity test" in out["text"]
    assert out["busy"] == 0
    assert out["tool"] == "wait"
    assert isinstance(out["rendered"], str) and out["rendered"]
    assert out["closed"] is True


def test_the_blocking_runner_has_the_same_new_members(tmp_path: Path) -> None:
    tools = _tool(tmp_path)
    with open_blocking_runner([tools], grace=0.5, spare_workers=0) as runner:
        runner.context = {"user": "lin"}
        assert runner.call_tool("who", timeout=30).text == "lin"
        assert runner.get_tool("who") is not None and runner.get_tool("nope") is None
        assert runner.pending_actions() == []
        assert runner.warnings == []
        assert runner.cwd == str(Path.cwd())
        assert runner.policy_for("who") == runner.sandbox
        assert runner.config.cwd == runner.cwd and isinstance(runner.unenforced, list)
        runner.cancel_all("nothing is running")
        assert not runner.closed
    assert runner.closed
