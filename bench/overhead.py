"""Per-turn memory overhead as the stored history grows (models excluded).

The store is pre-populated directly with N messages (100, 10k, 100k by default) and a record
whose cursor leaves the same raw window (``--window`` messages) unobserved, so only the history
size differs. Each turn then stores a user message (``prepare``) and a reply (``record``) with
default options and scripted models; only ``prepare`` + ``record`` are timed, background work is
settled outside the timing. Configurations are measured round-robin (one turn each per round,
in a rotating order), so a noisy neighbour slows all of them alike.

Claims: per-turn time is roughly flat in N because only the window after the cursor is read
(and only what is new since the last turn is read again); SQLite stays within 2x of the
in-memory store. PostgreSQL is measured on a throwaway server on loopback (the test suite's),
when PostgreSQL binaries are on the machine (``--no-postgres`` skips it).

    python bench/overhead.py            # 100, 10k, 100k messages; SQLite, in-memory, PostgreSQL
    python bench/overhead.py --quick    # tiny sizes (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from _common import Talk, create_database, header, postgres_admin_dsn, ratio, table

from obsmem.engine import ObservationalMemory
from obsmem.messages import Message, new_message_id
from obsmem.snapshot import Subject
from obsmem.stores import (
    Commit,
    CommitObservation,
    InMemoryStore,
    LoadRequest,
    PostgresStore,
    SQLiteStore,
    Store,
)
from obsmem.testing import scripted_observer, scripted_reflector
from obsmem.tokens import HeuristicEstimator

THREAD = "bench-thread"
RESOURCE = "bench-user"


@dataclass
class Setup:
    kind: str
    size: int
    store: Store
    om: ObservationalMemory
    talk: Talk
    times: list[float] = field(default_factory=list[float])


def _log(lines: int) -> str:
    out: list[str] = []
    for i in range(lines):
        if i % 20 == 0:
            out.append(f"Date: Jan {1 + i // 20}, 2025")
        out.append(f"* 🟡 (09:{i % 60:02d}) User said they moved the budget meeting to friday {i}")
    return "\n".join(out)


async def populate(store: Store, key: str, size: int, window: int, pool: list[Message]) -> None:
    """``size`` messages, then a record observed through all but the last ``window``."""
    await store.create_thread(THREAD, RESOURCE)
    estimator = HeuristicEstimator()
    batch: list[Message] = []
    for i in range(size):
        template = pool[i % len(pool)]
        message = replace(template, id=new_message_id())
        estimator.count_message(message)  # as the engine stores them: with their estimates
        batch.append(message)
        if len(batch) == 2_000:
            await store.append_messages(THREAD, batch)
            batch = []
    if batch:
        await store.append_messages(THREAD, batch)
    subject = Subject(scope="thread", thread_id=THREAD, resource_id=RESOURCE)
    record = (await store.load(LoadRequest(subject=subject))).record
    observations = _log(150)
    await store.commit(
        Commit(
            key=record.key,
            record_id=record.id,
            expected_version=record.version,
            change=CommitObservation(
                observations=observations,
                observation_tokens=HeuristicEstimator().count_text(observations),
                cursor=((THREAD, max(0, size - window)),),
            ),
        )
    )


def engine(store: Store) -> ObservationalMemory:
    return ObservationalMemory(
        store,
        {
            "observation": {"model": scripted_observer()},
            "reflection": {"model": scripted_reflector()},
        },
    )


async def turn(setup: Setup) -> None:
    user, reply = setup.talk.turn()
    started = time.perf_counter()
    await setup.om.prepare(THREAD, RESOURCE, [user])
    await setup.om.record(THREAD, RESOURCE, [reply])
    setup.times.append(time.perf_counter() - started)
    await setup.om.settle()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,10000,100000")
    parser.add_argument("--window", type=int, default=40, help="raw messages after the cursor")
    parser.add_argument("--turns", type=int, default=30, help="timed turns per configuration")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes for the smoke test")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL rows")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.window, args.turns, args.warmup = "100,1000", 20, 4, 1
    sizes = [int(s) for s in args.sizes.split(",")]
    header(
        "obsmem per-turn overhead vs stored history (models excluded)",
        sizes=args.sizes,
        window_messages=args.window,
        turns=args.turns,
    )
    pool = Talk(seed=1, user_tokens=100, assistant_tokens=300).messages(250)
    window_tokens = sum(HeuristicEstimator().count_message(m) for m in pool[: args.window])
    print(f"# raw window at the start: {args.window} messages, ~{window_tokens} tokens")

    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="obsmem-bench-"))
        admin: str | None = None
        if not args.no_postgres:
            try:
                admin = stack.enter_context(postgres_admin_dsn())
            except RuntimeError:
                admin = None
        kinds = ["sqlite", "memory"] + (["postgres"] if admin else [])
        if admin is None and not args.no_postgres:
            print("# no PostgreSQL on this machine: its rows are left out")
        setups: list[Setup] = []
        for kind in kinds:
            for size in sizes:
                store: Store
                if kind == "sqlite":
                    store = SQLiteStore(Path(tmp) / f"om-{size}.db")
                elif kind == "postgres":
                    assert admin is not None
                    store = PostgresStore(create_database(admin))
                else:
                    store = InMemoryStore()
                started = time.perf_counter()
                om = engine(store)
                await populate(store, om.key(THREAD, RESOURCE), size, args.window, pool)
                took = time.perf_counter() - started
                print(f"# populated {kind} with {size:,} messages in {took:.1f} s")
                setups.append(Setup(kind, size, store, om, Talk(seed=2)))
        # Keep the collector from walking the pre-populated history on every full collection.
        gc.collect()
        gc.freeze()
        for _ in range(args.warmup):
            for s in setups:
                await turn(s)
        for s in setups:
            s.times.clear()
        for n in range(args.turns):
            shift = n % len(setups)  # rotate the order so no configuration always goes first
            for s in setups[shift:] + setups[:shift]:
                await turn(s)
        for s in setups:
            await s.om.aclose()
            await s.store.aclose()

    med = {(s.kind, s.size): statistics.median(s.times) * 1000 for s in setups}
    p90 = {(s.kind, s.size): sorted(s.times)[int(0.9 * (len(s.times) - 1))] * 1000 for s in setups}
    print()
    table(
        [
            (kind, f"{size:,}", f"{med[kind, size]:.2f}", f"{p90[kind, size]:.2f}")
            for kind, size in med
        ],
        ["store", "stored messages", "median ms/turn", "p90 ms/turn"],
    )
    print()
    small, large = sizes[0], sizes[-1]
    for kind in kinds:
        ratio(
            f"{kind} per-turn time, {large:,} / {small:,} stored messages",
            med[kind, large] / med[kind, small],
            "1.00x = flat",
        )
    for size in sizes:
        ratio(
            f"sqlite / in-memory per-turn time at {size:,} messages",
            med["sqlite", size] / med["memory", size],
        )
    if "postgres" in kinds:
        for size in sizes:
            ratio(
                f"postgres / in-memory per-turn time at {size:,} messages",
                med["postgres", size] / med["memory", size],
            )


if __name__ == "__main__":
    asyncio.run(main())
