"""How long ``obsmem proxy`` takes to exit after SIGTERM, whatever it is doing.

The proxy runs as the command runs (``python -m obsmem proxy``, its own process, default
options) in front of the test suite's strict loopback server (tests/strict_server.py, on its own
thread), whose memory calls (Observer, Reflector) never answer: a model that is slow or gone,
the worst case for memory work left pending. Measured, each on a fresh process and database:

* **idle**: nothing pending;
* **catch-up pending**: one request with a long history (``--messages``, 100,000 by default)
  was answered; memory's catch-up of it waits on the Observer;
* **during the request**: SIGTERM while the proxy is still lining that request up (10 % and
  50 % into the time it took in the previous run): CPU work on its event loop;
* **request that never ends**: the upstream never answers the client's request.

Each stop is capped (``--cap`` seconds, then SIGKILL), so the code before bounded shutdown
shows as ``>cap``. The goal is 10 s (``obsmem.cli.stopping.DEADLINE``).

    python bench/shutdown.py            # 100,000 messages
    python bench/shutdown.py --quick    # 6,000 messages (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from _common import header, proxy_process, ratio, table
from tests.loopback_openai import answer, is_memory_call
from tests.proxy.helpers import system_of
from tests.strict_server import strict_server_thread

GOAL = 10.0
"""Seconds: the goal for a stop (``obsmem.cli.stopping.DEADLINE``)."""


class NeverAnswering:
    """Memory's calls and a request saying ``please hang`` wait until the end; the rest are
    answered at once. ``waiting`` is set when the first waits."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.released = threading.Event()

    async def __call__(self, body: dict[str, Any]) -> str:
        last = (body.get("messages") or [{}])[-1].get("content")
        if is_memory_call(system_of(body)) or "please hang" in str(last):
            self.waiting.set()
            await asyncio.to_thread(self.released.wait)
        return answer(body)


def history(count: int, last: str = "And what comes next?") -> list[dict[str, str]]:
    roles = ("user", "assistant")
    said = [
        {"role": roles[i % 2], "content": f"Turn {i}: we talked about the budget and the plan."}
        for i in range(count - 1 if count % 2 else count)
    ]
    return [*said, {"role": "user", "content": last}]


def proxy(upstream: str, folder: Path) -> Any:
    """``obsmem proxy`` in a process of its own on a fresh database, once it serves."""
    return proxy_process(upstream, "--db", str(folder / f"proxy-{time.monotonic_ns()}.db"))


async def stop(process: asyncio.subprocess.Process, cap: float) -> tuple[float | None, str]:
    """SIGTERM; seconds to the exit (None: still running at ``cap``, killed), and how it
    ended (its exit status and what it said on stderr)."""
    started = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    try:
        _, err = await asyncio.wait_for(process.communicate(), cap)
    except TimeoutError:
        process.kill()
        await process.wait()
        return None, ""
    said = " / ".join(line for line in err.decode().splitlines() if line.strip())
    return time.perf_counter() - started, f"status {process.returncode}; {said or 'nothing'}"


KEY = {"Authorization": "Bearer sk-bench"}


def post(http: httpx.AsyncClient, url: str, messages: list[dict[str, str]]) -> Any:
    body = {"model": "local", "messages": messages}
    return http.post(f"{url}/chat/completions", json=body, headers={"X-Obsmem-Thread": "t", **KEY})


async def accepted(http: httpx.AsyncClient, url: str) -> None:
    """The key's first request (it passes through): its answer lets memory start for the key."""
    body = {"model": "local", "messages": [{"role": "user", "content": "Hello."}]}
    headers = {"X-Obsmem-Thread": "first", **KEY}
    (await http.post(f"{url}/chat/completions", json=body, headers=headers)).raise_for_status()


async def scenarios(messages: int, cap: float) -> list[tuple[str, float | None, str]]:
    model = NeverAnswering()
    rows: list[tuple[str, float | None, str]] = []
    long = history(messages)
    with (
        tempfile.TemporaryDirectory() as tmp,
        strict_server_thread(answer=model) as upstream,
    ):
        folder = Path(tmp)
        async with httpx.AsyncClient(timeout=3600) as http:
            async with proxy(upstream.base_url, folder) as (_, process):
                rows.append(("idle", *await stop(process, cap)))

            async with proxy(upstream.base_url, folder) as (url, process):
                await accepted(http, url)
                started = time.perf_counter()
                reply = await post(http, url, long)
                took = time.perf_counter() - started
                reply.raise_for_status()
                await asyncio.to_thread(model.waiting.wait, 60)
                rows.append(("catch-up pending", *await stop(process, cap)))
            print(f"the {messages:,}-message request took {took:.1f} s through the proxy")

            for share in (0.1, 0.5):  # early in lining it up, and half-way through
                async with proxy(upstream.base_url, folder) as (url, process):
                    await accepted(http, url)
                    request = asyncio.ensure_future(post(http, url, long))
                    await asyncio.sleep(took * share)
                    name = f"{share:.0%} into the request"
                    rows.append((name, *await stop(process, cap)))
                    request.cancel()
                    with contextlib.suppress(BaseException):
                        await request

            async with proxy(upstream.base_url, folder) as (url, process):
                await accepted(http, url)
                request = asyncio.ensure_future(post(http, url, history(2, "please hang")))
                await asyncio.sleep(0.5)
                rows.append(("request that never ends", *await stop(process, cap)))
                with contextlib.suppress(BaseException):
                    await request
        model.released.set()
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="6,000 messages (smoke test)")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--cap", type=float, default=60.0, help="seconds before SIGKILL")
    args = parser.parse_args()
    messages = 6_000 if args.quick else args.messages
    header("obsmem proxy: time from SIGTERM to exit", messages=messages, cap=args.cap)
    rows = await scenarios(messages, args.cap)
    print()
    shown = [(name, f"{s:.2f}" if s is not None else f">{args.cap:.0f}") for name, s, _ in rows]
    table(shown, ["pending at SIGTERM", "seconds to exit"])
    print()
    for name, seconds, said in rows:
        print(f"{name}: {said if seconds is not None else 'still running; killed'}")
    print()
    for name, seconds, _ in rows:
        ratio(f"stop / {GOAL:.0f} s goal, {name}", None if seconds is None else seconds / GOAL)


if __name__ == "__main__":
    asyncio.run(main())
