"""The approval gate: a call of a tool that declares ``approval`` runs only once someone says yes.

Rules:

1. A tool's ``approval`` is a tier, ``read``, ``write`` or ``exec``, or
   ``dynamic`` (a function of the arguments decides, in the worker). ``read``
   needs no approval unless the function's answer carries ``policy "prompt"``;
   ``write`` and ``exec`` always ask. A tool without ``approval`` never asks.
2. The question is put before the call starts, so a refused call has done
   nothing: the worker answers it as it runs render hooks (``kind "approval"``),
   with the tool's ``formatApprovalDetails(args)`` lines as the prompt's message.
3. It is asked through the runner's UI ``confirm`` under the call's id, so an
   embedding host's UI, the CLI's terminal and an MCP client's elicitation
   (``_mcp.call_link`` routes by that id) all see it; only a literal ``True``
   approves. With no UI (a headless CLI, an MCP client without elicitation),
   ``confirm`` answers ``False``: the call is refused.
4. ``approve=True`` (``--approve`` of ``run`` and ``serve``) approves every
   call without asking or starting a worker for the question.
5. A refusal is a ``tool_error`` result whose message starts with
   ``approval denied`` and says how to approve; the CLI exits non-zero for it.
   A worker that cannot answer the question (its hook raised, it hung for
   :data:`QUESTION_TIMEOUT`) is a refusal too: nothing the host could show would
   be the tool's own account of the call.
6. Bounded: a prompt nobody answers within :data:`PROMPT_TIMEOUT` is a
   refusal, so an embedding UI whose ``confirm`` never returns cannot hold the
   call forever. The call does not exist yet while it is asked (nothing runs
   before the answer), so ``Runner.cancel(call_id)`` does not reach the
   prompt; cancelling the task that made the call does.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

import trio

from xcsh_run._discovery import ToolInfo
from xcsh_run._host.host_api import HostBridge, call_ui, ui_call
from xcsh_run._results import ErrorKind, ToolResult, error_result

QUESTION_TIMEOUT: Final = 5.0
PROMPT_TIMEOUT: Final = 600.0  # as long as an MCP elicitation may wait for its user
log: Final = logging.getLogger("xcsh_run")


async def gate(bridge: HostBridge, info: ToolInfo, args: Any, call_id: str, *, approve: bool) -> ToolResult | None:
    """None if the call may run now; otherwise the refusal to return instead of running it."""
    if info.approval is None or approve or info.approval == "read":
        return None
    if not bridge.has_ui and info.approval != "dynamic":
        return _denied(info, f"there is no UI to ask ({info.approval})")  # nothing to ask the worker
    text = await bridge.approval_question(info, args, QUESTION_TIMEOUT)
    try:
        decision = json.loads(text)
        tier, lines, reason, prompt = decision["tier"], decision["lines"], decision["reason"], decision["prompt"]
    except (ValueError, KeyError, TypeError):
        return _denied(info, "the tool's approval hooks gave no answer (see the log)")
    if tier == "read" and not prompt:
        return None
    title = f"Allow {info.label} ({tier})?"
    message = "\n".join([*lines, *([reason] if reason else [])]) or json.dumps(args, sort_keys=True)[:2000]
    if not bridge.has_ui:
        return _denied(info, f"there is no UI to ask ({tier})")
    token = ui_call.set(call_id)
    answer: Any = False
    try:
        with trio.move_on_after(PROMPT_TIMEOUT) as scope:
            answer = await call_ui(bridge.ui, "confirm", [title, message])
    except Exception as exc:
        log.warning("approval prompt for %s raised %r; refused", info.name, exc)
        answer = False
    finally:
        ui_call.reset(token)
    if scope.cancelled_caught:
        return _denied(info, f"nobody answered the prompt within {PROMPT_TIMEOUT:g} s")
    if answer is True:
        return None
    return _denied(info, f"the {tier} call was not approved")


def _denied(info: ToolInfo, why: str) -> ToolResult:
    message = (
        f"approval denied: {info.name} needs approval and {why}; nothing was run. Approve it when asked, "
        "or run with --approve (open_runner(approve=True)) to approve every call"
    )
    return error_result(ErrorKind.TOOL_ERROR, message, module=info.module)
