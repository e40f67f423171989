"""What one client's large request costs every other client of ``obsmem proxy``.

The proxy runs as the command runs (``python -m obsmem proxy``, its own process, default
options, SQLite), in front of the test suite's strict loopback server (tests/strict_server.py,
on its own thread, answering at once). One client sends small requests (a short question on a
thread of its own) one after another; measured alone, then while other clients keep sending
large requests just under the proxy's request-size limit, each on a new thread:

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
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _common import header, percentile, proxy_process, ratio, table
from tests.proxy.helpers import memory_aware
from tests.strict_server import strict_server_thread

WORDS = ["the", "budget", "travel", "plan", "release", "schedule", "customer", "invoice"]


def large_body(kind: str, size: int, rng: random.Random) -> bytes:
    """A chat request of about ``size`` bytes."""
    if kind == "text":
        text = " ".join(rng.choice(WORDS) for _ in range(size // 7))
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


async def keep_busy(
    http: httpx.AsyncClient, url: str, kind: str, size: int, busy: asyncio.Event
) -> int:
    """Send large requests one after another until cancelled; how many were answered."""
    rng = random.Random(7)
    answered = 0
    try:
        while True:
            body = large_body(kind, size, rng)
            headers = {
                "Authorization": "Bearer sk-bench",
                "X-Obsmem-Thread": f"large-{kind}-{answered}",
                "Content-Type": "application/json",
            }
            busy.set()
            try:
                reply = await http.post(f"{url}/chat/completions", content=body, headers=headers)
            finally:
                busy.clear()
            reply.raise_for_status()
            answered += 1
    except asyncio.CancelledError:
        return answered


async def measure(url: str, kind: str, size: int, count: int) -> tuple[list[float], list[float]]:
    async with httpx.AsyncClient(timeout=300) as http:
        await small_latencies(http, url, 3)  # warm: imports, connections, memory set up
        alone = await small_latencies(http, url, count)
        busy = asyncio.Event()
        sender = asyncio.create_task(keep_busy(http, url, kind, size, busy))
        during = await small_latencies(http, url, count, busy)
        sender.cancel()
        answered = await sender
        print(f"# {kind}: {answered} large requests answered while measuring")
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
    with (
        strict_server_thread(answer=memory_aware(lambda _: "Noted."), multimodal=True) as server,
        tempfile.TemporaryDirectory() as folder,
    ):
        for kind in ("text", "images"):
            db = str(Path(folder) / f"{kind}.db")
            async with proxy_process(server.base_url, "--db", db) as (url, _):
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
