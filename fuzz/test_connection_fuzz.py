"""Two Connections fuzzed against each other, no processes (worker/protocol/connection.py).

A host Connection and a worker Connection are wired through two byte buffers.
Hypothesis interleaves, in any order: requests and notifications from either
side (including ones the table does not allow in the current state or from
that side), whole exchanges (a request delivered, answered or withheld, and
its answer delivered), abandons, chunked delivery, requests and notifications
forged into one side (refused, accepted and withheld, or dropped), end of
stream, close(), forged answers and garbage. The table is the worker
protocol's plus one lenient notice each way. The model keeps, for every
request each side sent, how it ended, and for every request each side
received, whether it is still to answer, and checks:

(a) every request ends exactly once: one ResultReceived/ErrorReceived, or
    abandoned, or listed by ConnectionClosed / close(); the connection's
    ``outstanding`` is always exactly the model's unanswered set, and its
    ``unanswered`` exactly the requests received and not yet answered or
    withheld;
(b) sending is refused (LocalProtocolError, nothing registered) exactly when the
    table says so: a method of the other side, or a state it is not allowed in;
    answering or withholding an id that is not unanswered is refused too;
(c) a forged request is refused exactly when the table says so, with the
    reason the model expects and that reason's code; one that is allowed is
    received; honest traffic never raises RemoteProtocolError;
(d) a forged notification is dropped exactly when it is unknown, out of
    state, or a lenient notice with params that do not decode, and fails the
    connection only when a strict notice's params do not decode;
(e) nothing raises but LocalProtocolError and RemoteProtocolError, and a
    RemoteProtocolError sticks;
(f) at the end of every example, once both connections are ended, no request
    of either side is left.

Half the chunks are delivered through ``receive_buffer``/``received`` (reading
in place) instead of ``receive_data``. A separate property holds the typed
path for answers (one decode of the whole body into the result type) to the
general path's event, error and state, for answers changed every which way.

Most examples start past the handshake with requests already answered, one
forged request and one lenient notice (the ``handshake`` initializer), and
hold back what ends a connection (close, end of stream, forged answers,
garbage, fatal notifications) until a drawn number of requests have been
answered, so that calls, abandons, refusals, withholds and drops happen in
most examples before anything ends them (``--hypothesis-show-statistics``
shows how many).

Profiles (``dev``/``ci``/``long``) live in ``fuzz/conftest.py``; ``dev`` runs in `make test`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec
from hypothesis import event as event_note
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from xcsh_run.worker import protocol as p

T = TypeVar("T")


def read_in_place(conn: p.Connection, chunk: bytes) -> None:
    """Deliver ``chunk`` through receive_buffer/received, as a reader using os.readv would."""
    pos = 0
    while pos < len(chunk):
        view = conn.receive_buffer(16)
        n = min(len(view), len(chunk) - pos)
        view[:n] = chunk[pos : pos + n]
        view.release()
        conn.received(n)
        pos += n


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


class Hint(msgspec.Struct, frozen=True):
    call_id: str


_LIVE = (p.State.READY, p.State.LOADED, p.State.CLOSING)
HOST_HINT = p.Notice("hint/host", Hint, sender=p.Role.HOST, allowed=_LIVE, lenient=True)
WORKER_HINT = p.Notice("hint/worker", Hint, sender=p.Role.WORKER, allowed=_LIVE, lenient=True)
NOTICES: list[tuple[p.Notice[Any], Any]] = [
    (p.UPDATE, p.UpdateParams(call_id="c1", partial=CALL_RESULT)),
    (p.CANCEL, p.CancelParams(call_id="c1", reason="timeout")),
    (p.UI_CHANGED, p.UiChangedParams(has_ui=True)),
    (p.UI_NOTICE, p.UiParams(call_id=None, method="notify", args=["hi", "info"])),
    (p.LOG, p.LogParams(call_id=None, level=20, logger="x", message="m")),
    (p.ABORT, p.AbortParams(call_id="c1", reason="r")),
    (p.PENDING, p.PendingPushParams(call_id=None, action_id="a1", label="l", source_tool_name="t")),
    (HOST_HINT, Hint(call_id="c1")),
    (WORKER_HINT, Hint(call_id="c1")),
]
TABLE = p.MethodTable(p.WORKER_PROTOCOL.requests.values(), [notice for notice, _ in NOTICES])
SIDES = st.sampled_from([p.Role.HOST, p.Role.WORKER])
HOWS = st.sampled_from(["result", "error", "withhold", "abandon"])
IN_FLIGHT = st.integers(1, 3)
# LOADED twice as often as the other two together.
STAGES = st.sampled_from([p.State.LOADED] * 4 + [p.State.READY, p.State.AWAITING_INIT])
CALL_INDEX = 2
STRAY_IDS: list[p.JsonRpcId] = [-1, 0, 1, 2, 3, 7, 12, "x"]

# What a peer might forge into a side: any method name in or out of the table, odd ids, params that fit or not.
VALID_PARAMS = [p.encode_value(params) for _, params, _ in REQUESTS] + [p.encode_value(n) for _, n in NOTICES]
PARAMS = st.one_of(
    st.sampled_from([msgspec.Raw(b"{}"), msgspec.Raw(b"[]"), msgspec.Raw(b"5")]), st.sampled_from(VALID_PARAMS)
)
FORGED_REQUESTS = st.builds(
    p.Request,
    id=st.one_of(st.integers(-2, 12), st.sampled_from(["1", "x"])),
    method=st.sampled_from([m.name for m, _, _ in REQUESTS] + ["nope", ""]),
    params=PARAMS,
)
FORGED_NOTIFICATIONS = st.builds(
    p.Notification,
    # Half of them for the lenient notices, whose malformed params are dropped.
    method=st.one_of(
        st.sampled_from([HOST_HINT.name, WORKER_HINT.name]), st.sampled_from([n.name for n, _ in NOTICES] + ["nope"])
    ),
    params=PARAMS,
)
FORGED_BYTES = st.one_of(
    st.builds(p.encode_message, st.one_of(FORGED_REQUESTS, FORGED_NOTIFICATIONS)),
    st.builds(p.encode_message, st.builds(p.Response, id=st.integers(-1, 12), result=st.just(msgspec.Raw(b"null")))),
    st.binary(min_size=1, max_size=12),  # garbage
)


# Strategies built once: building one per draw (validation, labels) costs more than the connections do.
_PICKS: dict[int, st.SearchStrategy[int]] = {}
_ORDERS: dict[int, st.SearchStrategy[list[int]]] = {}


def pick(data: st.DataObject, items: Sequence[T]) -> T:
    n = len(items)
    if n not in _PICKS:
        _PICKS[n] = st.integers(0, n - 1)
    return items[data.draw(_PICKS[n])]


def shuffled(data: st.DataObject, items: Sequence[T]) -> list[T]:
    n = len(items)
    if n not in _ORDERS:
        _ORDERS[n] = st.permutations(range(n))
    return [items[i] for i in data.draw(_ORDERS[n])]


def fits(params: msgspec.Raw, tp: Any) -> bool:
    try:
        msgspec.json.decode(params, type=tp)
    except msgspec.DecodeError:
        return False
    return True


class Side:
    """One Connection and what the model knows about it."""

    def __init__(self, role: p.Role) -> None:
        self.conn = p.Connection(role, TABLE)
        self.inbox = bytearray()  # bytes written to this side, not delivered yet
        self.ended = False  # end of stream delivered
        self.tainted = False  # forged bytes were written to it: RemoteProtocolError is allowed
        self.error: p.RemoteProtocolError | None = None
        self.pending: set[int] = set()  # our requests, not ended
        self.ended_ids: dict[int, str] = {}  # our requests: how each one ended (exactly once)
        self.received: set[p.JsonRpcId] = set()  # their requests, not answered or withheld yet
        self.last_id = 0

    def end(self, req_id: int, how: str) -> None:
        assert req_id in self.pending, f"request {req_id} ended twice ({self.ended_ids.get(req_id)}, then {how})"
        self.pending.discard(req_id)
        self.ended_ids[req_id] = how

    @property
    def live(self) -> bool:
        """Can still take messages (forged ones are queued with receive_message)."""
        return not self.ended and self.error is None


class ConnectionPair(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sides = {p.Role.HOST: Side(p.Role.HOST), p.Role.WORKER: Side(p.Role.WORKER)}
        self.answered = 0  # answers received, by both sides
        self.quiet = 0  # answers to see before the rules that end a connection are enabled

    def peer(self, role: p.Role) -> Side:
        return self.sides[p.Role.WORKER if role is p.Role.HOST else p.Role.HOST]

    def write_to(self, side: Side, data: bytes) -> None:
        if not side.ended:
            side.inbox += data

    def endings_allowed(self) -> bool:
        return self.answered >= self.quiet

    # Hypothesis turns rules on and off per example (swarm testing), so the
    # honest traffic that everything else builds on starts here, not in a rule.
    @initialize(
        stage=STAGES,
        warm_up=st.integers(1, 3),
        quiet=st.integers(0, 12),
        request=FORGED_REQUESTS,
        hint=st.builds(p.Notification, method=st.just(HOST_HINT.name), params=PARAMS),
        data=st.data(),
    )
    def handshake(
        self, stage: p.State, warm_up: int, quiet: int, request: p.Request, hint: p.Notification, data: st.DataObject
    ) -> None:
        """Start most runs past the handshake, honestly, with a few requests answered, one forged
        request refused (or received and withheld) and one lenient notice dropped (or received)."""
        host, worker = self.sides[p.Role.HOST], self.sides[p.Role.WORKER]
        for index in range(int(stage)):
            self.send_request(p.Role.HOST, index)
            self.deliver(p.Role.WORKER, len(worker.inbox))
            self.answer_id(p.Role.WORKER, host.last_id, "result")
            self.deliver(p.Role.HOST, len(host.inbox))
        assert host.conn.state is worker.conn.state is stage
        if stage is p.State.LOADED:
            for _ in range(warm_up):
                self.converse(p.Role.HOST, data, data.draw(IN_FLIGHT))
        self.forge_request(p.Role.WORKER, request)
        self.forge_notification(p.Role.WORKER, hint)
        self.answered, self.quiet = 0, quiet

    def answer_peer(self, role: p.Role, reply: bytes) -> None:
        # An answer to a forged request answers an id the peer may never have sent.
        peer = self.peer(role)
        peer.tainted = peer.tainted or self.sides[role].tainted
        self.write_to(peer, reply)

    # --- the rules ---------------------------------------------------------------------
    # Few rules, because Hypothesis turns a random subset of them off in each
    # example (swarm testing). It lists them by their number of arguments, then
    # by name, and its simplest examples repeat the first one: the exchange.

    @rule(data=st.data())  # one argument: listed first
    def exchange(self, data: st.DataObject) -> None:
        self.converse(data.draw(SIDES), data, data.draw(IN_FLIGHT))

    @rule(role=SIDES, item=st.integers(0, len(REQUESTS) + len(NOTICES) - 1))
    def send(self, role: p.Role, item: int) -> None:
        """A request or a notification, allowed or not: sent and left for ``deliver``."""
        if item < len(REQUESTS):
            self.send_request(role, item)
        else:
            self.send_notification(role, item - len(REQUESTS))

    @rule(role=SIDES, data=st.data(), how=HOWS)
    def settle(self, role: p.Role, data: st.DataObject, how: str) -> None:
        """End one request: answer or withhold one of the peer's, or abandon one of ours."""
        if how == "abandon":
            self.abandon(role, data)
        else:
            self.answer(role, data, how)

    @rule(role=SIDES, message=st.one_of(FORGED_REQUESTS, FORGED_NOTIFICATIONS))
    def forge(self, role: p.Role, message: p.Request | p.Notification) -> None:
        """A request or a notification the peer never sent, straight into one side, with the outcome the table says."""
        if isinstance(message, p.Request):
            self.forge_request(role, message)
        else:
            self.forge_notification(role, message)

    @precondition(lambda self: self.endings_allowed())
    @rule(role=SIDES, how=st.one_of(st.sampled_from(["close", "end of stream"]), FORGED_BYTES))
    def finish(self, role: p.Role, how: str | bytes) -> None:
        """Once enough was answered: close(), the end of the stream, or hostile bytes (forged answers, garbage)."""
        side = self.sides[role]
        if isinstance(how, bytes):
            side.tainted = True
            self.write_to(side, how)
            return
        event_note(f"finish: {how}")
        if how == "close":
            for req_id in side.conn.close():
                side.end(req_id, "closed")
            assert side.conn.state in (p.State.CLOSED, p.State.ERROR)
        elif not side.ended:
            chunk, side.inbox = bytes(side.inbox), bytearray()
            if chunk:
                self.receive(side, role, chunk)
            side.ended = True
            self.receive(side, role, b"")

    @precondition(lambda self: any(s.inbox for s in self.sides.values()))
    @rule(role=SIDES, size=st.integers(1, 4096))
    def deliver(self, role: p.Role, size: int) -> None:
        side = self.sides[role]
        chunk, side.inbox = bytes(side.inbox[:size]), side.inbox[size:]
        if chunk:
            self.receive(side, role, chunk)

    # --- sending ---------------------------------------------------------------------

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

    def converse(self, role: p.Role, data: st.DataObject, count: int) -> None:
        """Up to ``count`` requests in flight at once: sent, delivered, answered in any order (or withheld,
        or abandoned first), and the answers delivered."""
        side, peer = self.sides[role], self.peer(role)
        peer_role = p.Role.WORKER if role is p.Role.HOST else p.Role.HOST
        sent: list[tuple[int, str]] = []
        for _ in range(count):
            sendable = [i for i, (m, _, _) in enumerate(REQUESTS) if m.sender is role and side.conn.state in m.allowed]
            if not sendable:
                break
            # Calls half the time they can be made: they are what the protocol is for.
            index = pick(data, [CALL_INDEX] * len(sendable) + sendable if CALL_INDEX in sendable else sendable)
            self.send_request(role, index)
            sent.append((side.last_id, REQUESTS[index][0].name))
        self.deliver(peer_role, len(peer.inbox))
        for req_id, name in shuffled(data, sent):
            if req_id not in peer.received:
                continue
            how = data.draw(HOWS)
            event_note(f"exchange: {name}, {how}")
            if how == "abandon":
                # Given up on before the answer comes: the answer is then dropped without an event.
                side.conn.abandon(req_id)
                side.end(req_id, "abandoned")
                event_note("abandoned")
                how = "result"
            self.answer_id(peer_role, req_id, how)
        if len(sent) > 1:
            event_note("exchange: several in flight")
        self.deliver(role, len(side.inbox))

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

    def answer(self, role: p.Role, data: st.DataObject, how: str) -> None:
        side = self.sides[role]
        if not side.conn.unanswered:
            # Nothing to answer: answering or withholding anything is this side's mistake, and changes nothing.
            stray: p.JsonRpcId = pick(data, STRAY_IDS)
            for attempt in (lambda: side.conn.send_error(stray, p.ErrorCode.TOOL_ERROR, "no"),
                            lambda: side.conn.withhold(stray)):  # fmt: skip
                try:
                    attempt()
                except p.LocalProtocolError:
                    continue
                raise AssertionError(f"answered {stray!r}, which was not unanswered")
            return
        self.answer_id(role, pick(data, side.conn.unanswered), how)

    def answer_id(self, role: p.Role, req_id: p.JsonRpcId, how: str) -> None:
        side = self.sides[role]
        side.received.discard(req_id)
        if how == "withhold":
            side.conn.withhold(req_id)
            event_note("withheld")
        elif how == "error":
            self.answer_peer(role, side.conn.send_error(req_id, p.ErrorCode.TOOL_ERROR, "no"))
        else:
            method = side.conn._unanswered[req_id]
            self.answer_peer(role, side.conn.send_result(req_id, RESULTS[method.name]))
        assert req_id not in side.conn.unanswered

    def abandon(self, role: p.Role, data: st.DataObject) -> None:
        side = self.sides[role]
        if not side.pending:
            return
        req_id = pick(data, sorted(side.pending))
        side.conn.abandon(req_id)
        side.end(req_id, "abandoned")
        event_note("abandoned")

    # --- forged into one side, each with the outcome the table says ---------------------

    def forge_request(self, role: p.Role, message: p.Request) -> None:
        side = self.sides[role]
        if not side.live:
            return
        method = TABLE.requests.get(message.method)
        expected: p.RefusalReason | None = None
        if method is None or method.sender is role:
            expected = p.RefusalReason.UNKNOWN_METHOD
        elif message.id in side.received:
            expected = p.RefusalReason.DUPLICATE_ID
        elif side.conn.state not in method.allowed:
            expected = p.RefusalReason.OUT_OF_STATE
        elif not fits(message.params, method.params):
            expected = p.RefusalReason.BAD_PARAMS
        side.conn.receive_message(message)
        event = side.conn.next_event()
        event_note(f"forged request: {expected.name if expected else 'received'}")
        if expected is None:
            assert isinstance(event, p.RequestReceived) and event.id == message.id and event.method is method
            # Withheld at once: an answer would go to a peer that never sent the request.
            side.conn.withhold(message.id)
            return
        assert isinstance(event, p.RequestRefused) and event.reason is expected, (event, expected)
        assert event.error.code == expected.code and event.id == message.id
        assert p.decode_message(event.reply[p.HEADER_BYTES :]) == p.ErrorResponse(id=message.id, error=event.error)

    def forge_notification(self, role: p.Role, message: p.Notification) -> None:
        side = self.sides[role]
        if not side.live:
            return
        notice = TABLE.notices.get(message.method)
        known = notice is not None and notice.sender is not role
        in_state = known and notice is not None and side.conn.state in notice.allowed
        fit = notice is not None and fits(message.params, notice.params)
        fatal = in_state and not fit and notice is not None and not notice.lenient
        if fatal and not self.endings_allowed():
            return
        side.conn.receive_message(message)
        try:
            event = side.conn.next_event()
        except p.RemoteProtocolError as exc:
            assert fatal, f"a forged notification failed the connection: {exc}"  # noqa: PT017
            side.tainted, side.error = True, exc
            event_note("forged notification: fatal")
            return
        assert not fatal
        if in_state and fit:
            assert isinstance(event, p.NotificationReceived) and event.method is notice
            event_note("forged notification: received")
            return
        assert isinstance(event, p.NotificationDropped) and event.method_name == message.method
        why = "bad params: " if in_state else "not allowed while" if known else "unknown notification"
        assert event.reason.startswith(why), (event.reason, why)
        event_note(f"forged notification: dropped ({why.rstrip(': ')})")

    # --- receiving ----------------------------------------------------------------------

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
            if len(chunk) % 2:  # half the chunks are read in place, in small reads
                read_in_place(side.conn, chunk)
            else:
                side.conn.receive_data(chunk)
            while not isinstance(event := side.conn.next_event(), p.NeedData):
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
            self.answered += 1
        elif isinstance(event, p.ConnectionClosed):
            for req_id in event.outstanding:
                side.end(req_id, "closed at end of stream")
        elif isinstance(event, p.RequestRefused):
            event_note(f"refused: {event.reason.name}")
            assert event.error.code == event.reason.code
            # The reasons' order: an unknown method first, then a duplicate id, then the rest.
            if event.reason is not p.RefusalReason.UNKNOWN_METHOD:
                assert (event.reason is p.RefusalReason.DUPLICATE_ID) == (event.id in side.received)
            self.answer_peer(role, event.reply)
        elif isinstance(event, p.RequestReceived):
            event_note(f"{event.method.name} received in {side.conn.state.name}")
            assert event.method.sender is not role
            assert isinstance(event.params, event.method.params)
            side.received.add(event.id)
        elif isinstance(event, p.NotificationReceived):
            assert event.method.sender is not role and side.conn.state in event.method.allowed

    # --- invariants ---------------------------------------------------------------------

    def teardown(self) -> None:
        """Every example ends both connections; then no request is left.

        The worker's stream ends (what is in flight is delivered first), the
        host's answers are delivered, and both close (the only way out of
        ERROR). Every request either side sent has then ended exactly once
        (``Side.end`` asserts it), whatever the example did before.
        """
        host, worker = self.sides[p.Role.HOST], self.sides[p.Role.WORKER]
        self.finish(p.Role.WORKER, "end of stream")
        if host.inbox:
            self.deliver(p.Role.HOST, len(host.inbox))
        self.finish(p.Role.HOST, "close")
        self.finish(p.Role.WORKER, "close")
        assert host.conn.outstanding == worker.conn.outstanding == ()
        assert not host.pending and not worker.pending, (host.pending, worker.pending)

    @invariant()
    def the_connection_agrees_with_the_model(self) -> None:
        for side in self.sides.values():
            assert set(side.conn.outstanding) == side.pending
            assert set(side.ended_ids).isdisjoint(side.pending)
            assert set(side.conn.unanswered) == side.received


