"""The sans-io Connection (pure, no processes): the numbered rules of worker/protocol/connection.py, the lifecycle,
refusals and their reasons, abandonment, withholding, lenient notices, frame limits and close, from both roles."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from xcsh_run.worker import protocol as p
from xcsh_run.worker.protocol import connection as _connection

INIT = p.InitializeParams(protocol_version=p.PROTOCOL_VERSION, host_pid=1, cwd="/")
CALL = p.CallParams(call_id="c1", tool="t", arguments=msgspec.Raw(b"{}"))


def events(conn: p.Connection) -> list[p.Event]:
    out: list[p.Event] = []
    while not isinstance(event := conn.next_event(), p.NeedData):
        out.append(event)
        if isinstance(event, p.ConnectionClosed):
            break
    return out


def state(conn: p.Connection) -> p.State:
    """Read through a call: mypy would otherwise keep a property narrowed across the steps that change it."""
    return conn.state


def outstanding(conn: p.Connection) -> tuple[int, ...]:
    return conn.outstanding


def deliver(data: bytes, to: p.Connection) -> list[p.Event]:
    to.receive_data(data)
    return events(to)


def pair(state: p.State = p.State.AWAITING_INIT) -> tuple[p.Connection, p.Connection]:
    """A host and a worker connection, brought to ``state`` (READY or LOADED) through the real handshake."""
    host, worker = p.Connection(p.Role.HOST), p.Connection(p.Role.WORKER)
    if state >= p.State.READY:
        answer(host, worker, p.INITIALIZE, INIT, p.InitializeResult(protocol_version=1, pid=2))
    if state >= p.State.LOADED:
        answer(host, worker, p.LOAD, p.LoadParams(path="/t.py"), p.LoadResult(tools=[]))
    return host, worker


def answer(
    sender: p.Connection, receiver: p.Connection, method: p.Method[Any, Any], params: Any, result: Any
) -> p.ResultReceived:
    req_id, data = sender.send_request(method, params)
    (received,) = deliver(data, receiver)
    assert isinstance(received, p.RequestReceived) and received.id == req_id
    (reply,) = deliver(receiver.send_result(received.id, result), sender)
    assert isinstance(reply, p.ResultReceived)
    return reply


# --- lifecycle ---------------------------------------------------------------------


def test_lifecycle_moves_from_initialize_to_loaded_on_both_sides() -> None:
    host, worker = pair()
    assert state(host) is state(worker) is p.State.AWAITING_INIT
    answer(host, worker, p.INITIALIZE, INIT, p.InitializeResult(protocol_version=1, pid=2))
    assert state(host) is state(worker) is p.State.READY
    answer(host, worker, p.LOAD, p.LoadParams(path="/t.py"), p.LoadResult(tools=[]))
    assert state(host) is state(worker) is p.State.LOADED


def test_an_error_answer_to_load_leaves_the_connection_ready() -> None:
    host, worker = pair(p.State.READY)
    req_id, data = host.send_request(p.LOAD, p.LoadParams(path="/t.py"))
    deliver(data, worker)
    (reply,) = deliver(worker.send_error(req_id, p.ErrorCode.LOAD_ERROR, "no"), host)
    assert isinstance(reply, p.ErrorReceived) and reply.error.data == {"kind": "load_error"}
    assert state(host) is state(worker) is p.State.READY


def test_shutdown_moves_both_sides_to_closing_and_end_of_stream_to_closed() -> None:
    host, worker = pair(p.State.LOADED)
    req_id, data = host.send_request(p.SHUTDOWN, p.ShutdownParams())
    assert state(host) is p.State.CLOSING
    assert [type(e) for e in deliver(data, worker)] == [p.RequestReceived]
    assert state(worker) is p.State.CLOSING
    (reply,) = deliver(worker.send_result(req_id, None), host)
    assert reply == p.ResultReceived(id=req_id, method=p.SHUTDOWN, result=None)
    assert deliver(b"", host) == [p.ConnectionClosed(outstanding=())]
    assert state(host) is p.State.CLOSED


def test_a_request_is_refused_while_closing_but_answers_still_arrive() -> None:
    host, worker = pair(p.State.LOADED)
    call_id, call = host.send_request(p.CALL, CALL)
    _, shutdown = host.send_request(p.SHUTDOWN, p.ShutdownParams())
    with pytest.raises(p.LocalProtocolError, match="CLOSING"):
        host.send_request(p.SESSION, p.SessionParams(event={}))
    received = deliver(call + shutdown, worker)
    assert [type(e) for e in received] == [p.RequestReceived, p.RequestReceived]
    (reply,) = deliver(worker.send_result(call_id, p.CallResult(content=[])), host)
    assert isinstance(reply, p.ResultReceived) and reply.result == p.CallResult(content=[])


def test_a_tool_may_still_log_and_prompt_while_closing() -> None:
    host, worker = pair(p.State.LOADED)
    deliver(host.send_request(p.SHUTDOWN, p.ShutdownParams())[1], worker)
    log = worker.send_notification(p.LOG, p.LogParams(call_id=None, level=20, logger="x", message="m"))
    _, prompt = worker.send_request(p.UI, p.UiParams(call_id=None, method="confirm", args=["a", "b"]))
    kinds = [type(e) for e in deliver(log + prompt, host)]
    assert kinds == [p.NotificationReceived, p.RequestReceived]


# --- rule 1: every request of ours ends exactly once ------------------------------------


def test_ids_count_from_one_and_each_answer_ends_its_request() -> None:
    host, worker = pair(p.State.LOADED)
    assert outstanding(host) == ()
    first, a = host.send_request(p.SESSION, p.SessionParams(event={}))
    second, b = host.send_request(p.SESSION, p.SessionParams(event={}))
    assert (first, second) == (3, 4)  # 1 and 2 were initialize and load
    assert outstanding(host) == (3, 4)
    deliver(a + b, worker)
    assert worker.unanswered == (3, 4)
    (reply,) = deliver(worker.send_result(second, p.SessionResult()), host)
    assert isinstance(reply, p.ResultReceived) and reply.id == 4 and outstanding(host) == (3,)


def test_a_second_answer_to_the_same_id_is_a_remote_error() -> None:
    host, _ = pair(p.State.READY)
    req_id, _ = host.send_request(p.SESSION, p.SessionParams(event={}))
    reply = p.encode_message(p.Response(id=req_id, result=p.encode_value({"warnings": []})))
    assert isinstance(deliver(reply, host)[0], p.ResultReceived)
    with pytest.raises(p.RemoteProtocolError, match="second answer"):
        deliver(reply, host)


@pytest.mark.parametrize("bad_id", [99, 0, -1, "3", None])
def test_an_answer_to_an_id_never_sent_is_a_remote_error(bad_id: Any) -> None:
    host, _ = pair(p.State.READY)
    with pytest.raises(p.RemoteProtocolError, match="the host never sent"):
        deliver(p.encode_message(p.ErrorResponse(id=bad_id, error=p.ErrorObject(code=1, message="x"))), host)
    assert state(host) is p.State.ERROR


def test_an_answer_to_an_abandoned_request_is_dropped_without_an_event() -> None:
    host, worker = pair(p.State.LOADED)
    req_id, data = host.send_request(p.CALL, CALL)
    deliver(data, worker)
    host.abandon(req_id)
    host.abandon(req_id)  # idempotent
    assert outstanding(host) == ()
    assert deliver(worker.send_result(req_id, p.CallResult(content=[])), host) == []
    assert state(host) is p.State.LOADED


def test_end_of_stream_lists_the_requests_that_will_never_be_answered() -> None:
    host, _ = pair(p.State.LOADED)
    a, _ = host.send_request(p.CALL, CALL)
    b, _ = host.send_request(p.SESSION, p.SessionParams(event={}))
    host.abandon(a)
    assert deliver(b"", host) == [p.ConnectionClosed(outstanding=(b,))]
    assert host.next_event() == p.ConnectionClosed(outstanding=(b,))  # and it stays closed
    assert outstanding(host) == ()


def test_close_returns_the_outstanding_requests_and_drops_their_late_answers() -> None:
    host, worker = pair(p.State.LOADED)
    req_id, data = host.send_request(p.CALL, CALL)
    deliver(data, worker)
    assert host.close() == (req_id,)
    assert state(host) is p.State.CLOSED
    assert deliver(worker.send_result(req_id, p.CallResult(content=[])), host) == []
    with pytest.raises(p.LocalProtocolError, match="CLOSED"):
        host.send_notification(p.CANCEL, p.CancelParams(call_id="c1", reason="x"))


# --- rule 2: every request of theirs is answered exactly once, or refused ----------------


def test_an_incoming_request_is_answered_exactly_once() -> None:
    host, worker = pair(p.State.LOADED)
    req_id, data = host.send_request(p.CALL, CALL)
    (received,) = deliver(data, worker)
    assert received == p.RequestReceived(id=req_id, method=p.CALL, params=CALL)
    worker.send_error(req_id, p.ErrorCode.TOOL_ERROR, "boom", traceback="tb")
    assert worker.unanswered == ()
    with pytest.raises(p.LocalProtocolError, match="no unanswered request"):
        worker.send_result(req_id, p.CallResult(content=[]))
    with pytest.raises(p.LocalProtocolError, match="no unanswered request"):
        worker.send_error(12345, p.ErrorCode.TOOL_ERROR, "never asked")


def test_a_duplicate_id_of_an_unanswered_request_is_refused() -> None:
    _, worker = pair(p.State.LOADED)
    request = p.encode_message(p.Request(id=7, method="call", params=p.encode_value(CALL)))
    assert isinstance(deliver(request, worker)[0], p.RequestReceived)
    (refused,) = deliver(request, worker)
    assert isinstance(refused, p.RequestRefused) and refused.error.code == p.ErrorCode.INVALID_REQUEST
    assert refused.reason is p.RefusalReason.DUPLICATE_ID
    assert worker.unanswered == (7,)


def test_a_withheld_request_ends_with_nothing_to_send_and_frees_its_id() -> None:
    host, worker = pair(p.State.LOADED)
    req_id, data = host.send_request(p.CALL, CALL)
    deliver(data, worker)
    worker.withhold(req_id)  # nothing to send
    assert worker.unanswered == () and state(worker) is p.State.LOADED
    for late in (lambda: worker.send_result(req_id, p.CallResult(content=[])), lambda: worker.withhold(req_id)):
        with pytest.raises(p.LocalProtocolError, match="no unanswered request"):
            late()
    # The id is free again: the same id is a new request, not a duplicate.
    again = p.encode_message(p.Request(id=req_id, method="call", params=p.encode_value(CALL)))
    assert [type(e) for e in deliver(again, worker)] == [p.RequestReceived]
    # Our side of a withheld request: it stays outstanding until we give up on it.
    assert outstanding(host) == (req_id,)


def test_withholding_an_id_that_is_not_unanswered_is_a_local_error() -> None:
    host, worker = pair(p.State.LOADED)
    with pytest.raises(p.LocalProtocolError, match="no unanswered request with id 99"):
        worker.withhold(99)
    req_id, _ = host.send_request(p.CALL, CALL)
    with pytest.raises(p.LocalProtocolError):
        host.withhold(req_id)  # one of ours, not one of theirs
    assert outstanding(host) == (req_id,)


def test_a_withheld_shutdown_still_moved_the_connection_to_closing() -> None:
    host, worker = pair(p.State.LOADED)
    req_id, data = host.send_request(p.SHUTDOWN, p.ShutdownParams())
    deliver(data, worker)
    worker.withhold(req_id)
    assert state(worker) is p.State.CLOSING  # the request's transition, not the result's


def test_an_unknown_method_is_refused_with_a_ready_reply_and_the_connection_goes_on() -> None:
    _, worker = pair(p.State.READY)
    (refused,) = deliver(p.encode_message(p.Request(id="x", method="no/such")), worker)
    assert isinstance(refused, p.RequestRefused)
    assert (refused.id, refused.method_name, refused.error.code) == ("x", "no/such", p.ErrorCode.METHOD_NOT_FOUND)
    assert refused.reason is p.RefusalReason.UNKNOWN_METHOD
    assert p.decode_message(refused.reply[p.HEADER_BYTES :]) == p.ErrorResponse(id="x", error=refused.error)
    assert refused.error.data is None and worker.unanswered == () and state(worker) is p.State.READY


def test_a_request_only_the_other_side_sends_is_an_unknown_method() -> None:
    host, _ = pair(p.State.LOADED)
    (refused,) = deliver(p.encode_message(p.Request(id=1, method="load", params=p.encode_value({"path": "/"}))), host)
    assert isinstance(refused, p.RequestRefused) and refused.error.code == p.ErrorCode.METHOD_NOT_FOUND
    assert refused.reason is p.RefusalReason.UNKNOWN_METHOD


def test_an_out_of_state_request_is_refused() -> None:
    _, worker = pair()
    (refused,) = deliver(p.encode_message(p.Request(id=1, method="call", params=p.encode_value(CALL))), worker)
    assert isinstance(refused, p.RequestRefused) and refused.error.code == p.ErrorCode.INVALID_REQUEST
    assert refused.reason is p.RefusalReason.OUT_OF_STATE
    assert "AWAITING_INIT" in refused.error.message and state(worker) is p.State.AWAITING_INIT


def test_a_request_with_malformed_params_is_refused_as_invalid_params() -> None:
    _, worker = pair(p.State.LOADED)
    (refused,) = deliver(p.encode_message(p.Request(id=4, method="call", params=p.encode_value({"tool": 1}))), worker)
    assert isinstance(refused, p.RequestRefused) and refused.error.code == p.ErrorCode.INVALID_PARAMS
    assert refused.reason is p.RefusalReason.BAD_PARAMS
    assert refused.error.message.startswith("bad call params: ")


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        (p.RefusalReason.UNKNOWN_METHOD, p.ErrorCode.METHOD_NOT_FOUND),
        (p.RefusalReason.DUPLICATE_ID, p.ErrorCode.INVALID_REQUEST),
        (p.RefusalReason.OUT_OF_STATE, p.ErrorCode.INVALID_REQUEST),
        (p.RefusalReason.BAD_PARAMS, p.ErrorCode.INVALID_PARAMS),
    ],
)
def test_each_refusal_reason_has_its_json_rpc_code(reason: p.RefusalReason, code: p.ErrorCode) -> None:
    assert reason.code is code


# --- notifications -------------------------------------------------------------------


def test_a_notification_is_decoded_into_its_params_type() -> None:
    host, worker = pair(p.State.LOADED)
    data = host.send_notification(p.CANCEL, p.CancelParams(call_id="c1", reason="timeout"))
    assert deliver(data, worker) == [p.NotificationReceived(method=p.CANCEL, params=p.CancelParams("c1", "timeout"))]


def test_unknown_and_out_of_state_notifications_are_dropped() -> None:
    _, worker = pair()
    unknown = p.encode_message(p.Notification(method="no/such"))
    early = p.encode_message(p.Notification(method="$/cancel", params=p.encode_value({"call_id": "c", "reason": "r"})))
    assert [e.reason for e in deliver(unknown + early, worker) if isinstance(e, p.NotificationDropped)] == [
        "unknown notification",
        "not allowed while AWAITING_INIT",
    ]


def test_a_notification_with_malformed_params_is_a_remote_error_that_sticks() -> None:
    host, _ = pair(p.State.LOADED)
    with pytest.raises(p.RemoteProtocolError, match="malformed 'update' message") as first:
        deliver(p.encode_message(p.Notification(method="update", params=p.encode_value({"call_id": 1}))), host)
    assert state(host) is p.State.ERROR
    with pytest.raises(p.RemoteProtocolError) as again:
        host.next_event()
    assert again.value is first.value
    with pytest.raises(p.RemoteProtocolError):
        host.receive_data(b"more")


class Hint(msgspec.Struct, frozen=True):
    call_id: str


LENIENT = p.Notice("hint", Hint, sender=p.Role.HOST, allowed=[p.State.READY], on_receive=p.State.LOADED, lenient=True)
STRICT = p.Notice("strict", Hint, sender=p.Role.HOST, allowed=[p.State.READY])
NOTICE_TABLE = p.MethodTable(p.WORKER_PROTOCOL.requests.values(), [LENIENT, STRICT])


@pytest.mark.parametrize("params", [b"5", b"{}", b'{"call_id":1}', b"null", b"[]"])
def test_a_lenient_notice_with_malformed_params_is_dropped_and_the_connection_goes_on(params: bytes) -> None:
    host, worker = p.Connection(p.Role.HOST, NOTICE_TABLE), p.Connection(p.Role.WORKER, NOTICE_TABLE)
    answer(host, worker, p.INITIALIZE, INIT, p.InitializeResult(protocol_version=1, pid=2))
    worker.receive_message(p.Notification(method="hint", params=msgspec.Raw(params)))
    (dropped,) = events(worker)
    assert isinstance(dropped, p.NotificationDropped) and dropped.method_name == "hint"
    assert dropped.reason.startswith("bad params: ")
    assert state(worker) is p.State.READY  # a dropped notice moves nothing
    worker.receive_message(p.Notification(method="hint", params=msgspec.Raw(b'{"call_id":"c","extra":1}')))
    assert events(worker) == [p.NotificationReceived(method=LENIENT, params=Hint(call_id="c"))]
    assert state(worker) is p.State.LOADED


def test_a_strict_notice_beside_a_lenient_one_still_fails_the_connection() -> None:
    host = p.Connection(p.Role.HOST, NOTICE_TABLE)
    worker = p.Connection(p.Role.WORKER, NOTICE_TABLE)
    answer(host, worker, p.INITIALIZE, INIT, p.InitializeResult(protocol_version=1, pid=2))
    with pytest.raises(p.RemoteProtocolError, match="malformed 'strict' message"):
        deliver(p.encode_message(p.Notification(method="strict", params=msgspec.Raw(b"5"))), worker)
    assert state(worker) is p.State.ERROR


# --- rule 3: results are typed ------------------------------------------------------------


def test_a_result_is_decoded_into_the_method_result_type() -> None:
    host, worker = pair(p.State.LOADED)
    reply = answer(host, worker, p.RENDER, p.RenderParams(tool="t", kind="call"), p.RenderResult(text="hi"))
    assert reply.result == p.RenderResult(text="hi") and reply.method is p.RENDER


def test_a_result_that_does_not_fit_its_type_is_a_remote_error_naming_the_method() -> None:
    host, _ = pair(p.State.LOADED)
    req_id, _ = host.send_request(p.CALL, CALL)
    with pytest.raises(p.RemoteProtocolError, match="malformed call result"):
        deliver(p.encode_message(p.Response(id=req_id, result=p.encode_value({"content": 3}))), host)
    assert host.close() == (req_id,)  # not answered: still listed
    assert state(host) is p.State.ERROR


def test_a_ui_result_is_any_json() -> None:
    host, worker = pair(p.State.LOADED)
    assert answer(worker, host, p.UI, p.UiParams(call_id=None, method="select"), ["a", 1]).result == ["a", 1]


# The typed path (one decode of a whole answer into its result type) is only a
# faster way to the general path's answer (the envelope, then the result): for
# every body, both give the same event, or the same error, and the same state.
_R = b'{"protocol_version":1,"pid":2}'
ANSWER_BODIES = {
    "compact": b'{"id":1,"result":%s,"jsonrpc":"2.0"}' % _R,
    "reordered": b'{"jsonrpc":"2.0","id":1,"result":%s}' % _R,
    "spaced": b'{"id": 1, "result": %s, "jsonrpc": "2.0"}' % _R,
    "wrong-result-type": b'{"id":1,"result":{"protocol_version":"1","pid":2},"jsonrpc":"2.0"}',
    "result-missing-member": b'{"id":1,"result":{"pid":2},"jsonrpc":"2.0"}',
    "unknown-member": b'{"id":1,"result":%s,"jsonrpc":"2.0","extra":1}' % _R,
    "no-jsonrpc": b'{"id":1,"result":%s}' % _R,
    "jsonrpc-1.0": b'{"id":1,"result":%s,"jsonrpc":"1.0"}' % _R,
    "repeated-id": b'{"id":1,"result":%s,"id":2,"jsonrpc":"2.0"}' % _R,
    "repeated-id-same": b'{"id":1,"result":%s,"id":1,"jsonrpc":"2.0"}' % _R,
    "result-and-error": b'{"id":1,"result":%s,"error":{"code":1,"message":"m"},"jsonrpc":"2.0"}' % _R,
    "never-sent-id": b'{"id":7,"result":%s,"jsonrpc":"2.0"}' % _R,
    "zero-id": b'{"id":0,"result":%s,"jsonrpc":"2.0"}' % _R,
    "leading-zero-id": b'{"id":01,"result":%s,"jsonrpc":"2.0"}' % _R,
    "huge-id": b'{"id":123456789012345678901234567890,"result":%s,"jsonrpc":"2.0"}' % _R,
    "string-id": b'{"id":"1","result":%s,"jsonrpc":"2.0"}' % _R,
    "trailing-garbage": b'{"id":1,"result":%s,"jsonrpc":"2.0"} x' % _R,
    "truncated": b'{"id":1,"result":%s,"jsonrpc":"2.0"' % _R,
    "error-answer": b'{"id":1,"error":{"code":-32000,"message":"m"},"jsonrpc":"2.0"}',
}


def _answer_outcome(body: bytes, *, typed: bool, abandon: bool = False) -> tuple[object, p.State, tuple[int, ...]]:
    host, worker = pair()
    req_id, data = host.send_request(p.INITIALIZE, INIT)
    deliver(data, worker)
    if abandon:
        host.abandon(req_id)
    if not typed:
        host._typed_answer = lambda body: None  # type: ignore[method-assign]
    try:
        outcome: object = deliver(len(body).to_bytes(4, "big") + body, host)
    except p.RemoteProtocolError as exc:
        outcome = ("RemoteProtocolError", str(exc))
    return outcome, state(host), outstanding(host)


@pytest.mark.parametrize("body", ANSWER_BODIES.values(), ids=ANSWER_BODIES.keys())
@pytest.mark.parametrize("abandon", [False, True], ids=["waiting", "abandoned"])
def test_the_typed_path_gives_the_general_paths_answer(body: bytes, abandon: bool) -> None:
    assert _answer_outcome(body, typed=True, abandon=abandon) == _answer_outcome(body, typed=False, abandon=abandon)


def test_an_answer_as_this_side_encodes_it_takes_the_typed_path(monkeypatch: pytest.MonkeyPatch) -> None:
    host, worker = pair()
    req_id, data = host.send_request(p.INITIALIZE, INIT)
    deliver(data, worker)
    reply = worker.send_result(req_id, p.InitializeResult(protocol_version=1, pid=2))
    monkeypatch.setattr(_connection, "decode_message", lambda body: pytest.fail("decoded twice"))
    (event,) = deliver(reply, host)
    assert event == p.ResultReceived(
        id=req_id, method=p.INITIALIZE, result=p.InitializeResult(protocol_version=1, pid=2)
    )
    assert state(host) is p.State.READY and outstanding(host) == ()


def test_a_payload_is_encoded_once_with_its_frame_and_reads_as_if_encoded_ahead() -> None:
    host, worker = pair(p.State.LOADED)
    req_id, data = host.send_request(p.CALL, CALL)
    deliver(data, worker)
    result = p.CallResult(content=[{"type": "text", "text": "é" * 10}], details={"n": [1, 2]})
    direct = worker.send_result(req_id, result)
    assert direct == p.encode_message(p.Response(id=req_id, result=p.encode_value(result)))
    (event,) = deliver(direct, host)
    assert isinstance(event, p.ResultReceived) and event.result == result


def test_a_payload_json_cannot_carry_is_a_local_error_naming_it_and_nothing_is_sent() -> None:
    host, worker = pair(p.State.LOADED)
    req_id, data = host.send_request(p.CALL, CALL)
    deliver(data, worker)
    with pytest.raises(p.NotSerialisable, match=r"^call result is not JSON-serialisable") as exc:
        worker.send_result(req_id, p.CallResult(content=[], details={"x": object()}))
    assert exc.value.what == "call result is" and isinstance(exc.value, p.LocalProtocolError)
    assert worker.unanswered == (req_id,)
    worker.send_result(req_id, p.CallResult(content=[]))


# --- rule 4: this side's mistakes are LocalProtocolError and change nothing ----------------------


def test_sending_a_method_of_the_other_side_is_a_local_error() -> None:
    host, worker = pair(p.State.LOADED)
    with pytest.raises(p.LocalProtocolError, match="sent by the host"):
        worker.send_request(p.CALL, CALL)
    with pytest.raises(p.LocalProtocolError, match="sent by the worker"):
        host.send_notification(p.LOG, p.LogParams(call_id=None, level=1, logger="", message=""))


def test_sending_out_of_state_is_a_local_error_that_registers_nothing() -> None:
    host, _ = pair()
    with pytest.raises(p.LocalProtocolError, match="AWAITING_INIT"):
        host.send_request(p.CALL, CALL)
    assert outstanding(host) == () and host.send_request(p.INITIALIZE, INIT)[0] == 1


def test_params_of_the_wrong_type_are_a_local_error() -> None:
    host, _ = pair(p.State.LOADED)
    with pytest.raises(p.LocalProtocolError, match="must be CallParams"):
        host.send_request(p.CALL, p.LoadParams(path="/"))  # type: ignore[misc]
    with pytest.raises(p.LocalProtocolError, match="JSON-serialisable"):
        host.send_request(
            p.CALL, p.CallParams(call_id="c", tool="t", arguments=msgspec.Raw(b"{}"), ctx={"x": object()})
        )
    assert outstanding(host) == ()


def test_a_frame_over_the_limit_is_a_local_error_that_registers_nothing() -> None:
    host, worker = pair(p.State.LOADED)
    host.max_frame_bytes = worker.max_frame_bytes = 200
    with pytest.raises(p.FrameTooLarge) as exc:
        host.send_request(p.SESSION, p.SessionParams(event={"x": "y" * 300}))
    assert exc.value.limit == 200 and exc.value.size > 200 and outstanding(host) == ()
    req_id, data = host.send_request(p.CALL, CALL)
    deliver(data, worker)
    with pytest.raises(p.LocalProtocolError):
        worker.send_result(req_id, p.CallResult(content=[{"text": "z" * 300}]))
    assert worker.unanswered == (req_id,)  # still to answer, with something smaller
    worker.send_error(req_id, p.ErrorCode.LIMIT_EXCEEDED, "too big", limit="output")


def test_max_send_bytes_follows_max_frame_bytes_unless_given() -> None:
    conn = p.Connection(p.Role.HOST, max_frame_bytes=1000)
    assert conn.max_send_bytes == 1000
    conn.max_frame_bytes = 2000
    assert conn.max_send_bytes == 2000


def test_a_send_limit_of_its_own_bounds_only_what_this_side_sends() -> None:
    host, worker = pair(p.State.LOADED)
    worker.max_send_bytes = 200
    worker.max_frame_bytes = 10_000  # what it accepts; its send limit stays its own
    assert worker.max_send_bytes == 200
    req_id, data = host.send_request(p.SESSION, p.SessionParams(event={"x": "y" * 1000}))
    deliver(data, worker)  # a large message in: within what the worker accepts
    with pytest.raises(p.FrameTooLarge) as exc:
        worker.send_result(req_id, p.SessionResult(warnings=["w" * 300]))
    assert exc.value.limit == 200 and worker.unanswered == (req_id,)


def test_no_send_limit_means_as_large_as_a_frame_can_be() -> None:
    host, worker = p.Connection(p.Role.HOST, max_frame_bytes=100, max_send_bytes=None), p.Connection(p.Role.WORKER)
    assert host.max_send_bytes is None and host.max_frame_bytes == 100
    _, data = host.send_request(p.INITIALIZE, p.InitializeParams(protocol_version=1, host_pid=1, cwd="/" * 500))
    assert len(data) > 500 and isinstance(deliver(data, worker)[0], p.RequestReceived)
    with pytest.raises(ValueError, match="max_frame_bytes"):
        host.max_send_bytes = 0


def test_data_after_the_end_of_stream_is_a_local_error() -> None:
    _, worker = pair()
    worker.receive_data(b"")
    with pytest.raises(p.LocalProtocolError):
        worker.receive_data(b"x")


def test_garbage_is_a_remote_error() -> None:
    _, worker = pair(p.State.READY)
    with pytest.raises(p.RemoteProtocolError):
        deliver(b"\x00\x00\x00\x02{]", worker)
    assert state(worker) is p.State.ERROR and worker.close() == ()
    assert state(worker) is p.State.ERROR


# --- other transports --------------------------------------------------------------------


def test_whole_messages_and_lines_for_newline_delimited_transports() -> None:
    server = p.Connection(p.Role.WORKER, encode=p.encode_line)
    server.receive_message(p.Request(id="a", method="nope"))
    (refused,) = events(server)
    assert isinstance(refused, p.RequestRefused) and refused.reply.endswith(b"\n")
    assert p.decode_message(refused.reply.rstrip(b"\n")).id == "a"  # type: ignore[union-attr]


def test_a_table_of_its_own_with_its_own_lifecycle() -> None:
    hello = p.Method("hello", dict[str, Any], dict[str, Any], sender=p.Role.HOST,
                     allowed=[p.State.AWAITING_INIT], on_result=p.State.LOADED)  # fmt: skip
    table = p.MethodTable([hello], [])
    client, server = p.Connection(p.Role.HOST, table), p.Connection(p.Role.WORKER, table)
    reply = answer(client, server, hello, {"a": 1}, {"b": 2})
    assert reply.result == {"b": 2} and state(client) is state(server) is p.State.LOADED
    with pytest.raises(p.LocalProtocolError, match="not in this connection's method table"):
        client.send_request(p.CALL, CALL)
