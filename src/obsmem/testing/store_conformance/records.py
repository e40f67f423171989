"""The core contract: the head record, its compare-and-set, and the rules each change keeps."""

from __future__ import annotations

import asyncio

import pytest

from obsmem.errors import ConflictError, StoreError
from obsmem.messages import Message, utcnow
from obsmem.records import BufferedReflection, OMRecord, record_key
from obsmem.stores import CoreStore

from .kit import (
    activate,
    add_chunk,
    append,
    assert_record_invariants,
    new_generation,
    numbered_chunk,
    observe,
    open_record,
    resource_chunk,
    set_reflection,
    thread_with_messages,
)


class RecordContract:
    """One head per key; a stale version is a conflict; chunks, cursor and generations keep
    their rules."""

    async def test_a_load_creates_one_head(self, store: CoreStore) -> None:
        key, record = await thread_with_messages(store, 0)
        again = await open_record(store)
        assert again.id == record.id
        assert record.key == key
        assert record.generation == 0
        assert record.cursor == {}
        assert await store.get_record("thread:other") is None

    async def test_concurrent_first_loads_agree(self, store: CoreStore) -> None:
        records = await asyncio.gather(*[open_record(store) for _ in range(8)])
        assert len({r.id for r in records}) == 1
        assert len(await store.list_threads("r1")) == 1

    async def test_a_stale_version_is_a_conflict(self, store: CoreStore) -> None:
        _, record = await thread_with_messages(store, 4)
        await add_chunk(store, record, numbered_chunk(1, "t1", 1, 2))
        with pytest.raises(ConflictError) as info:
            await add_chunk(store, record, numbered_chunk(2, "t1", 3, 4))
        assert info.value.expected_version == record.version
        assert info.value.actual_version == record.version + 1
        # The conflict carries the current head, so the loser decides again without a read.
        current = info.value.current
        assert isinstance(current, OMRecord)
        assert current == await store.get_record("thread:t1")
        assert [c.id for c in current.chunks] == ["chunk-1"]

    async def test_only_one_of_many_racing_writers_wins(self, store: CoreStore) -> None:
        key, record = await thread_with_messages(store, 2)
        results = await asyncio.gather(
            *[add_chunk(store, record, numbered_chunk(n, "t1", 1, 2)) for n in range(10)],
            return_exceptions=True,
        )
        wins = [r for r in results if isinstance(r, OMRecord)]
        assert len(wins) == 1
        assert all(isinstance(r, ConflictError) for r in results if not isinstance(r, OMRecord))
        head = await store.get_record(key)
        assert head is not None
        assert len(head.chunks) == 1
        await assert_record_invariants(store, key)

    async def test_chunks_must_continue_right_after_what_is_covered(self, store: CoreStore) -> None:
        key, record = await thread_with_messages(store, 6)
        with pytest.raises(ConflictError, match="next unbuffered message is seq 1"):
            await add_chunk(store, record, numbered_chunk(1, "t1", 2, 3))
        record = await add_chunk(store, record, numbered_chunk(1, "t1", 1, 3))
        with pytest.raises(ConflictError, match="seq 4"):
            await add_chunk(store, record, numbered_chunk(2, "t1", 3, 5))
        with pytest.raises(StoreError, match="has 6 messages"):
            await add_chunk(store, record, numbered_chunk(2, "t1", 4, 9))
        with pytest.raises(StoreError, match="covers thread t1"):
            await add_chunk(store, record, numbered_chunk(2, "t2", 1, 1))
        record = await add_chunk(store, record, numbered_chunk(2, "t1", 4, 6))
        with pytest.raises(ConflictError, match="already buffered"):
            await add_chunk(store, record, numbered_chunk(2, "t1", 7, 7))
        assert [c.id for c in record.chunks] == ["chunk-1", "chunk-2"]
        head = await store.get_record(key)
        assert head == record
        await assert_record_invariants(store, key)

    async def test_activation_moves_the_cursor_and_keeps_the_rest(self, store: CoreStore) -> None:
        key, record = await thread_with_messages(store, 9)
        for n, (a, b) in enumerate([(1, 3), (4, 6), (7, 9)], start=1):
            record = await add_chunk(store, record, numbered_chunk(n, "t1", a, b, 300))
        log = "chunk 1\n\nchunk 2"
        record = await activate(store, record, 2, observations=log, observation_tokens=20)
        assert record.cursor == {"t1": 6}
        assert record.observations == log
        assert record.observation_tokens == 20
        assert record.total_tokens_observed == 600
        assert [c.id for c in record.chunks] == ["chunk-3"]
        assert record.chunks[0].current_task == "task 3"  # hints survive storage
        with pytest.raises(StoreError, match="cannot activate 2 of 1"):
            await activate(store, record, 2, observations="", observation_tokens=0)
        assert await store.get_record(key) == record
        await assert_record_invariants(store, key)

    async def test_commit_observation_never_moves_the_cursor_back(self, store: CoreStore) -> None:
        key, record = await thread_with_messages(store, 5)
        record = await observe(
            store,
            record,
            observations="obs",
            observation_tokens=3,
            cursor={"t1": 4},
            observed_tokens=400,
        )
        assert record.cursor == {"t1": 4}
        assert record.total_tokens_observed == 400
        with pytest.raises(StoreError, match="backwards"):
            await observe(store, record, observations="x", observation_tokens=1, cursor={"t1": 2})
        with pytest.raises(StoreError, match="has 5 messages"):
            await observe(store, record, observations="x", observation_tokens=1, cursor={"t1": 7})
        await assert_record_invariants(store, key)

    async def test_token_counts_in_whole_floats_are_stored_as_integers(
        self, store: CoreStore
    ) -> None:
        """A custom estimator may count in floats (12.0): every store takes them as the integers
        they are (PostgreSQL binds parameters as text, and "12.0" is no BIGINT)."""
        key, record = await thread_with_messages(store, 5)
        await observe(
            store,
            record,
            observations="obs",
            observation_tokens=3.0,  # pyright: ignore[reportArgumentType]
            cursor={"t1": 4},
            observed_tokens=400.0,  # pyright: ignore[reportArgumentType]
        )
        head = await store.get_record(key)
        assert head is not None
        assert (head.observation_tokens, head.total_tokens_observed) == (3, 400)

    async def test_commit_observation_checks_where_it_started(self, store: CoreStore) -> None:
        key, record = await thread_with_messages(store, 5)
        stale_from = dict(record.cursor)
        record = await observe(
            store,
            record,
            observations="a",
            observation_tokens=1,
            cursor={"t1": 2},
            expected_cursor=stale_from,
        )
        with pytest.raises(ConflictError, match="stale"):
            await observe(
                store,
                record,
                observations="a\nb",
                observation_tokens=2,
                cursor={"t1": 4},
                expected_cursor=stale_from,
            )
        record = await observe(
            store,
            record,
            observations="a\nb",
            observation_tokens=2,
            cursor={"t1": 4},
            expected_cursor={"t1": 2},
        )
        assert record.cursor == {"t1": 4}
        await assert_record_invariants(store, key)

    async def test_commit_observation_drops_redundant_chunks_and_refuses_to_split(
        self, store: CoreStore
    ) -> None:
        key, record = await thread_with_messages(store, 9)
        for n, (a, b) in enumerate([(1, 3), (4, 6), (7, 9)], start=1):
            record = await add_chunk(store, record, numbered_chunk(n, "t1", a, b))
        with pytest.raises(StoreError, match="split buffered chunk chunk-2"):
            await observe(store, record, observations="x", observation_tokens=1, cursor={"t1": 5})
        record = await observe(
            store, record, observations="x", observation_tokens=1, cursor={"t1": 6}
        )
        assert [c.id for c in record.chunks] == ["chunk-3"]
        await assert_record_invariants(store, key)

    async def test_reflection_starts_a_generation_and_carries_chunks(
        self, store: CoreStore
    ) -> None:
        key, record = await thread_with_messages(store, 6)
        record = await observe(
            store,
            record,
            observations="line 1\nline 2\nline 3",
            observation_tokens=30,
            cursor={"t1": 3},
        )
        record = await add_chunk(store, record, numbered_chunk(1, "t1", 4, 6))
        buffered = BufferedReflection(
            cycle_id="reflect-1",
            text="short",
            token_count=2,
            input_tokens=20,
            line_count=2,
            created_at=utcnow(),
        )
        record = await set_reflection(store, record, buffered)
        assert record.buffered_reflection == buffered
        old = record
        head = await new_generation(
            store, record, observations="short\n\nline 3", observation_tokens=5
        )
        assert head.id != old.id
        assert head.generation == 1
        assert head.origin == "reflection"
        assert head.cursor == {"t1": 3}
        assert [c.id for c in head.chunks] == ["chunk-1"]
        assert head.buffered_reflection is None
        assert await store.get_record(key) == head
        # The retired generation refuses every transition, even at its last version.
        with pytest.raises(ConflictError, match="retired"):
            await add_chunk(store, old, numbered_chunk(2, "t1", 4, 6))
        history = await store.history(key)
        assert [(r.generation, r.observations) for r in history] == [
            (1, "short\n\nline 3"),
            (0, "line 1\nline 2\nline 3"),
        ]
        assert history[1].superseded_by == head.id
        assert [r.generation for r in await store.history(key, limit=1, offset=1)] == [0]
        # The chunk activates on the new generation.
        head = await activate(
            store, head, 1, observations="short\n\nline 3\n\nchunk 1", observation_tokens=8
        )
        assert head.cursor == {"t1": 6}
        await assert_record_invariants(store, key)

    async def test_buffered_reflection_cannot_cover_more_lines_than_the_log(
        self, store: CoreStore
    ) -> None:
        _, record = await thread_with_messages(store, 1)
        too_long = BufferedReflection(
            cycle_id="r", text="x", token_count=1, input_tokens=1, line_count=3, created_at=utcnow()
        )
        with pytest.raises(StoreError, match="covers 3 lines"):
            await set_reflection(store, record, too_long)

    async def test_clear_removes_memory_but_not_messages_and_old_handles_conflict(
        self, store: CoreStore
    ) -> None:
        key, record = await thread_with_messages(store, 3)
        record = await add_chunk(store, record, numbered_chunk(1, "t1", 1, 3))
        await store.clear(key)
        assert await store.get_record(key) is None
        assert await store.history(key) == []
        assert len(await store.list_messages("t1")) == 3
        fresh = await open_record(store)
        assert fresh.chunks == ()
        # A worker still holding the cleared record cannot write into the new one.
        with pytest.raises(ConflictError) as info:
            await add_chunk(store, record, numbered_chunk(2, "t1", 1, 1))
        assert info.value.current == fresh

    async def test_resource_scope_cursor_is_per_thread(self, store: CoreStore) -> None:
        for t in ("a", "b"):
            await store.create_thread(t, "r1")
            await append(store, t, [Message.user(f"{t}{i}", id=f"{t}{i}") for i in range(3)])
        key = record_key("resource", thread_id=None, resource_id="r1")
        record = await open_record(store, "a", "r1", scope="resource")
        assert record.key == key
        chunk = resource_chunk(("a", 1, 2), ("b", 1, 3))
        record = await add_chunk(store, record, chunk)
        record = await activate(store, record, 1, observations="x", observation_tokens=1)
        assert record.cursor == {"a": 2, "b": 3}
        assert record.covered_through("a") == 2
        await assert_record_invariants(store, key)
