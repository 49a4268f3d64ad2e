"""The stateless era (MCP 2026-07-28): requests that carry their revision, served by the official SDK.

A 2026-07-28 client sends no ``initialize``: each request names its revision,
its capabilities and (optionally) its log level in ``_meta``, and HTTP
requests say the same in ``MCP-Protocol-Version``, ``Mcp-Method`` and
``Mcp-Name``. The SDK's low-level ``Server`` (``mcp``, kept current by the
protocol's maintainers) owns that protocol: the envelope and header checks,
``server/discover``, version negotiation and its errors, removed methods,
``resultType`` and the cache hints on results. This module gives it the two
methods xcsh-run serves, mapped onto the same tool calls as the handshake
revisions (``server``).

Rules:

1. ``tools/list`` lists what the handshake revisions list, rendered for
   2026-07-28, with a cache hint of the poll interval: the tool files are
   checked that often, so a listing is not known to change sooner.
2. ``tools/call`` is one call on the serving runner (``server``). Its
   progress and its tool's log records ride the request's own response
   stream; records only when the request's ``_meta`` asked for a log level,
   and only from that level up (the revision's per-request opt-in).
3. A request has no back-channel: a tool's ``api.ui`` prompts and
   ``api.sample`` get their no-op answers at once (as for a 2025 client
   that declared no elicitation), never a request the client cannot answer.
4. Closing the response stream cancels the request: the SDK cancels its
   handler, and the call goes through the runner's ladder.
5. Each request is its own session for ``ctx.sessionManager`` (nothing is
   shared between stateless requests, not even of one client).
6. When the server winds down, calls in flight are cancelled through the
   ladder with the reason; the runner's records of them say why.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Final

import mcp_types as types
import trio
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from xcsh_run._discovery import ToolInfo
from xcsh_run._host import Runner
from xcsh_run._mcp.elicit import Answer
from xcsh_run._mcp.log_records import LEVELS
from xcsh_run._mcp.names import rename_listed
from xcsh_run._mcp.render import INSTRUCTIONS, render_tools
from xcsh_run._mcp.server import CallHistory, ToolServer
from xcsh_run._version import __version__
from xcsh_run.worker.protocol import Notice

logger = logging.getLogger("xcsh_run.mcp")

STATELESS_VERSION: Final = "2026-07-28"
# A dict result names its own type: the SDK fills it only into the models it builds.
COMPLETE: Final = "complete"
# Above every level: a request that asked for no log level is sent no records (rule 2).
_NO_RECORDS: Final = len(LEVELS)


class StatelessServer:
    """The SDK's ``Server`` for 2026-07-28 requests, over one :class:`ToolServer`; a ``Session`` of it (rule 6)."""

    def __init__(self, tools: ToolServer, poll_interval: float) -> None:
        self._tools = tools
        self._calls: dict[str, Runner] = {}  # the calls in flight, by call id, for the wind-down
        self.sdk: Server[Any] = Server(
            "xcsh-run",
            version=__version__,
            instructions=INSTRUCTIONS,
            cache_hints={"tools/list": CacheHint(ttl_ms=int(poll_interval * 1000), scope="public")},
            get_tool_input_schema=self._input_schema,
        )
        # Registered by method, not as on_list_tools/on_call_tool: those are typed to return the SDK's
        # models, and the results here are the dicts `render` builds for every revision.
        self.sdk.add_request_handler("tools/list", types.PaginatedRequestParams, self._list_tools)
        self.sdk.add_request_handler("tools/call", types.CallToolRequestParams, self._call_tool)
        tools.sessions.add(self)

    # --- what the server asks of a session ----------------------------------------------

    @property
    def can_elicit(self) -> bool | None:
        return None  # never a reason to turn prompts on or off for the handshake sessions (rule 3)

    async def tools_changed(self, before: list[ToolInfo], after: list[ToolInfo]) -> None:
        """Nothing to send: a stateless client re-lists when its cache hint runs out."""

    def wind_down(self, why: str, deadline: float) -> None:
        for call_id, runner in list(self._calls.items()):
            runner.cancel(call_id, why)

    # --- the methods ---------------------------------------------------------------

    def _listing(self) -> list[dict[str, Any]]:
        runners = self._tools.runners
        return rename_listed(render_tools(self._tools.listed_tools(), STATELESS_VERSION), runners.names)

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        """The listed tool's ``inputSchema``, for the SDK's ``Mcp-Param-*`` header checks."""
        for tool in self._listing():
            if tool["name"] == name:
                schema = tool.get("inputSchema")
                return schema if isinstance(schema, dict) else None
        return None

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        if params.cursor is not None:
            raise MCPError(
                code=types.INVALID_PARAMS, message="invalid params: unknown cursor (tools/list is never paginated here)"
            )
        await self._tools.runners.first_load.wait()  # the first load runs in the background
        return {"tools": self._listing(), "resultType": COMPLETE}

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        raw = dict(ctx.params or {})
        owner = _RequestOwner(ctx)

        def started(runner: Runner, call_id: str) -> None:
            self._calls[call_id] = runner
            owner.call_id = call_id

        try:
            result = await self._tools.call_tool(
                owner,
                None,
                name=params.name,
                arguments=raw.get("arguments"),
                meta=raw.get("_meta"),
                version=STATELESS_VERSION,
                history=CallHistory(f"mcp-{uuid.uuid4().hex[:12]}"),
                closing=lambda: self._tools.closing,
                send_progress=owner.progress,
                label=f"request {ctx.request_id!r}",
                started=started,
            )
            return {**result, "resultType": COMPLETE}
        finally:
            if owner.call_id is not None:
                self._calls.pop(owner.call_id, None)


class _RequestOwner:
    """One stateless ``tools/call`` as the owner of its call (``call_link.CallOwner``): rules 2 and 3."""

    __slots__ = ("_ctx", "log_level", "call_id")

    can_elicit: Final = False
    can_sample: Final = False

    def __init__(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self._ctx = ctx
        self.call_id: str | None = None
        meta = (ctx.params or {}).get("_meta")
        asked = meta.get(types.LOG_LEVEL_META_KEY) if isinstance(meta, dict) else None
        self.log_level = LEVELS.index(asked) if isinstance(asked, str) and asked in LEVELS else _NO_RECORDS

    async def notify_for(self, request: Any, notice: Notice[Any], params: dict[str, Any]) -> None:
        """A log record of the call, on the request's stream (the only kind a link sends itself)."""
        message = types.LoggingMessageNotification(params=types.LoggingMessageNotificationParams.model_validate(params))
        await self._ctx.session.send_notification(message, related_request_id=self._ctx.request_id)

    async def progress(self, params: dict[str, Any]) -> None:
        await self._ctx.session.report_progress(params["progress"], params.get("total"), params.get("message"))

    async def ask(self, request: Any, params: dict[str, Any], timeout: float, *, sample: bool = False) -> Answer | None:
        await trio.lowlevel.checkpoint()
        return None  # rule 3: no back-channel to ask on
