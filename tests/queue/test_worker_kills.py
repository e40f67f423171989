"""Two workers and two serving processes on one PostgreSQL database, workers SIGKILLed
mid-cycle again and again: every message is stored once, every range committed once, every log
ends consistent, and no due work is lost (a job run afterwards finds nothing to do).

``OBSMEM_QUEUE_KILLS`` sets the number of kills (12 by default; 100 or more as a release
check, like ``python -m tests.fuzz``)."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from obsmem.stores import PostgresStore
from obsmem.testing.store_conformance.kit import assert_record_invariants

from ..engine.helpers import engine
from .processes import (
    ROOT,
    prepare_calls_table,
    queue_empty,
    sql,
    start_worker,
    until,
    workers_registered,
)
from .worker_app import DSN, options

pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("OBSMEM_QUEUE_KILLS", "12"))
THREADS, TURNS = 4, 8


def _serving(dsn: str, prefix: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), DSN: dsn}
    command = [sys.executable, "-m", "tests.queue.serve", prefix, str(THREADS), str(TURNS)]
    return subprocess.Popen(command, env=env, cwd=ROOT)


def _mid_call(dsn: str, pids: list[int]) -> list[int]:
    rows = sql(
        dsn,
        "SELECT DISTINCT pid FROM test_model_calls WHERE ended IS NULL AND pid = ANY(%s)",
        (pids,),
    )
    return [int(r[0]) for r in rows]  # type: ignore[arg-type]


async def test_workers_killed_mid_cycle_lose_and_double_nothing(postgres_dsn: str) -> None:
    prepare_calls_table(postgres_dsn)
    rng = random.Random(40)
    live = [start_worker(postgres_dsn, delay=0.15) for _ in range(2)]
    dead: list[subprocess.Popen[bytes]] = []
    servers = [_serving(postgres_dsn, p) for p in ("a", "b")]
    try:
        await until(lambda: workers_registered(postgres_dsn, 2), "two workers registered")
        for kill in range(KILLS):
            pids = [p.pid for p in live]
            await until(
                lambda pids=pids: bool(_mid_call(postgres_dsn, pids)), f"a cycle to kill ({kill})"
            )
            chosen = rng.choice(_mid_call(postgres_dsn, pids) or pids)
            victim = next(p for p in live if p.pid == chosen)
            victim.kill()
            victim.wait()
            live.remove(victim)
            dead.append(victim)
            live.append(start_worker(postgres_dsn, delay=0.15))
        for server in servers:
            assert server.wait(timeout=300) == 0
        await until(lambda: queue_empty(postgres_dsn), "the queue drained", 180)
    finally:
        for proc in live + dead + servers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    store = PostgresStore(postgres_dsn)
    check = engine(store, options(postgres_dsn))
    try:
        for prefix in ("a", "b"):
            for n in range(THREADS):
                thread = f"{prefix}{n}"
                messages = await store.list_messages(thread)
                assert [m.seq for m in messages] == list(range(1, 2 * TURNS + 1))
                assert len({m.id for m in messages}) == len(messages)
                key = f"thread:{thread}"
                await assert_record_invariants(store, key)
                cycles = await store.list_cycles(key, outcomes=("committed",), limit=1000)
                seqs = [
                    (r.thread_id, s, c.kind)
                    for c in cycles
                    if c.kind == "buffering"
                    for r in c.ranges
                    for s in range(r.first_seq, r.last_seq + 1)
                ]
                assert len(seqs) == len(set(seqs)), f"{thread}: a range committed twice"
                args = {
                    "v": 1,
                    "step": "cycle",
                    "key": key,
                    "scope": "thread",
                    "thread_id": thread,
                    "resource_id": "u1",
                }
                assert await check.run_job(args) == (), f"{thread}: due work was lost"
    finally:
        await check.aclose()
