"""Checks of the record invariants (ARCHITECTURE.md) against what a store holds."""

from __future__ import annotations

import itertools

from obsmem.stores import Store


async def assert_record_invariants(store: Store, key: str) -> None:
    head = await store.get_record(key)
    assert head is not None, f"{key}: no head record"
    history = await store.history(key)
    assert history[0].id == head.id, "history must start with the head"
    heads = [r for r in history if r.superseded_by is None]
    assert len(heads) == 1, f"{key}: {len(heads)} head records"
    # Generations are consecutive, each retired record points at its successor, and the
    # cursor never moves backwards from one generation to the next.
    for newer, older in itertools.pairwise(history):
        assert newer.generation == older.generation + 1
        assert older.superseded_by == newer.id
        for thread_id, seq in older.cursor.items():
            assert newer.cursor.get(thread_id, 0) >= seq, "cursor moved backwards"
    # Chunks continue right after the cursor, without gaps or overlaps, inside the thread.
    covered = dict(head.cursor)
    for chunk in head.chunks:
        for r in chunk.ranges:
            assert r.first_seq == covered.get(r.thread_id, 0) + 1, (
                f"chunk {chunk.id} leaves a gap or overlaps in thread {r.thread_id}"
            )
            covered[r.thread_id] = r.last_seq
    for thread_id, seq in covered.items():
        thread = await store.get_thread(thread_id)
        assert thread is not None
        assert seq <= thread.message_count, f"{thread_id}: covers messages that do not exist"
