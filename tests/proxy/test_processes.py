"""``obsmem proxy`` as a command: its own process, and two of them sharing one PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from obsmem.cli import main
from obsmem.messages import TextPart
from obsmem.stores import PostgresStore, SQLiteStore, Store
from tests.strict_server import strict_server

from .helpers import bytes_under, memory_aware

SRC = str(Path(__file__).resolve().parents[2] / "src")
FILLER = " ".join(["please", "remember", "this", "detail", "for", "later"] * 5)


def echo(body: dict[str, Any]) -> str:
    last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
    return f"Answer to: {re.findall(r'Turn [0-9]+ of [a-z0-9-]+', str(last['content']))[-1]}"


@contextlib.asynccontextmanager
async def proxy_process(
    upstream: str, db: str, *flags: str, said: list[str] | None = None
) -> AsyncIterator[tuple[str, list[bytes]]]:
    """``obsmem proxy`` in a subprocess on a free port: its base URL, and (once it stopped)
    everything it wrote to stderr; its start-up line goes into ``said``."""
    env = {**os.environ, "PYTHONPATH": SRC}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "obsmem",
        "proxy",
        "--upstream",
        upstream,
        "--db",
        db,
        "--port",
        "0",
        "--message-tokens",
        "400",
        "--buffer-tokens",
        "off",
        *flags,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    stderr: list[bytes] = []
    try:
        async with asyncio.timeout(30):
            line = (await process.stdout.readline()).decode()
        if said is not None:
            said.append(line)
        found = re.search(r"(http://\S+/v1) ->", line)
        if found is None:
            raise AssertionError(line + (await process.stderr.read()).decode())
        yield found.group(1), stderr
    finally:
        if process.returncode is None:
            process.terminate()
        _, err = await process.communicate()
        stderr.append(err)
        # uvicorn shuts down cleanly, then lets the SIGTERM end the process as usual.
        assert process.returncode in (0, -15), err.decode()


def turn(thread: str, i: int) -> str:
    return f"Turn {i} of {thread}: tell me more about it. {FILLER}"


def _texts(messages: list[Any]) -> list[str]:
    return [" ".join(p.text for p in m.parts if isinstance(p, TextPart)) for m in messages]


def _resource(key: str) -> str:
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:24]


async def _accepted(http: httpx.AsyncClient, urls: list[str], key: str | None) -> None:
    """A first request of ``key`` to each proxy, naming no thread: it passes through, and the
    upstream's answer lets memory start for the key (:mod:`obsmem.proxy.admission`)."""
    for url in urls:
        reply = await http.post(
            f"{url}/chat/completions",
            json={"model": "local", "messages": [{"role": "user", "content": turn("warm", 0)}]},
            headers={"Authorization": f"Bearer {key}"} if key else {},
        )
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-obsmem-memory"].startswith("off; no thread id")


async def _conversation(
    http: httpx.AsyncClient, urls: list[str], thread: str, turns: int, key: str
) -> list[dict[str, Any]]:
    """One client: ``turns`` turns, sending its whole history, to each proxy in turn."""
    history: list[dict[str, Any]] = []
    for i in range(turns):
        history.append({"role": "user", "content": turn(thread, i)})
        reply = await http.post(
            f"{urls[i % len(urls)]}/chat/completions",
            json={"model": "local", "messages": history},
            headers={"Authorization": f"Bearer {key}", "X-Obsmem-Thread": thread},
        )
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-obsmem-memory"] == "on"
        history.append(reply.json()["choices"][0]["message"])
    return history


async def _check_stored(store: Store, key: str, histories: dict[str, list[dict[str, Any]]]) -> None:
    for thread, history in histories.items():
        stored = await store.list_messages(f"{_resource(key)}:{thread}")
        assert _texts(stored) == [m["content"] for m in history], thread
        assert [m.seq for m in stored] == list(range(1, len(history) + 1))


