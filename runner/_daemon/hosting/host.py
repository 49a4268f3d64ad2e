"""A host: a process of the daemon, forked from it, that runs one client's command at a time with warm runners.

1. **The command is the CLI's own** (``run_argv``), run in a thread under the
   client's process state (``process_state``). Its trio body and its runner
   come back to this process's loop through :class:`_Call` (the CLI's
   ``Hosting``), where the runners outlive the call (``runner_cache``).
2. **The client's signals** arrive as frames on its connection and go to the
   command's signal watcher; the connection's end (the client is gone) is a
   SIGTERM: the call stops through the ladder.
3. **The exit code goes to the client, then ``done`` to the daemon**, so that
   the daemon hands this host another call only once this one has left it.
4. **The daemon's end** (its control socket closes) ends the host after the
   call it runs: the runners close, each bounded, and the process exits. So
   does a SIGTERM, SIGINT or SIGHUP to the host itself.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import trio

from xcsh_run._cli import HOSTING, run_argv
from xcsh_run._daemon import wire
from xcsh_run._daemon.hosting.process_state import DirectoryGone, ProcessState
from xcsh_run._daemon.hosting.runner_cache import RunnerCache

if TYPE_CHECKING:
    from xcsh_run._host import Runner

logger = logging.getLogger("xcsh_run.daemon")


class _Call:
    """One client's command as the CLI sees its host (``xcsh_run._cli.Hosting``)."""

    def __init__(self, cache: RunnerCache, signals: trio.MemoryReceiveChannel[int]) -> None:
        self._cache = cache
        self._signals = signals

    def run(self, main: Callable[[], Awaitable[None]]) -> None:
        trio.from_thread.run(self._in_loop, main)

    async def _in_loop(self, main: Callable[[], Awaitable[None]]) -> None:
        token = HOSTING.set(self)  # open_cli_runner, called in this task, finds the host here
        try:
            await main()
        finally:
            HOSTING.reset(token)

    def signal_source(self) -> AsyncIterator[int]:
        return self._signals

    def open_runner(self, tool_paths: Sequence[str], **options: Any) -> AbstractAsyncContextManager[Runner]:
        return self._cache.open(tool_paths, **options)


def _command(argv: list[str], call: _Call) -> int:
    """The CLI's command, on the call's thread (rule 1); an unexpected error is the traceback Python would print."""
    HOSTING.set(call)
    try:
        return run_argv(argv)
    except BaseException:
        try:
            traceback.print_exc(file=sys.stderr)
        except (OSError, ValueError):
            pass
        return 1


async def _listen(conn: trio.socket.SocketType, signals: trio.MemorySendChannel[int]) -> None:
    """The client's frames: its forwarded signals; its end is a SIGTERM (rule 2)."""
    reader = wire.FrameReader()
    try:
        while True:
            data = await conn.recv(4096)
            if not data:
                break
            reader.feed(data)
            while reader.ready:
                number = reader.ready.popleft().get("signal")
                if number in (signal.SIGINT, signal.SIGTERM):
                    signals.send_nowait(int(number))
    except (OSError, wire.FrameError):
        pass
    signals.send_nowait(int(signal.SIGTERM))


async def _receive(sock: trio.socket.SocketType, reader: wire.FrameReader, fds: list[int]) -> wire.Frame | None:
    while not reader.ready:
        data, ancdata, _flags, _addr = await sock.recvmsg(1 << 16, wire.ANCILLARY_BYTES)
        fds.extend(wire.fds_in(ancdata))
        if not data:
            return None
        reader.feed(data)
    return reader.ready.popleft()


class Host:
    """The host's loop (the module docstring's rules)."""

    def __init__(self, control: trio.socket.SocketType) -> None:
        self._control = control
        self._state = ProcessState()

    async def serve(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as own_signals:
            async with trio.open_nursery() as nursery:
                cache = RunnerCache(nursery)
                nursery.start_soon(cache.evict_idle)
                nursery.start_soon(self._stop_on_signal, own_signals, nursery.cancel_scope)
                try:
                    await self._calls(cache)
                finally:
                    with trio.CancelScope(shield=True):
                        await cache.aclose()
                    nursery.cancel_scope.cancel()

    async def _stop_on_signal(self, own_signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
        async for _ in own_signals:
            scope.cancel()
            return

    async def _calls(self, cache: RunnerCache) -> None:
        reader = wire.FrameReader()
        while True:
            fds: list[int] = []
            try:
                frame = await _receive(self._control, reader, fds)
            except (OSError, wire.FrameError):
                frame = None
            if frame is None or len(fds) != 4:
                for fd in fds:
                    wire.close_quietly(fd)
                return  # the daemon is gone (rule 4)
            await self._call(frame, fds, cache)
            try:
                await self._control.send(wire.encode({"done": True, "runners": len(cache)}))
            except OSError:
                return

    async def _call(self, frame: wire.Frame, fds: list[int], cache: RunnerCache) -> None:
        conn = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fds[0])
        std = fds[1:]
        answer: wire.Frame
        send_signals, receive_signals = trio.open_memory_channel[int](math.inf)
        try:
            argv = [str(arg) for arg in frame["argv"]]
            env = {str(k): str(v) for k, v in frame["env"].items()}
            cwd = str(frame["cwd"])
        except (KeyError, TypeError, AttributeError):
            answer = {"exit": 2, "say": "xcsh-run: daemon: a call without argv, env and cwd"}
        else:
            for number in frame.get("signals") or ():
                if number in (signal.SIGINT, signal.SIGTERM):
                    send_signals.send_nowait(int(number))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_listen, conn, send_signals)
                try:
                    with self._state.of_client(std, cwd, env, argv):
                        code = await trio.to_thread.run_sync(_command, argv, _Call(cache, receive_signals))
                    answer = {"exit": code}
                except DirectoryGone as exc:
                    answer = {"exit": 2, "say": f"xcsh-run: {exc}; cd to one that exists"}
                nursery.cancel_scope.cancel()
        for fd in std:
            wire.close_quietly(fd)
        try:
            await conn.send(wire.encode(answer))
        except OSError:
            pass  # the client is gone: nobody to tell
        conn.close()


def serve(control_fd: int) -> int:
    """A host's whole life on ``control_fd`` (its end of the daemon's socket pair); its exit status."""
    control = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=control_fd)
    try:
        trio.run(Host(control).serve)
    except Exception:
        logger.exception("host %d failed", os.getpid())
        return 1
    return 0
