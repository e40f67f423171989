"""What one client's large request costs every other client of ``obsmem proxy``.

The proxy runs as the command runs (``python -m obsmem proxy``, its own process, default
options, SQLite), in front of a loopback upstream in a process of its own that answers at once
without parsing what it is sent (so its own work on a large request holds up nothing: what is
measured is the proxy). One client sends small requests (a short question on a thread of its
own) one after another; measured alone, then while another client keeps sending large requests
just under the proxy's request-size limit, each on a new thread:

* **text**: one user message of ``--megabytes`` of pasted text (the proxy stores it, counts its
  tokens, and memory observes it);
* **images**: one user message with four images as ``data:`` URLs, ``--megabytes`` in all.

The ratio is the small requests' latency while a large request is in flight over their latency
alone (p50 and the worst): 1.00x is a proxy whose event loop never waits on a large request.

    python bench/proxy_large.py            # 30 MB requests (the limit is 32 MiB)
    python bench/proxy_large.py --quick    # 2 MB requests (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import multiprocessing
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from _common import header, percentile, proxy_process, ratio, table

WORDS = ["the", "budget", "travel", "plan", "release", "schedule", "customer", "invoice"]


OBSERVATION = "<observations>\nDate: Dec 4, 2025\n* 🟡 (10:00) User shared a page.\n</observations>"


def _answer(raw: bytes) -> bytes:
    """The HTTP answer to a chat request, read as bytes only: memory's own calls (their system
    prompt asks for the output format) get an observation, the rest a one-word answer; streamed
    when the request asks for it."""
    text = OBSERVATION if b"## Output format" in raw[:100_000] else "Noted."
    base = {"id": "c", "created": 0, "model": "local"}
    if raw.find(b'"stream":true') < 0 and raw.find(b'"stream": true') < 0:
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        body = {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
        data, kind = json.dumps(body).encode(), b"application/json"
    else:
        chunks = [
            {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
        ]
        events = [{**base, "object": "chat.completion.chunk", "choices": [c]} for c in chunks]
        lines = [f"data: {json.dumps(e)}\n\n" for e in events] + ["data: [DONE]\n\n"]
        data, kind = "".join(lines).encode(), b"text/event-stream"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n" % (kind, len(data))
    return head + b"Connection: close\r\n\r\n" + data


def _serve_upstream(ports: Any) -> None:
    """The upstream, in its own process: one request per connection, answered at once."""

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        writer.write(_answer(await reader.readexactly(length)))
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(one, "127.0.0.1", 0)
        ports.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


@contextlib.contextmanager
def upstream_process() -> Iterator[str]:
    """The upstream's base URL, served by a process of its own until the end."""
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    process = context.Process(target=_serve_upstream, args=(ports,), daemon=True)
    process.start()
    try:
        yield f"http://127.0.0.1:{ports.get(timeout=60)}/v1"
    finally:
        process.kill()
        process.join()


def large_body(kind: str, size: int, rng: random.Random) -> bytes:
    """A chat request of about ``size`` bytes."""
    if kind == "text":
        text = " ".join(rng.choices(WORDS, k=size // 7))
        content: Any = f"Please keep this page: {text[:size]}"
    else:
        images = [base64.b64encode(rng.randbytes(size // 4 * 3 // 4)).decode() for _ in range(4)]
        content = [{"type": "text", "text": "Here are my photos."}] + [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}
            for data in images
        ]
    return json.dumps(
        {"model": "local", "messages": [{"role": "user", "content": content}]}
    ).encode()


async def small_latencies(
    http: httpx.AsyncClient, url: str, count: int, busy: asyncio.Event | None = None
) -> list[float]:
    """Seconds each of ``count`` small requests took (with ``busy``: only those that started
    and ended while a large request was in flight)."""
    taken: list[float] = []
    history: list[dict[str, Any]] = []
    thread = f"small-{time.monotonic_ns()}"
    headers = {"Authorization": "Bearer sk-bench", "X-Obsmem-Thread": thread}
    while len(taken) < count:
        history.append({"role": "user", "content": f"Question {len(history)}: what is next?"})
        body = {"model": "local", "messages": history}
        during = busy is None or busy.is_set()
        start = time.perf_counter()
        reply = await http.post(f"{url}/chat/completions", json=body, headers=headers)
        took = time.perf_counter() - start
        reply.raise_for_status()
        history.append(reply.json()["choices"][0]["message"])
        if during and (busy is None or busy.is_set()):
            taken.append(took)
        elif busy is not None:
            await busy.wait()
    return taken


async def send_large(http: httpx.AsyncClient, url: str, body: bytes, thread: str) -> float:
    """Seconds one large request took (on a new thread)."""
    headers = {
        "Authorization": "Bearer sk-bench",
        "X-Obsmem-Thread": thread,
        "Content-Type": "application/json",
    }
    start = time.perf_counter()
    reply = await http.post(f"{url}/chat/completions", content=body, headers=headers)
    reply.raise_for_status()
    return time.perf_counter() - start


async def keep_busy(http: httpx.AsyncClient, url: str, body: bytes, busy: asyncio.Event) -> int:
    """Send ``body`` again and again, each time on a new thread, until cancelled; how many were
    answered."""
    answered = 0
    try:
        while True:
            busy.set()
            try:
                await send_large(http, url, body, f"large-{answered}")
            finally:
                busy.clear()
            answered += 1
    except asyncio.CancelledError:
        return answered


async def measure(url: str, kind: str, size: int, count: int) -> tuple[list[float], list[float]]:
    body = large_body(kind, size, random.Random(7))  # made once: the client's own CPU never counts
    async with httpx.AsyncClient(timeout=300) as http:
        await small_latencies(http, url, 3)  # warm: imports, connections, memory set up
        alone = await small_latencies(http, url, count)
        took = await send_large(http, url, body, "large-alone")
        busy = asyncio.Event()
        sender = asyncio.create_task(keep_busy(http, url, body, busy))
        during = await small_latencies(http, url, count, busy)
        sender.cancel()
        answered = await sender
        print(f"# {kind}: a large request alone took {took:.2f} s; {answered} more while measuring")
    return alone, during


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--megabytes", type=float, default=30.0, help="size of a large request")
    parser.add_argument("--requests", type=int, default=40, help="small requests measured")
    args = parser.parse_args()
    megabytes = 2.0 if args.quick else args.megabytes
    count = 6 if args.quick else args.requests
    size = int(megabytes * 1_000_000)
    header("a large request's cost to other clients of obsmem proxy", megabytes=megabytes)
    rows: list[list[str]] = []
    ratios: list[tuple[str, float]] = []
    with upstream_process() as upstream, tempfile.TemporaryDirectory() as folder:
        for kind in ("text", "images"):
            db = str(Path(folder) / f"{kind}.db")
            async with proxy_process(upstream, "--db", db) as (url, _):
                alone, during = await measure(url, kind, size, count)
            for name, values in (("alone", alone), (f"during {kind}", during)):
                p50, worst = percentile(values, 50) * 1000, max(values) * 1000
                rows.append([name, f"{p50:.1f}", f"{worst:.1f}"])
            ratios.append((f"{kind} p50", percentile(during, 50) / percentile(alone, 50)))
            ratios.append((f"{kind} worst", max(during) / max(alone)))
    table(rows, ["small requests", "p50 ms", "worst ms"])
    for name, value in ratios:
        ratio(f"small-request latency during a {megabytes:g} MB request / alone, {name}", value)


if __name__ == "__main__":
    asyncio.run(main())
