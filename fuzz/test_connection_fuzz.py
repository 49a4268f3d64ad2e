"""Two Connections fuzzed against each other, no processes (worker/_connection.py).

A host Connection and a worker Connection are wired through two byte buffers.
Hypothesis interleaves, in any order: requests and notifications from either
side (including ones the table does not allow in the current state or from
that side), answers, abandons, chunked delivery, end of stream, close(),
forged messages and garbage. The model keeps, for every request each side
sent, how it ended, and checks:

(a) every request ends exactly once: one ResultReceived/ErrorReceived, or
    abandoned, or listed by ConnectionClosed / close(); the connection's
    ``outstanding`` is always exactly the model's unanswered set;
(b) sending is refused (LocalProtocolError, nothing registered) exactly when the
    table says so: a method of the other side, or a state it is not allowed in;
(c) an out-of-state or unknown request that reaches a side is refused with a
    reply, never a crash; honest traffic never raises RemoteProtocolError;
(d) nothing raises but LocalProtocolError and RemoteProtocolError, and a
    RemoteProtocolError sticks.

Profiles (``dev``/``ci``/``long``) live in ``fuzz/conftest.py``; ``dev`` runs in `make test`.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import event as event_note
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from worker import _protocol as p

CALL = p.CallParams(call_id="c1", tool="t", arguments=msgspec.Raw(b"{}"))
CALL_RESULT = p.CallResult(content=[{"type": "text", "text": "ok"}])
# Each method with params and a result of its declared types.
REQUESTS: list[tuple[p.Method[Any, Any], Any, Any]] = [
    (p.INITIALIZE, p.InitializeParams(protocol_version=1, host_pid=1, cwd="/"),
     p.InitializeResult(protocol_version=1, pid=2)),
    (p.LOAD, p.LoadParams(path="/t.py"), p.LoadResult(tools=[])),
    (p.CALL, CALL, CALL_RESULT),
    (p.SESSION, p.SessionParams(event={"reason": "start"}), p.SessionResult()),
    (p.RENDER, p.RenderParams(tool="t", kind="call"), p.RenderResult(text="r")),
    (p.RESOLVE, p.ResolveParams(action_id="a1", action="apply", reason="why"), p.ResolveResult(result=None)),
    (p.SHUTDOWN, p.ShutdownParams(), None),
    (p.UI, p.UiParams(call_id="c1", method="confirm", args=["t", "m"]), True),
]  # fmt: skip
RESULTS = {method.name: result for method, _, result in REQUESTS}
NOTICES: list[tuple[p.Notice[Any], Any]] = [
    (p.UPDATE, p.UpdateParams(call_id="c1", partial=CALL_RESULT)),
    (p.CANCEL, p.CancelParams(call_id="c1", reason="timeout")),
    (p.UI_CHANGED, p.UiChangedParams(has_ui=True)),
    (p.UI_NOTICE, p.UiParams(call_id=None, method="notify", args=["hi", "info"])),
    (p.LOG, p.LogParams(call_id=None, level=20, logger="x", message="m")),
    (p.ABORT, p.AbortParams(call_id="c1", reason="r")),
    (p.PENDING, p.PendingPushParams(call_id=None, action_id="a1", label="l", source_tool_name="t")),
]
SIDES = st.sampled_from([p.Role.HOST, p.Role.WORKER])

# Messages a peer might forge: any method name in or out of the table, odd ids, bad params.
FORGED = st.one_of(
    st.builds(
        p.Request,
        id=st.one_of(st.integers(-2, 12), st.sampled_from(["1", "x"])),
        method=st.sampled_from([m.name for m, _, _ in REQUESTS] + ["nope", ""]),
        params=st.sampled_from([msgspec.Raw(b"{}"), msgspec.Raw(b"[]"), msgspec.Raw(b'{"path":"/"}')]),
    ),
    st.builds(
        p.Notification,
        method=st.sampled_from([n.name for n, _ in NOTICES] + ["nope"]),
        params=st.sampled_from([msgspec.Raw(b"{}"), msgspec.Raw(b'{"has_ui":true}')]),
    ),
    st.builds(p.Response, id=st.integers(-1, 12), result=st.just(msgspec.Raw(b"null"))),
)


class Side:
    """One Connection and what the model knows about it."""

    def __init__(self, role: p.Role) -> None:
        self.conn = p.Connection(role)
        self.inbox = bytearray()  # bytes written to this side, not delivered yet
        self.ended = False  # end of stream delivered
        self.tainted = False  # forged bytes were written to it: RemoteProtocolError is allowed
        self.error: p.RemoteProtocolError | None = None
        self.pending: set[int] = set()  # our requests, not ended
        self.ended_ids: dict[int, str] = {}  # our requests: how each one ended (exactly once)
        self.last_id = 0

    def end(self, req_id: int, how: str) -> None:
        assert req_id in self.pending, f"request {req_id} ended twice ({self.ended_ids.get(req_id)}, then {how})"
        self.pending.discard(req_id)
        self.ended_ids[req_id] = how


class ConnectionPair(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sides = {p.Role.HOST: Side(p.Role.HOST), p.Role.WORKER: Side(p.Role.WORKER)}

    def peer(self, role: p.Role) -> Side:
        return self.sides[p.Role.WORKER if role is p.Role.HOST else p.Role.HOST]

    def write_to(self, side: Side, data: bytes) -> None:
        if not side.ended:
            side.inbox += data

    @initialize(stage=st.sampled_from([p.State.AWAITING_INIT, p.State.READY, p.State.LOADED]))
    def handshake(self, stage: p.State) -> None:
        """Start most runs past the handshake, honestly, so that every state gets explored."""
        host, worker = self.sides[p.Role.HOST], self.sides[p.Role.WORKER]
        for method, params, result in REQUESTS[: int(stage)]:
            self.send_request(p.Role.HOST, REQUESTS.index((method, params, result)))
            self.deliver(p.Role.WORKER, len(worker.inbox))
            self.answer_id(p.Role.WORKER, host.last_id, fail=False)
            self.deliver(p.Role.HOST, len(host.inbox))
        assert host.conn.state is worker.conn.state is stage

    def answer_peer(self, role: p.Role, reply: bytes) -> None:
        # An answer to a forged request answers an id the peer may never have sent.
        peer = self.peer(role)
        peer.tainted = peer.tainted or self.sides[role].tainted
        self.write_to(peer, reply)

    # --- sending ---------------------------------------------------------------------

    @rule(role=SIDES, index=st.integers(0, len(REQUESTS) - 1))
    def send_request(self, role: p.Role, index: int) -> None:
        side = self.sides[role]
        method, params, _ = REQUESTS[index]
        allowed = method.sender is role and side.conn.state in method.allowed
        try:
            req_id, data = side.conn.send_request(method, params)
        except p.LocalProtocolError:
            assert not allowed
            return
        assert allowed and req_id == side.last_id + 1
        side.last_id = req_id
        side.pending.add(req_id)
        self.write_to(self.peer(role), data)

    @rule(role=SIDES, index=st.integers(0, len(NOTICES) - 1))
    def send_notification(self, role: p.Role, index: int) -> None:
        side = self.sides[role]
        notice, params = NOTICES[index]
        allowed = notice.sender is role and side.conn.state in notice.allowed
        try:
            data = side.conn.send_notification(notice, params)
        except p.LocalProtocolError:
            assert not allowed
            return
        assert allowed
        self.write_to(self.peer(role), data)

    @rule(role=SIDES, data=st.data(), fail=st.booleans())
    def answer(self, role: p.Role, data: st.DataObject, fail: bool) -> None:
        side = self.sides[role]
        if not side.conn.unanswered:
            return
        self.answer_id(role, data.draw(st.sampled_from(side.conn.unanswered)), fail)

    def answer_id(self, role: p.Role, req_id: p.JsonRpcId, fail: bool) -> None:
        side = self.sides[role]
        if fail:
            reply = side.conn.send_error(req_id, p.ErrorCode.TOOL_ERROR, "no")
        else:
            method = side.conn._unanswered[req_id]
            reply = side.conn.send_result(req_id, RESULTS[method.name])
        assert req_id not in side.conn.unanswered
        self.answer_peer(role, reply)

    @rule(role=SIDES, data=st.data())
    def abandon(self, role: p.Role, data: st.DataObject) -> None:
        side = self.sides[role]
        if not side.pending:
            return
        req_id = data.draw(st.sampled_from(sorted(side.pending)))
        side.conn.abandon(req_id)
        side.end(req_id, "abandoned")

    @rule(role=SIDES)
    def close(self, role: p.Role) -> None:
        side = self.sides[role]
        for req_id in side.conn.close():
            side.end(req_id, "closed")
        assert side.conn.state in (p.State.CLOSED, p.State.ERROR)

    # --- hostile input ------------------------------------------------------------------

    @rule(role=SIDES, message=FORGED)
    def forge(self, role: p.Role, message: p.Message) -> None:
        side = self.sides[role]
        side.tainted = True
        self.write_to(side, p.encode_message(message))

    @rule(role=SIDES, garbage=st.binary(min_size=1, max_size=12))
    def garbage(self, role: p.Role, garbage: bytes) -> None:
        side = self.sides[role]
        side.tainted = True
        self.write_to(side, garbage)

    # --- receiving ----------------------------------------------------------------------

    @precondition(lambda self: any(s.inbox for s in self.sides.values()))
    @rule(role=SIDES, size=st.integers(1, 4096))
    def deliver(self, role: p.Role, size: int) -> None:
        side = self.sides[role]
        chunk, side.inbox = bytes(side.inbox[:size]), side.inbox[size:]
        if chunk:
            self.receive(side, role, chunk)

    @rule(role=SIDES)
    def end_of_stream(self, role: p.Role) -> None:
        side = self.sides[role]
        if side.ended:
            return
        chunk, side.inbox = bytes(side.inbox), bytearray()
        if chunk:
            self.receive(side, role, chunk)
        side.ended = True
        self.receive(side, role, b"")

    def receive(self, side: Side, role: p.Role, chunk: bytes) -> None:
        if side.error is not None:
            for step in (lambda: side.conn.receive_data(chunk), side.conn.next_event):
                try:
                    step()
                except p.RemoteProtocolError as exc:
                    assert exc is side.error  # noqa: PT017 - it sticks
                else:
                    raise AssertionError("a failed connection accepted more")
            return
        try:
            side.conn.receive_data(chunk)
            while not isinstance(event := side.conn.next_event(), p._NeedData):
                self.handle(side, role, event)
                if isinstance(event, p.ConnectionClosed):
                    break
        except p.RemoteProtocolError as exc:
            assert side.tainted, f"honest traffic raised {exc}"  # noqa: PT017
            assert side.conn.state is p.State.ERROR
            side.error = exc

    def handle(self, side: Side, role: p.Role, event: p.Event) -> None:
        event_note(type(event).__name__)
        if isinstance(event, p.ResultReceived | p.ErrorReceived):
            side.end(event.id, "answered")
        elif isinstance(event, p.ConnectionClosed):
            for req_id in event.outstanding:
                side.end(req_id, "closed at end of stream")
        elif isinstance(event, p.RequestRefused):
            self.answer_peer(role, event.reply)
        elif isinstance(event, p.RequestReceived):
            event_note(f"{event.method.name} received in {side.conn.state.name}")
            assert event.method.sender is not role
            assert isinstance(event.params, event.method.params)
        elif isinstance(event, p.NotificationReceived):
            assert event.method.sender is not role and side.conn.state in event.method.allowed

    # --- invariants ---------------------------------------------------------------------

    @invariant()
    def outstanding_is_the_model(self) -> None:
        for side in self.sides.values():
            assert set(side.conn.outstanding) == side.pending
            assert set(side.ended_ids).isdisjoint(side.pending)


# Pure and fast: half the profile's examples (100 in `dev`, a few seconds), 30 steps each.
_PROFILE = settings()  # the loaded profile
ConnectionPair.TestCase.settings = settings(
    _PROFILE, max_examples=max(50, _PROFILE.max_examples // 2), stateful_step_count=30
)
test_two_connections_against_each_other = ConnectionPair.TestCase
