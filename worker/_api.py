"""The ``api`` object every factory receives (SPEC §2, "The API object")."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import msgspec

from . import pi as _pi
from ._exec import ExecResult, exec_async, exec_sync


class NoOpUI:
    """The UI with nothing attached: every method is harmless and returns an empty answer."""

    def select(self, title: str, options: Sequence[str]) -> str | None:
        return None

    def confirm(self, title: str, message: str) -> bool:
        return False

    def input(self, title: str, placeholder: str | None = None) -> str | None:
        return None

    def notify(self, message: str, type: str = "info") -> None:
        return None

    def set_status(self, key: str, text: str | None) -> None:
        return None

    def editor(self, title: str, prefill: str | None = None) -> str | None:
        return None

    def get_editor_text(self) -> str:
        return ""

    def set_editor_text(self, text: str) -> None:
        return None


def _loop_running() -> bool:
    import sys

    # Only look when asyncio was imported at all: a sync tool never pays for it.
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class ToolAPI:
    """Given to ``factory(api)``. One instance is shared by all factories in a worker."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.ui: Any = NoOpUI()
        self.has_ui = False
        self.logger = logging.getLogger("xcsh.tool")
        self.msgspec: ModuleType = msgspec
        self.pi: ModuleType = _pi

    def exec(self, command: str, args: Sequence[str] = (), **kwargs: Any) -> Any:
        """Run a program without a shell.

        Inside a running asyncio loop (an ``async def`` tool) this returns an
        awaitable; elsewhere it blocks and returns the :class:`ExecResult`.
        ``exec_sync`` and ``exec_async`` are the explicit forms.
        """
        if _loop_running():
            return exec_async(command, args, **kwargs)
        return exec_sync(command, args, **kwargs)

    def exec_sync(self, command: str, args: Sequence[str] = (), **kwargs: Any) -> ExecResult:
        return exec_sync(command, args, **kwargs)

    async def exec_async(self, command: str, args: Sequence[str] = (), **kwargs: Any) -> ExecResult:
        return await exec_async(command, args, **kwargs)

    def push_pending_action(self, action: Any) -> None:
        raise NotImplementedError("push_pending_action is not supported by this version of xcsh-run")
