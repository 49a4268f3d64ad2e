"""``api.ui`` (:class:`UI`) and the dual sync/async calling convention of the api object.

Methods that answer something are usable from sync and async tools alike:
inside a running asyncio loop they return an awaitable, elsewhere they block
and return the value. Methods that answer nothing return :data:`DONE`, which
is ``None``-like and may also be awaited.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Final, Protocol

from xcsh_run.worker._tool_api.host_link import HostLink
from xcsh_run.worker.protocol import methods as m


def loop_running() -> bool:
    """True inside a running asyncio loop on this thread (an ``async def`` tool)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:  # a sync tool never pays for importing asyncio
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Done:
    """The return value of fire-and-forget methods: falsy, and awaitable to None."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __await__(self) -> Generator[Any, None, None]:
        return None
        yield  # pragma: no cover - makes this a generator

    def __repr__(self) -> str:
        return "DONE"


DONE: Final = Done()


class _Owner(Protocol):
    """What the UI needs of the api object that owns it."""

    has_ui: bool


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

    def elicit(self, message: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        return {"action": "cancel", "content": None}


_NO_UI: Final = NoOpUI()


class UI:
    """``api.ui``: the user's interface, answered by the host (``xcsh_run.pi.UI`` for annotations).

    Each method is a request to the host's UI: a terminal prompt under the
    CLI, an MCP client's elicitation under ``serve``, or the ``UIContext`` an
    embedding program attached with ``set_ui_context``. With no UI attached
    (``api.has_ui`` is False) every method returns the empty answer at once:
    ``None``, ``False`` or ``""``.

    The methods that answer block a sync tool until the user answers; inside an
    ``async def`` tool they return an awaitable instead (``await
    api.ui.select(...)``). The ones that only tell (`notify`, `set_status`,
    `set_editor_text`) never wait, and may be awaited as well.

    Example:
        ```python
        def execute(tool_call_id, params, on_update, ctx, signal):
            if not api.ui.confirm("Delete", f"Delete {params['path']}?"):
                return "left as it was"
            ...

        async def execute_async(tool_call_id, params, on_update, ctx, signal):
            colour = await api.ui.select("Colour", ["red", "green"])
        ```
    """

    def __init__(self, api: _Owner, link: Callable[[], HostLink | None]) -> None:
        self._api = api
        self._link = link  # the api's link, read at each use: a worker attaches it after the api exists

    def _ask(self, method: str, *args: Any, key: str | None = None) -> Any:
        if not self._api.has_ui:
            value = getattr(_NO_UI, method)(*args)
            if loop_running():
                return ready(value)
            return value
        link = self._link()
        assert link is not None
        params = m.UiParams(call_id=link.call_id, method=method, args=list(args), key=key)
        if loop_running():
            return link.request_async(m.UI, params)
        return link.request(m.UI, params)

    def _tell(self, method: str, *args: Any) -> Done:
        link = self._link()
        if self._api.has_ui and link is not None:
            link.notify(m.UI_NOTICE, m.UiParams(call_id=link.call_id, method=method, args=list(args)))
        return DONE

    def select(self, title: str, options: Sequence[str]) -> Any:
        """Ask the user to pick one of ``options``.

        Args:
            title: the question.
            options: the choices, as shown.

        Returns:
            The chosen option (``str``), or ``None`` when the user dismissed the
            question or no UI is attached; an awaitable of it in an async tool.
        """
        return self._ask("select", title, list(options))

    def confirm(self, title: str, message: str) -> Any:
        """Ask a yes/no question.

        Args:
            title: a short heading.
            message: the question.

        Returns:
            ``True`` for yes; ``False`` for no, a dismissal, or no UI; an awaitable of it in an async tool.
        """
        return self._ask("confirm", title, message)

    def input(self, title: str, placeholder: str | None = None) -> Any:
        """Ask for one line of text.

        Args:
            title: the question.
            placeholder: a hint shown in the empty field.

        Returns:
            The text (``str``), or ``None`` when dismissed or without a UI; an awaitable of it in an async tool.
        """
        return self._ask("input", title, placeholder)

    def editor(self, title: str, prefill: str | None = None) -> Any:
        """Let the user write or edit a longer text.

        Args:
            title: what the text is for.
            prefill: the text the editor starts with.

        Returns:
            The edited text (``str``), or ``None`` when dismissed or without a UI;
            an awaitable of it in an async tool.
        """
        return self._ask("editor", title, prefill)

    def get_editor_text(self) -> Any:
        """The text of the host's input editor (``""`` without a UI); an awaitable of it in an async tool."""
        return self._ask("get_editor_text")

    def elicit(self, message: str, schema: Mapping[str, Any], *, key: str | None = None) -> Any:
        """Ask the user to fill in a form: ``schema`` is a flat JSON Schema object (MCP elicitation).

        Args:
            message: what the form is for.
            schema: ``{"type": "object", "properties": {...}, "required": [...]}``
                whose properties are strings, numbers, integers, booleans or
                enums (no nesting).
            key: the name of this question for an MCP 2026-07-28 client, which
                gets it as an input request by that key (``user_name``); 1 to 64
                letters, digits, ``_``, ``.`` or ``-``. Without it the server
                names it (``input-1``, ...); elsewhere it changes nothing.

        Returns:
            ``{"action": "accept" | "decline" | "cancel", "content": {...} | None}``;
            ``content`` (the form's values) only with ``accept``. Without a UI:
            ``cancel``. An awaitable of it in an async tool.

        Example:
            ```python
            answer = api.ui.elicit("Where to?", {"type": "object",
                                                 "properties": {"city": {"type": "string"}}})
            if answer["action"] == "accept":
                city = answer["content"]["city"]
            ```
        """
        problem = m.input_key_problem(key) if key is not None else None
        if problem is not None:
            raise ValueError(f"api.ui.elicit: {problem}")
        return self._ask("elicit", message, dict(schema), key=key)

    def notify(self, message: str, type: str = "info") -> Done:
        """Show the user a message, without waiting.

        Args:
            message: the text.
            type: ``"info"``, ``"warning"`` or ``"error"``.
        """
        return self._tell("notify", message, type)

    def set_status(self, key: str, text: str | None) -> Done:
        """Set (or, with ``None``, clear) a line of the host's status display, without waiting.

        Args:
            key: which status line; each tool should use its own.
            text: the text, or ``None`` to remove the line.
        """
        return self._tell("set_status", key, text)

    def set_editor_text(self, text: str) -> Done:
        """Replace the text of the host's input editor, without waiting."""
        return self._tell("set_editor_text", text)


async def ready(value: Any) -> Any:
    return value
