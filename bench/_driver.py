"""The process one peer runs in: ``python -m bench._driver MODULE:CLASS [JSON kwargs]``.

Every peer lives in its own process, so that one system's imports, threads and
garbage never weigh on another's numbers, and all of them stay alive together,
so that the orchestrator (``bench.run``) can interleave them round by round.

Protocol, one JSON object per line: the driver writes ``{"ready": [ops], "pid": N}``
once the peer is set up; then, for each ``{"op": NAME, ...kwargs}`` read on stdin,
it writes ``{"ok": value}`` or ``{"error": "..."}``. EOF on stdin ends the peer.
fd 1 is pointed at stderr so that nothing a peer (or its workers) prints can
corrupt the replies, which go out on a private copy of the original stdout.

A peer class has ``loop = "sync" | "trio" | "asyncio"``, is a (sync or async)
context manager that owns its workers, and answers ``op_NAME(**kwargs)``
methods (coroutines for the async loops) with JSON-serialisable values.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any


def _load(spec: str) -> type:
    module_name, _, class_name = spec.partition(":")
    return getattr(importlib.import_module(module_name), class_name)  # type: ignore[no-any-return]


class _Wire:
    def __init__(self) -> None:
        self.out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)

    def send(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(obj) + "\n")
        self.out.flush()

    @staticmethod
    def parse(line: str) -> tuple[str, dict[str, Any]] | None:
        if not line:
            return None
        cmd = json.loads(line)
        return cmd.pop("op"), cmd


def _ops(peer: object) -> list[str]:
    return sorted(name[3:] for name in dir(peer) if name.startswith("op_"))


def _failure(op: str) -> dict[str, Any]:
    return {"error": f"{op}: {traceback.format_exc(limit=-4)}"}


def serve_sync(peer: Any, wire: _Wire) -> None:
    with peer:
        wire.send({"ready": _ops(peer), "pid": os.getpid()})
        while (cmd := wire.parse(sys.stdin.readline())) is not None:
            op, kwargs = cmd
            try:
                wire.send({"ok": getattr(peer, "op_" + op)(**kwargs)})
            except Exception:
                wire.send(_failure(op))


async def serve_trio(peer: Any, wire: _Wire) -> None:
    import trio

    async with peer:
        wire.send({"ready": _ops(peer), "pid": os.getpid()})
        while (cmd := wire.parse(await trio.to_thread.run_sync(sys.stdin.readline))) is not None:
            op, kwargs = cmd
            try:
                wire.send({"ok": await getattr(peer, "op_" + op)(**kwargs)})
            except Exception:
                wire.send(_failure(op))


async def serve_asyncio(peer: Any, wire: _Wire) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    async with peer:
        wire.send({"ready": _ops(peer), "pid": os.getpid()})
        while (cmd := wire.parse(await loop.run_in_executor(None, sys.stdin.readline))) is not None:
            op, kwargs = cmd
            try:
                wire.send({"ok": await getattr(peer, "op_" + op)(**kwargs)})
            except Exception:
                wire.send(_failure(op))


def main() -> None:
    wire = _Wire()
    try:
        cls = _load(sys.argv[1])
        peer = cls(**(json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}))
        if cls.loop == "trio":
            import trio

            trio.run(serve_trio, peer, wire)
        elif cls.loop == "asyncio":
            import asyncio

            asyncio.run(serve_asyncio(peer, wire))
        else:
            serve_sync(peer, wire)
    except BaseException:
        wire.send({"error": f"setup of {sys.argv[1]} failed: {traceback.format_exc(limit=-6)}"})
        raise


if __name__ == "__main__":
    main()
