"""One HTTP request of our own server handed to an ASGI application (the SDK's stateless-era handler).

The connection, its admission, its bounds and its Origin and token checks stay
ours (``server``); the application sees one ``http`` scope whose body is the
request we already read.

Rules:

1. ``receive`` gives the whole body once; the next ``receive`` waits until the
   client's end closes and then says ``http.disconnect``, which is how the
   application learns the client went away (closing the stream is the cancel).
2. The response goes out as the application sends it: the head on its first
   body part (so a ``Content-Length`` it sets is used, and a stream without one
   is chunked), each part as it comes, the end with the last.
3. A client gone while the application writes does not raise inside the
   application: the rest is dropped, ``receive`` says ``http.disconnect`` (rule 1),
   and :func:`serve_asgi` raises :class:`ConnectionGone` once the application returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from xcsh_run._mcp.http.h11_io import ConnectionGone, HttpConnection, HttpRequest

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def serve_asgi(app: AsgiApp, conn: HttpConnection, request: HttpRequest, query: bytes = b"") -> None:
    """Answer ``request`` on ``conn`` with ``app``; returns once the response is complete (rules 1-3)."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": "http",
        "path": request.path,
        "raw_path": request.path.encode("latin-1"),
        "query_string": query,
        "root_path": "",
        "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in request.headers.items()],
        "client": None,
        "server": None,
    }
    body_given = False
    head: tuple[int, list[tuple[str, str]]] | None = None
    started = gone = False

    async def receive() -> Message:
        nonlocal body_given
        if not body_given:
            body_given = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        if not gone:
            await conn.watch_closed()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal head, started, gone
        if gone:
            return
        try:
            if message["type"] == "http.response.start":
                raw = message.get("headers", [])
                head = (
                    int(message["status"]),
                    [(bytes(k).decode("latin-1"), bytes(v).decode("latin-1")) for k, v in raw],
                )
                return
            if message["type"] != "http.response.body" or head is None:
                return
            if not started:
                started = True
                await conn.start(*head)
            body = bytes(message.get("body", b""))
            if body:
                await conn.send(body)
            if not message.get("more_body", False):
                await conn.finish()
        except ConnectionGone:
            gone = True  # rule 3

    await app(scope, receive, send)
    if gone or not started:
        raise ConnectionGone
