"""The storage conformance suite: every store must behave exactly like this.

Runs once per store kind (see the ``store`` fixture in tests/conftest.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from obsmem.errors import ConflictError, StoreError
from obsmem.messages import (
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    utcnow,
)
from obsmem.records import (
    BufferedChunk,
    BufferedReflection,
    MessageRange,
    ObservationGroup,
    OMRecord,
    record_key,
)
from obsmem.stores import Store

from .invariants import assert_record_invariants
from .ops import activate, add_chunk, new_generation, observe, open_record, set_reflection

T0 = datetime(2025, 12, 4, 14, 30, tzinfo=UTC)


def _msg(i: int, role: str = "user") -> Message:
    return Message(
        id=f"m{i}",
        role=role,  # type: ignore[arg-type]
        parts=(TextPart(text=f"message {i}"),),
        created_at=T0 + timedelta(minutes=i),
    )


def _chunk(n: int, thread: str, first: int, last: int, tokens: int = 100) -> BufferedChunk:
    return BufferedChunk(
        id=f"chunk-{n}",
        cycle_id=f"cycle-{n}",
        observations=f"* 🟡 (14:{30 + n:02d}) chunk {n}",
        token_count=10,
        message_tokens=tokens,
        ranges=(MessageRange(thread_id=thread, first_seq=first, last_seq=last),),
        message_ids=tuple(f"m{i}" for i in range(first, last + 1)),
        created_at=utcnow(),
        current_task=f"task {n}",
    )


async def _thread_with_messages(store: Store, n: int, thread: str = "t1", resource: str = "r1"):
    await store.create_thread(thread, resource)
    await store.append_messages(thread, [_msg(i) for i in range(1, n + 1)])
    key = record_key("thread", thread_id=thread, resource_id=resource)
    record = await open_record(store, thread, resource)
    return key, record


# -- threads ----------------------------------------------------------------------------------


async def test_threads_are_created_once_and_listed_by_resource(store: Store) -> None:
    a = await store.create_thread("a", "r1", title="First", metadata={"x": 1})
    again = await store.create_thread("a", "r1", title="ignored")
    assert again == a
    await store.create_thread("b", "r1")
    await store.create_thread("c", "r2")
    assert [t.id for t in await store.list_threads("r1")] == ["a", "b"]
    assert [t.id for t in await store.list_threads("r2")] == ["c"]
    assert await store.list_resources() == ["r1", "r2"]
    assert await store.get_thread("missing") is None


async def test_a_thread_id_cannot_be_taken_over_by_another_resource(store: Store) -> None:
    await store.create_thread("a", "r1")
    with pytest.raises(StoreError, match="another resource"):
        await store.create_thread("a", "r2")


async def test_thread_metadata_merges_shallowly(store: Store) -> None:
    await store.create_thread("a", "r1", metadata={"keep": 1, "change": 1})
    t = await store.update_thread("a", title="Title", metadata={"change": 2, "new": {"k": "v"}})
    assert t.title == "Title"
    assert t.metadata == {"keep": 1, "change": 2, "new": {"k": "v"}}
    loaded = await store.get_thread("a")
    assert loaded is not None
    assert loaded.metadata == t.metadata
    assert loaded.title == "Title"
    with pytest.raises(StoreError, match="no thread"):
        await store.update_thread("missing", metadata={})


async def test_resource_metadata_merges_and_starts_empty(store: Store) -> None:
    assert await store.get_resource("r1") == {}
    assert await store.update_resource("r1", {"a": 1, "b": {"x": 1}}) == {"a": 1, "b": {"x": 1}}
    assert await store.update_resource("r1", {"b": 2}) == {"a": 1, "b": 2}
    assert await store.get_resource("r1") == {"a": 1, "b": 2}
    assert await store.get_resource("r2") == {}


# -- messages ---------------------------------------------------------------------------------


async def test_append_assigns_seq_and_is_idempotent(store: Store) -> None:
    await store.create_thread("t1", "r1")
    first = await store.append_messages("t1", [_msg(1), _msg(2, "assistant")])
    assert [(m.id, m.seq, m.thread_id, m.resource_id) for m in first] == [
        ("m1", 1, "t1", "r1"),
        ("m2", 2, "t1", "r1"),
    ]
    again = await store.append_messages("t1", [_msg(2, "assistant"), _msg(3)])
    assert [(m.id, m.seq) for m in again] == [("m2", 2), ("m3", 3)]
    stored = await store.list_messages("t1")
    assert [m.seq for m in stored] == [1, 2, 3]
    thread = await store.get_thread("t1")
    assert thread is not None
    assert thread.message_count == 3


async def test_messages_round_trip_every_part_kind(store: Store) -> None:
    await store.create_thread("t1", "r1")
    original = Message(
        id="rich",
        role="assistant",
        created_at=datetime(2025, 12, 4, 14, 30, 5, 123456, tzinfo=UTC),
        metadata={"source": "test", "nested": {"a": [1, 2]}},
        parts=(
            TextPart(text="Here is the board 📋"),
            ReasoningPart(text="thinking...", signature="sig"),
            ToolCallPart(tool_call_id="c1", tool_name="search", args={"q": "venues"}),
            ToolResultPart(
                tool_call_id="c1",
                tool_name="search",
                content={"hits": ["A", "B"]},
                attachments=(ImagePart(data=b"\x89PNG...", media_type="image/png"),),
            ),
            ImagePart(url="https://example.com/board.png", width=800, height=600, detail="high"),
            FilePart(
                data=b"%PDF-1.4",
                media_type="application/pdf",
                filename="a.pdf",
                token_estimate=1234,
            ),
        ),
    )
    [stored] = await store.append_messages("t1", [original])
    [loaded] = await store.list_messages("t1")
    assert loaded == stored
    assert loaded.parts == original.parts
    assert loaded.created_at == original.created_at
    assert loaded.metadata == original.metadata


async def test_list_messages_windows(store: Store) -> None:
    await store.create_thread("t1", "r1")
    await store.append_messages("t1", [_msg(i) for i in range(1, 11)])
    assert [m.seq for m in await store.list_messages("t1", after_seq=3, through_seq=6)] == [4, 5, 6]
    assert [m.seq for m in await store.list_messages("t1", after_seq=7)] == [8, 9, 10]
    assert [m.seq for m in await store.list_messages("t1", limit=2, newest_first=True)] == [10, 9]
    assert await store.list_messages("nope") == []


async def test_get_messages_never_crosses_resources(store: Store) -> None:
    await store.create_thread("t1", "r1")
    await store.create_thread("t2", "r2")
    await store.append_messages("t1", [_msg(1)])
    await store.append_messages("t2", [Message.user("secret", id="s1")])
    found = await store.get_messages(["m1", "s1", "nope"], resource_id="r1")
    assert [m.id for m in found] == ["m1"]


async def test_append_rejects_foreign_ids_and_threads(store: Store) -> None:
    await store.create_thread("t1", "r1")
    await store.create_thread("t2", "r1")
    await store.append_messages("t1", [_msg(1)])
    with pytest.raises(StoreError, match="another thread"):
        await store.append_messages("t2", [_msg(1)])
    with pytest.raises(StoreError, match="names thread"):
        await store.append_messages("t2", [Message.user("x", thread_id="t1")])
    with pytest.raises(StoreError, match="no thread"):
        await store.append_messages("missing", [_msg(5)])
    # a failed append stores nothing
    assert await store.list_messages("t2") == []


# -- records: creation and compare-and-set ----------------------------------------------------


async def test_a_load_creates_one_head(store: Store) -> None:
    key, record = await _thread_with_messages(store, 0)
    again = await open_record(store)
    assert again.id == record.id
    assert record.key == key
    assert record.generation == 0
    assert record.cursor == {}
    assert await store.get_record("thread:other") is None


async def test_concurrent_first_loads_agree(store: Store) -> None:
    records = await asyncio.gather(*[open_record(store) for _ in range(8)])
    assert len({r.id for r in records}) == 1
    assert len(await store.list_threads("r1")) == 1


async def test_a_stale_version_is_a_conflict(store: Store) -> None:
    _, record = await _thread_with_messages(store, 4)
    await add_chunk(store, record, _chunk(1, "t1", 1, 2))
    with pytest.raises(ConflictError) as info:
        await add_chunk(store, record, _chunk(2, "t1", 3, 4))
    assert info.value.expected_version == record.version
    assert info.value.actual_version == record.version + 1
    # The conflict carries the current head, so the loser decides again without a read.
    current = info.value.current
    assert isinstance(current, OMRecord)
    assert current == await store.get_record("thread:t1")
    assert [c.id for c in current.chunks] == ["chunk-1"]


async def test_only_one_of_many_racing_writers_wins(store: Store) -> None:
    key, record = await _thread_with_messages(store, 2)
    results = await asyncio.gather(
        *[add_chunk(store, record, _chunk(n, "t1", 1, 2)) for n in range(10)],
        return_exceptions=True,
    )
    wins = [r for r in results if isinstance(r, OMRecord)]
    assert len(wins) == 1
    assert all(isinstance(r, ConflictError) for r in results if not isinstance(r, OMRecord))
    head = await store.get_record(key)
    assert head is not None
    assert len(head.chunks) == 1
    await assert_record_invariants(store, key)


# -- buffering and activation -----------------------------------------------------------------


async def test_chunks_must_continue_right_after_what_is_covered(store: Store) -> None:
    key, record = await _thread_with_messages(store, 6)
    with pytest.raises(ConflictError, match="next unbuffered message is seq 1"):
        await add_chunk(store, record, _chunk(1, "t1", 2, 3))
    record = await add_chunk(store, record, _chunk(1, "t1", 1, 3))
    with pytest.raises(ConflictError, match="seq 4"):
        await add_chunk(store, record, _chunk(2, "t1", 3, 5))
    with pytest.raises(StoreError, match="has 6 messages"):
        await add_chunk(store, record, _chunk(2, "t1", 4, 9))
    with pytest.raises(StoreError, match="covers thread t1"):
        await add_chunk(store, record, _chunk(2, "t2", 1, 1))
    record = await add_chunk(store, record, _chunk(2, "t1", 4, 6))
    with pytest.raises(ConflictError, match="already buffered"):
        await add_chunk(store, record, _chunk(2, "t1", 7, 7))
    assert [c.id for c in record.chunks] == ["chunk-1", "chunk-2"]
    head = await store.get_record(key)
    assert head == record
    await assert_record_invariants(store, key)


async def test_activation_moves_the_cursor_and_keeps_the_rest(store: Store) -> None:
    key, record = await _thread_with_messages(store, 9)
    for n, (a, b) in enumerate([(1, 3), (4, 6), (7, 9)], start=1):
        record = await add_chunk(store, record, _chunk(n, "t1", a, b, 300))
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


# -- synchronous observation ------------------------------------------------------------------


async def test_commit_observation_never_moves_the_cursor_back(store: Store) -> None:
    key, record = await _thread_with_messages(store, 5)
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


async def test_token_counts_in_whole_floats_are_stored_as_integers(store: Store) -> None:
    """A custom estimator may count in floats (12.0): every store takes them as the integers
    they are (PostgreSQL binds parameters as text, and "12.0" is no BIGINT)."""
    key, record = await _thread_with_messages(store, 5)
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


async def test_commit_observation_checks_where_it_started(store: Store) -> None:
    key, record = await _thread_with_messages(store, 5)
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


async def test_commit_observation_drops_redundant_chunks_and_refuses_to_split(store: Store) -> None:
    key, record = await _thread_with_messages(store, 9)
    for n, (a, b) in enumerate([(1, 3), (4, 6), (7, 9)], start=1):
        record = await add_chunk(store, record, _chunk(n, "t1", a, b))
    with pytest.raises(StoreError, match="split buffered chunk chunk-2"):
        await observe(store, record, observations="x", observation_tokens=1, cursor={"t1": 5})
    record = await observe(store, record, observations="x", observation_tokens=1, cursor={"t1": 6})
    assert [c.id for c in record.chunks] == ["chunk-3"]
    await assert_record_invariants(store, key)


# -- reflection and generations ---------------------------------------------------------------


async def test_reflection_starts_a_generation_and_carries_chunks(store: Store) -> None:
    key, record = await _thread_with_messages(store, 6)
    record = await observe(
        store,
        record,
        observations="line 1\nline 2\nline 3",
        observation_tokens=30,
        cursor={"t1": 3},
    )
    record = await add_chunk(store, record, _chunk(1, "t1", 4, 6))
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
    head = await new_generation(store, record, observations="short\n\nline 3", observation_tokens=5)
    assert head.id != old.id
    assert head.generation == 1
    assert head.origin == "reflection"
    assert head.cursor == {"t1": 3}
    assert [c.id for c in head.chunks] == ["chunk-1"]
    assert head.buffered_reflection is None
    assert await store.get_record(key) == head
    # The retired generation refuses every transition, even at its last version.
    with pytest.raises(ConflictError, match="retired"):
        await add_chunk(store, old, _chunk(2, "t1", 4, 6))
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


async def test_buffered_reflection_cannot_cover_more_lines_than_the_log(store: Store) -> None:
    _, record = await _thread_with_messages(store, 1)
    too_long = BufferedReflection(
        cycle_id="r", text="x", token_count=1, input_tokens=1, line_count=3, created_at=utcnow()
    )
    with pytest.raises(StoreError, match="covers 3 lines"):
        await set_reflection(store, record, too_long)


async def test_clear_removes_memory_but_not_messages_and_old_handles_conflict(store: Store) -> None:
    key, record = await _thread_with_messages(store, 3)
    record = await add_chunk(store, record, _chunk(1, "t1", 1, 3))
    await store.clear(key)
    assert await store.get_record(key) is None
    assert await store.history(key) == []
    assert len(await store.list_messages("t1")) == 3
    fresh = await open_record(store)
    assert fresh.chunks == ()
    # A worker still holding the cleared record cannot write into the new one.
    with pytest.raises(ConflictError) as info:
        await add_chunk(store, record, _chunk(2, "t1", 1, 1))
    assert info.value.current == fresh


# -- resource scope and observation groups ----------------------------------------------------


async def test_resource_scope_cursor_is_per_thread(store: Store) -> None:
    for t in ("a", "b"):
        await store.create_thread(t, "r1")
        await store.append_messages(t, [Message.user(f"{t}{i}", id=f"{t}{i}") for i in range(3)])
    key = record_key("resource", thread_id=None, resource_id="r1")
    record = await open_record(store, "a", "r1", scope="resource")
    assert record.key == key
    chunk = BufferedChunk(
        id="c1",
        cycle_id="cy1",
        observations="x",
        token_count=1,
        message_tokens=10,
        ranges=(
            MessageRange(thread_id="a", first_seq=1, last_seq=2),
            MessageRange(thread_id="b", first_seq=1, last_seq=3),
        ),
        created_at=utcnow(),
    )
    record = await add_chunk(store, record, chunk)
    record = await activate(store, record, 1, observations="x", observation_tokens=1)
    assert record.cursor == {"a": 2, "b": 3}
    assert record.covered_through("a") == 2
    await assert_record_invariants(store, key)


async def test_observation_groups_are_written_with_their_transition(store: Store) -> None:
    key, record = await _thread_with_messages(store, 4)
    group = ObservationGroup(
        id="g1",
        key=key,
        resource_id="r1",
        thread_id="t1",
        cycle_id="cycle-1",
        start_id="m1",
        end_id="m2",
        observations="* 🔴 fact",
        ranges=(MessageRange(thread_id="t1", first_seq=1, last_seq=2),),
        created_at=utcnow(),
    )
    record = await add_chunk(store, record, _chunk(1, "t1", 1, 2), groups=[group])
    assert await store.list_observation_groups("r1") == [group]
    assert await store.list_observation_groups("r1", thread_id="t1") == [group]
    assert await store.list_observation_groups("r1", thread_id="other") == []
    assert await store.list_observation_groups("r2") == []
    # a failed transition writes no group
    with pytest.raises(ConflictError):
        await add_chunk(
            store,
            replace(record, version=record.version - 1),
            _chunk(2, "t1", 3, 4),
            groups=[ObservationGroup(**{**_group_fields(group), "id": "g2"})],
        )
    assert [g.id for g in await store.list_observation_groups("r1")] == ["g1"]
    await store.clear(key)
    assert await store.list_observation_groups("r1") == []


def _group_fields(g: ObservationGroup) -> dict[str, object]:
    return {f: getattr(g, f) for f in g.__dataclass_fields__}


def test_postgres_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from obsmem.errors import MissingExtraError
    from obsmem.stores import PostgresStore

    real_import = builtins.__import__

    def no_psycopg(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("psycopg"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    with pytest.raises(MissingExtraError, match=r'pip install "obsmem\[postgres\]"'):
        PostgresStore("postgresql://localhost/obsmem")


async def test_group_embeddings_are_searched_within_the_resource(store: Store) -> None:
    from obsmem.records import GroupEmbedding

    key, record = await _thread_with_messages(store, 4)
    await store.create_thread("x", "r2")
    groups = [
        ObservationGroup(
            id=f"g{i}",
            key=key if i < 3 else "thread:x",
            resource_id="r1" if i < 3 else "r2",
            thread_id="t1" if i < 3 else "x",
            cycle_id=f"c{i}",
            start_id="m1",
            end_id="m2",
            observations=f"group {i}",
            created_at=T0 + timedelta(days=i),
        )
        for i in range(4)
    ]
    record = await add_chunk(store, record, _chunk(1, "t1", 1, 2), groups=groups)
    vectors = {"g0": (1.0, 0.0), "g1": (0.8, 0.6), "g2": (0.0, 1.0), "g3": (1.0, 0.0)}
    await store.put_embeddings(
        [
            GroupEmbedding(
                group_id=g.id,
                key=g.key,
                resource_id=g.resource_id,
                thread_id=g.thread_id,
                observed_at=g.created_at,
                model="m",
                vector=vectors[g.id],
            )
            for g in groups
        ]
    )
    hits = await store.search_embeddings("r1", [1.0, 0.0], model="m", limit=2)
    assert [(g.id, round(s, 2)) for g, s in hits] == [("g0", 1.0), ("g1", 0.8)]
    assert all(g.resource_id == "r1" for g, _ in hits)  # g3 (r2) is as close but never seen
    later = await store.search_embeddings(
        "r1", [1.0, 0.0], model="m", after=T0 + timedelta(days=1, hours=1)
    )
    assert [g.id for g, _ in later] == ["g2"]
    assert await store.search_embeddings("r1", [1.0, 0.0], model="other") == []
    assert await store.search_embeddings("r1", [1.0, 0.0], model="m", thread_id="x") == []
    await store.clear(key)
    assert await store.search_embeddings("r1", [1.0, 0.0], model="m") == []
    assert [g.id for g, _ in await store.search_embeddings("r2", [1.0, 0.0], model="m")] == ["g3"]


async def test_postgres_ranks_in_sql_with_pgvector_when_the_server_has_it(
    postgres_dsn: str,
) -> None:
    import psycopg

    from obsmem.records import GroupEmbedding
    from obsmem.stores import PostgresStore

    with psycopg.connect(postgres_dsn) as conn:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    if available is None:
        pytest.skip("this PostgreSQL has no pgvector (client-side scoring is used instead)")
    store = PostgresStore(postgres_dsn)
    try:
        key, record = await _thread_with_messages(store, 2)
        assert store.uses_pgvector
        groups = [
            ObservationGroup(
                id=f"g{i}",
                key=key,
                resource_id="r1",
                thread_id="t1",
                cycle_id=f"c{i}",
                start_id="m1",
                end_id="m2",
                observations=f"group {i}",
                created_at=T0,
            )
            for i in range(3)
        ]
        await add_chunk(store, record, _chunk(1, "t1", 1, 2), groups=groups)
        await store.put_embeddings(
            [
                GroupEmbedding(
                    group_id=g.id,
                    key=key,
                    resource_id="r1",
                    thread_id="t1",
                    observed_at=T0,
                    model="m",
                    vector=v,
                )
                for g, v in zip(groups, [(1.0, 0.0), (0.6, 0.8), (0.0, 1.0)], strict=True)
            ]
        )
        hits = await store.search_embeddings("r1", [0.0, 1.0], model="m", limit=2)
        assert [(g.id, round(s, 2)) for g, s in hits] == [("g2", 1.0), ("g1", 0.8)]
        await store.clear(key)
        assert await store.search_embeddings("r1", [0.0, 1.0], model="m") == []
    finally:
        await store.aclose()