# Pure and fast: half the profile's examples (100 in `dev`, a few seconds), 30 steps each.
_PROFILE = settings()  # the loaded profile
ConnectionPair.TestCase.settings = settings(
    _PROFILE, max_examples=max(50, _PROFILE.max_examples // 2), stateful_step_count=30
)
test_two_connections_against_each_other = ConnectionPair.TestCase


# --- the typed path for answers -----------------------------------------------------------
# One typed decode of a whole answer is only a faster way to the general path's
# event (the envelope, then the result); for any body both must agree.

_member_values: dict[str, st.SearchStrategy[Any]] = {
    "id": st.sampled_from([0, 1, 2, -1, 1.0, "1", None, 2**70]),
    "result": st.sampled_from(
        [
            {"protocol_version": 1, "pid": 2},
            {"protocol_version": "1", "pid": 2},
            {"pid": 2},
            {"protocol_version": 1, "pid": 2, "extra": None},
            None,
            [],
        ]
    ),
    "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
    "error": st.sampled_from([{"code": -32000, "message": "m"}, {"code": "x"}, None]),
    "method": st.sampled_from(["initialize", "update", 1]),
    "params": st.sampled_from([{}, None]),
    "other": st.integers(),
}


@st.composite
def answer_bodies(draw: st.DrawFn) -> bytes:
    """Mostly this side's own encoding of an answer, with members changed, added, repeated or reordered."""
    keys = ["id", "result", "jsonrpc"]
    if draw(st.booleans()):
        keys = draw(st.permutations(keys))
    keys += draw(st.lists(st.sampled_from(list(_member_values)), max_size=2))
    drop = draw(st.sets(st.sampled_from(keys), max_size=1)) if draw(st.booleans()) else set()
    members = [(k, draw(_member_values[k])) for k in keys if k not in drop]
    body = b"{" + b",".join(b'"%s":%s' % (k.encode(), msgspec.json.encode(v)) for k, v in members) + b"}"
    return body + draw(st.sampled_from([b"", b"", b" ", b"x"]))


def _answer_outcome(body: bytes, *, typed: bool, abandon: bool) -> tuple[object, p.State, tuple[int, ...]]:
    host, worker = p.Connection(p.Role.HOST), p.Connection(p.Role.WORKER)
    init = p.InitializeParams(protocol_version=p.PROTOCOL_VERSION, host_pid=1, cwd="/")
    req_id, data = host.send_request(p.INITIALIZE, init)
    worker.receive_data(data)
    assert isinstance(worker.next_event(), p.RequestReceived)
    if abandon:
        host.abandon(req_id)
    if not typed:
        host._typed_answer = lambda body: None  # type: ignore[method-assign]
    outcome: list[object] = []
    try:
        host.receive_data(len(body).to_bytes(4, "big") + body)
        while not isinstance(event := host.next_event(), p.NeedData):
            outcome.append(event)
    except p.RemoteProtocolError as exc:
        outcome.append(str(exc))
    return outcome, host.state, host.outstanding


@given(body=answer_bodies(), abandon=st.booleans())
def test_the_typed_path_for_answers_agrees_with_the_general_path(body: bytes, abandon: bool) -> None:
    typed = _answer_outcome(body, typed=True, abandon=abandon)
    assert typed == _answer_outcome(body, typed=False, abandon=abandon)
    event_note("answered" if typed[0] and isinstance(typed[0][0], p.ResultReceived) else "not a result")
