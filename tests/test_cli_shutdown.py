"""SIGTERM stops ``obsmem proxy``, ``ui`` and ``mcp`` (``chat``: ``test_cli_chat.py``) within a
bounded time whatever is pending: a catch-up of a long history whose Observer never answers, a
request in flight waiting on it, a page whose store stopped answering. Each command runs as a
process of its own, and exits by the signal after a clean stop, saying what memory work it
abandoned; a thread left behind is caught up at its next turn after the restart. The bound here
is a safety net for shared machines; the goal (10 s) is measured by ``bench/shutdown.py``."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from obsmem.cli.stopping import FORCED_EXIT
from obsmem.messages import Message
from obsmem.proxy.identity import KeyMap
from obsmem.records import record_key
from obsmem.stores import PostgresStore, SQLiteStore, Store

from .loopback_openai import answer, is_memory_call
from .proxy.helpers import AUTH, KEY, running_proxy, system_of
from .strict_server import StrictServer, endless, strict_server, strict_server_thread
from .wire_counter import WireCounter

SRC = str(Path(__file__).resolve().parents[1] / "src")
STOP_BOUND = 45.0
"""Seconds a command may take to stop after SIGTERM here (the goal is 10 s)."""
WAIT = 60.0
"""Seconds any one expected event may take (a safety net: each wait returns when it comes)."""
FILLER = (
    "We went over the budget, the travel plan and the release schedule again; the customer "
    "wants the invoice next week."
)
PROXY_DEFAULTS = {
    "observation": {"messageTokens": 30_000, "bufferTokens": 0.2},
    "reflection": {"observationTokens": 40_000},
}
"""``obsmem proxy``'s memory options when none are given."""
LONG_HISTORY = 3_000
"""Messages in the one long request: about 90,000 tokens, three times the default threshold,
so memory catches up in the background (the 100,000-message case: ``bench/shutdown.py``)."""


class Held:
    """The loopback model's answers: memory's own calls (Observer, Reflector) wait until
    :meth:`release` (``waiting`` is set when the first arrives); the client's are answered at
    once."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self._released = threading.Event()

    async def __call__(self, body: dict[str, Any]) -> str:
        if is_memory_call(system_of(body)):
            self.waiting.set()
            await asyncio.to_thread(self._released.wait)
        return answer(body)

    def release(self) -> None:
        self._released.set()

    async def wait(self) -> None:
        assert await asyncio.to_thread(self.waiting.wait, WAIT), "no call came to hold"


@contextlib.contextmanager
def held_model() -> Generator[tuple[StrictServer, Held]]:
    """The strict loopback server on its own thread, answering with :class:`Held`."""
    held = Held()
    with strict_server_thread(answer=held) as server:
        try:
            yield server, held
        finally:
            held.release()


@dataclass
class Stopped:
    seconds: float
    code: int | None
    stderr: str

    def assert_clean(self, abandoned: str | None) -> None:
        """Ended by the signal after a clean stop (uvicorn's way), no traceback, and the line
        naming the abandoned memory work (its description starts with ``abandoned``) when
        there was some."""
        assert self.code == -signal.SIGTERM, (self.code, self.stderr)
        assert "Traceback" not in self.stderr, self.stderr
        assert "ending now" not in self.stderr, self.stderr  # not the watchdog
        if abandoned is not None:
            assert f"memory work abandoned ({abandoned}" in self.stderr, self.stderr
            assert "it resumes at the next start" in self.stderr, self.stderr
        else:
            assert "abandoned" not in self.stderr, self.stderr


@dataclass
class Running:
    process: asyncio.subprocess.Process
    stderr: Path
    first_line: str

    async def stop(self) -> Stopped:
        """SIGTERM, and the exit (a command still running ``STOP_BOUND`` s later fails)."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), STOP_BOUND)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        if self.process.returncode == -signal.SIGKILL:
            said = self.stderr.read_text(errors="replace")
            pytest.fail(f"still running {STOP_BOUND:.0f} s after SIGTERM; it said:\n{said}")
        seconds = time.monotonic() - started
        return Stopped(seconds, self.process.returncode, self.stderr.read_text(errors="replace"))


_runs = itertools.count()


@contextlib.asynccontextmanager
async def command(
    folder: Path, *args: str, env: dict[str, str] | None = None, stdio: bool = False
) -> AsyncGenerator[Running]:
    """``python -m obsmem ARGS`` in a process of its own, once it printed its first line on
    stdout (``stdio``: at once, with stdin and stdout piped for the protocol)."""
    err = folder / f"stderr-{next(_runs)}.txt"
    environment = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or SRC, **(env or {})}
    with err.open("w") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "obsmem",
            *args,
            stdin=asyncio.subprocess.PIPE if stdio else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=sink,
            env=environment,
            cwd=folder,
        )
    try:
        line = ""
        if not stdio:
            assert process.stdout is not None
            async with asyncio.timeout(WAIT):
                line = (await process.stdout.readline()).decode()
            assert line, err.read_text()
        yield Running(process, err, line)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def history(pairs: int, last: str = "And what comes next?") -> list[dict[str, Any]]:
    """``pairs`` user/assistant turns, then a user message."""
    said = [
        {"role": ("user", "assistant")[i % 2], "content": f"Turn {i}: {FILLER}"}
        for i in range(2 * pairs)
    ]
    return [*said, {"role": "user", "content": last}]


