"""The tasks extension of MCP 2026-07-28 (``io.modelcontextprotocol/tasks``): calls a client polls.

The server is a real ``xcsh-run serve --http`` with real workers; the client
is raw HTTP with the 2026-07-28 envelope, since the wire is the point, and
every request goes over a connection of its own, so each test also shows that
a task outlives the connection that created it. The store's bounds are
checked on the store itself, through its ``TaskedCall`` seam.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
import trio

from tests._support.mcp_clients import DEADLINE, http_server
from tests.conftest import SDK_HTTP_LEFTOVERS
from tests.mcp.test_mcp_stateless import REVISION, answer, envelope
from xcsh_run._mcp.tasks import MAX_TASKS, TASKS_EXTENSION, TaskStore

pytestmark = SDK_HTTP_LEFTOVERS

JOBS = """
import os

from xcsh_run.pi import CustomTool, ToolError


def factory(api):
    def build(tcid, params, on_update, ctx, signal):
        # Waits for the file the test writes (or for its cancel), then builds.
        while not os.path.exists(params["go"]):
            if signal.wait(0.05):
                signal.throw_if_aborted()
        return f"built {params['target']}"

    def lint(tcid, params, on_update, ctx, signal):
        raise ToolError("3 problems in main.py")

    def segfault(tcid, params, on_update, ctx, signal):
        os._exit(70)

    def deploy(tcid, params, on_update, ctx, signal):
        env = api.ui.select("Which environment?", ["staging", "production"])
        sure = api.ui.confirm("Deploy", f"Deploy to {env}?")
        return f"deployed to {env}" if sure else "not deployed"

    def release(tcid, params, on_update, ctx, signal):
        version = api.ui.input("Version", "1.0.0")
        return f"released {version}"

    def wipe(tcid, params, on_update, ctx, signal):
        return "wiped"

    async def both(tcid, params, on_update, ctx, signal):
        # A prompt named like the server's own names, and one the server names, asked together.
        import asyncio
        form = {"type": "object", "properties": {"x": {"type": "string"}}}
        first, second = await asyncio.gather(api.ui.elicit("First", form, key="input-1"), api.ui.confirm("Second", "?"))
        return f"{first['action']} {second}"

    async def greedy(tcid, params, on_update, ctx, signal):
        # A form and a sample at once, from a client that cannot sample: the sample decides.
        import asyncio
        form = {"type": "object", "properties": {"x": {"type": "string"}}}
        await asyncio.gather(api.ui.elicit("Form", form), api.sample("Hi", max_tokens=5))
        return "never"

    wait = {"type": "object", "properties": {"go": {"type": "string"}, "target": {"type": "string"}},
            "required": ["go", "target"]}
    none = {"type": "object"}
    return [
        CustomTool(name="build", description="Builds a target", parameters=wait, execute=build,
                   task_support="optional"),
        CustomTool(name="lint", description="Lints", parameters=none, execute=lint, task_support="required"),
        CustomTool(name="segfault", description="Dies", parameters=none, execute=segfault, task_support="optional"),
        CustomTool(name="deploy", description="Asks, then deploys", parameters=none, execute=deploy,
                   task_support="optional"),
        CustomTool(name="release", description="Asks a version, then releases as a task", parameters=none,
                   execute=release, task_support="required", task_after_input=True),
        CustomTool(name="quick", description="Answers at once", parameters=none, execute=lambda *a: "quick"),
        CustomTool(name="wipe", description="Wipes, once approved", parameters=none, execute=wipe,
                   approval="write", task_support="optional"),
        CustomTool(name="both", description="Asks two things at once", parameters=none, execute=both),
        CustomTool(name="greedy", description="Asks a form and a sample", parameters=none, execute=greedy),
    ]
"""

SURVEY_TS = """
import type { CustomToolFactory } from "@mariozechner/pi-coding-agent";

// Asks the client for its roots and for a folder, by keys of its own, then surveys: a task if it can be.
const factory: CustomToolFactory = (pi) => ({
  name: "survey",
  label: "Survey",
  description: "Asks which folder, then surveys it",
  taskSupport: "optional",
  parameters: pi.typebox.Type.Object({}),
  async execute(_toolCallId, _params, _onUpdate, _ctx, _signal) {
    const roots = (await pi.roots({ key: "workspace" })) as { uri: string }[] | undefined;
    const form = { type: "object", properties: { folder: { type: "string" } }, required: ["folder"] };
    const answer = (await pi.ui.elicit("Which folder?", form, { key: "folder" })) as { content?: { folder: string } };
    const text = `surveyed ${answer.content?.folder} under ${roots?.map((r) => r.uri).join(", ")}`;
    return { content: [{ type: "text", text }], details: {} };
  },
});

