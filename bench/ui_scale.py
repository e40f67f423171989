"""``obsmem ui`` at scale: the first page of a 100,000-message thread and the list of a
resource with 2,000 threads, served by the inspector's app over a SQLite file.

The database is filled directly (the store makes the schema, then rows go in with
``executemany``), so building it takes seconds. Each page is fetched through the app in process
(httpx's ASGI transport, no network), ``--runs`` times after one warm-up, and the median is
reported. Side by side in the same run, the same pages over a small thread and a small resource
show what size costs: paged reads keep the ratio near 1.

    python bench/ui_scale.py            # 100,000 messages, 2,000 threads, 7 runs
    python bench/ui_scale.py --quick    # 10,000 messages, 200 threads, 3 runs (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import httpx
from _common import T0, header, ratio, table

from obsmem.messages import Message
from obsmem.stores import SQLiteStore
from obsmem.stores.rows import MESSAGES
from obsmem.stores.schema import INSERT_MESSAGE
from obsmem.ui.app import UIConfig, create_app
from obsmem.ui.cli import check_extra

SMALL_MESSAGES = 1_000
SMALL_THREADS = 20
MESSAGES_PER_LISTED_THREAD = 4


def _messages(thread: str, resource: str, count: int, start: int = 0) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for n in range(start, start + count):
        role = "user" if n % 2 == 0 else "assistant"
        text = f"Message {n} of {thread}: the budget, the travel plan and the release schedule."
        m = Message(
            role=role,
            parts=Message.user(text).parts,
            id=f"{thread}-m{n}",
            created_at=T0 + timedelta(seconds=30 * n),
            thread_id=thread,
            resource_id=resource,
            seq=n + 1,
        )
        rows.append(MESSAGES.row(m))
    return rows


async def _schema(db: Path) -> None:
    store = SQLiteStore(db)
    await store.create_thread("schema", "schema")
    await store.aclose()


def build(db: Path, *, messages: int, threads: int) -> float:
    """Fill ``db``: thread ``big`` (and ``small``) with messages, resource ``many`` (and
    ``few``) with threads; returns the seconds it took."""
    started = time.perf_counter()
    asyncio.run(_schema(db))
    conn = sqlite3.connect(db)
    now = T0.isoformat()
    thread_rows = [("big", "one", messages), ("small", "one", SMALL_MESSAGES)]
    thread_rows += [(f"many-{i:05d}", "many", MESSAGES_PER_LISTED_THREAD) for i in range(threads)]
    thread_rows += [
        (f"few-{i:03d}", "few", MESSAGES_PER_LISTED_THREAD) for i in range(SMALL_THREADS)
    ]
    with conn:
        conn.executemany(
            "INSERT INTO threads (id, resource_id, title, metadata, message_count, created_at, "
            "updated_at) VALUES (?, ?, NULL, '{}', ?, ?, ?)",
            [(t, r, n, now, now) for t, r, n in thread_rows],
        )
        for thread, resource, count in thread_rows:
            for first in range(0, count, 10_000):
                batch = _messages(thread, resource, min(10_000, count - first), first)
                conn.executemany(INSERT_MESSAGE, batch)
    conn.close()
    return time.perf_counter() - started


async def _time(client: httpx.AsyncClient, url: str, runs: int) -> float:
    response = await client.get(url)  # warm-up
    assert response.status_code == 200, (url, response.status_code, response.text[:300])
    seconds: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        response = await client.get(url)
        seconds.append(time.perf_counter() - started)
        assert response.status_code == 200
    return statistics.median(seconds)


async def measure(db: Path, runs: int) -> dict[str, float]:
    from obsmem.cli.common import open_store

    store = open_store(str(db), read_only=True)
    app = create_app(store, UIConfig(label=str(db)))
    pages = {
        "thread big, newest page": f"/thread?{urlencode({'id': 'big'})}",
        "thread big, first page": f"/thread?{urlencode({'id': 'big', 'page': 1})}",
        "thread small, newest page": f"/thread?{urlencode({'id': 'small'})}",
        "list many": f"/?{urlencode({'resource': 'many'})}",
        "list many, search": f"/?{urlencode({'resource': 'many', 'q': 'many-0012'})}",
        "list few": f"/?{urlencode({'resource': 'few'})}",
        "live state big": f"/api/state?{urlencode({'id': 'big'})}",
    }
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return {name: await _time(client, url, runs) for name, url in pages.items()}
    finally:
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--messages", type=int, help="messages in the big thread")
    parser.add_argument("--threads", type=int, help="threads in the big resource")
    parser.add_argument("--runs", type=int, help="timed fetches per page")
    args = parser.parse_args()
    check_extra()
    messages = args.messages or (10_000 if args.quick else 100_000)
    threads = args.threads or (200 if args.quick else 2_000)
    runs = args.runs or (3 if args.quick else 7)
    header("obsmem ui at scale", messages=messages, threads=threads, runs=runs)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "ui.db"
        built = build(db, messages=messages, threads=threads)
        size = db.stat().st_size / 1e6
        print(f"# built in {built:.1f} s ({size:.0f} MB)")
        times = asyncio.run(measure(db, runs))
    table([(name, f"{t * 1000:.1f}") for name, t in times.items()], ["page", "median ms"])
    ratio(
        f"thread first page, {messages:,} vs {SMALL_MESSAGES:,} messages",
        times["thread big, newest page"] / times["thread small, newest page"],
    )
    ratio(
        f"thread list, {threads:,} vs {SMALL_THREADS} threads",
        times["list many"] / times["list few"],
    )


if __name__ == "__main__":
    main()
