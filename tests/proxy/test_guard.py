"""What every request to ``obsmem proxy`` must pass (:mod:`obsmem.proxy.guard`): Host and
Origin, the size and nesting limits, text no encoder likes; and every error is a clear status
and one log line, never a traceback. Through a real proxy on loopback, in front of the strict
loopback upstream."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

import obsmem.tokens.estimator
from obsmem.cli import main
from obsmem.errors import ConfigError
from obsmem.messages import Message
from obsmem.proxy import ProxyConfig
from obsmem.stores import InMemoryStore, Store
from tests.strict_server import strict_server

from .helpers import (
    AUTH,
    RunningProxy,
    client_requests,
    memory_aware,
    running_proxy,
    system_of,
)

KEY = AUTH  # a key the running proxy has accepted already
FILLER = " ".join(["please", "remember", "this", "detail", "for", "later"] * 5)


def turn(i: int) -> str:
    return f"Turn {i}: tell me about place number {i}. {FILLER}"


def chat(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "local", "messages": messages}


async def post(
    proxy: RunningProxy, body: bytes | dict[str, Any], thread: str = "guarded", **headers: str
) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {**KEY, "X-Obsmem-Thread": thread, "Content-Type": "application/json", **headers}
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"{proxy.base_url}/chat/completions", content=raw, headers=sent)


async def stored_messages(store: Store) -> list[Message]:
    """Every message of every thread in ``store``."""
    out: list[Message] = []
    for resource in await store.list_resources():
        for thread in await store.list_threads(resource):
            out.extend(await store.list_messages(thread.id))
    return out


def one_refusal(caplog: pytest.LogCaptureFixture, status: int) -> str:
    """The one log line a refused request left: a WARNING naming the status, no traceback."""
    records = [r for r in caplog.records if r.name.startswith(("obsmem", "uvicorn"))]
    assert len(records) == 1, [r.getMessage() for r in records]
    (record,) = records
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert f"({status})" in record.getMessage()
    return record.getMessage()


def error_of(reply: httpx.Response) -> dict[str, Any]:
    assert reply.headers["content-type"] == "application/json"
    return reply.json()["error"]


# -- Host and Origin -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Host": "attacker.example"}, 421, "host_not_allowed"),  # DNS rebinding
        ({"Host": "attacker.example:8766", "Content-Type": "text/plain"}, 421, "host_not_allowed"),
        (
            {"Origin": "https://attacker.example", "Content-Type": "text/plain"},
            403,
            "origin_not_allowed",
        ),
        ({"Origin": "null"}, 403, "origin_not_allowed"),  # a sandboxed page, a local file
    ],
)
async def test_a_foreign_host_or_origin_is_refused_and_nothing_is_stored_or_forwarded(
    headers: dict[str, str], status: int, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = InMemoryStore()
    async with (
        strict_server(answer=memory_aware(lambda _: "ok")) as upstream,
        running_proxy(upstream.base_url, store=store) as proxy,
    ):
        caplog.set_level(logging.INFO)
        reply = await post(proxy, chat([{"role": "user", "content": "hello"}]), **headers)
        assert reply.status_code == status
        error = error_of(reply)
        assert error["code"] == code
        assert "--allow-" in error["message"]  # the fix
        one_refusal(caplog, status)
        passthrough = await post(proxy, b"{}", **headers)  # every path, not only chat
        assert passthrough.status_code == status
        assert upstream.requests == []
        assert proxy.proxy.memory_if_made is None
        assert await stored_messages(store) == []


async def test_loopback_and_the_allowed_hosts_and_origins_are_served() -> None:
    async with (
        strict_server(answer=memory_aware(lambda _: "ok")) as upstream,
        running_proxy(
            upstream.base_url,
            allowed_hosts=["proxy.internal"],
            allowed_origins=["https://app.example.com/"],
        ) as proxy,
    ):
        served = [
            {"Host": "localhost:8766", "Origin": "http://localhost:3000"},
            {"Host": "[::1]:8766", "Origin": "http://127.0.0.1:5173"},
            {"Host": "PROXY.internal:443", "Origin": "https://app.example.com"},
        ]
        for n, headers in enumerate(served):
            reply = await post(proxy, chat([{"role": "user", "content": f"hi {n}"}]), **headers)
            assert reply.status_code == 200, reply.text
            assert reply.headers["x-obsmem-memory"] == "on"
        refused = await post(
            proxy, chat([{"role": "user", "content": "hi"}]), Origin="http://app.example.com"
        )
        assert refused.status_code == 403  # another scheme is another origin


def test_allowed_hosts_and_origins_are_read_at_start() -> None:
    config = ProxyConfig(
        upstream="http://127.0.0.1:1/v1",
        store=InMemoryStore(),
        allowed_hosts=["Proxy.Internal:8766", "*"],
        allowed_origins=["HTTPS://App.Example.com/"],
    )
    assert config.allowed_hosts == {"proxy.internal", "*"}
    assert config.allowed_origins == {"https://app.example.com"}
    with pytest.raises(ConfigError, match="give an origin as a browser sends it"):
        ProxyConfig(
            upstream="http://127.0.0.1:1/v1", store=InMemoryStore(), allowed_origins=["a.b"]
        )
    with pytest.raises(ConfigError, match="give a host name"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", store=InMemoryStore(), allowed_hosts=["a b"])
    with pytest.raises(ConfigError, match="from 16"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", store=InMemoryStore(), max_json_depth=500)


@pytest.mark.parametrize(
    "options", [{"scope": "resource"}, {"observation": "fast"}, {"observations": {}}]
)
def test_memory_options_other_than_the_two_sections_are_refused_at_start(
    options: dict[str, object],
) -> None:
    """Before, such options passed and every request then said ``X-Obsmem-Memory: failing;
    ValueError: dictionary update sequence…``, naming neither cause nor fix."""
    with pytest.raises(ConfigError, match="one log per conversation"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", store=InMemoryStore(), options=options)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--max-json-depth", "500"], "--max-json-depth 500: give a number from 16"),
        (["--max-request-bytes", "10"], "--max-request-bytes 10: give a number of bytes"),
        (["--allow-origin", "app.example.com"], "--allow-origin 'app.example.com': give an"),
    ],
)
def test_the_command_refuses_a_bad_limit_or_origin_with_the_fix(
    flags: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "proxy.db")
    args = ["proxy", "--upstream", "http://127.0.0.1:9/v1", "--db", db, *flags]
    assert main(args, out=io.StringIO()) == 2
    assert says in capsys.readouterr().err


# -- size and nesting limits ---------------------------------------------------------------------


async def test_a_body_over_the_size_limit_is_refused_before_any_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryStore()
    async with (
        strict_server(answer=memory_aware(lambda _: "ok")) as upstream,
        running_proxy(upstream.base_url, store=store, max_request_bytes=64 * 1024) as proxy,
    ):
        caplog.set_level(logging.INFO)
        reply = await post(proxy, chat([{"role": "user", "content": "x" * 70_000}]))
        assert reply.status_code == 413
        error = error_of(reply)
        assert error["code"] == "request_too_large"
        assert "--max-request-bytes" in error["message"]
        one_refusal(caplog, 413)
        fits = await post(proxy, chat([{"role": "user", "content": "x" * 60_000}]))
        assert fits.status_code == 200
        assert len(client_requests(upstream.requests)) == 1  # only the one that fits
        assert [m.text for m in await stored_messages(store)] == ["x" * 60_000, "ok"]


async def _raw_request(proxy: RunningProxy, head: str, body_pieces: list[bytes]) -> bytes:
    """Send ``head`` and ``body_pieces`` on a raw connection and read the answer's status
    line, without ever finishing the body (a proxy that waits for the rest never answers)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        writer.write(head.encode())
        for piece in body_pieces:
            writer.write(piece)
            await writer.drain()
        async with asyncio.timeout(10):
            return await reader.readline()
    finally:
        writer.close()


