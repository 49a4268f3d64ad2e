"""A call keeps its caller's W3C trace context: the host's records of it name the trace.

``Runner.call_tool(traceparent=...)`` takes the caller's ``traceparent``; a
malformed one is a ``ValueError`` naming the format (an embedding host's
mistake, said at once), while the MCP server drops a malformed
``_meta.traceparent`` and serves the call (tests/mcp/test_mcp_stateless.py).
A real runner and worker throughout; the records are caught on the host's logger.
"""

from __future__ import annotations

import logging

import pytest
import trio

from tests.conftest import TOOLS, make_runner
from xcsh_run._calls import parse_traceparent

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    "value",
    [
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # upper case
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # the invalid version
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # version 00 has four fields
        42,
        None,
    ],
)
def test_a_malformed_traceparent_is_no_trace_context(value: object) -> None:
    assert parse_traceparent(value) is None


def test_a_later_version_keeps_its_first_four_fields_and_tracestate_rides_only_beside_a_valid_one() -> None:
    later = parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", "vendor=1")
    assert later is not None
    assert later.traceparent == "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert later.tracestate == "vendor=1"
    assert (later.trace_id, later.parent_id) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    long_state = parse_traceparent(GOOD, "k=" + "v" * 600)
    assert long_state is not None
    assert long_state.tracestate is None


async def test_the_hosts_records_of_a_call_name_its_trace(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="xcsh_run")
    with trio.fail_after(30):
        async with make_runner(TOOLS / "basic.py") as runner:
            result = await runner.call_tool("echo", {"text": "traced"}, traceparent=GOOD)
            assert not result.is_error
    started = [r for r in caplog.records if getattr(r, "trace_id", None) == GOOD[3:35]]
    assert [r.getMessage() for r in started] == [f"'echo' ({started[0].call_id}) continues trace {GOOD}"]


async def test_a_malformed_traceparent_from_an_embedding_host_is_a_value_error_that_names_the_format() -> None:
    with trio.fail_after(30):
        async with make_runner(TOOLS / "basic.py") as runner:
            with pytest.raises(ValueError, match=r"not a W3C traceparent: expected '00-<32 hex trace id>"):
                await runner.call_tool("echo", {"text": "x"}, traceparent="00-abc-01")
            assert not (await runner.call_tool("echo", {"text": "still runs"})).is_error
