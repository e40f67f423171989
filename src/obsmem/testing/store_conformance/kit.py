"""What the contract's tests share: short spellings of load and commit, the record invariants,
and :func:`needs`, which skips a capability's tests on a store without it.

Usable in a store's own tests too: ``from obsmem.testing.store_conformance.kit import load``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from obsmem.messages import Message, TextPart, utcnow
from obsmem.records import (
    BufferedChunk,
    BufferedReflection,
    MessageRange,
    ObservationGroup,
    OMRecord,
    Scope,
    record_key,
)
from obsmem.snapshot import Snapshot, Subject
from obsmem.stores import (
    ActivateChunks,
    AddChunk,
    Change,
    Commit,
    CommitObservation,
    CoreStore,
    LoadRequest,
    SetBufferedReflection,
    StartGeneration,
)
from obsmem.stores.base import C, missing_methods


def needs(store: object, capability: type[C]) -> C:
    """``store`` as ``capability``; the test is skipped, naming the capability and the methods
    the store lacks, when it does not offer it."""
    if not isinstance(store, capability):
        missing = ", ".join(missing_methods(store, capability))
        pytest.skip(f"the store does not offer {capability.__name__} (no {missing})")
    return store


def offers(store: object, capability: type) -> bool:
    """Whether ``store`` offers ``capability``: a contract checks what it touches of the
    others (the ledger's rows after a delete, say) only where they are offered."""
    return isinstance(store, capability)


def subject(thread: str = "t1", resource: str = "r1", scope: Scope = "thread") -> Subject:
    return Subject(scope=scope, thread_id=thread, resource_id=resource)


async def load(
    store: CoreStore, thread: str = "t1", resource: str = "r1", scope: Scope = "thread"
) -> Snapshot:
    return await store.load(LoadRequest(subject=subject(thread, resource, scope)))


async def open_record(
    store: CoreStore, thread: str = "t1", resource: str = "r1", scope: Scope = "thread"
) -> OMRecord:
    """The head record (created when missing), through a load."""
    return (await load(store, thread, resource, scope)).record


async def apply(
    store: CoreStore,
    record: OMRecord,
    change: Change,
    *,
    groups: Sequence[ObservationGroup] = (),
) -> OMRecord:
    result = await store.commit(
        Commit(
            key=record.key,
            record_id=record.id,
            expected_version=record.version,
            change=change,
            groups=groups,
        )
    )
    return result.record


async def add_chunk(
    store: CoreStore,
    record: OMRecord,
    chunk: BufferedChunk,
    *,
    groups: Sequence[ObservationGroup] = (),
) -> OMRecord:
    return await apply(store, record, AddChunk(chunk=chunk), groups=groups)


async def activate(
    store: CoreStore, record: OMRecord, count: int, *, observations: str, observation_tokens: int
) -> OMRecord:
    change = ActivateChunks(
        count=count, observations=observations, observation_tokens=observation_tokens
    )
    return await apply(store, record, change)


async def observe(
    store: CoreStore,
    record: OMRecord,
    *,
    observations: str,
    observation_tokens: int,
    cursor: Mapping[str, int],
    expected_cursor: Mapping[str, int] | None = None,
    observed_tokens: int = 0,
    groups: Sequence[ObservationGroup] = (),
) -> OMRecord:
    change = CommitObservation(
        observations=observations,
        observation_tokens=observation_tokens,
        cursor=tuple(cursor.items()),
        expected_cursor=None if expected_cursor is None else tuple(expected_cursor.items()),
        observed_tokens=observed_tokens,
    )
    return await apply(store, record, change, groups=groups)


async def set_reflection(
    store: CoreStore, record: OMRecord, reflection: BufferedReflection | None
) -> OMRecord:
    return await apply(store, record, SetBufferedReflection(reflection=reflection))


async def new_generation(
    store: CoreStore, record: OMRecord, *, observations: str, observation_tokens: int
) -> OMRecord:
    change = StartGeneration(observations=observations, observation_tokens=observation_tokens)
    return await apply(store, record, change)


async def assert_record_invariants(store: CoreStore, key: str) -> None:
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


async def append(
    store: CoreStore, thread: str, messages: Sequence[Message], *, resource: str | None = None
) -> list[Message]:
    """Store ``messages`` at the end of ``thread`` the way a turn does, through a load (its
    resource, when not given: the thread's own, or ``r1`` for a new thread)."""
    if resource is None:
        found = await store.get_thread(thread)
        resource = found.resource_id if found is not None else "r1"
    return list(
        (await store.load(LoadRequest(subject=subject(thread, resource), append=messages))).stored
    )


T0 = datetime(2025, 12, 4, 14, 30, tzinfo=UTC)
"""When the suite's messages were said (one a minute from here)."""


def numbered_message(i: int, role: str = "user") -> Message:
    """Message ``m{i}``, said ``i`` minutes after :data:`T0`."""
    return Message(
        id=f"m{i}",
        role=role,  # type: ignore[arg-type]
        parts=(TextPart(text=f"message {i}"),),
        created_at=T0 + timedelta(minutes=i),
    )


def numbered_chunk(n: int, thread: str, first: int, last: int, tokens: int = 100) -> BufferedChunk:
    """Buffered chunk ``chunk-{n}`` covering seqs ``first..last`` of ``thread``."""
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


def resource_chunk(*ranges: tuple[str, int, int]) -> BufferedChunk:
    """Buffered chunk ``c1`` covering each ``(thread, first seq, last seq)``: one chunk of a
    resource-scope log, spanning threads."""
    return BufferedChunk(
        id="c1",
        cycle_id="cy1",
        observations="x",
        token_count=1,
        message_tokens=10,
        ranges=tuple(MessageRange(thread_id=t, first_seq=a, last_seq=b) for t, a, b in ranges),
        created_at=utcnow(),
    )


def observation_group(
    key: str,
    group_id: str = "g1",
    *,
    thread: str = "t1",
    observations: str = "* 🔴 fact",
    messages: tuple[str, str] = ("m1", "m2"),
    cycle_id: str = "cycle-1",
    created_at: datetime | None = None,
) -> ObservationGroup:
    """Group ``group_id`` of ``key`` in resource ``r1``, observed from ``messages`` (seqs 1..2)
    of ``thread`` (now, unless ``created_at`` is given)."""
    return ObservationGroup(
        id=group_id,
        key=key,
        resource_id="r1",
        thread_id=thread,
        cycle_id=cycle_id,
        start_id=messages[0],
        end_id=messages[1],
        observations=observations,
        ranges=(MessageRange(thread_id=thread, first_seq=1, last_seq=2),),
        created_at=created_at or utcnow(),
    )


async def thread_with_messages(
    store: CoreStore, n: int, thread: str = "t1", resource: str = "r1"
) -> tuple[str, OMRecord]:
    """A thread holding messages ``m1..m{n}``: its log key and head record."""
    await store.create_thread(thread, resource)
    await append(store, thread, [numbered_message(i) for i in range(1, n + 1)])
    key = record_key("thread", thread_id=thread, resource_id=resource)
    return key, await open_record(store, thread, resource)
