"""A Python tool's answer to the host's approval question: its tier and the lines to show.

Rules:

1. ``approval`` is a tier (``read``, ``write``, ``exec``) or a function of the
   arguments returning one, or ``{"tier", "policy", "reason"}``, as oh-my-pi's
   tools declare it; ``format_approval_details(args)`` gives a str or a list of str.
2. The answer travels as the JSON text of a render reply (``kind "approval"``),
   the same shape the TypeScript worker sends, so the host reads one format.
3. Anything else a hook gives is a ``tool_error`` naming the hook: the host then
   refuses the call, since nothing it could show would be the tool's own account.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from xcsh_run.worker.protocol import ErrorCode, error_object
from xcsh_run.worker.protocol import methods as m

TIERS = ("read", "write", "exec")


def decide(tool: Any, args: Any, run_hook: Callable[..., Any]) -> Any:
    """The render reply for ``kind "approval"``, or an error object."""
    tier: Any = tool.approval
    reason: Any = None
    policy: Any = None
    try:
        if callable(tier):
            tier = run_hook(tier, args)
        if isinstance(tier, dict):
            tier, reason, policy = tier.get("tier"), tier.get("reason"), tier.get("policy")
        lines = run_hook(tool.format_approval_details, args) if tool.format_approval_details is not None else []
    except BaseException as exc:
        return error_object(ErrorCode.TOOL_ERROR, f"approval raised {type(exc).__name__}: {exc}")
    if tier not in TIERS:
        return error_object(ErrorCode.TOOL_ERROR, f"approval must give one of {', '.join(TIERS)}, got {tier!r}")
    lines = [lines] if isinstance(lines, str) else [] if lines is None else lines
    if not isinstance(lines, list | tuple) or not all(isinstance(line, str) for line in lines):
        return error_object(ErrorCode.TOOL_ERROR, "format_approval_details must return a str or a list of str")
    decision = {
        "tier": tier,
        "lines": list(lines),
        "reason": reason if isinstance(reason, str) else None,
        "prompt": policy == "prompt",
    }
    return m.RenderResult(text=msgspec.json.encode(decision).decode())
