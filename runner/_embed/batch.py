"""Batches: one tool over many inputs, a bounded number of calls at a time, each result as it completes.

:func:`run_batch` (trio) and :func:`run_batch_sync` (plain threads) take any
runner with :class:`Runner`'s ``call_tool`` contract (``name, arguments, *,
timeout, tool_call_id``, one ``ToolResult`` per call, never an exception for
a failed call): a local :class:`Runner` or :class:`BlockingRunner` today, and
any other runner that keeps that contract. Inputs are pulled as calls free
up, never all at once, so a batch of a million lines holds ``concurrency``
calls and as many finished results in memory. An input that is not a JSON
object (or an exception standing for a line that could not be read) becomes
its own ``invalid_arguments`` result; nothing an input does stops the batch.
:func:`jsonl_inputs` turns lines of JSON into such inputs.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
from collections.abc import AsyncIterable, AsyncIterator, Container, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import trio

from xcsh_run._discovery import snippet
from xcsh_run._errors import ConfigError
from xcsh_run._results import ErrorKind, ToolResult, error_result, named


class CallsTools(Protocol):
    """What :func:`run_batch` needs of a runner: :meth:`Runner.call_tool`'s contract."""

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        tool_call_id: str | None = None,
    ) -> ToolResult: ...


class CallsToolsBlocking(Protocol):
    """What :func:`run_batch_sync` needs: :class:`BlockingRunner`'s ``call_tool`` (from any thread) and ``cancel``."""

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        tool_call_id: str | None = None,
    ) -> ToolResult: ...

    def cancel(self, tool_call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool: ...


@dataclass(frozen=True)
class BatchItem:
    """One finished call of a batch.

    Attributes:
        index: the input's index, as the input gave it ([`jsonl_inputs`][xcsh_run.jsonl_inputs]:
            the line's number minus one).
        result: the call's single result; an input that was not a JSON
            object is an ``invalid_arguments`` result that no worker saw.
    """

    index: int
    result: ToolResult

    def to_json(self) -> dict[str, Any]:
        """``{"index", "content", "details", "is_error", "error"}``: the line ``xcsh-run batch`` writes."""
        return {"index": self.index, **self.result.to_json()}


def jsonl_inputs(lines: Iterable[str | bytes], *, start: int = 0) -> Iterator[tuple[int, Any]]:
    """Inputs for a batch from lines of JSON, one object a line, lazily: ``(index, arguments-or-error)``.

    ``lines`` are text or bytes (a file opened ``"rb"``: UTF-8 is checked
    line by line, so one bad line spoils only itself). The index is the
    line's position from ``start`` (0: line 1 is index 0). A blank line is no
    input (its index is not used). A line that is not UTF-8, not JSON, or not
    a JSON object yields a ``ValueError`` naming the line and the problem,
    which the batch turns into that index's ``invalid_arguments`` result.
    """
    each: Iterable[str | bytes] = lines
    for index, line in enumerate(each, start):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            yield index, ValueError(f"line {index + 1} is not valid JSON: {exc.msg} at column {exc.colno}")
            continue
        except UnicodeDecodeError as exc:
            yield index, ValueError(f"line {index + 1} is not UTF-8: {exc.reason} at byte {exc.start + 1}")
            continue
        if not isinstance(value, dict):
            kind = type(value).__name__ if value is not None else "null"
            yield index, ValueError(f'line {index + 1} must be a JSON object like {{"key": "value"}}, got a {kind}')
            continue
        yield index, value


def _refused(tool: str, value: Any) -> ToolResult | None:
    """The ``invalid_arguments`` result of an input that is not a JSON object, as ``Runner.call_tool`` words it."""
    if isinstance(value, Mapping):
        return None
    if isinstance(value, BaseException):
        message = str(value)
    else:
        message = f"arguments for {tool!r} must be a JSON object, got {type(value).__name__}"
    refused = error_result(ErrorKind.INVALID_ARGUMENTS, message, path="$", expected="an object", got=snippet(value))
    return named(refused, tool)


def _check(concurrency: int) -> None:
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be a positive number of calls, got {concurrency!r}")


_END: Final = object()


class _Inputs:
    """The inputs, pulled one at a time as a call frees up; skipped indices never come out."""

    def __init__(self, inputs: Iterable[tuple[int, Any]] | AsyncIterable[tuple[int, Any]], skip: Container[int]):
        self._sync = iter(inputs) if not isinstance(inputs, AsyncIterable) else None
        self._async = aiter(inputs) if isinstance(inputs, AsyncIterable) else None
        self._skip = skip
        # Only an async source has checkpoints inside a pull: two tasks must not interleave there.
        self._lock = trio.Lock()
        self._over = False

    async def next(self) -> tuple[int, Any] | None:
        if self._sync is not None:
            return self._next_sync()  # no checkpoint: a pull is atomic for trio
        async with self._lock:
            while not self._over:
                assert self._async is not None
                item: Any = await anext(self._async, _END)
                if item is _END:
                    self._over = True
                elif item[0] not in self._skip:
                    return item  # type: ignore[no-any-return]
            return None

    def _next_sync(self) -> tuple[int, Any] | None:
        assert self._sync is not None
        while not self._over:
            item: Any = next(self._sync, _END)
            if item is _END:
                self._over = True
            elif item[0] not in self._skip:
                return item  # type: ignore[no-any-return]
        return None


class BatchResults:
    """The results of a running batch: an async iterator of [`BatchItem`][xcsh_run.BatchItem], in completion order.

    Get one from [`run_batch`][xcsh_run.run_batch].
    """

    def __init__(
        self, receive: trio.MemoryReceiveChannel[BatchItem], running: dict[int, str], calls: trio.CancelScope
    ) -> None:
        self._receive = receive
        self._running = running
        self._calls = calls

    def __aiter__(self) -> BatchResults:
        return self

    async def __anext__(self) -> BatchItem:
        # A result already waiting is taken without a trip through the scheduler:
        # at thousands of calls a second, those trips are most of the batch's own cost.
        try:
            try:
                return self._receive.receive_nowait()
            except trio.WouldBlock:
                return await self._receive.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    @property
    def running(self) -> dict[int, str]:
        """The calls in flight: input index -> ``tool_call_id`` (for ``runner.cancel``)."""
        return dict(self._running)

    def stop(self) -> None:
        """Stop the batch and keep iterating: no call starts any more, the running ones are
        cancelled through their ladder and yield nothing, the results that had finished still
        come, and the iteration ends once every call's worker tree is gone."""
        self._calls.cancel()


@contextlib.asynccontextmanager
async def run_batch(
    runner: CallsTools,
    tool: str,
    inputs: Iterable[tuple[int, Any]] | AsyncIterable[tuple[int, Any]],
    *,
    concurrency: int = 8,
    skip: Container[int] = (),
    timeout: float | None = None,
) -> AsyncIterator[BatchResults]:
    """Call ``tool`` once per input, at most ``concurrency`` calls at a time; iterate the results as they complete.

    ```python
    async with run_batch(runner, "echo", jsonl_inputs(open("args.jsonl")), concurrency=8) as results:
        async for item in results:
            print(item.index, item.result.kind)
    ```

    It is a context manager around the iterator because the calls run as
    tasks, which trio keeps inside a block (an async generator cannot hold
    them across its ``yield``). Leaving the block early, by ``break``, an
    exception or a cancellation, cancels the calls still running through
    their ladder; they yield nothing, and the block is left once every
    worker tree they had is gone.

    Args:
        runner: a [`Runner`][xcsh_run.Runner], or anything with its ``call_tool`` contract.
        tool: the tool's name.
        inputs: ``(index, arguments)`` pairs, sync or async, pulled lazily. An
            argument value that is not a mapping (a list, a ``ValueError`` for
            a line that could not be parsed) becomes that index's
            ``invalid_arguments`` result, naming the problem.
        concurrency: calls in flight at once. Give the runner at least as
            many ``max_workers``, or calls wait in its queue (and may end ``busy``).
        skip: indices not to run (those a previous run already has); they yield nothing.
        timeout: each call's timeout (see ``Runner.call_tool``).

    Raises:
        ConfigError: ``concurrency`` is not a positive int.
    """
    _check(concurrency)
    source = _Inputs(inputs, skip)
    send, receive = trio.open_memory_channel[BatchItem](concurrency)
    running: dict[int, str] = {}
    prefix = f"batch-{os.urandom(4).hex()}"
    failures: list[BaseException] = []

    async def work(send: trio.MemorySendChannel[BatchItem], nursery: trio.Nursery) -> None:
        try:
            while (item := await source.next()) is not None:
                index, value = item
                result = _refused(tool, value)
                if result is None:
                    call_id = f"{prefix}-{index}"
                    running[index] = call_id
                    try:
                        result = await runner.call_tool(tool, value, timeout=timeout, tool_call_id=call_id)
                    finally:
                        del running[index]
                try:
                    send.send_nowait(BatchItem(index, result))  # the call's own checkpoints were enough
                except trio.WouldBlock:
                    await send.send(BatchItem(index, result))
        except Exception as exc:
            # Not a call's failure (those are results) but the runner's or the inputs':
            # raised as itself out of the block, not wrapped in the nursery's group.
            # Recorded before the channel closes: the reader may end the block as soon as it does.
            failures.append(exc)
            nursery.cancel_scope.cancel()
        finally:
            send.close()  # no checkpoint: nothing can come between the failure and its record

    # The calls, not the reader: BatchResults.stop() cancels them alone, and the
    # results already sent still reach the reader before the channel closes.
    calls = trio.CancelScope()

    async def workers(nursery: trio.Nursery) -> None:
        with calls:
            async with trio.open_nursery() as inner, send:
                for _ in range(concurrency):
                    inner.start_soon(work, send.clone(), nursery)

    error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(workers, nursery)
        try:
            yield BatchResults(receive, running, calls)
        except Exception as exc:
            error = exc
        finally:
            nursery.cancel_scope.cancel()
            receive.close()
    if failures:
        raise failures[0]
    if error is not None:
        raise error


_DONE: Final = object()


def run_batch_sync(
    runner: CallsToolsBlocking,
    tool: str,
    inputs: Iterable[tuple[int, Any]],
    *,
    concurrency: int = 8,
    skip: Container[int] = (),
    timeout: float | None = None,
) -> Generator[BatchItem, None, None]:
    """[`run_batch`][xcsh_run.run_batch] for plain programs: an iterator of `BatchItem`, in completion order.

    ```python
    with open_blocking_runner(["tools/"], max_workers=8) as runner, open("args.jsonl") as lines:
        for item in run_batch_sync(runner, "echo", jsonl_inputs(lines), concurrency=8):
            print(item.index, item.result.kind)
    ```

    ``concurrency`` threads each take the next input and make one blocking
    call at a time on ``runner`` (a [`BlockingRunner`][xcsh_run.BlockingRunner] runs calls from
    several threads in parallel). Closing the iterator early
    (``close()``, a ``break`` in a ``with contextlib.closing(...)`` block, a
    ``KeyboardInterrupt`` while it waits) cancels the calls still running
    and returns once every thread is done. The parameters are
    [`run_batch`][xcsh_run.run_batch]'s.
    """
    _check(concurrency)
    return _run_batch_sync(runner, tool, iter(inputs), concurrency, skip, timeout)


def _run_batch_sync(
    runner: CallsToolsBlocking,
    tool: str,
    inputs: Iterator[tuple[int, Any]],
    concurrency: int,
    skip: Container[int],
    timeout: float | None,
) -> Generator[BatchItem, None, None]:
    lock = threading.Lock()
    stopping = threading.Event()
    running: dict[str, int] = {}
    # Bounded: threads wait for a slow reader instead of piling results up.
    # Each thread puts _DONE last, so the reader knows when all are over.
    results: queue.Queue[Any] = queue.Queue(maxsize=concurrency)
    prefix = f"batch-{os.urandom(4).hex()}"

    def take() -> tuple[int, Any] | None:
        with lock:
            while not stopping.is_set():
                item: Any = next(inputs, _END)
                if item is _END:
                    return None
                index: int = item[0]
                value: Any = item[1]
                if index in skip:
                    continue
                if isinstance(value, Mapping):
                    running[f"{prefix}-{index}"] = index
                return index, value
            return None

    def work() -> None:
        try:
            while (item := take()) is not None:
                index, value = item
                result = _refused(tool, value)
                if result is None:
                    call_id = f"{prefix}-{index}"
                    try:
                        result = runner.call_tool(tool, value, timeout=timeout, tool_call_id=call_id)
                    finally:
                        with lock:
                            del running[call_id]
                results.put(BatchItem(index, result))
        except BaseException as exc:
            results.put(exc)
        finally:
            results.put(_DONE)

    threads = [threading.Thread(target=work, name="xcsh-run-batch", daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    over = 0
    try:
        while over < len(threads):
            got = results.get()
            if got is _DONE:
                over += 1
            elif isinstance(got, BaseException):
                raise got
            else:
                yield got
    finally:
        stopping.set()
        # A call registers with the runner only once its thread gets there:
        # cancel again at each turn until every thread has ended.
        while over < len(threads):
            with lock:
                call_ids = list(running)
            for call_id in call_ids:
                runner.cancel(call_id, "the batch was stopped")
            try:
                got = results.get(timeout=0.05)
            except queue.Empty:
                continue
            if got is _DONE:
                over += 1
        for thread in threads:
            thread.join()
