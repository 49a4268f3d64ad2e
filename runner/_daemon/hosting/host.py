"""A host: a process of the daemon, forked from it, that runs one client's command at a time with warm runners.

1. **The command is the CLI's own** (``run_argv``), run in a thread under the
   client's process state (``process_state``). Its trio body and its runner
   come back to this process's loop through :class:`_Call` (the CLI's
   ``Hosting``), where the runners outlive the call (``runner_cache``).
2. **The client's signals** arrive as frames on its connection and go to the
   command's signal watcher; the connection's end (the client is gone) is a
   SIGTERM: the call stops through the ladder. One that comes while no trio
   body runs (the command's thread reads ``--args -`` from a terminal, or
   parses) is the CLI's KeyboardInterrupt: the client is answered 130 at
   once, and the host ends, since its thread cannot be stopped; a host never
   stays busy with a call nobody waits for.
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
from xcsh_run._terminal import reset_logging

if TYPE_CHECKING:
    from xcsh_run._host import Runner

logger = logging.getLogger("xcsh_run.daemon")


class _Call:
    """One client's command as the CLI sees its host (``xcsh_run._cli.Hosting``)."""

    def __init__(self, cache: RunnerCache, signals: trio.MemoryReceiveChannel[int]) -> None:
        self._cache = cache
        self._signals = signals
        self.watching = False  # a trio body runs, and its watcher takes the signals (rule 2)
        self.finished = False  # the command's thread is past the command: a signal now changes nothing

    def run(self, main: Callable[[], Awaitable[None]]) -> None:
        trio.from_thread.run(self._in_loop, main)

    async def _in_loop(self, main: Callable[[], Awaitable[None]]) -> None:
        token = HOSTING.set(self)  # open_cli_runner, called in this task, finds the host here
        self.watching = True
        try:
            await main()
        finally:
            self.watching = False
            HOSTING.reset(token)

    def signal_source(self) -> AsyncIterator[int]:
        return self._signals

    def open_runner(self, tool_paths: Sequence[str], **options: Any) -> AbstractAsyncContextManager[Runner]:
        return self._cache.open(tool_paths, **options)


def _command(argv: list[str], call: _Call) -> int:
    """The CLI's command, on the call's thread (rule 1), with the console script's ends.

    An unexpected error is the traceback Python would print (exit 1), and
    output that cannot be written is exit 120, as Python's own exit makes it.
    Logging is put back as it was, for the next command.
    """
    HOSTING.set(call)
    try:
        code = run_argv(argv)
    except BaseException:
        try:
            traceback.print_exc(file=sys.stderr)
        except (OSError, ValueError):
            pass
        code = 1
    finally:
        reset_logging()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe, a full disk
            code = code or 120
    call.finished = True
    return code


async def _listen(conn: trio.socket.SocketType, reader: wire.FrameReader, deliver: Callable[[int], None]) -> None:
    """The client's frames: its forwarded signals; its end is a SIGTERM (rule 2)."""
    try:
        while True:
            while reader.ready:
                number = reader.take().get("signal")
                if number in (signal.SIGINT, signal.SIGTERM):
                    deliver(int(number))
            data = await conn.recv(4096)
            if not data:
                break
            reader.feed(data)
    except (OSError, wire.FrameError):
        pass
    deliver(int(signal.SIGTERM))


async def _receive(sock: trio.socket.SocketType, reader: wire.FrameReader, fds: list[int]) -> wire.Frame | None:
    while not reader.ready:
        data, ancdata, _flags, _addr = await sock.recvmsg(1 << 16, wire.ANCILLARY_BYTES)
        fds.extend(wire.fds_in(ancdata))
        if not data:
            return None
        reader.feed(data)
    return reader.take()


class Host:
    """The host's loop (the module docstring's rules)."""

    def __init__(self, control: trio.socket.SocketType) -> None:
        self._control = control
        self._state = ProcessState()
        self._ending = False  # a call's thread could not be stopped: end after answering it (rule 2)

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
            if self._ending:
                return
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
            umask = int(frame.get("umask", 0o022))
            path = frame.get("path")
            search_path = [str(entry) for entry in path] if isinstance(path, list) else None
        except (KeyError, TypeError, AttributeError, ValueError):
            answer = {"exit": 2, "say": "xcsh-run: daemon: a call without argv, env and cwd"}
        else:
            call = _Call(cache, receive_signals)
            # What the daemon read of the client's stream past the call frame: its first signals.
            reader = wire.FrameReader()
            reader.feed(str(frame.get("rest") or "").encode("latin-1"))
            interrupted: list[int] = []
            with trio.CancelScope() as command_scope:

                def deliver(number: int) -> None:
                    if call.watching:
                        send_signals.send_nowait(number)
                    elif not interrupted and not call.finished:
                        interrupted.append(number)
                        command_scope.cancel()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_listen, conn, reader, deliver)
                    try:
                        with self._state.of_client(std, cwd, env, argv, umask, search_path):
                            code = await trio.to_thread.run_sync(_command, argv, call, abandon_on_cancel=True)
                        answer = {"exit": code}
                    except DirectoryGone as exc:
                        answer = {"exit": 2, "say": f"xcsh-run: {exc}; cd to one that exists"}
                    nursery.cancel_scope.cancel()
            if interrupted:
                # The thread is still in the command (rule 2): answered as the CLI's KeyboardInterrupt.
                self._ending = True
                name = signal.Signals(interrupted[0]).name
                answer = {"exit": 130, "say": f"xcsh-run: interrupted by {name}"}
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