export default factory;
"""

TASKS = {"extensions": {TASKS_EXTENSION: {}}}
ELICITING_TASKS = {"elicitation": {}, "extensions": {TASKS_EXTENSION: {}}}


@pytest.fixture
def jobs(tmp_path: Path) -> str:
    path = tmp_path / "jobs.py"
    path.write_text(JOBS)
    return str(path)


def meta(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    return envelope(
        **{"io.modelcontextprotocol/clientCapabilities": capabilities if capabilities is not None else TASKS}
    )


async def rpc(url: str, method: str, params: dict[str, Any], *, name: str | None = None) -> dict[str, Any]:
    """One 2026-07-28 request on a connection of its own; the JSON-RPC response."""
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": REVISION,
        "mcp-method": method,
    }
    if name is None and method == "tools/call":
        name = params["name"]
    if name is not None:
        headers["mcp-name"] = name
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with httpx2.AsyncClient(timeout=DEADLINE) as client:
        return answer(await client.post(url, headers=headers, content=json.dumps(body)))


async def call(url: str, tool: str, arguments: dict[str, Any], caps: dict[str, Any] | None = None) -> dict[str, Any]:
    return await rpc(url, "tools/call", {"name": tool, "arguments": arguments, "_meta": meta(caps)})


async def task_get(url: str, task_id: str, caps: dict[str, Any] | None = None) -> dict[str, Any]:
    return await rpc(url, "tasks/get", {"taskId": task_id, "_meta": meta(caps)}, name=task_id)


async def settled(url: str, task_id: str, *, status: str | None = None) -> dict[str, Any]:
    """``tasks/get`` until the task is over (or has ``status``); bounded by the test's deadline."""
    while True:
        got = (await task_get(url, task_id))["result"]
        if got["status"] in ("completed", "failed", "cancelled") or got["status"] == status:
            return got
        await trio.sleep(0.05)


