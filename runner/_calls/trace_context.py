"""W3C Trace Context for a call: the ``traceparent`` (and ``tracestate``) a caller hands on with it.

A caller that traces its work (an agent host with OpenTelemetry, an MCP client
sending ``_meta.traceparent``) names the span a tool call belongs to; the call
keeps it, so that what the host records about the call can be joined to the
caller's trace.

Rules (https://www.w3.org/TR/trace-context/#traceparent-header):

1. ``traceparent`` is ``VERSION-TRACEID-PARENTID-FLAGS``: 2, 32, 16 and 2
   lower-case hex digits. Version ``ff`` is invalid, and an all-zero trace id
   or parent id is invalid.
2. A later version may append fields after the flags (``-...``); they are
   ignored, the first four kept. Version ``00`` has exactly four fields.
3. ``tracestate`` is kept only beside a valid ``traceparent``, and only while
   it is a string of at most 512 characters (the limit the W3C rules let a
   vendor truncate at); a longer one is dropped, not cut mid-entry.
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

_TRACEPARENT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_MAX_TRACESTATE: Final = 512


class TraceContext(NamedTuple):
    """A call's place in its caller's trace."""

    traceparent: str
    tracestate: str | None = None

    @property
    def trace_id(self) -> str:
        return self.traceparent[3:35]

    @property
    def parent_id(self) -> str:
        return self.traceparent[36:52]


def parse_traceparent(traceparent: Any, tracestate: Any = None) -> TraceContext | None:
    """The trace context ``traceparent`` names, or None when it is absent or malformed (rules 1-3)."""
    if not isinstance(traceparent, str):
        return None
    found = _TRACEPARENT.fullmatch(traceparent.strip())
    if found is None:
        return None
    version, trace_id, parent_id, flags, rest = found.groups()
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16 or (version == "00" and rest):
        return None
    state = tracestate.strip() if isinstance(tracestate, str) else None
    if not state or len(state) > _MAX_TRACESTATE:
        state = None
    return TraceContext(f"{version}-{trace_id}-{parent_id}-{flags}", state)


def check_traceparent(traceparent: str | None) -> TraceContext | None:
    """A caller's ``traceparent`` as a :class:`TraceContext`; a malformed one is a ``ValueError`` that says why."""
    if traceparent is None:
        return None
    parsed = parse_traceparent(traceparent)
    if parsed is None:
        raise ValueError(
            f"traceparent {traceparent[:80]!r} is not a W3C traceparent: expected "
            "'00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>', lower case, ids not all zeros"
        )
    return parsed
