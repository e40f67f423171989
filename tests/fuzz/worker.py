"""One fuzz worker: an ObservationalMemory engine in its own process, driving a shared thread.

Usage: python -m tests.fuzz.worker STORE SEED WORKER TURNS. Every choice comes from the seed, so a
failing run can be replayed. Faults: model errors, transient 503s, empty and degenerate answers,
untagged text, slow calls; the parent may SIGKILL this process at any moment.
"""

from __future__ import annotations

import asyncio
import random
import sys

from obsmem.engine import ObservationalMemory
from obsmem.messages import Message
from obsmem.stores import PostgresStore, SQLiteStore, Store
from obsmem.testing import Fault, scripted_observer, scripted_reflector

THREAD, RESOURCE = "shared", "fuzz-user"
FAULTS: tuple[Fault | None, ...] = (None,) * 12 + (
    "error",
    "transient",
    "empty",
    "degenerate",
    "untagged",
)


def open_store(target: str) -> Store:
    return PostgresStore(target) if target.startswith("postgresql://") else SQLiteStore(target)


def words(rng: random.Random, n: int) -> str:
    vocab = [
        "plan",
        "venue",
        "budget",
        "invoice",
        "garden",
        "harbor",
        "ticket",
        "review",
        "deploy",
        "schema",
    ]
    return " ".join(rng.choice(vocab) for _ in range(n))


async def main(target: str, seed: int, worker: int, turns: int) -> None:
    rng = random.Random(seed * 1000 + worker)
    store = open_store(target)
    fault_rng = random.Random(seed * 7919 + worker)
    om = ObservationalMemory(
        store,
        {
            "observation": {
                "model": scripted_observer(
                    words=6, fault=lambda n: fault_rng.choice(FAULTS), delay=rng.random() * 0.02
                ),
                "messageTokens": rng.choice([300, 600, 1_000]),
                "bufferTokens": rng.choice([0.2, 0.4, False]),
            },
            "reflection": {
                "model": scripted_reflector(fault=lambda n: fault_rng.choice(FAULTS)),
                "observationTokens": rng.choice([400, 800]),
            },
        },
        sync_timeout=2.0,
        background_timeout=2.0,
    )
    try:
        for turn in range(turns):
            tag = f"w{worker}t{turn}"
            user = Message.user(f"{tag} {words(rng, rng.randint(5, 120))}", id=f"{tag}-u")
            prepared = await om.prepare(THREAD, RESOURCE, [user])
            await check_context(store, prepared.messages, prepared.record.cursor.get(THREAD, 0))
            reply = Message.assistant(f"{tag}r {words(rng, rng.randint(5, 80))}", id=f"{tag}-a")
            await om.record(THREAD, RESOURCE, [reply])
            action = rng.random()
            if action < 0.3:
                await om.settle()
            elif action < 0.35:
                await om.observe(THREAD, RESOURCE)
            elif action < 0.38:
                await om.reflect(THREAD, RESOURCE)
            print(f"turn {turn} done", flush=True)
        await om.settle()
    finally:
        await om.aclose()
        await store.aclose()


async def check_context(store: Store, messages: list[Message], cursor: int) -> None:
    """The raw messages sent are exactly the stored messages after the cursor used (but the
    oldest ones a left-out note stands for, while observation catches up)."""
    raw = [m for m in messages if not (m.metadata.get("obsmem") or {}).get("synthetic")]
    stored = await store.list_messages(THREAD, after_seq=cursor)
    last = max((m.seq or 0) for m in raw) if raw else cursor
    expected = [m.id for m in stored if (m.seq or 0) <= last]
    notes = [m for m in messages if m.id == "obsmem-left-out"]
    if notes:
        expected = expected[notes[0].metadata["obsmem"]["count"] :]
    assert [m.id for m in raw] == expected, (
        f"raw {[m.id for m in raw]} != stored after cursor {cursor}: {expected}"
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