async def test_a_task_is_created_at_once_runs_on_and_its_result_is_read_later(jobs: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            discovered = (await rpc(server.url, "server/discover", {"_meta": meta()}))["result"]
            assert TASKS_EXTENSION in discovered["capabilities"]["extensions"]

            created = (await call(server.url, "build", {"go": str(go), "target": "app"}))["result"]
            assert created["resultType"] == "task"
            assert created["status"] == "working"
            assert created["ttlMs"] > 0 and created["pollIntervalMs"] > 0
            assert not {"result", "error", "requestState", "inputRequests"} & set(created)
            working = (await task_get(server.url, created["taskId"]))["result"]
            assert working["status"] == "working"
            assert working["resultType"] == "complete"
            go.write_text("")
            done = await settled(server.url, created["taskId"])
            assert done["status"] == "completed"
            assert done["result"]["content"] == [{"type": "text", "text": "built app"}]
            # Read again: a finished task stays readable for its ttl.
            assert (await task_get(server.url, created["taskId"]))["result"]["status"] == "completed"


async def test_a_tool_error_is_a_completed_task_and_a_dead_worker_a_failed_one(jobs: str) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            lint = (await call(server.url, "lint", {}))["result"]
            linted = await settled(server.url, lint["taskId"])
            assert linted["status"] == "completed"
            assert linted["result"]["isError"] is True
            assert "3 problems in main.py" in linted["result"]["content"][0]["text"]
            crash = (await call(server.url, "segfault", {}))["result"]
            crashed = await settled(server.url, crash["taskId"])
            assert crashed["status"] == "failed"
            assert "result" not in crashed
            assert crashed["error"]["code"] == mcp_types.INTERNAL_ERROR
            assert "segfault" in crashed["error"]["message"]
            assert crashed["error"]["data"]["kind"] == "crashed"


async def test_tasks_cancel_stops_the_call_and_the_task_says_cancelled(jobs: str, tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            created = (await call(server.url, "build", {"go": str(tmp_path / "never"), "target": "x"}))["result"]
            cancel = {"taskId": created["taskId"], "_meta": meta()}
            ack = (await rpc(server.url, "tasks/cancel", cancel, name=created["taskId"]))["result"]
            assert ack["resultType"] == "complete"
            assert not {"taskId", "status", "result", "error"} & set(ack)
            stopped = await settled(server.url, created["taskId"])
            assert stopped["status"] == "cancelled"
            assert "tasks/cancel" in stopped["statusMessage"]
            # Cancelling a task that is over answers the same acknowledgement.
            again = (await rpc(server.url, "tasks/cancel", cancel, name=created["taskId"]))["result"]
            assert again["resultType"] == "complete"
            assert (await task_get(server.url, created["taskId"]))["result"]["status"] == "cancelled"


async def test_without_the_extension_calls_run_in_their_request_and_the_task_methods_are_refused(
    jobs: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    go.write_text("")
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            plain = (await call(server.url, "build", {"go": str(go), "target": "app"}, caps={}))["result"]
            assert plain["resultType"] == "complete"
            assert plain["content"][0]["text"] == "built app"
            refused = (await call(server.url, "lint", {}, caps={}))["error"]
            assert refused["code"] == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
            assert refused["data"]["requiredCapabilities"]["extensions"] == {TASKS_EXTENSION: {}}
            for method in ("tasks/get", "tasks/update", "tasks/cancel"):
                params = {"taskId": "any", "inputResponses": {}, "_meta": meta({})}
                error = (await rpc(server.url, method, params, name="any"))["error"]
                assert error["code"] == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY, method
            # A sync tool stays sync, even with the earlier revision's task hint.
            hinted = {"name": "quick", "arguments": {}, "task": {"ttl": 60000}, "_meta": meta()}
            assert (await rpc(server.url, "tools/call", hinted))["result"]["content"][0]["text"] == "quick"


async def test_a_tasks_prompts_wait_for_tasks_update_and_may_be_answered_one_at_a_time(jobs: str) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            task_id = (await call(server.url, "deploy", {}, caps=ELICITING_TASKS))["result"]["taskId"]
            asking = await settled(server.url, task_id, status="input_required")
            assert asking["status"] == "input_required"
            [(key, request)] = asking["inputRequests"].items()
            assert request["method"] == "elicitation/create"
            update = {"taskId": task_id, "_meta": meta(ELICITING_TASKS)}
            unknown = {**update, "inputResponses": {"no-such-key": {"action": "accept", "content": {}}}}
            assert (await rpc(server.url, "tasks/update", unknown, name=task_id))["result"]["resultType"] == "complete"
            assert key in (await task_get(server.url, task_id))["result"]["inputRequests"]
            chosen = {**update, "inputResponses": {key: {"action": "accept", "content": {"choice": "staging"}}}}
            await rpc(server.url, "tasks/update", chosen, name=task_id)
            second = await settled(server.url, task_id, status="input_required")
            while key in second.get("inputRequests", {}):  # the answer reaches the worker, then the next prompt
                second = await settled(server.url, task_id, status="input_required")
            [(key2, _)] = second["inputRequests"].items()
            confirmed = {**update, "inputResponses": {key2: {"action": "accept", "content": {"confirm": True}}}}
            await rpc(server.url, "tasks/update", confirmed, name=task_id)
            done = await settled(server.url, task_id)
            assert done["result"]["content"][0]["text"] == "deployed to staging"


async def test_a_task_after_input_tool_asks_in_the_request_then_becomes_a_task(jobs: str) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            first = (await call(server.url, "release", {}, caps=ELICITING_TASKS))["result"]
            assert first["resultType"] == "input_required"
            assert "taskId" not in first
            [key] = first["inputRequests"]
            retry = {
                "name": "release",
                "arguments": {},
                "inputResponses": {key: {"action": "accept", "content": {"text": "2.0.0"}}},
                "requestState": first["requestState"],
                "_meta": meta(ELICITING_TASKS),
            }
            created = (await rpc(server.url, "tools/call", retry))["result"]
            assert created["resultType"] == "task"
            assert "requestState" not in created
            done = await settled(server.url, created["taskId"])
            assert done["result"]["content"][0]["text"] == "released 2.0.0"


async def test_a_task_id_of_an_earlier_run_is_refused_saying_the_task_was_lost(jobs: str, tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            created = (await call(server.url, "build", {"go": str(tmp_path / "never"), "target": "x"}))["result"]
        # That server stopped (its running task with it, through the ladder); a new one knows nothing of it.
        async with http_server(jobs) as server:
            error = (await task_get(server.url, created["taskId"]))["error"]
            assert error["code"] == mcp_types.INVALID_PARAMS
            assert "earlier run of this server" in error["message"]
            unknown = (await task_get(server.url, "no-such-task"))["error"]
            assert unknown["code"] == mcp_types.INVALID_PARAMS
            assert "unknown task" in unknown["message"]


async def test_an_mcp_name_header_that_is_not_the_task_id_is_refused(jobs: str, tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            created = (await call(server.url, "build", {"go": str(tmp_path / "never"), "target": "x"}))["result"]
            params = {"taskId": created["taskId"], "_meta": meta()}
            error = (await rpc(server.url, "tasks/get", params, name="another-task"))["error"]
            assert error["code"] == -32020
            await rpc(server.url, "tasks/cancel", params, name=created["taskId"])
            assert (await settled(server.url, created["taskId"]))["status"] == "cancelled"


class _Job:
    """A call as the store sees it (its ``TaskedCall`` seam)."""

    def __init__(self) -> None:
        self.over = False
        self.stopped: str | None = None

    def view(self) -> dict[str, Any]:
        return {"status": "completed" if self.over else "working"}

    def stop(self, why: str) -> None:
        self.stopped = why

    def answer(self, responses: Any) -> bool:
        return False


def test_the_store_keeps_at_most_max_tasks_forgetting_the_oldest_that_is_over() -> None:
    store = TaskStore()
    jobs = [_Job() for _ in range(MAX_TASKS)]
    tasks = [store.create(job) for job in jobs]
    assert all(task is not None for task in tasks)
    assert store.create(_Job()) is None  # every kept task still runs: no new one
    jobs[5].over = True
    tasks[5].changed()  # type: ignore[union-attr]
    newest = store.create(_Job())
    assert newest is not None
    assert tasks[5].id not in store  # type: ignore[union-attr]
    assert tasks[6].id in store  # type: ignore[union-attr]
    assert newest.id.startswith(f"{store.run}-")


async def test_a_typescript_tool_runs_as_a_task_and_names_its_input_requests(bun: str, tmp_path: Path) -> None:
    survey = tmp_path / "survey.ts"
    survey.write_text(SURVEY_TS)
    caps = {"elicitation": {}, "roots": {}, "extensions": {TASKS_EXTENSION: {}}}
    with trio.fail_after(DEADLINE):
        async with http_server(str(survey)) as server:
            task_id = (await call(server.url, "survey", {}, caps=caps))["result"]["taskId"]
            update = {"taskId": task_id, "_meta": meta(caps)}
            asking = await settled(server.url, task_id, status="input_required")
            assert asking["inputRequests"] == {"workspace": {"method": "roots/list", "params": {}}}
            roots = {"roots": [{"uri": "file:///work/app", "name": "app"}]}
            await rpc(server.url, "tasks/update", {**update, "inputResponses": {"workspace": roots}}, name=task_id)
            asking = await settled(server.url, task_id, status="input_required")
            while "folder" not in asking.get("inputRequests", {}):  # the roots reach the tool, then it asks
                asking = await settled(server.url, task_id, status="input_required")
            assert asking["inputRequests"]["folder"]["method"] == "elicitation/create"
            folder = {"folder": {"action": "accept", "content": {"folder": "src"}}}
            await rpc(server.url, "tasks/update", {**update, "inputResponses": folder}, name=task_id)
            done = await settled(server.url, task_id)
            assert done["result"]["content"] == [{"type": "text", "text": "surveyed src under file:///work/app"}]


async def test_a_task_cancelled_while_its_approval_prompt_is_open_is_cancelled(jobs: str) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            task_id = (await call(server.url, "wipe", {}, caps=ELICITING_TASKS))["result"]["taskId"]
            asking = await settled(server.url, task_id, status="input_required")
            assert asking["status"] == "input_required"  # the approval prompt, before the call is the runner's
            cancel = {"taskId": task_id, "_meta": meta(ELICITING_TASKS)}
            await rpc(server.url, "tasks/cancel", cancel, name=task_id)
            stopped = await settled(server.url, task_id)
            assert stopped["status"] == "cancelled"
            assert "tasks/cancel" in stopped["statusMessage"]


async def test_a_tools_own_key_never_collides_with_the_servers_names(jobs: str) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            asked = (await call(server.url, "both", {}, caps={"elicitation": {}}))["result"]
            assert asked["resultType"] == "input_required"
            assert sorted(asked["inputRequests"]) == ["input-1", "input-2"]
            methods = {r["params"]["message"]: key for key, r in asked["inputRequests"].items()}
            assert methods["First"] == "input-1"  # the tool's own, kept; the server's name skipped it


async def test_a_sample_refused_among_prompts_asked_together_refuses_the_request(jobs: str) -> None:
    with trio.fail_after(DEADLINE):
        async with http_server(jobs) as server:
            refused = await call(server.url, "greedy", {}, caps={"elicitation": {}})
            assert refused["error"]["code"] == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
