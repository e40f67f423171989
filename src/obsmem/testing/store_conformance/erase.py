"""The erase capability (ErasableStore): an owner's delete leaves no trace, and work begun
before it brings nothing back."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from obsmem.errors import ConflictError
from obsmem.messages import Message, TextPart, utcnow
from obsmem.records import (
    BufferedReflection,
    CycleRecord,
    GroupEmbedding,
    MessageRange,
    ObservationGroup,
    Scope,
    record_key,
)
from obsmem.stores import (
    Commit,
    CommitObservation,
    ErasableStore,
    LedgerStore,
    LoadRequest,
    ResourcePatch,
    SearchableStore,
    StartGeneration,
    Store,
    TransferStore,
)
from obsmem.stores.erasure import tombstone_key

from .kit import (
    T0,
    add_chunk,
    apply,
    load,
    needs,
    new_generation,
    numbered_chunk,
    observation_group,
    observe,
    offers,
    open_record,
    set_reflection,
    subject,
)

SECRET = "my card number is 4111-1111-1111-1111"


VECTOR = (0.6, 0.8)


def _messages(thread: str, n: int) -> list[Message]:
    return [
        Message(
            id=f"{thread}-m{i}",
            role="user",
            parts=(TextPart(text=f"{SECRET} ({thread} #{i})"),),
            created_at=T0 + timedelta(minutes=i),
        )
        for i in range(1, n + 1)
    ]


def _group(key: str, thread: str, n: int) -> ObservationGroup:
    return observation_group(
        key,
        f"g-{thread}-{n}",
        thread=thread,
        observations=f"* 🔴 {SECRET} ({thread})",
        messages=(f"{thread}-m1", f"{thread}-m2"),
        cycle_id=f"cycle-{thread}-{n}",
    )


def _cycle(key: str, thread: str) -> CycleRecord:
    return CycleRecord(
        cycle_id=f"cycle-{thread}-1",
        key=key,
        resource_id="r1",
        thread_ids=(thread,),
        kind="observation",
        outcome="committed",
        started_at=T0,
        duration_ms=1.0,
        ranges=(MessageRange(thread_id=thread, first_seq=1, last_seq=2),),
        generation=0,
        operation="observation",
    )


def _block(thread: str) -> str:
    return f'<thread id="{thread}">\n* 🔴 {SECRET} ({thread})\n</thread>'


async def remember(store: Store, thread: str, scope: Scope) -> None:
    """A thread with messages, an observed log, a group with its embedding and a ledger row
    (those two where the store offers search and the ledger)."""
    await store.load(
        LoadRequest(
            subject=subject(thread, scope=scope),
            append=_messages(thread, 3),
            resource_patch=ResourcePatch(resource_id="r1", set=((("om:working_memory",), SECRET),)),
        )
    )
    record = await open_record(store, thread, scope=scope)
    key = record.key
    log = _block(thread) if scope == "resource" else f"* 🔴 {SECRET} ({thread})"
    group = _group(key, thread, 1)
    record = await observe(
        store,
        record,
        observations=(record.observations + "\n" + log).strip(),
        observation_tokens=20,
        cursor={**record.cursor, thread: 2},
        groups=[group],
    )
    if offers(store, SearchableStore):
        await store.put_embeddings([GroupEmbedding.of(group, VECTOR, model="m")])
    await store.load(
        LoadRequest(subject=subject(thread, scope=scope), cycles=[_cycle(key, thread)])
    )


async def _assert_no_trace(store: Store, thread: str) -> None:
    assert await store.get_thread(thread) is None
    assert await store.list_messages(thread) == []
    assert await store.get_messages([f"{thread}-m1", f"{thread}-m2"], resource_id="r1") == []
    key = record_key("thread", thread_id=thread, resource_id=None)
    assert await store.get_record(key) is None
    assert await store.history(key) == []
    if offers(store, LedgerStore):
        assert await store.list_cycles(key) == []
        assert await store.list_cycles("resource:r1", thread_id=thread) == []
    if offers(store, SearchableStore):
        assert await store.list_observation_groups("r1", thread_id=thread) == []
        found = await store.search_embeddings("r1", VECTOR, model="m", thread_id=thread)
        assert found == []


class EraseContract:
    """Skipped, naming ErasableStore, on a store without it. Search and the ledger are checked
    for traces only where the store offers them."""

    async def test_delete_thread_erases_it_and_keeps_its_neighbours(self, store: Store) -> None:
        needs(store, ErasableStore)
        await remember(store, "t1", "thread")
        await remember(store, "t2", "thread")
        erased = await store.delete_thread("t1")
        assert erased is not None
        assert (erased.thread_ids, erased.messages, erased.remaining) == (("t1",), 3, "")
        await _assert_no_trace(store, "t1")
        assert [t.id for t in await store.list_threads("r1")] == ["t2"]
        assert len(await store.list_messages("t2")) == 3
        assert (await store.get_record("thread:t2")) is not None
        if offers(store, SearchableStore):
            assert len(await store.list_observation_groups("r1", thread_id="t2")) == 1

    async def test_a_thread_created_again_is_a_fresh_one(self, store: Store) -> None:
        needs(store, ErasableStore)
        await remember(store, "t1", "thread")
        before = await store.get_thread("t1")
        assert before is not None
        assert before.incarnation
        await store.delete_thread("t1")
        snapshot = await load(store, "t1")
        again = snapshot.threads[0].thread
        assert again.message_count == 0
        assert again.incarnation != before.incarnation
        assert snapshot.record.observations == ""
        assert snapshot.record.version == 1

    async def test_delete_thread_leaves_only_its_tombstone(self, store: Store) -> None:
        """The resource's metadata keeps a hash of the erased thread's id and when
        (``om:erased``), nothing of what it said, beside what was there; erasing the resource
        takes it too."""
        needs(store, ErasableStore)
        await remember(store, "t1", "thread")
        await remember(store, "t2", "thread")
        before = utcnow()
        await store.delete_thread("t1")
        metadata = await store.get_resource("r1")
        assert metadata["om:working_memory"] == SECRET  # the resource's, not the thread's
        (thread, at), *others = metadata["om:erased"].items()
        assert (thread, others) == (tombstone_key("t1"), [])
        assert "t1" not in str(metadata["om:erased"])
        assert datetime.fromisoformat(at) >= before.replace(microsecond=0)
        await store.delete_resource("r1")
        assert await store.get_resource("r1") == {}

    async def test_unknown_thread_or_resource_erases_nothing(self, store: Store) -> None:
        needs(store, ErasableStore)
        await remember(store, "t1", "thread")
        assert await store.delete_thread("nope") is None
        assert await store.delete_resource("nobody") is None
        assert len(await store.list_messages("t1")) == 3

    async def test_resource_scope_delete_thread_strips_its_blocks_from_every_generation(
        self, store: Store
    ) -> None:
        needs(store, ErasableStore)
        await remember(store, "t1", "resource")
        await remember(store, "t2", "resource")
        head = await open_record(store, "t1", scope="resource")
        merged = "* 🟡 the user shares cards across threads"
        boundary = "--- message boundary (2025-12-04T15:00:00.000Z) ---"
        log = (
            f"{merged}\n[recall range t1-m1:t2-m2]\n* 🟡 a reflected line\n{_block('t2')}\n\n"
            f"{boundary}\n\n{_block('t1')}\n"
        )
        head = await new_generation(store, head, observations=log, observation_tokens=9)
        head = await set_reflection(
            store,
            head,
            BufferedReflection(
                cycle_id="c-r",
                text=SECRET,
                token_count=3,
                input_tokens=9,
                line_count=3,
                created_at=utcnow(),
            ),
        )
        spanning = replace(
            _group(head.key, "t2", 2),
            start_id="t1-m1",
            ranges=(
                MessageRange(thread_id="t1", first_seq=1, last_seq=2),
                MessageRange(thread_id="t2", first_seq=1, last_seq=2),
            ),
        )
        change = StartGeneration(observations=head.observations, observation_tokens=9)
        head = await apply(store, head, change, groups=[spanning])  # a reflection's group
        erased = await store.delete_thread("t1")
        assert erased is not None
        assert erased.remaining == f"{merged}\n* 🟡 a reflected line"
        await _assert_no_trace(store, "t1")
        after = await store.get_record("resource:r1")
        assert after is not None
        assert "recall range t1-m1" not in after.observations  # the erased group's range
        assert boundary not in after.observations  # nothing is left after it
        assert after.version > head.version
        assert "(t1)" not in after.observations
        assert "(t2)" in after.observations
        assert "t1" not in after.cursor
        assert after.buffered_reflection is None
        for generation in await store.history("resource:r1"):
            assert "(t1)" not in generation.observations
        if offers(store, SearchableStore):
            kept = await store.list_observation_groups("r1")
            assert [g.id for g in kept] == ["g-t2-1"]  # not the reflection's group spanning t1
        if offers(store, LedgerStore):
            assert len(await store.list_cycles("resource:r1", thread_id="t2")) == 1

    async def test_delete_thread_drops_buffered_chunks_that_touch_it(self, store: Store) -> None:
        needs(store, ErasableStore)
        await store.load(
            LoadRequest(subject=subject("t1", scope="resource"), append=_messages("t1", 3))
        )
        head = await open_record(store, "t1", scope="resource")
        head = await add_chunk(store, head, numbered_chunk(1, "t1", 1, 2))
        await store.delete_thread("t1")
        after = await store.get_record("resource:r1")
        assert after is not None
        assert after.chunks == ()

    async def test_delete_resource_erases_everything_of_it(self, store: Store) -> None:
        needs(store, ErasableStore)
        for scope in ("thread", "resource"):
            await remember(store, "t1" if scope == "thread" else "t2", scope)  # type: ignore[arg-type]
        await store.load(
            LoadRequest(subject=subject("x1", resource="r2"), append=_messages("x1", 1))
        )
        erased = await store.delete_resource("r1")
        assert erased is not None
        assert sorted(erased.thread_ids) == ["t1", "t2"]
        assert erased.messages == 6
        for thread in ("t1", "t2"):
            await _assert_no_trace(store, thread)
        assert await store.get_record("resource:r1") is None
        assert await store.get_resource("r1") == {}
        assert [t.id for t in await store.list_threads("r2")] == ["x1"]
        if offers(store, LedgerStore):
            assert await store.list_cycles("resource:r1") == []
        if offers(store, SearchableStore):
            assert await store.list_observation_groups("r1") == []
        if offers(store, TransferStore):
            assert await store.list_resources() == ["r2"]
        assert len(await store.list_messages("x1")) == 1

    async def test_an_embedding_of_an_erased_group_is_not_stored(self, store: Store) -> None:
        """Embeddings are computed after their group's commit: one that arrives after the group
        was erased (its thread deleted meanwhile) is dropped, not stored for later."""
        needs(store, SearchableStore)
        record = await open_record(store, "t1")
        group = _group(record.key, "t1", 1)
        late = GroupEmbedding.of(group, VECTOR, model="m")
        await store.put_embeddings([late])  # the group is not (or no longer) stored
        await observe(
            store,
            record,
            observations="* 🔴 a fact",
            observation_tokens=3,
            cursor={},
            groups=[group],
        )
        assert await store.search_embeddings("r1", VECTOR, model="m") == []
        await store.put_embeddings([late])
        assert [g.id for g, _ in await store.search_embeddings("r1", VECTOR, model="m")] == [
            "g-t1-1"
        ]

    async def test_work_begun_before_a_delete_brings_nothing_back(self, store: Store) -> None:
        """No resurrection: a reply begun before the delete stores nothing, and a commit
        checked against the incarnation read before it changes nothing, even once the thread
        is created again under its id and the head is read afresh."""
        needs(store, ErasableStore)
        for thread in ("t1", "t2"):
            await store.load(
                LoadRequest(subject=subject(thread, scope="resource"), append=_messages(thread, 3))
            )
        before = await load(store, "t1", scope="resource")
        old = before.main.thread.incarnation
        await store.delete_thread("t1")
        late = LoadRequest(
            subject=subject("t1", scope="resource"),
            append=[Message.user("a reply begun before the delete", id="late")],
            incarnation=old,
        )
        with pytest.raises(ConflictError):
            await store.load(late)
        assert await store.get_thread("t1") is None
        assert await store.list_messages("t1") == []
        again = await store.load(
            LoadRequest(subject=subject("t1", scope="resource"), append=_messages("t1", 2))
        )
        assert again.main.thread.incarnation != old
        head = again.record
        stale = Commit(
            key=head.key,
            record_id=head.id,
            expected_version=head.version,  # the head as it is now: only the thread is stale
            change=CommitObservation(
                observations=f"* 🔴 {SECRET}", observation_tokens=5, cursor=(("t1", 2),)
            ),
            groups=[_group(head.key, "t1", 9)],
            incarnations=(("t1", old),),
        )
        with pytest.raises(ConflictError) as info:
            await store.commit(stale)
        assert info.value.current is None  # the work is dropped, not retried
        assert await store.get_record(head.key) == head
        assert SECRET not in head.observations
        if offers(store, SearchableStore):
            assert await store.list_observation_groups("r1", thread_id="t1") == []
