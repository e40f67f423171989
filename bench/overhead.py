"""Per-turn memory overhead as the stored history grows (models excluded).

The store is pre-populated directly with N messages (100, 10k, 100k by default) and a record
whose cursor leaves the same raw window (``--window`` messages) unobserved, so only the history
size differs. Each turn then stores a user message (``prepare``) and a reply (``record``) with
default options and scripted models; only ``prepare`` + ``record`` are timed, background work is
settled outside the timing. Configurations are measured round-robin (one turn each per round,
in a rotating order), so a noisy neighbour slows all of them alike.

Claim: per-turn time is roughly flat in N because only the window after the cursor is read.

    python bench/overhead.py            # 100, 10k, 100k messages; SQLite and in-memory
    python bench/overhead.py --quick    # tiny sizes (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from _common import Talk, header, ratio, table

from obsmem.engine import ObservationalMemory
from obsmem.messages import Message, new_message_id
from obsmem.stores import InMemoryStore, SQLiteStore, Store
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
    batch: list[Message] = []
    for i in range(size):
        template = pool[i % len(pool)]
        batch.append(replace(template, id=new_message_id()))
        if len(batch) == 2_000:
            await store.append_messages(THREAD, batch)
            batch = []
    if batch:
        await store.append_messages(THREAD, batch)
    record = await store.get_or_create_record(
        key, scope="thread", thread_id=THREAD, resource_id=RESOURCE
    )
    observations = _log(150)
    await store.commit_observation(
        record.id,
        record.version,
        observations=observations,
        observation_tokens=HeuristicEstimator().count_text(observations),
        cursor={THREAD: max(0, size - window)},
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

    with tempfile.TemporaryDirectory(prefix="obsmem-bench-") as tmp:
        setups: list[Setup] = []
        for kind in ("sqlite", "memory"):
            for size in sizes:
                store: Store = (
                    SQLiteStore(Path(tmp) / f"om-{size}.db")
                    if kind == "sqlite"
                    else InMemoryStore()
                )
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
    for kind in ("sqlite", "memory"):
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


if __name__ == "__main__":
    asyncio.run(main())
