"""What ``obsmem proxy`` costs and what it saves, against calling the upstream directly.

The upstream is the test suite's strict loopback server (tests/strict_server.py) on its own
thread, answering at once (memory's own calls get a one-line observation per turn). The proxy
runs as the command runs (``python -m obsmem proxy``, its own process). The client is httpx,
sending its whole history every turn as OpenAI clients do. Measured side by side in one run:

* **added latency**: the same turns sent directly and through the proxy, alternating; p50 and
  p99 of the whole request (non-streaming) and of the time to the first content chunk
  (streaming);
* **throughput**: 50 concurrent clients on 50 threads, direct, through one proxy on SQLite, and
  through two proxy processes sharing one PostgreSQL (the test suite's throwaway server; skipped
  without PostgreSQL binaries or with ``--no-postgres``);
* **upstream request size** over a long conversation with and without the proxy (what the client
  sends is what goes upstream without it).

    python bench/proxy.py            # 300 latency turns, 50 clients x 8 turns, 240-turn talk
    python bench/proxy.py --quick    # tiny sizes (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _common import (
    create_database,
    header,
    percentile,
    postgres_admin_dsn,
    proxy_process,
    ratio,
    table,
)
from tests.proxy.helpers import client_requests, memory_aware
from tests.strict_server import StrictServer, strict_server_thread

FILLER = (
    "We talked about the budget, the travel plan and the release schedule; the customer wants "
    "the invoice next week and the team prefers the later date. "
)


def turn_text(thread: str, i: int, words: int) -> str:
    return f"Turn {i} of {thread}: " + (FILLER * (1 + words // 25))[: words * 6]


def answer(body: dict[str, Any]) -> Any:
    last = next(m for m in reversed(body["messages"]) if m.get("role") == "user")
    found = re.findall(r"Turn [0-9]+", str(last.get("content")))
    text = f"Noted {found[-1] if found else 'that'}. " + FILLER
    return iter([text[:40], text[40:80], text[80:]]) if body.get("stream") else text


async def one_turn(
    http: httpx.AsyncClient,
    url: str,
    history: list[dict[str, Any]],
    thread: str,
    *,
    stream: bool = False,
) -> tuple[float, float]:
    """Send the history; append the answer. (seconds to the whole answer, to its first chunk)"""
    headers = {"Authorization": "Bearer sk-bench", "X-Obsmem-Thread": thread}
    body = {"model": "local", "messages": history, "stream": stream}
    start = time.perf_counter()
    first = 0.0
    if not stream:
        reply = await http.post(f"{url}/chat/completions", json=body, headers=headers)
        reply.raise_for_status()
        total = time.perf_counter() - start
        history.append(reply.json()["choices"][0]["message"])
        return total, total
    pieces: list[str] = []
    async with http.stream("POST", f"{url}/chat/completions", json=body, headers=headers) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if line.startswith("data: {") and '"content"' in line:
                if not first:
                    first = time.perf_counter() - start
                found = re.search(r'"content": "((?:[^"\\]|\\.)*)"', line)
                pieces.append(found.group(1) if found else "")
    history.append({"role": "assistant", "content": "".join(pieces)})
    return time.perf_counter() - start, first


async def warm_up(urls: list[str], words: int) -> None:
    """A few turns through each URL first: imports, connections and the memory set up, so
    the first request's start-up is not counted as latency."""
    async with httpx.AsyncClient(timeout=60) as http:
        for url in urls:
            history: list[dict[str, Any]] = []
            for i in range(3):
                history.append({"role": "user", "content": turn_text("warm", i, words)})
                await one_turn(http, url, history, f"warm-{url}", stream=i == 2)


async def latency(direct: str, proxied: str, turns: int, words: int) -> None:
    print("\n## added latency per request (one client, alternating direct and proxied)")
    times: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    await warm_up([direct, proxied], words)
    async with httpx.AsyncClient(timeout=60) as http:
        for stream in (False, True):
            histories: dict[str, list[dict[str, Any]]] = {"direct": [], "proxy": []}
            for i in range(turns):
                thread = f"lat-{int(stream)}-{i // 20}"
                if i % 20 == 0:
                    histories = {"direct": [], "proxy": []}
                order = [("direct", direct), ("proxy", proxied)]
                for name, url in order if i % 2 == 0 else order[::-1]:
                    history = histories[name]
                    history.append({"role": "user", "content": turn_text(thread, i, words)})
                    took = await one_turn(http, url, history, thread, stream=stream)
                    times.setdefault((name, stream), []).append(took)
    rows: list[list[str]] = []
    for stream in (False, True):
        pick = 1 if stream else 0
        what = "time to first token (stream)" if stream else "whole request"
        direct_ms = [t[pick] * 1000 for t in times[("direct", stream)]]
        proxy_ms = [t[pick] * 1000 for t in times[("proxy", stream)]]
        for q in (50, 99):
            d, p = percentile(direct_ms, q), percentile(proxy_ms, q)
            rows.append([what, f"p{q}", f"{d:.2f}", f"{p:.2f}", f"{p - d:+.2f}"])
    table(rows, ["measure", "", "direct ms", "proxy ms", "added ms"])
    for stream in (False, True):
        pick = 1 if stream else 0
        name = "TTFT streaming" if stream else "latency non-streaming"
        d = percentile([t[pick] for t in times[("direct", stream)]], 50)
        p = percentile([t[pick] for t in times[("proxy", stream)]], 50)
        ratio(f"proxy / direct p50 {name}", p / d)


