"""The plain ASGI pieces obsmem's servers share (``obsmem proxy``, ``ui`` and ``mcp``): a
middleware that acts on HTTP requests only, a ``send`` that knows whether the response has
started, and a short answer sent whole.

Plain ASGI, not Starlette's ``BaseHTTPMiddleware``: that one runs the app in a task of its own
and buffers what it sends, and these sit in front of streamed answers and the server's stop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

__all__ = [
    "JSON",
    "TEXT",
    "ASGIApp",
    "HTTPMiddleware",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "Sending",
    "answer",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TEXT = (b"content-type", b"text/plain; charset=utf-8")
JSON = (b"content-type", b"application/json")


class HTTPMiddleware:
    """ASGI middleware for HTTP requests: :meth:`http` sees each one; the lifespan and any
    other scope go to ``app`` untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request (in front of ``self.app``)."""
        raise NotImplementedError


class Sending:
    """``send`` that remembers whether the response has started: until it has, a failure can
    still be answered; after, the client can only be cut off."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)


async def answer(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]] = (TEXT,)
) -> None:
    """Send a whole response: ``status``, ``headers`` (plain text by default) with the body's
    length, and ``body``."""
    length = (b"content-length", str(len(body)).encode())
    await send({"type": "http.response.start", "status": status, "headers": [*headers, length]})
    await send({"type": "http.response.body", "body": body})
