"""Bounds on what the host keeps on a worker's behalf, whatever the worker sends.

docs/sandbox.md, "What the host enforces whatever the tool does". A frame is
at most ``max_frame_bytes`` (64 MiB), but what the host *keeps* past the
message that brought it (previews, prompts waiting for a person, log records
queued for a client) is bounded here, per worker and in all.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from xcsh_run.worker import protocol as p

# worker/_tool_api/api.py refuses the same pending actions first, with the same numbers,
# so an honest tool gets an exception where it pushed; these catch the rest.
PENDING_MAX_BYTES: Final = 1 << 20
"""A pending action's label plus its JSON ``details``: a preview a person or a model reads, not a payload."""
PENDING_PER_WORKER: Final = 16
PENDING_TOTAL: Final = 64
"""So previews hold at most 64 MiB of the host, and pin at most 64 workers."""
UI_IN_FLIGHT_PER_WORKER: Final = 8
UI_MAX_BYTES: Final = 1 << 20
"""A UI request's arguments, held while the UI answers (which may take a person's time)."""
COMPLAINTS_LOGGED: Final = 5
"""Warnings logged per worker about what it sent past these bounds, or for calls it is not running."""
LOG_MAX_CHARS: Final = 256 * 1024
"""One log record's message, cut past this: records are queued per call for MCP clients (100 at most)."""


def over(what: str, value: Any, limit: int, extra: int = 0) -> str | None:
    """Why ``value`` (decoded from one frame) is too big to keep, as JSON plus ``extra`` bytes; None if it fits."""
    try:
        size = len(msgspec.json.encode(value)) + extra
    except (TypeError, ValueError, RecursionError, msgspec.EncodeError):
        return f"{what} cannot be measured (nested too deep to encode again)"
    return f"{what} is {size} bytes of JSON, over the {limit}-byte limit" if size > limit else None


def cut_log(record: p.LogParams) -> p.LogParams:
    """``record`` with its message cut to :data:`LOG_MAX_CHARS`, saying how much was cut."""
    if len(record.message) <= LOG_MAX_CHARS:
        return record
    cut = len(record.message) - LOG_MAX_CHARS
    message = (
        f"{record.message[:LOG_MAX_CHARS]}... [{cut} characters cut: the host keeps {LOG_MAX_CHARS} of one record]"
    )
    return msgspec.structs.replace(record, message=message)
