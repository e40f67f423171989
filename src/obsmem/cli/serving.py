"""uvicorn for the commands that serve HTTP (``obsmem proxy``, ``ui``, ``mcp --transport
http``), stopping as :mod:`.stopping` says: in-flight requests get ``GRACE`` seconds after
SIGTERM (uvicorn waits for them forever by default), and a watchdog ends the process at
``DEADLINE``. Imported only by those commands, after their optional dependencies were checked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

import uvicorn

from ..asgi import JSON, ASGIApp, HTTPMiddleware, Receive, Scope, Send, Sending, answer
from .stopping import GRACE, start_deadline

__all__ = ["BoundedServer"]


class BoundedServer(uvicorn.Server):
    """``uvicorn.Server`` over ``app`` that stops in bounded time: the first SIGTERM or Ctrl-C
    starts the deadline; requests still running ``GRACE`` seconds later are cut off (a 503, or a
    response already started cut short), never reported with a traceback; ``closing`` (if
    given) runs after the app's lifespan ended, before uvicorn ends the process by the signal.
    """

    def __init__(
        self,
        app: Any,
        *,
        command: str,
        closing: Callable[[], Awaitable[None]] | None = None,
        **config: Any,
    ) -> None:
        super().__init__(
            uvicorn.Config(
                _CutOffWhenStopping(app, self, command),
                timeout_graceful_shutdown=GRACE,
                **config,
            )
        )
        self.command = command
        self._closing = closing
        logging.getLogger("uvicorn.error").addFilter(_OwnWords(self))

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        start_deadline(self.command)
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: Any = None) -> None:
        await super().shutdown(sockets)
        if self._closing is not None:
            await self._closing()


class _OwnWords(logging.Filter):
    """uvicorn's words for a request cut off by the stop, said the command's way: one line,
    ``obsmem proxy: ...``, on stderr."""

    def __init__(self, server: BoundedServer) -> None:
        super().__init__()
        self.server = server

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.server.should_exit:
            return True
        if record.msg == "ASGI callable returned without completing response.":
            return False  # a response cut off by the stop (said below)
        if str(record.msg).startswith("Cancel %s running task(s)"):
            args = record.args if isinstance(record.args, tuple) else ()
            cut = args[0] if args else "some"
            print(
                f"obsmem {self.server.command}: stopping; cut off {cut} request(s) still "
                f"running {GRACE} s after the signal",
                file=sys.stderr,
                flush=True,
            )
            return False
        return True


class _CutOffWhenStopping(HTTPMiddleware):
    """ASGI middleware: a request that uvicorn cancels when its graceful shutdown runs out (the
    only time it cancels one) ends with a 503 saying the server is stopping, or, when its
    response had started, with the connection closed (the client sees the stream cut short,
    not a whole answer); uvicorn would report the cancellation as an exception in the app,
    with its traceback."""

    def __init__(self, app: ASGIApp, server: uvicorn.Server, command: str) -> None:
        super().__init__(app)
        self.server = server
        self.command = command

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        sending = Sending(send)
        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not self.server.should_exit or task is None:
                raise
            task.uncancel()
            if not sending.started:
                await _stopping(send, self.command)


async def _stopping(send: Send, command: str) -> None:
    """The 503 a request cut off by the stop gets (OpenAI's error shape)."""
    message = f"obsmem {command} is stopping: the request was cut off; send it again"
    body = json.dumps({"error": {"message": message, "type": "server_stopping", "code": 503}})
    headers = (JSON, (b"connection", b"close"), (b"retry-after", b"5"))
    await answer(send, 503, body.encode(), headers)
