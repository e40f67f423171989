"""The core contract: the store's two memory operations, load and commit."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest

from obsmem.errors import ConflictError, StoreError
from obsmem.messages import Message, TextPart, utcnow
from obsmem.records import BufferedChunk, MessageRange, ThreadCopy
from obsmem.stores import (
    AddChunk,
    Commit,
    CommitObservation,
    CoreStore,
    LoadRequest,
    ResourcePatch,
    SearchableStore,
    ThreadPatch,
)

from .kit import (
    T0,
    add_chunk,
    assert_record_invariants,
    load,
    observation_group,
    observe,
    resource_chunk,
    subject,
)


def _msg(i: int, role: str = "user", thread: str = "t") -> Message:
    return Message(
        id=f"{thread}-m{i}",
        role=role,  # type: ignore[arg-type]
        parts=(TextPart(text=f"message {i}"),),
        created_at=T0 + timedelta(minutes=i),
    )


def _chunk(n: int, first: int, last: int, thread: str = "t1") -> BufferedChunk:
    return BufferedChunk(
        id=f"chunk-{n}",
        cycle_id=f"cycle-{n}",
        observations=f"* chunk {n}",
        token_count=3,
        message_tokens=100,
        ranges=(MessageRange(thread_id=thread, first_seq=first, last_seq=last),),
        created_at=utcnow(),
    )


class LoadCommitContract:
    """A load stores the turn and reads the snapshot; a commit changes the head with what the
    cycle made."""

    async def test_a_load_stores_the_input_and_reads_what_is_unobserved(
        self, store: CoreStore
    ) -> None:
        first = await store.load(
            LoadRequest(subject=subject(), append=[_msg(i, thread="t1") for i in range(1, 5)])
        )
        assert [m.seq for m in first.stored] == [1, 2, 3, 4]
        assert [m.seq for m in first.main.unobserved] == [1, 2, 3, 4]
        assert first.main.thread.message_count == 4
        assert first.record.cursor == {}
        assert first.subject.threads == ("t1",)
        record = await observe(
            store, first.record, observations="* obs", observation_tokens=2, cursor={"t1": 3}
        )
        second = await store.load(LoadRequest(subject=subject(), append=[_msg(5, thread="t1")]))
        assert second.record == record
        assert [m.seq for m in second.main.unobserved] == [4, 5]
        # Appending an id again stores nothing new and returns the stored message.
        again = await store.load(LoadRequest(subject=subject(), append=[_msg(5, thread="t1")]))
        assert [m.seq for m in again.stored] == [5]
        assert again.main.thread.message_count == 5

    async def test_a_load_never_takes_over_another_resources_thread(self, store: CoreStore) -> None:
        await load(store, "t1", "r1")
        with pytest.raises(StoreError, match="another resource"):
            await store.load(
                LoadRequest(subject=subject("t1", "intruder"), append=[_msg(1, thread="t1")])
            )
        assert await store.list_messages("t1") == []

    async def test_a_load_with_a_stale_copy_of_the_thread_stores_nothing(
        self, store: CoreStore
    ) -> None:
        """``LoadRequest.expect``: the caller's copy of the thread (its incarnation, message
        count and the values of some metadata keys) is checked against the thread as found
        before anything is stored. When it differs, or the thread is gone, nothing is stored
        or created and a ConflictError without a current head is raised; a copy that matches
        stores as any load (a copy of no thread: the load creates it). In thread scope and
        resource scope, with and without a patch."""
        failing = {"observer": {"error": "down"}}
        marked = ThreadPatch(thread_id="t1", set=((("om:failure",), failing),))
        first = await store.load(
            LoadRequest(subject=subject(), append=[_msg(1, thread="t1")], patches=[marked])
        )
        held = ThreadCopy(
            incarnation=first.main.thread.incarnation,
            message_count=1,
            metadata={"om:failure": failing, "om:retracted": None},
        )
        stale = {
            "holds 1 messages, not 0": replace(held, message_count=0),
            "deleted and created again": replace(held, incarnation="another"),
            "other values of om:retracted": replace(held, metadata={"om:retracted": {"x": 1}}),
            "other values of om:failure": replace(held, metadata={"om:failure": None}),
        }
        patch = ThreadPatch(thread_id="t1", set=((("added",), 1),))
        for scope in ("thread", "resource"):
            for patches in ([], [patch]):
                for why, copy in stale.items():
                    request = LoadRequest(
                        subject=subject(scope=scope),
                        append=[_msg(2, thread="t1")],
                        patches=patches,
                        expect=copy,
                    )
                    with pytest.raises(ConflictError, match=why) as info:
                        await store.load(request)
                    assert info.value.current is None
        assert [m.id for m in await store.list_messages("t1")] == ["t1-m1"]
        thread = await store.get_thread("t1")
        assert thread is not None
        assert "added" not in thread.metadata
        with pytest.raises(ConflictError, match="is gone"):
            await store.load(
                LoadRequest(subject=subject("t2"), append=[_msg(1, thread="t2")], expect=held)
            )
        assert await store.get_thread("t2") is None
        absent = ThreadCopy(incarnation="", message_count=0)  # the caller found no thread
        with pytest.raises(ConflictError, match="was created since"):
            await store.load(
                LoadRequest(subject=subject(), append=[_msg(2, thread="t1")], expect=absent)
            )
        made = await store.load(
            LoadRequest(subject=subject("t2"), append=[_msg(1, thread="t2")], expect=absent)
        )
        assert [m.seq for m in made.stored] == [1]
        snap = await store.load(
            LoadRequest(subject=subject(), append=[_msg(2, thread="t1")], expect=held)
        )
        assert [m.seq for m in snap.stored] == [2]
        assert snap.main.thread.message_count == 2

    async def test_two_loads_that_found_no_thread_make_it_once(self, store: CoreStore) -> None:
        """Two loads at once, each with a copy of no thread (``ThreadCopy(incarnation="")``):
        one makes the thread and stores its input; the other, whether it runs after or waits
        on the first, finds the thread made and stores nothing."""
        absent = ThreadCopy(incarnation="", message_count=0)
        loads = [
            store.load(LoadRequest(subject=subject(), append=[_msg(i, thread="t1")], expect=absent))
            for i in (1, 2)
        ]
        results = await asyncio.gather(*loads, return_exceptions=True)
        refused = [r for r in results if isinstance(r, ConflictError)]
        assert len(refused) == 1, results
        assert "was created since" in str(refused[0])
        assert len(await store.list_messages("t1")) == 1

    async def test_resource_scope_loads_every_thread_with_its_own_cursor(
        self, store: CoreStore
    ) -> None:
        for t in ("a", "b", "c"):
            await store.load(
                LoadRequest(
                    subject=subject(t, "r1", "resource"),
                    append=[_msg(i, thread=t) for i in range(1, 4)],
                )
            )
        await load(store, "other", "r2", "resource")
        snap = await load(store, "b", "r1", "resource")
        assert [t.id for t in snap.threads] == ["b", "a", "c"]  # the subject's thread first
        assert snap.subject.threads == ("b", "a", "c")
        chunk = resource_chunk(("a", 1, 2), ("c", 1, 3))
        record = await add_chunk(store, snap.record, chunk)
        record = await observe(
            store, record, observations="x", observation_tokens=1, cursor={"a": 2, "c": 3}
        )
        snap = await load(store, "a", "r1", "resource")
        assert {t.id: [m.seq for m in t.unobserved] for t in snap.threads} == {
            "a": [3],
            "b": [1, 2, 3],
            "c": [],
        }

    async def test_a_load_can_tell_when_the_assistant_last_spoke(self, store: CoreStore) -> None:
        messages = [_msg(1, thread="t1"), _msg(2, "assistant", "t1"), _msg(3, thread="t1")]
        snap = await store.load(LoadRequest(subject=subject(), append=messages, last_reply=True))
        assert snap.last_reply_at == messages[1].created_at
        assert (await load(store)).last_reply_at is None  # only when asked
        quiet = await store.load(LoadRequest(subject=subject("t2"), last_reply=True))
        assert quiet.last_reply_at is None

    async def test_thread_patches_merge_nested_paths(self, store: CoreStore) -> None:
        await store.create_thread("t1", "r1", metadata={"keep": 1, "om:extracted": {"a": 1}})
        snap = await store.load(
            LoadRequest(
                subject=subject(),
                patches=[
                    ThreadPatch(
                        thread_id="t1",
                        set=((("om:extracted", "b"), {"x": [1]}), (("deep", "er", "est"), 3)),
                    )
                ],
            )
        )
        assert snap.thread_metadata == {
            "keep": 1,
            "om:extracted": {"a": 1, "b": {"x": [1]}},
            "deep": {"er": {"est": 3}},
        }
        assert (await store.get_thread("t1")) == snap.main.thread

    async def test_concurrent_metadata_merges_lose_nothing(self, store: CoreStore) -> None:
        snap = await load(store)
        record = snap.record

        async def commit_value(slug: str) -> None:
            # Every writer commits its own value with a change of the record; each loser decides
            # again from the head its conflict carries, as a cycle does.
            head = record
            for _ in range(50):
                try:
                    await store.commit(
                        Commit(
                            key=head.key,
                            record_id=head.id,
                            expected_version=head.version,
                            change=CommitObservation(
                                observations=head.observations + f"\n* {slug}",
                                observation_tokens=head.observation_tokens + 1,
                                cursor=(),
                            ),
                            threads=[
                                ThreadPatch(thread_id="t1", set=((("om:extracted", slug), slug),))
                            ],
                        )
                    )
                    return
                except ConflictError as exc:
                    head = exc.current
            raise AssertionError("never committed")

        slugs = [f"slug-{i}" for i in range(8)]
        await asyncio.gather(*(commit_value(s) for s in slugs))
        thread = await store.get_thread("t1")
        assert thread is not None
        assert thread.metadata["om:extracted"] == {s: s for s in slugs}
        head = await store.get_record("thread:t1")
        assert head is not None
        assert sorted(head.observations.split()) == sorted(["*"] * 8 + slugs)

    async def test_suggested_titles_respect_the_pin(self, store: CoreStore) -> None:
        await store.create_thread("t1", "r1")

        async def suggest(title: str) -> str | None:
            snap = await store.load(
                LoadRequest(
                    subject=subject(), patches=[ThreadPatch(thread_id="t1", suggested_title=title)]
                )
            )
            return snap.main.thread.title

        assert await suggest("ab") is None  # too short to be a title
        assert await suggest("  Trip to Lisbon ") == "Trip to Lisbon"
        await store.update_thread("t1", title="Mine", metadata={"title_pinned": True})
        assert await suggest("Something else") == "Mine"
        snap = await store.load(
            LoadRequest(
                subject=subject(), patches=[ThreadPatch(thread_id="t1", title="Set anyway")]
            )
        )
        assert snap.main.thread.title == "Set anyway"

    async def test_a_commit_brings_its_groups_metadata_and_the_new_snapshot(
        self, store: CoreStore
    ) -> None:
        snap = await store.load(
            LoadRequest(subject=subject(), append=[_msg(i, thread="t1") for i in range(1, 5)])
        )
        group = observation_group(
            snap.record.key, observations="* chunk 1", messages=("t1-m1", "t1-m2")
        )
        result = await store.commit(
            Commit(
                key=snap.record.key,
                record_id=snap.record.id,
                expected_version=snap.record.version,
                change=AddChunk(chunk=_chunk(1, 1, 2)),
                groups=[group],
                threads=[ThreadPatch(thread_id="t1", suggested_title="Venues")],
                resource=ResourcePatch(resource_id="r1", set=((("wm",), "notes"),)),
                reload=snap.subject,
            )
        )
        assert [c.id for c in result.record.chunks] == ["chunk-1"]
        [change] = result.threads
        assert (change.before.title, change.after.title) == (None, "Venues")
        assert result.snapshot is not None
        assert result.snapshot.record == result.record
        assert [m.seq for m in result.snapshot.main.unobserved] == [1, 2, 3, 4]
        assert result.snapshot.resource_metadata == {"wm": "notes"}
        if isinstance(store, SearchableStore):  # groups are read back where search is offered
            assert await store.list_observation_groups("r1") == [group]
        # A commit that loses its race writes none of what came with it.
        with pytest.raises(ConflictError):
            await store.commit(
                Commit(
                    key=snap.record.key,
                    record_id=snap.record.id,
                    expected_version=snap.record.version,
                    change=AddChunk(chunk=_chunk(2, 3, 4)),
                    threads=[ThreadPatch(thread_id="t1", set=((("lost",), True),))],
                    resource=ResourcePatch(resource_id="r1", set=((("lost",), True),)),
                )
            )
        thread = await store.get_thread("t1")
        assert thread is not None
        assert "lost" not in thread.metadata
        assert await store.get_resource("r1") == {"wm": "notes"}
        await assert_record_invariants(store, snap.record.key)

    async def test_a_commit_names_a_missing_thread(self, store: CoreStore) -> None:
        snap = await load(store)
        with pytest.raises(StoreError, match="no thread 'ghost'"):
            await store.commit(
                Commit(
                    key=snap.record.key,
                    record_id=snap.record.id,
                    expected_version=snap.record.version,
                    change=CommitObservation(observations="x", observation_tokens=1, cursor=()),
                    threads=[ThreadPatch(thread_id="ghost", set=((("a",), 1),))],
                )
            )
        assert await store.get_record(snap.record.key) == snap.record
