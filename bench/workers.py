"""Memory work on ``obsmem worker`` processes (``background="queue"``, PostgreSQL).

1. Cycles per second with 1, 2 and 4 worker processes: serving turns queue the work of many
   threads first; then the workers start, and the time from all of them registered until the
   queue is drained is measured.
2. The p99 turn latency of a serving process under the same load, with background work
   in-process and on two workers.

The Observer is the suite's scripted model (``tests/queue/worker_app.py``) with a fixed answer
time (``--model-seconds``), so the figures measure obsmem and PostgreSQL, not a provider. The
core count is printed in the header: worker processes compete for the same cores as PostgreSQL.

    python bench/workers.py            # 48 threads, 1/2/4 workers
    python bench/workers.py --quick    # smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from _common import ROOT, create_database, header, percentile, postgres_admin_dsn, ratio, table
from tests.engine.helpers import Conversation
from tests.queue.processes import (
    prepare_calls_table,
    queue_empty,
    sql,
    start_worker,
    workers_registered,
)
from tests.queue.worker_app import options

from obsmem import Memory
from obsmem.engine import ObservationalMemory
from obsmem.stores import PostgresStore


def _engine(dsn: str, background: str, model_seconds: float) -> ObservationalMemory:
    given: dict[str, Any] = {**options(dsn, delay=model_seconds), "background": background}
    memory = Memory(PostgresStore(dsn), observational_memory=given)
    assert memory.om is not None
    return memory.om


async def _serve(om: ObservationalMemory, threads: int, turns: int) -> list[float]:
    """Turns on every thread, the threads concurrently; each turn's seconds."""
    times: list[float] = []

    async def one(n: int) -> None:
        conv = Conversation(seed=n)
        for _ in range(turns):
            started = time.perf_counter()
            await om.prepare(f"t{n}", "u1", [conv.user(150)])
            await om.record(f"t{n}", "u1", [conv.assistant(150)])
            times.append(time.perf_counter() - started)

    await asyncio.gather(*(one(n) for n in range(threads)))
    return times


async def _wait(condition: Any, within: float = 600.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("the workers did not drain the queue in time")
        await asyncio.sleep(0.05)


def _committed(dsn: str) -> int:
    rows = sql(dsn, "SELECT count(*) FROM om_cycles WHERE outcome = 'committed'")
    return int(rows[0][0])  # type: ignore[arg-type]


async def _throughput(admin: str, workers: int, args: argparse.Namespace) -> tuple[int, float]:
    """Committed cycles, and seconds from all ``workers`` registered until the queue drained."""
    dsn = create_database(admin)
    prepare_calls_table(dsn)
    om = _engine(dsn, "queue", args.model_seconds)
    try:  # every turn first, so the workers find a backlog
        await _serve(om, args.threads, args.turns)
    finally:
        await om.aclose(cancel=True)  # no settle(): no worker runs yet
    procs = [start_worker(dsn, concurrency=4, delay=args.model_seconds) for _ in range(workers)]
    try:
        await _wait(lambda: workers_registered(dsn, workers))
        started = time.perf_counter()
        await _wait(lambda: queue_empty(dsn))
        return _committed(dsn), time.perf_counter() - started
    finally:
        _stop(procs)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the worker processes and wait for them."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


async def _latency(admin: str, background: str, args: argparse.Namespace) -> list[float]:
    """Turn seconds of one serving process, background work in-process or on two workers."""
    dsn = create_database(admin)
    prepare_calls_table(dsn)
    procs = []
    if background == "queue":
        procs = [start_worker(dsn, concurrency=4, delay=args.model_seconds) for _ in range(2)]
        await _wait(lambda: workers_registered(dsn, 2))
    om = _engine(dsn, background, args.model_seconds)
    try:
        return await _serve(om, args.threads, args.turns)
    finally:
        await om.aclose(cancel=True)
        _stop(procs)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=48)
    parser.add_argument("--turns", type=int, default=4, help="turns per thread")
    parser.add_argument("--model-seconds", type=float, default=0.2)
    parser.add_argument("--quick", action="store_true", help="a small run (smoke test)")
    args = parser.parse_args()
    counts = (1, 2, 4)
    if args.quick:
        args.threads, args.turns, counts = 6, 2, (1, 2)
    header(
        "memory work on obsmem worker processes (PostgreSQL)",
        threads=args.threads,
        turns_per_thread=args.turns,
        model_seconds=args.model_seconds,
        cores=os.cpu_count(),
    )
    with contextlib.ExitStack() as stack:
        try:
            admin = stack.enter_context(postgres_admin_dsn())
        except RuntimeError as exc:
            print(f"SKIPPED: no PostgreSQL on this machine ({exc})")
            return
        rates: dict[int, float] = {}
        rows = []
        for n in counts:
            cycles, seconds = await _throughput(admin, n, args)
            rates[n] = cycles / seconds
            rows.append((n, cycles, f"{seconds:.2f}", f"{rates[n]:.1f}"))
        latency = {b: await _latency(admin, b, args) for b in ("process", "queue")}
    print()
    table(rows, ["workers", "committed cycles", "seconds", "cycles/s"])
    print()
    table(
        [
            (b, len(t), f"{statistics.median(t) * 1000:.1f}", f"{percentile(t, 99) * 1000:.1f}")
            for b, t in latency.items()
        ],
        ["background", "turns", "median ms", "p99 ms"],
    )
    print(f"# {os.cpu_count()} cores shared by PostgreSQL, the workers and the serving process")
    most = max(counts)
    ratio(f"cycles/s {most} workers / 1 worker", rates[most] / rates[1])
    ratio(
        "p99 turn latency in-process / on workers",
        percentile(latency["process"], 99) / percentile(latency["queue"], 99),
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    asyncio.run(main())