async def test_the_command_serves_and_never_stores_or_logs_the_key(tmp_path: Path) -> None:
    secret = "sk-proxy-process-secret-789"
    db = tmp_path / "proxy.db"
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        proxy_process(upstream.base_url, str(db)) as (url, stderr),
        httpx.AsyncClient() as http,
    ):
        await _accepted(http, [url], secret)
        history = await _conversation(http, [url], "solo", 8, secret)
        models = await http.get(f"{url}/models", headers={"Authorization": f"Bearer {secret}"})
        assert models.json()["data"][0]["id"] == "local"
    store = SQLiteStore(db)
    try:
        await _check_stored(store, secret, {"solo": history})
    finally:
        await store.aclose()
    written = bytes_under(tmp_path)
    assert secret.encode() not in written
    assert secret.encode() not in b"".join(stderr)


def test_without_the_extra_the_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    code = main(["proxy", "--upstream", "http://127.0.0.1:9/v1"], out=io.StringIO())
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "obsmem: obsmem proxy needs an optional dependency (the uvicorn package): run "
        'pip install "obsmem[proxy]"'
    )


def test_a_bad_upstream_is_refused_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["proxy", "--upstream", "localhost:8000"], out=io.StringIO()) == 2
    assert "give the upstream's base URL with its /v1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--known-keys-only"], "there is none: give the keys with --keys FILE"),
        (["--resource", "team:a"], "--resource: resource 'team:a' has a ':'"),
    ],
)
def test_owner_flags_that_cannot_work_are_refused_with_the_fix(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["proxy", "--upstream", "http://127.0.0.1:9/v1", "--db", str(tmp_path / "p.db")]
    assert main([*args, *flags], out=io.StringIO()) == 2
    assert says in capsys.readouterr().err


async def test_the_command_says_who_owns_key_less_requests(tmp_path: Path) -> None:
    """``--resource me``: the start-up line says so, and a request without a key is served
    (after its first one, which passes through) with memory stored as me's."""
    db = tmp_path / "proxy.db"
    said: list[str] = []
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        proxy_process(upstream.base_url, str(db), "--resource", "me", said=said) as (url, _),
        httpx.AsyncClient() as http,
    ):
        assert "requests without a key: resource 'me'" in said[0]
        await _accepted(http, [url], None)
        reply = await http.post(
            f"{url}/chat/completions",
            json={"model": "local", "messages": [{"role": "user", "content": turn("t", 0)}]},
            headers={"X-Obsmem-Thread": "t"},
        )
        assert reply.headers["x-obsmem-memory"] == "on"
    store = SQLiteStore(db)
    try:
        assert [t.id for t in await store.list_threads("me")] == ["me:t"]
    finally:
        await store.aclose()


async def test_two_processes_on_one_postgresql_lose_and_duplicate_nothing(
    postgres_dsn: str,
) -> None:
    """Two proxy processes share one PostgreSQL and nothing else; concurrent clients on their
    own threads alternate between them, and one conversation sends each request to both at
    once (a retry through another process): every message is stored exactly once."""
    key = "sk-shared"
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        proxy_process(upstream.base_url, postgres_dsn) as (first, _),
        proxy_process(upstream.base_url, postgres_dsn) as (second, _),
        httpx.AsyncClient(timeout=60) as http,
    ):
        await _accepted(http, [first, second], key)
        threads = [f"t{n}" for n in range(8)]
        results = await asyncio.gather(
            *(_conversation(http, [first, second], t, 6, key) for t in threads),
            _twice(http, [first, second], "both", 5, key),
        )
        histories = dict(zip([*threads, "both"], results, strict=True))
        assert not upstream.refusals
    store = PostgresStore(postgres_dsn)
    try:
        await _check_stored(store, key, histories)
    finally:
        await store.aclose()


async def _twice(
    http: httpx.AsyncClient, urls: list[str], thread: str, turns: int, key: str
) -> list[dict[str, Any]]:
    """Each turn sent to every proxy at once; the history goes on with the first answer."""
    history: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {key}", "X-Obsmem-Thread": thread}
    for i in range(turns):
        history.append({"role": "user", "content": turn(thread, i)})
        replies = await asyncio.gather(
            *(
                http.post(
                    f"{url}/chat/completions",
                    json={"model": "local", "messages": history},
                    headers=headers,
                )
                for url in urls
            )
        )
        assert all(r.status_code == 200 for r in replies)
        answers = {r.json()["choices"][0]["message"]["content"] for r in replies}
        assert len(answers) == 1
        history.append(replies[0].json()["choices"][0]["message"])
    return history
