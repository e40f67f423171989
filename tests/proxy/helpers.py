"""The proxy in-process in front of a loopback upstream, for tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from obsmem.proxy import Proxy, ProxyConfig, create_app
from obsmem.stores import InMemoryStore, Store
from tests.loopback_openai import is_memory_call

SMALL = {
    "observation": {"messageTokens": 400, "bufferTokens": False},
    "reflection": {"observationTokens": 4_000},
}
"""Memory that observes after a few turns (block_after 480 tokens), no background buffering."""
KEY = "sk-test-alpha"
"""The API key the tests' clients send unless they say otherwise."""
AUTH = {"Authorization": f"Bearer {KEY}"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
    return ""


def system_of(body: dict[str, Any]) -> str:
    return "\n".join(
        _text(m.get("content"))
        for m in body.get("messages", [])
        if m.get("role") in ("system", "developer")
    )


def memory_aware(reply: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """An upstream answer: memory's own calls get one observation per numbered turn they were
    shown; the client's requests get ``reply(body)``."""

    def answer(body: dict[str, Any]) -> Any:
        if is_memory_call(system_of(body)):
            shown = "\n".join(_text(m.get("content")) for m in body.get("messages", []))
            turns = sorted(set(re.findall(r"Turn (\d+)", shown)), key=int)
            lines = "\n".join(f"* 🟡 (10:00) User spoke in turn {t}." for t in turns) or (
                "* 🟡 (10:00) User chatted."
            )
            return f"<observations>\nDate: Dec 4, 2025\n{lines}\n</observations>"
        return reply(body)

    return answer


def client_requests(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The upstream requests that were the client's (not memory's own calls)."""
    return [r for r in requests if not is_memory_call(system_of(r))]


@dataclass
class RunningProxy:
    proxy: Proxy
    port: int
    server: uvicorn.Server
    task: asyncio.Task[None] = field(repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@contextlib.asynccontextmanager
async def running_proxy(
    upstream: str,
    *,
    store: Store | None = None,
    options: dict[str, Any] | None = None,
    accepted: Sequence[str | None] = (KEY,),
    **kwargs: Any,
) -> AsyncIterator[RunningProxy]:
    """The proxy served by uvicorn on this event loop, on a free loopback port. The upstream
    has ``accepted`` these API keys already (as after a first request of each, which passes
    through: :mod:`obsmem.proxy.admission`), so a test's first request has memory."""
    config = ProxyConfig(
        upstream=upstream,
        store=store if store is not None else InMemoryStore(),
        options=options if options is not None else SMALL,
        **kwargs,
    )
    app = create_app(config)
    proxy: Proxy = app.state.proxy
    for key in accepted:
        proxy.admission.accept(config.owners.caller(key))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    async with asyncio.timeout(10):
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
    try:
        yield RunningProxy(proxy, port, server, task)
    finally:
        server.should_exit = True
        await task
        sock.close()


@dataclass
class FixedUpstream:
    """An upstream that answers every request with one status, body and headers."""

    status: int
    body: bytes
    headers: dict[str, str]
    stream: bool = False
    port: int = 0
    requests: list[bytes] = field(default_factory=list[bytes])
    headers_seen: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    _server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readline()
            seen: dict[str, str] = {}
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode().partition(":")
                seen[name.strip().lower()] = value.strip()
            self.headers_seen.append(seen)
            length = int(seen.get("content-length", "0"))
            self.requests.append(await reader.readexactly(length))
            head = [f"HTTP/1.1 {self.status} Error", f"Content-Length: {len(self.body)}"]
            head += [f"{k}: {v}" for k, v in self.headers.items()]
            head.append("Connection: close")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + self.body)
            await writer.drain()
        finally:
            writer.close()

    async def __aenter__(self) -> FixedUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


def error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "x", "code": status}}).encode()


def bytes_under(folder: Path) -> bytes:
    """Everything the files in ``folder`` hold (a database with its WAL and journal)."""
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())
