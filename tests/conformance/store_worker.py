"""A worker process for the two-process store test: appends messages and races the other
process to buffer, activate and reflect on the same thread, retrying on every ConflictError.

The first argument is a SQLite file path or a PostgreSQL DSN."""

from __future__ import annotations

import asyncio
import sys

from obsmem.errors import ConflictError
from obsmem.messages import Message, utcnow
from obsmem.records import BufferedChunk, MessageRange, OMRecord
from obsmem.stores import (
    ActivateChunks,
    AddChunk,
    Change,
    Commit,
    PostgresStore,
    SQLiteStore,
    StartGeneration,
    Store,
)

KEY = "thread:shared"


async def _step(store: Store, name: str, i: int) -> None:
    while True:
        head = await store.get_record(KEY)
        assert head is not None
        try:
            await _act(store, head, name, i)
            return
        except ConflictError:
            continue  # lost the race: re-read and decide again


async def _commit(store: Store, head: OMRecord, change: Change) -> None:
    await store.commit(
        Commit(key=KEY, record_id=head.id, expected_version=head.version, change=change)
    )


async def _act(store: Store, head: OMRecord, name: str, i: int) -> None:
    thread = await store.get_thread("shared")
    assert thread is not None
    first = head.covered_through("shared") + 1
    if first <= thread.message_count and i % 3 != 2:
        msgs = await store.list_messages("shared", after_seq=first - 1)
        text = "\n".join(f"* saw {m.id}" for m in msgs)
        chunk = BufferedChunk(
            id=f"chunk-{name}-{i}",
            cycle_id=f"cycle-{name}-{i}",
            observations=text,
            token_count=len(msgs),
            message_tokens=len(msgs) * 10,
            ranges=(MessageRange(thread_id="shared", first_seq=first, last_seq=msgs[-1].seq or 0),),
            message_ids=tuple(m.id for m in msgs),
            created_at=utcnow(),
        )
        await _commit(store, head, AddChunk(chunk=chunk))
    elif head.chunks and i % 5 != 4:
        text = "\n".join(t for t in (head.observations, head.chunks[0].observations) if t)
        tokens = text.count("\n") + 1
        await _commit(
            store, head, ActivateChunks(count=1, observations=text, observation_tokens=tokens)
        )
    elif head.observations:
        # A "reflection" that keeps every line, so the final log can still be checked line by line.
        await _commit(
            store,
            head,
            StartGeneration(
                observations=head.observations, observation_tokens=head.observation_tokens
            ),
        )


async def main(path: str, name: str, rounds: int) -> None:
    store: Store = PostgresStore(path) if path.startswith("postgresql://") else SQLiteStore(path)
    try:
        for i in range(rounds):
            await store.append_messages("shared", [Message.user(f"{name} {i}", id=f"{name}-{i}")])
            await _step(store, name, i)
    finally:
        await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
