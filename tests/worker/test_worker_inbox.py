"""The worker's inbox (_runtime/inbox.py): fd_in read by the main thread while idle, by the reader thread while busy.

Each test speaks the protocol straight to ``python -I -m xcsh_run.worker`` over its
pipes, as a blocking client, and writes exactly the byte sequences whose
handling depends on which thread reads: a cancel in the same write as its
call, requests pipelined behind a running call, a cancel for a queued call,
a UI answer that arrives while the worker is idle, the end of the stream
while idle and while busy, SIGTERM while idle and right after a ``$/cancel``.
Every read has a deadline, and every worker is killed (with its group) at
the end of its test.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import TOOLS
from xcsh_run.worker import protocol as p

MODULE = str(TOOLS / "inbox.py")
DEADLINE = 10.0


class RawWorker:
    """A worker process driven by hand: frames out, messages in, each read bounded by :data:`DEADLINE`."""

    def __init__(self, *, has_ui: bool = False) -> None:
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "xcsh_run.worker", "--fd-in", str(to_r), "--fd-out", str(from_w)],
            pass_fds=(to_r, from_w),
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # as the host does: the lifeline kills the worker's own group
        )
        os.close(to_r)
        os.close(from_w)
        self.decoder = p.FrameDecoder()
        self.next_id = 1
        init = p.InitializeParams(protocol_version=p.PROTOCOL_VERSION, host_pid=os.getpid(), cwd=os.getcwd(),
                                  has_ui=has_ui)  # fmt: skip
        assert isinstance(self.ask(p.INITIALIZE, init), p.Response)
        loaded = self.ask(p.LOAD, p.LoadParams(path=MODULE))
        assert isinstance(loaded, p.Response), loaded

    def request(self, method: p.Method[Any, Any], params: Any) -> bytes:
        """The frame of the next request (not written)."""
        frame = p.encode_message(p.Request(id=self.next_id, method=method.name, params=p.encode_value(params)))
        self.next_id += 1
        return frame

    def call(self, call_id: str, tool: str, **arguments: Any) -> bytes:
        params = p.CallParams(call_id=call_id, tool=tool, arguments=msgspec.Raw(msgspec.json.encode(arguments)))
        return self.request(p.CALL, params)

    @staticmethod
    def cancel(call_id: str, reason: str) -> bytes:
        params = p.encode_value(p.CancelParams(call_id=call_id, reason=reason))
        return p.encode_message(p.Notification(method=p.CANCEL.name, params=params))

    def write(self, *frames: bytes) -> None:
        """All the frames in one write: the worker reads them together."""
        data = b"".join(frames)
        assert os.write(self.to_w, data) == len(data)

    def receive(self) -> p.Message:
        deadline = time.monotonic() + DEADLINE
        poller = select.poll()
        poller.register(self.from_r, select.POLLIN)
        while (msg := self.decoder.next_message()) is p.NEED_DATA:
            left = deadline - time.monotonic()
            assert left > 0 and poller.poll(left * 1000), "no message from the worker in time"
            chunk = os.read(self.from_r, 1 << 16)
            assert chunk, f"the worker closed its pipe (exit status {self.proc.poll()})"
            self.decoder.receive_data(chunk)
        assert not isinstance(msg, p.NeedData)
        return msg

    def ask(self, method: p.Method[Any, Any], params: Any) -> p.Message:
        self.write(self.request(method, params))
        return self.receive()

    def answers(self, count: int) -> list[p.Response | p.ErrorResponse]:
        """The next ``count`` answers, in the order they came, skipping notifications."""
        found: list[p.Response | p.ErrorResponse] = []
        while len(found) < count:
            msg = self.receive()
            if isinstance(msg, p.Response | p.ErrorResponse):
                found.append(msg)
        return found

    def update(self) -> Any:
        """The ``partial.details`` of the next ``update`` notification."""
        msg = self.receive()
        assert isinstance(msg, p.Notification) and msg.method == p.UPDATE.name, msg
        return msgspec.json.decode(msg.params, type=p.UpdateParams).partial.details

    def wait(self) -> int:
        return self.proc.wait(DEADLINE)

    def stop(self) -> None:
        for fd in (self.to_w, self.from_r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(DEADLINE)


@pytest.fixture
def worker() -> Iterator[RawWorker]:
    w = RawWorker()
    yield w
    w.stop()


def details(answer: p.Response | p.ErrorResponse) -> Any:
    assert isinstance(answer, p.Response), answer
    return msgspec.json.decode(answer.result, type=p.CallResult).details


def text(answer: p.Response | p.ErrorResponse) -> str:
    assert isinstance(answer, p.Response), answer
    content = msgspec.json.decode(answer.result, type=p.CallResult).content
    return str(content[0]["text"]) if content else ""


def cancelled(answer: p.Response | p.ErrorResponse) -> str:
    """The reason of a ``cancelled`` error answer."""
    assert isinstance(answer, p.ErrorResponse), answer
    assert answer.error.code == p.ErrorCode.CANCELLED, answer.error
    return answer.error.message


def gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaps counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while not gone(pid):
        assert time.monotonic() < deadline, f"process {pid} still alive"
        time.sleep(0.01)


# --- the main thread reads while idle: what it read with a request is handled first -------------


def test_a_cancel_written_with_its_call_stops_it_before_it_starts(worker: RawWorker, tmp_path: Path) -> None:
    log = tmp_path / "log"
    worker.write(
        worker.call("c1", "hold", log=str(log), release=str(tmp_path / "never")), worker.cancel("c1", "timeout")
    )
    (answer,) = worker.answers(1)
    assert cancelled(answer) == "cancelled: timeout"
    assert not log.exists()  # the tool never ran


def test_a_ui_answer_read_while_idle_reaches_a_tools_thread() -> None:
    worker = RawWorker(has_ui=True)
    try:
        worker.write(worker.call("c1", "ask_later"))
        prompt: p.Request | None = None
        answer: p.Response | p.ErrorResponse | None = None
        while prompt is None or answer is None:
            msg = worker.receive()
            if isinstance(msg, p.Request):
                assert msg.method == p.UI.name
                prompt = msg
            elif isinstance(msg, p.Response | p.ErrorResponse):
                answer = msg
        assert text(answer) == "asked"
        # The call is answered, so the worker is idle: its main thread reads this.
        worker.write(p.encode_message(p.Response(id=prompt.id, result=msgspec.Raw(b"true"))))
        notice = worker.receive()
        assert isinstance(notice, p.Notification) and notice.method == p.UI_NOTICE.name, notice
        assert msgspec.json.decode(notice.params, type=p.UiParams).args[0] == "answer True"
    finally:
        worker.stop()


# --- the reader thread reads while a call runs ---------------------------------------------------


def test_a_cancel_while_the_call_runs_stops_it(worker: RawWorker, tmp_path: Path) -> None:
    worker.write(worker.call("c1", "hold", log=str(tmp_path / "log"), release=str(tmp_path / "never")))
    assert worker.update() == "holding"
    worker.write(worker.cancel("c1", "cancelled"))
    (answer,) = worker.answers(1)
    assert cancelled(answer) == "cancelled: cancelled"


def test_calls_pipelined_behind_a_running_call_are_served_in_order(worker: RawWorker, tmp_path: Path) -> None:
    never = str(tmp_path / "never")
    log = tmp_path / "log"
    worker.write(worker.call("c1", "hold", log=str(log), release=never))
    assert worker.update() == "holding"
    # Written while c1 runs, one write each: the reader thread queues the
    # calls, and sees the cancels behind them.
    worker.write(worker.call("c2", "echo", n=2))
    worker.write(worker.call("c3", "hold", log=str(log), release=never))
    worker.write(worker.call("c4", "echo", n=4))
    worker.write(worker.cancel("c3", "withdrawn"))  # still queued: kept when c2 starts, and c3 never runs
    worker.write(worker.cancel("c1", "cancelled"))
    first, second, third, fourth = worker.answers(4)
    assert (first.id, second.id, third.id, fourth.id) == (3, 4, 5, 6)
    assert cancelled(first) == "cancelled: cancelled"
    assert details(second) == {"n": 2}
    assert cancelled(third) == "cancelled: withdrawn"
    assert details(fourth) == {"n": 4}
    assert log.read_text().split() == ["start", "c1"]


def test_calls_written_together_while_idle_are_served_in_order(worker: RawWorker, tmp_path: Path) -> None:
    worker.write(*(worker.call(f"c{i}", "echo", i=i) for i in range(50)))
    assert [details(a) for a in worker.answers(50)] == [{"i": i} for i in range(50)]


def test_sigterm_right_after_a_cancel_reports_the_cancels_reason(worker: RawWorker) -> None:
    worker.write(worker.call("c1", "nap", seconds=30))
    assert worker.update() == "napping"
    # What the host does: $/cancel, then SIGTERM at once. The handler waits
    # (briefly) for the reader thread to have read the reason.
    worker.write(worker.cancel("c1", "timeout"))
    worker.proc.send_signal(signal.SIGTERM)
    (answer,) = worker.answers(1)
    assert cancelled(answer) == "cancelled: timeout"
    worker.write(worker.call("c2", "echo", again=True))  # and the worker serves on
    assert details(worker.answers(1)[0]) == {"again": True}


# --- the end of the stream and SIGTERM, idle and busy ----------------------------------------


def test_eof_while_idle_takes_the_workers_group_down(worker: RawWorker) -> None:
    worker.write(worker.call("c1", "spawn"))
    child = details(worker.answers(1)[0])
    os.close(worker.to_w)  # the host is gone
    worker.wait()
    wait_gone(child)


def test_eof_while_a_call_runs_takes_the_workers_group_down(worker: RawWorker, tmp_path: Path) -> None:
    worker.write(worker.call("c1", "hold", log=str(tmp_path / "log"), release=str(tmp_path / "never"), spawn=True))
    child = worker.update()["child"]
    os.close(worker.to_w)
    worker.wait()
    wait_gone(child)


def test_sigterm_while_idle_exits_0(worker: RawWorker) -> None:
    worker.write(worker.call("c1", "echo"))
    worker.answers(1)
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait() == 0
