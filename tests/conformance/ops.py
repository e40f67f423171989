"""Short spellings of the store's load and commit for the conformance tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from obsmem.records import BufferedChunk, BufferedReflection, ObservationGroup, OMRecord, Scope
from obsmem.snapshot import Snapshot, Subject
from obsmem.stores import (
    ActivateChunks,
    AddChunk,
    Change,
    Commit,
    CommitObservation,
    LoadRequest,
    SetBufferedReflection,
    StartGeneration,
    Store,
)


def subject(thread: str = "t1", resource: str = "r1", scope: Scope = "thread") -> Subject:
    return Subject(scope=scope, thread_id=thread, resource_id=resource)


async def load(
    store: Store, thread: str = "t1", resource: str = "r1", scope: Scope = "thread"
) -> Snapshot:
    return await store.load(LoadRequest(subject=subject(thread, resource, scope)))


async def open_record(
    store: Store, thread: str = "t1", resource: str = "r1", scope: Scope = "thread"
) -> OMRecord:
    """The head record (created when missing), through a load."""
    return (await load(store, thread, resource, scope)).record


async def apply(
    store: Store,
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
    store: Store,
    record: OMRecord,
    chunk: BufferedChunk,
    *,
    groups: Sequence[ObservationGroup] = (),
) -> OMRecord:
    return await apply(store, record, AddChunk(chunk=chunk), groups=groups)


async def activate(
    store: Store, record: OMRecord, count: int, *, observations: str, observation_tokens: int
) -> OMRecord:
    change = ActivateChunks(
        count=count, observations=observations, observation_tokens=observation_tokens
    )
    return await apply(store, record, change)


async def observe(
    store: Store,
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
    store: Store, record: OMRecord, reflection: BufferedReflection | None
) -> OMRecord:
    return await apply(store, record, SetBufferedReflection(reflection=reflection))


async def new_generation(
    store: Store, record: OMRecord, *, observations: str, observation_tokens: int
) -> OMRecord:
    change = StartGeneration(observations=observations, observation_tokens=observation_tokens)
    return await apply(store, record, change)
