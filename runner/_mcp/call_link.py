"""What an MCP ``tools/call`` has beside its result: its tool's log records and prompts, routed to its session.

The runners serve every session, and what a worker sends about a call (a log
record, a UI prompt) names only the call's id. :class:`CallLinks` keeps one
:class:`CallLink` per MCP call in flight, by call id; the hooks it gives
each runner (a log listener, and the UI context) look the id up and reach the
session and the request the call belongs to. A record or a prompt whose id
is not an MCP call in flight (a load, a session hook, a call already over)
reaches no client: a record stays in the host's log, a prompt gets the
no-op answer. See ``log_records`` and ``elicit`` for the rules of each.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol

import trio

from xcsh_run._host import UI_DEFAULTS, Runner, ui_call, ui_key
from xcsh_run._mcp.elicit import ELICIT_TIMEOUT, Answer, form_for, roots_answer, sample_answer
from xcsh_run._mcp.log_records import LogPump
from xcsh_run._mcp.methods import ELICIT, MESSAGE, ROOTS, SAMPLE
from xcsh_run.worker import protocol as p
from xcsh_run.worker.protocol import Method, Notice

logger = logging.getLogger("xcsh_run.mcp")


class CallOwner(Protocol):
    """What a link needs of the session that made the call; ``request`` is the session's own request object."""

    @property
    def log_level(self) -> int: ...

    @property
    def can_elicit(self) -> bool | None: ...

    @property
    def can_sample(self) -> bool: ...

    @property
    def can_list_roots(self) -> bool: ...

    async def notify_for(self, request: Any, notice: Notice[Any], params: dict[str, Any]) -> None: ...

    async def ask(
        self,
        request: Any,
        params: dict[str, Any],
        timeout: float,
        *,
        method: Method[Any, Any] = ELICIT,
        key: str | None = None,
    ) -> Answer | None:
        """Ask the client ``method`` (a prompt's form, a sample, its roots) for ``request``'s tool; its answer.

        ``key``: the name the tool gave the prompt (an input request's key, for a stateless client).
        """
        ...


class CallLink:
    """One MCP call in flight: where its records and its prompts go."""

    __slots__ = ("_owner", "_request", "_unlink", "logs")

    def __init__(self, owner: CallOwner, request: Any, tool: str, unlink: Callable[[], object]) -> None:
        self._owner = owner
        self._request = request
        self._unlink = unlink
        self.logs = LogPump(tool, lambda: owner.log_level, functools.partial(owner.notify_for, request, MESSAGE))

    def close(self) -> None:
        """The call is over: nothing more reaches it; its queued records are still sent."""
        self._unlink()
        self.logs.close()

    async def prompt(self, method: str, args: list[Any]) -> Any:
        if method == "sample":
            if not self._owner.can_sample or not args or not isinstance(args[0], dict):
                return None
            answer = await self._owner.ask(self._request, args[0], ELICIT_TIMEOUT, method=SAMPLE, key=ui_key.get())
            return sample_answer(answer)
        if method == "roots":
            if not self._owner.can_list_roots:
                return None
            return roots_answer(
                await self._owner.ask(self._request, {}, ELICIT_TIMEOUT, method=ROOTS, key=ui_key.get())
            )
        form = form_for(method, args)
        if form is None or not self._owner.can_elicit:
            return UI_DEFAULTS[method]
        return form.answer(await self._owner.ask(self._request, form.params, ELICIT_TIMEOUT, key=ui_key.get()))


class CallLinks:
    """The MCP calls in flight of one server, by call id, and the hooks that reach them from the runners."""

    def __init__(self) -> None:
        self._links: dict[str, CallLink] = {}
        self.ui = _RoutingUI(self._links)

    def __len__(self) -> int:
        return len(self._links)

    def open(self, call_id: str, owner: CallOwner, request: Any, tool: str, nursery: trio.Nursery) -> CallLink:
        """Link ``call_id`` to ``owner``'s ``request`` until :meth:`CallLink.close`; records are sent from ``nursery``.

        Opened before the call starts and closed once its result is in: the
        worker sends a call's records before its result, so every record of
        the call is queued by then, and sent before ``nursery`` ends.
        """
        link = self._links[call_id] = CallLink(owner, request, tool, functools.partial(self._links.pop, call_id, None))
        nursery.start_soon(link.logs.pump)
        return link

    def attach(self, runner: Runner, has_ui: bool) -> None:
        """Give a new runner the hooks (before its first worker starts)."""
        runner.set_log_listener(self._on_log)
        runner.set_ui_context(self.ui, has_ui)

    def _on_log(self, record: p.LogParams) -> None:
        link = self._links.get(record.call_id) if record.call_id is not None else None
        if link is not None:
            link.logs.put(record)


class _RoutingUI:
    """The UI context of every runner of the server: a prompt goes to the link of its call (``ui_call``)."""

    def __init__(self, links: dict[str, CallLink]) -> None:
        self._links = links

    async def _prompt(self, method: str, args: list[Any]) -> Any:
        call_id = ui_call.get()
        link = self._links.get(call_id) if call_id is not None else None
        if link is None:
            return UI_DEFAULTS[method]
        return await link.prompt(method, args)

    async def confirm(self, title: str, message: str) -> Any:
        return await self._prompt("confirm", [title, message])

    async def select(self, title: str, options: list[str]) -> Any:
        return await self._prompt("select", [title, options])

    async def input(self, title: str, placeholder: str | None = None) -> Any:
        return await self._prompt("input", [title, placeholder])

    async def elicit(self, message: str, schema: dict[str, Any]) -> Any:
        return await self._prompt("elicit", [message, schema])

    async def sample(self, params: dict[str, Any]) -> Any:
        return await self._prompt("sample", [params])

    async def roots(self) -> Any:
        return await self._prompt("roots", [])