async def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read() -> None:
    async with (
        strict_server() as upstream,
        running_proxy(upstream.base_url, max_request_bytes=64 * 1024) as proxy,
    ):
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nAuthorization: Bearer sk-x\r\n"
            f"X-Obsmem-Thread: t\r\nContent-Length: {40 * 1024 * 1024}\r\n\r\n"
        )
        status = await _raw_request(proxy, head, [b'{"messages": ['])
        assert status.startswith(b"HTTP/1.1 413"), status
        assert upstream.requests == []


async def test_a_body_without_a_length_is_refused_as_soon_as_it_passes_the_limit() -> None:
    async with (
        strict_server() as upstream,
        running_proxy(upstream.base_url, max_request_bytes=64 * 1024) as proxy,
    ):
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nAuthorization: Bearer sk-x\r\n"
            "X-Obsmem-Thread: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        piece = b"x" * 16 * 1024
        chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * 5  # 80 KiB, and no end
        status = await _raw_request(proxy, head, chunks)
        assert status.startswith(b"HTTP/1.1 413"), status
        assert upstream.requests == []


@pytest.mark.parametrize("depth", [65, 5_000])
async def test_json_nested_past_the_limit_is_refused_with_a_400(
    depth: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the limit, and past what Python's JSON parser can take (a 500 and a traceback
    before)."""
    store = InMemoryStore()
    async with (
        strict_server() as upstream,
        running_proxy(upstream.base_url, store=store) as proxy,
    ):
        caplog.set_level(logging.INFO)
        nested = "[" * (depth - 3) + "]" * (depth - 3)  # in the body, messages, a message
        raw = f'{{"model": "m", "messages": [{{"role": "user", "content": {nested}}}]}}'
        reply = await post(proxy, raw.encode())
        assert reply.status_code == 400
        error = error_of(reply)
        assert error["code"] == "json_too_deep"
        assert "deeper than 64 levels" in error["message"]
        assert "--max-json-depth" in error["message"]
        one_refusal(caplog, 400)
        assert upstream.requests == []
        assert await stored_messages(store) == []


def _tool_step(arguments: str) -> list[dict[str, Any]]:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return [
        {"role": "user", "content": turn(0)},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
    ]


async def test_tool_arguments_nested_2000_deep_are_refused_and_memory_keeps_working() -> None:
    """Once memory failed on such a message, every later request of the thread (resending it)
    failed too; now the request is refused up front, and the thread's memory is untouched."""
    async with (
        strict_server(answer=memory_aware(lambda _: "ok")) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        deep = '{"a": ' + "[" * 2_000 + "]" * 2_000 + "}"
        reply = await post(proxy, chat(_tool_step(deep)))
        assert reply.status_code == 400
        message = error_of(reply)["message"]
        assert "at messages[1].tool_calls[0].function.arguments" in message
        assert "deeper than 64 levels" in message
        fixed = await post(proxy, chat(_tool_step('{"a": [[1]]}')))
        assert fixed.status_code == 200
        assert fixed.headers["x-obsmem-memory"] == "on"


# -- text no encoder likes -----------------------------------------------------------------------


async def test_a_lone_surrogate_is_stored_as_sent_and_memory_keeps_working() -> None:
    """A lone surrogate (``"\\ud800"`` in the JSON) switched memory off for the thread for
    good; now it is stored exactly, the Observer is shown U+FFFD in its place, and memory
    observes the thread as any other."""
    store = InMemoryStore()
    odd = f"Turn 0: my code is \ud800 here. {FILLER}"
    async with (
        strict_server(answer=memory_aware(lambda _: "ok")) as upstream,
        running_proxy(upstream.base_url, store=store) as proxy,
    ):
        history: list[dict[str, Any]] = [{"role": "user", "content": odd}]
        statuses: list[str] = []
        for i in range(1, 12):
            reply = await post(proxy, chat(history))
            statuses.append(reply.headers["x-obsmem-memory"])
            history += [reply.json()["choices"][0]["message"], {"role": "user", "content": turn(i)}]
            await proxy.proxy.settle()
        assert set(statuses) == {"on"}, statuses
        observed = system_of(client_requests(upstream.requests)[-1])
        assert "User spoke in turn 0." in observed  # the odd message was observed
        stored = [m.text for m in await stored_messages(store)]
        assert stored[0] == odd  # losslessly
    memory_calls = [r for r in upstream.requests if r not in client_requests(upstream.requests)]
    assert memory_calls
    assert "\ufffd here" in json.dumps(memory_calls[0], ensure_ascii=False)


# -- every error path: a status and one log line ---------------------------------------------------


@pytest.mark.parametrize(
    ("body", "headers", "status", "says"),
    [
        (b'{"model": "m", "messages": [', {}, 400, "not valid JSON"),
        (b"[1, 2]", {}, 400, "must be a JSON object, not an array"),
        (b'"hi"', {}, 400, "must be a JSON object, not a string"),
        (b"\xff\xfe{}", {}, 400, "not valid JSON"),
        (b"{}", {"Content-Type": "text/plain"}, 415, "Content-Type: application/json"),
        (b"a=1", {"Content-Type": "application/x-www-form-urlencoded"}, 415, "must be JSON"),
    ],
)
async def test_a_bad_body_is_a_clear_status_and_one_log_line(
    body: bytes,
    headers: dict[str, str],
    status: int,
    says: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with (
        strict_server() as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        caplog.set_level(logging.INFO)
        reply = await post(proxy, body, **headers)
        assert reply.status_code == status
        assert says in error_of(reply)["message"]
        assert says in one_refusal(caplog, status)
        assert upstream.requests == []


async def _breaking_upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers with the start of a stream, then hangs up in the middle of it."""
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b'\r\n10\r\ndata: {"id": "x"\r\n'
    )
    await writer.drain()
    writer.close()


async def test_an_upstream_that_breaks_off_is_one_log_line_never_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = await asyncio.start_server(_breaking_upstream, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with running_proxy(f"http://127.0.0.1:{port}/v1") as proxy:
            caplog.set_level(logging.INFO)
            with pytest.raises(httpx.RemoteProtocolError):
                await post(proxy, b"{}", thread="")  # no thread: passes through as it comes
    finally:
        server.close()
        await server.wait_closed()
    assert not [r for r in caplog.records if r.exc_info is not None]
    lines = [r.getMessage() for r in caplog.records if r.name == "obsmem"]
    lines = [line for line in lines if "named no thread" not in line]  # said once, not an error
    assert len(lines) == 1, lines
    assert "RemoteProtocolError" in lines[0]


# -- a large request never holds up the others -----------------------------------------------------


class HeldCount:
    """The text estimate, which waits for ``release`` when it counts a large text for the
    ``which``-th time (so the test can see what the proxy serves meanwhile)."""

    def __init__(self, which: int) -> None:
        self.which = which
        self.counting, self.release = threading.Event(), threading.Event()
        self.timed_out = False
        """The count waited for ``release`` in vain: nothing else was served meanwhile."""
        self._large = 0
        self._count = obsmem.tokens.estimator.estimate_text_tokens

    def __call__(self, text: str) -> int:
        if len(text) > 1_000_000:
            self._large += 1
            if self._large == self.which:
                self.counting.set()
                self.timed_out = not self.release.wait(timeout=10)
        return self._count(text)


@pytest.mark.parametrize("which", [1, 2], ids=["storing it", "the Observer capping it"])
async def test_a_small_request_is_served_while_a_large_one_is_counted(
    which: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting the tokens of a pasted page of megabytes takes seconds of CPU, once when it is
    stored and once when the Observer's transcript caps it: both run on a worker thread, so
    another conversation's request is answered while the count waits (on the event loop, the
    count would hold every request up until it gave up waiting)."""
    held = HeldCount(which)
    monkeypatch.setattr(obsmem.tokens.estimator, "estimate_text_tokens", held)
    async with (
        strict_server(answer=memory_aware(lambda _: "ok")) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        history = [{"role": "user", "content": "Turn 0: " + "a pasted page of text " * 60_000}]
        if which == 2:  # the page is observed once it is no longer the current step
            stored = await post(proxy, chat(history))
            history += [stored.json()["choices"][0]["message"], {"role": "user", "content": "?"}]
        large = asyncio.create_task(post(proxy, chat(history)))
        try:
            assert await asyncio.to_thread(held.counting.wait, 10)
            small = await post(proxy, chat([{"role": "user", "content": "hi"}]), thread="other")
            assert small.status_code == 200
            assert small.headers["x-obsmem-memory"] == "on"
        finally:
            held.release.set()
        answered = await large
        assert answered.status_code == 200
        assert answered.headers["x-obsmem-memory"] == "on"
        await proxy.proxy.settle()
    assert not held.timed_out


def test_log_and_json_text_keep_what_a_header_cannot_carry() -> None:
    """A header carries Latin-1 only; a log line and a JSON error keep every character."""
    from obsmem.proxy.upstream import one_line

    text = "KeyError: '用户' not found —\n café"
    assert one_line(text) == "KeyError: '??' not found ? café"
    assert one_line(text, header=False) == "KeyError: '用户' not found — café"
