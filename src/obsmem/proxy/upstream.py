"""The upstream as the proxy talks to it: where a request goes, which headers go on and come
back, an answer relayed as it arrives, and the 502 when the upstream cannot be reached."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..models.overflow import ContextOverflow, context_overflow
from .admission import MEMORY_HEADER

__all__ = ["Upstream", "cause", "one_line"]

log = logging.getLogger("obsmem")

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
        "accept-encoding",
    }
)
_OVERFLOW_STATUSES = (400, 413, 422, 500)
"""The statuses an upstream refuses a request longer than the model's context with."""


def one_line(text: str, limit: int = 300, *, header: bool = True) -> str:
    """``text`` on one line of at most ``limit`` characters; for a ``header`` (HTTP carries
    Latin-1 only) what Latin-1 cannot carry is shown as ``?``, in a log line or JSON it stays."""
    flat = " ".join(text.split())
    if header:
        flat = flat.encode("latin-1", "replace").decode("latin-1")
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def cause(exc: BaseException) -> str:
    return one_line(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


class Upstream:
    """The upstream's base URL (up to and including its ``/v1``) and the client that calls it."""

    def __init__(self, base: str, timeout: float) -> None:
        self.base = base.rstrip("/")
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=10.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    def url(self, path: str) -> str:
        return self.base + path.removeprefix("/v1")

    @staticmethod
    def headers_of(request: Request) -> dict[str, str]:
        """The client's headers that go on upstream (the proxy's own ``X-Obsmem-*`` do not)."""
        return {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in _HOP_BY_HOP and not k.lower().startswith("x-obsmem-")
        }

    @staticmethod
    def response_headers(answer: httpx.Response, status: str) -> dict[str, str]:
        """The answer's headers that go back to the client, with memory's status."""
        headers = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers[MEMORY_HEADER] = status
        return headers

    def unreachable(self, exc: httpx.HTTPError, status: str) -> Response:
        message = f"obsmem proxy: cannot reach the upstream {self.base}: {cause(exc)}"
        log.warning("%s", message)
        error = {"message": message, "type": "upstream_unreachable", "param": None, "code": 502}
        return JSONResponse({"error": error}, status_code=502, headers={MEMORY_HEADER: status})

    async def send(self, request: Request, body: bytes, *, stream: bool = True) -> httpx.Response:
        """``body`` sent as the client's request (its method, path, query and headers but the
        proxy's own); a streamed answer's body is still to read."""
        built = self.client.build_request(
            request.method,
            self.url(request.url.path),
            content=body,
            headers=self.headers_of(request),
            params=str(request.query_params),
        )
        return await self.client.send(built, stream=stream)

    async def send_as_is(
        self, request: Request, raw: bytes, status: str
    ) -> httpx.Response | Response:
        """The request as the client sent it (its answer's body still to read), or the 502
        that says the upstream is unreachable."""
        try:
            return await self.send(request, raw)
        except httpx.HTTPError as exc:
            return self.unreachable(exc, status)

    def relay(
        self,
        answer: httpx.Response,
        status: str,
        seen: Callable[[bytes], object] | None = None,
        then: Callable[[], Awaitable[object]] | None = None,
    ) -> Response:
        """The upstream's answer to the client as it comes: each piece ``seen`` on the way,
        and, once it ended (not when the client hung up before), ``then``."""
        headers = self.response_headers(answer, status)

        async def pieces() -> AsyncIterator[bytes]:
            try:
                async for piece in answer.aiter_bytes():
                    if seen is not None:
                        seen(piece)
                    yield piece
            finally:
                await answer.aclose()
            if then is not None:
                await then()

        return StreamingResponse(pieces(), status_code=answer.status_code, headers=headers)

    async def forward(self, request: Request, raw: bytes, status: str) -> Response:
        """The request as the client sent it, to the same path upstream; the answer as it came."""
        answer = await self.send_as_is(request, raw, status)
        return answer if isinstance(answer, Response) else self.relay(answer, status)

    @staticmethod
    async def overflow(answer: httpx.Response) -> ContextOverflow | None:
        """The answer's refusal of the request as longer than the model's context, or None
        (the answer's body is read when its status may be one)."""
        if answer.status_code not in _OVERFLOW_STATUSES:
            return None
        await answer.aread()
        refused = httpx.HTTPStatusError("refused", request=answer.request, response=answer)
        return context_overflow(refused)
