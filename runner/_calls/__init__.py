"""One call, from its plan to its single result.

Rules of the package (``lifecycle`` numbers them in full):

1. **Every call ends in exactly one result**, whatever happened: an error is a
   ``ToolResult`` with ``is_error``, and ``Cancelled`` leaves only after the
   worker's tree is reaped.
2. **Cancellation climbs a ladder** (``CancelLadder``): ask, wait the grace,
   then kill through the boundary.
3. **The error kind comes from the error code** (``outcome``), never from a
   worker's free text.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._calls.deadlines import DeadlineKeeper as DeadlineKeeper
    from xcsh_run._calls.ladder import CancelLadder as CancelLadder
    from xcsh_run._calls.lifecycle import Calls as Calls
    from xcsh_run._calls.lifecycle import UpdateCallback as UpdateCallback
    from xcsh_run._calls.outcome import str_or_none as str_or_none
    from xcsh_run._calls.table import CallTable as CallTable
    from xcsh_run._calls.trace_context import TraceContext as TraceContext
    from xcsh_run._calls.trace_context import check_traceparent as check_traceparent
    from xcsh_run._calls.trace_context import parse_traceparent as parse_traceparent

__all__ = [
    "CallTable",
    "Calls",
    "CancelLadder",
    "DeadlineKeeper",
    "TraceContext",
    "UpdateCallback",
    "check_traceparent",
    "parse_traceparent",
    "str_or_none",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "CallTable": "table",
    "Calls": "lifecycle",
    "CancelLadder": "ladder",
    "DeadlineKeeper": "deadlines",
    "TraceContext": "trace_context",
    "UpdateCallback": "lifecycle",
    "check_traceparent": "trace_context",
    "parse_traceparent": "trace_context",
    "str_or_none": "outcome",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