async def throughput(urls: list[str], clients: int, turns: int, words: int) -> float:
    """Requests a second: ``clients`` clients on their own threads, ``turns`` turns each."""

    async def client(n: int, http: httpx.AsyncClient) -> None:
        history: list[dict[str, Any]] = []
        thread = f"tp-{n}-{time.monotonic_ns()}"
        for i in range(turns):
            history.append({"role": "user", "content": turn_text(thread, i, words)})
            await one_turn(http, urls[(n + i) % len(urls)], history, thread)

    limits = httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(n, http) for n in range(clients)))
        return clients * turns / (time.perf_counter() - start)


async def request_size(
    server: StrictServer, proxied: str, turns: int, words: int, message_tokens: int
) -> None:
    print(f"\n## upstream request size over a {turns}-turn conversation")
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful aide."}]
    rows: list[list[str]] = []
    last = (0, 0)
    async with httpx.AsyncClient(timeout=60) as http:
        for i in range(turns):
            history.append({"role": "user", "content": turn_text("long", i, words)})
            without = server.tokens_of({"messages": history})
            before = len(server.requests)
            await one_turn(http, proxied, history, "long-talk")
            sent = client_requests(server.requests[before:])
            with_proxy = server.tokens_of(sent[-1])
            last = (without, with_proxy)
            if (i + 1) % max(1, turns // 6) == 0 or i + 1 == turns:
                rows.append([str(i + 1), f"{without:,}", f"{with_proxy:,}"])
    table(rows, ["turn", "without proxy (tokens)", "with proxy (tokens)"])
    print(f"# the bound: block_after {int(message_tokens * 1.2):,} raw tokens plus the log")
    ratio(f"upstream request size with / without the proxy at turn {turns}", last[1] / last[0])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL")
    args = parser.parse_args()
    turns = 20 if args.quick else 300
    clients, client_turns = (10, 3) if args.quick else (50, 8)
    talk = 30 if args.quick else 240
    words, message_tokens = 60, 3_000
    header(
        "obsmem proxy vs the upstream directly",
        latency_turns=turns,
        clients=clients,
        turns_per_client=client_turns,
        long_talk_turns=talk,
        message_tokens=message_tokens,
    )
    with (
        strict_server_thread(answer=memory_aware(answer)) as server,
        tempfile.TemporaryDirectory() as folder,
    ):
        db = str(Path(folder) / "proxy.db")
        async with proxy_process(
            server.base_url, "--db", db, "--message-tokens", str(message_tokens)
        ) as (url, _):
            await latency(server.base_url, url, turns, words)
            print(f"\n## throughput: {clients} concurrent clients on {clients} threads")
            direct = await throughput([server.base_url], clients, client_turns, words)
            sqlite = await throughput([url], clients, client_turns, words)
            rows = [["direct", f"{direct:.1f}"], ["proxy, SQLite", f"{sqlite:.1f}"]]
            postgres: float | None = None
            if not args.no_postgres:
                postgres = await _two_on_postgres(server, clients, client_turns, words)
                if postgres is not None:
                    rows.append(["two proxies, one PostgreSQL", f"{postgres:.1f}"])
            table(rows, ["path", "requests/s"])
            ratio("proxy on SQLite / direct throughput", sqlite / direct)
            ratio(
                "two proxies on PostgreSQL / direct throughput",
                None if postgres is None else postgres / direct,
            )
            await request_size(server, url, talk, words * 3, message_tokens)


async def _two_on_postgres(
    server: StrictServer, clients: int, turns: int, words: int
) -> float | None:
    try:
        admin_context = postgres_admin_dsn()
        admin = admin_context.__enter__()
    except RuntimeError as exc:
        print(f"# PostgreSQL skipped: {exc}")
        return None
    try:
        dsn = create_database(admin)
        async with (
            proxy_process(server.base_url, "--db", dsn, "--message-tokens", "3000") as (first, _),
            proxy_process(server.base_url, "--db", dsn, "--message-tokens", "3000") as (second, _),
        ):
            await warm_up([first, second], words)
            return await throughput([first, second], clients, turns, words)
    finally:
        admin_context.__exit__(None, None, None)


if __name__ == "__main__":
    asyncio.run(main())