async def covered(store: Store, thread: str) -> int:
    """Through which seq memory observed or buffered the thread (0: none of it)."""
    record = await store.get_record(record_key("thread", thread_id=thread, resource_id=None))
    return record.covered_through(thread) if record is not None else 0


# -- obsmem proxy ---------------------------------------------------------------------------------


def _proxy_url(first_line: str) -> str:
    found = re.search(r"(http://\S+/v1) ->", first_line)
    assert found is not None, first_line
    return found.group(1)


async def _key_accepted(http: httpx.AsyncClient, url: str) -> None:
    """The key's first request, which names no thread: its answer lets memory start for the
    key (:mod:`obsmem.proxy.admission`)."""
    body = {"model": "local", "messages": [{"role": "user", "content": "Hello."}]}
    reply = await http.post(f"{url}/chat/completions", json=body, headers=AUTH)
    assert reply.status_code == 200, reply.text


async def test_proxy_stops_with_a_catch_up_pending_and_the_thread_catches_up_after(
    tmp_path: Path,
) -> None:
    """The fault-injection case: one request with a long history starts a catch-up in the
    background; its Observer never answers. SIGTERM abandons it; the restarted proxy catches
    the thread up at its next request."""
    db = tmp_path / "proxy.db"
    said = history(LONG_HISTORY // 2)
    thread = f"{KeyMap().resource(KEY)}:long"
    with held_model() as (upstream, held):
        args = ("proxy", "--upstream", upstream.base_url, "--db", str(db), "--port", "0")
        async with command(tmp_path, *args) as proxy, httpx.AsyncClient(timeout=WAIT) as http:
            await _key_accepted(http, _proxy_url(proxy.first_line))
            reply = await http.post(
                f"{_proxy_url(proxy.first_line)}/chat/completions",
                json={"model": "local", "messages": said},
                headers={"X-Obsmem-Thread": "long", **AUTH},
            )
            assert reply.status_code == 200, reply.text
            assert reply.headers["x-obsmem-memory"] == "on"
            await held.wait()  # the catch-up's first Observer call
            stopped = await proxy.stop()
        stopped.assert_clean("1 catch-up")

        store = SQLiteStore(db)
        assert await covered(store, thread) == 0  # still behind: nothing observed
        held.release()
        said += [reply.json()["choices"][0]["message"], {"role": "user", "content": "And then?"}]
        async with (
            running_proxy(upstream.base_url, store=store, options=PROXY_DEFAULTS) as again,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            reply = await http.post(
                f"{again.base_url}/chat/completions",
                json={"model": "local", "messages": said},
                headers={"X-Obsmem-Thread": "long", **AUTH},
            )
            assert reply.status_code == 200, reply.text
            await again.proxy.settle()
            assert await covered(store, thread) > len(said) // 2


async def test_proxy_stops_with_a_request_waiting_on_a_synchronous_observation(
    tmp_path: Path,
) -> None:
    """A request past the threshold observes before it goes upstream, and the Observer never
    answers: the stop cuts the request off after the grace (a 503 that says so)."""
    db = tmp_path / "proxy.db"
    said = history(20)  # about 1,400 tokens: less than one Observer call past 1,000
    with held_model() as (upstream, held):
        args = ("proxy", "--upstream", upstream.base_url, "--db", str(db), "--port", "0")
        flags = ("--message-tokens", "1000", "--buffer-tokens", "off")
        async with (
            command(tmp_path, *args, *flags) as proxy,
            httpx.AsyncClient(timeout=STOP_BOUND + WAIT) as http,
        ):
            await _key_accepted(http, _proxy_url(proxy.first_line))
            request = asyncio.ensure_future(
                http.post(
                    f"{_proxy_url(proxy.first_line)}/chat/completions",
                    json={"model": "local", "messages": said},
                    headers={"X-Obsmem-Thread": "sync", **AUTH},
                )
            )
            await held.wait()
            stopped = await proxy.stop()
            reply = await request
    stopped.assert_clean(None)
    assert reply.status_code == 503
    assert "obsmem proxy is stopping" in reply.json()["error"]["message"]


async def test_proxy_cuts_a_stream_still_running_after_the_grace_short(tmp_path: Path) -> None:
    """An answer the upstream streams without end: after the grace the client's stream is cut
    (an incomplete response, never one that looks whole), and the stop says so in one line."""
    db = tmp_path / "proxy.db"
    async with strict_server(answer=endless()) as upstream:
        args = ("proxy", "--upstream", upstream.base_url, "--db", str(db), "--port", "0")
        async with command(tmp_path, *args) as proxy, httpx.AsyncClient(timeout=WAIT) as http:
            body = {"model": "local", "messages": history(1), "stream": True}
            async with http.stream(
                "POST",
                f"{_proxy_url(proxy.first_line)}/chat/completions",
                json=body,
                headers={"X-Obsmem-Thread": "streamed", **AUTH},
            ) as reply:
                pieces = reply.aiter_bytes()
                assert b"data: " in await anext(pieces)
                stopping = asyncio.ensure_future(proxy.stop())
                with pytest.raises(httpx.RemoteProtocolError):
                    async for _ in pieces:
                        pass
                stopped = await stopping
    stopped.assert_clean(None)
    assert "obsmem proxy: stopping; cut off 1 request(s) still running 3 s after the signal" in (
        stopped.stderr
    )


# -- obsmem ui ------------------------------------------------------------------------------------


async def test_ui_stops_with_a_page_waiting_on_a_store_that_stopped_answering(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """The inspector's PostgreSQL goes silent (a network cut) while a page reads it: the
    stop does not wait for the store's call timeout (60 s)."""
    seed = PostgresStore(postgres_dsn)
    try:
        await seed.create_thread("t1", "u1")
        await seed.append_messages("t1", [Message.user("hello")])
    finally:
        await seed.aclose()
    url = urlsplit(postgres_dsn)
    assert url.hostname is not None
    assert url.port is not None
    network = WireCounter(url.hostname, url.port)
    await network.start()
    forwarded = postgres_dsn.replace(f":{url.port}/", f":{network.port}/")
    try:
        async with (
            command(tmp_path, "ui", "--db", forwarded, "--port", "0") as ui,
            httpx.AsyncClient(timeout=STOP_BOUND + WAIT) as http,
        ):
            page = ui.first_line.split()[2]
            assert "t1" in (await http.get(page)).text
            network.silent = True
            request = asyncio.ensure_future(http.get(page))
            async with asyncio.timeout(WAIT):
                await network.swallowed.wait()
            stopped = await ui.stop()
            reply = await request
    finally:
        network.silent = False
        await network.aclose()
    stopped.assert_clean(None)
    assert reply.status_code == 503


# -- obsmem mcp -----------------------------------------------------------------------------------


def _mcp_env(model: StrictServer) -> dict[str, str]:
    return {"OBSMEM_MODEL": "openai/local-test", "OPENAI_BASE_URL": model.base_url}


MCP_FLAGS = ("--resource", "alice", "--message-tokens", "300", "--buffer-tokens", "off")


async def test_mcp_over_http_stops_with_a_tool_call_waiting_on_the_observer(
    tmp_path: Path,
) -> None:
    """A ``remember`` past the threshold observes before it answers, and the Observer never
    answers: the stop does not wait for the call (a client's session still open)."""
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    db = str(tmp_path / "memory.db")
    with held_model() as (model, held):
        args = ("mcp", "--db", db, *MCP_FLAGS, "--transport", "http", "--port", "0")
        async with command(tmp_path, *args, env=_mcp_env(model)) as server:
            url = server.first_line.rsplit(" at ", 1)[1].strip()
            async with Client(url, read_timeout_seconds=STOP_BOUND + WAIT) as client:
                said = history(6)[:-1]  # about 500 tokens: one Observer call past 300
                call = asyncio.ensure_future(client.call_tool("remember", {"messages": said}))
                await held.wait()
                stopped = await server.stop()
                with pytest.raises(MCPError, match="Server returned an error response"):
                    await call  # the 503 the cut-off call got
    stopped.assert_clean(None)


async def _rpc(process: asyncio.subprocess.Process, ident: int, method: str, **params: Any) -> Any:
    """One JSON-RPC request over the stdio transport, and its result."""
    assert process.stdin is not None
    assert process.stdout is not None
    request = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
    process.stdin.write(json.dumps(request).encode() + b"\n")
    await process.stdin.drain()
    async with asyncio.timeout(WAIT):
        while True:
            message = json.loads(await process.stdout.readline())
            if message.get("id") == ident:
                assert "result" in message, message
                return message["result"]


async def test_mcp_over_stdio_stops_when_its_client_gives_up_waiting(tmp_path: Path) -> None:
    """A client stores a long history (a catch-up starts; its Observer never answers), closes
    stdin and waits for the server to exit; the server waits for its memory work, so the
    client sends SIGTERM (as MCP clients do): the server abandons that work and exits."""
    db = str(tmp_path / "memory.db")
    with held_model() as (model, held):
        args = ("mcp", "--db", db, *MCP_FLAGS)
        async with command(tmp_path, *args, env=_mcp_env(model), stdio=True) as server:
            process = server.process
            hello = {"name": "test", "version": "0"}
            await _rpc(
                process,
                1,
                "initialize",
                protocolVersion="2025-06-18",
                capabilities={},
                clientInfo=hello,
            )
            assert process.stdin is not None
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            process.stdin.write(json.dumps(note).encode() + b"\n")
            said = history(40)[:-1]  # about 3,000 tokens: a catch-up past 300
            result = await _rpc(
                process, 2, "tools/call", name="remember", arguments={"messages": said}
            )
            assert not result.get("isError"), result
            await held.wait()
            process.stdin.close()
            stopped = await server.stop()
    stopped.assert_clean("1 catch-up")


# -- the deadline ---------------------------------------------------------------------------------


def test_the_deadline_ends_a_process_whose_main_thread_never_lets_go(tmp_path: Path) -> None:
    """What a stop cannot cut sooner (CPU work on the event loop, a store that does not answer)
    is ended by the watchdog thread: here a main thread that spins forever."""
    spin = (
        "from obsmem.cli.stopping import start_deadline\n"
        "start_deadline('proxy', 1.0)\n"
        "while True:\n"
        "    pass\n"
    )
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or SRC}
    ended = subprocess.run(
        [sys.executable, "-c", spin], capture_output=True, text=True, env=env, timeout=WAIT
    )
    assert ended.returncode == FORCED_EXIT == 143
    assert ended.stderr.strip() == (
        "obsmem proxy: still stopping 1 s after the signal; ending now (unfinished memory work "
        "resumes at the next start)"
    )
