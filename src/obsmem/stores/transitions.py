"""The state transitions of an observational-memory record, as pure functions.

Each function takes the head record as read inside the store's transaction and returns what to
write, or raises. Stores call these and only persist the result, so every store enforces the same
invariants (ARCHITECTURE.md, "Invariants"):

- the cursor never moves backwards;
- buffered chunks continue right after the cursor (no gap, no overlap);
- a chunk is never stranded: chunks belong to the key and carry across generations;
- a transition only applies to the head at the version the caller read.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from ..errors import ConflictError, StoreError
from ..messages import Message
from ..records import BufferedChunk, BufferedReflection, OMRecord, Scope, Thread

__all__ = [
    "activate",
    "add_chunk",
    "check_current",
    "check_message_thread",
    "check_thread_owner",
    "commit_observation",
    "initial_record",
    "new_record_id",
    "reflect",
    "set_buffered_reflection",
    "update_counters",
]


def new_record_id() -> str:
    return f"om-{uuid.uuid4().hex}"


def initial_record(
    key: str, *, scope: Scope, thread_id: str | None, resource_id: str | None, now: datetime
) -> OMRecord:
    return OMRecord(
        id=new_record_id(),
        key=key,
        scope=scope,
        thread_id=thread_id if scope == "thread" else None,
        resource_id=resource_id,
        created_at=now,
        updated_at=now,
    )


def check_current(record: OMRecord | None, record_id: str, expected_version: int) -> OMRecord:
    """The record if it is the head at ``expected_version``; ConflictError otherwise."""
    if record is None:
        raise ConflictError(f"record {record_id} no longer exists (memory was cleared)")
    if record.superseded_by is not None:
        raise ConflictError(
            f"record {record_id} was retired by a reflection (new head {record.superseded_by})",
            expected_version=expected_version,
            actual_version=record.version,
        )
    if record.version != expected_version:
        raise ConflictError(
            f"record {record_id} is at version {record.version}, not {expected_version}: "
            "another worker changed it; re-read and decide again",
            expected_version=expected_version,
            actual_version=record.version,
        )
    return record


def _bump(record: OMRecord, now: datetime, **changes: object) -> OMRecord:
    return replace(record, version=record.version + 1, updated_at=now, **changes)  # type: ignore[arg-type]


def _check_thread(record: OMRecord, thread_id: str) -> None:
    if record.scope == "thread" and thread_id != record.thread_id:
        raise StoreError(f"record {record.key} covers thread {record.thread_id}, not {thread_id}")


def _check_exists(thread_id: str, last_seq: int, message_counts: Mapping[str, int]) -> None:
    have = message_counts.get(thread_id, 0)
    if last_seq > have:
        raise StoreError(
            f"thread {thread_id} has {have} messages; cannot cover messages up to seq {last_seq}"
        )


def add_chunk(
    record: OMRecord,
    chunk: BufferedChunk,
    *,
    message_counts: Mapping[str, int],
    last_buffered_at_tokens: int | None,
    now: datetime,
) -> OMRecord:
    if any(c.cycle_id == chunk.cycle_id for c in record.chunks):
        raise ConflictError(f"a chunk of cycle {chunk.cycle_id} is already buffered")
    if not chunk.ranges:
        raise StoreError("a buffered chunk must cover at least one message")
    seen: set[str] = set()
    for r in chunk.ranges:
        _check_thread(record, r.thread_id)
        if r.thread_id in seen:
            raise StoreError(f"chunk {chunk.id} names thread {r.thread_id} twice")
        seen.add(r.thread_id)
        expected_first = record.covered_through(r.thread_id) + 1
        if r.first_seq != expected_first:
            raise ConflictError(
                f"chunk {chunk.id} starts at seq {r.first_seq} of thread {r.thread_id}, but the "
                f"next unbuffered message is seq {expected_first}"
            )
        _check_exists(r.thread_id, r.last_seq, message_counts)
    return _bump(
        record,
        now,
        chunks=(*record.chunks, chunk),
        last_buffered_at_tokens=(
            record.last_buffered_at_tokens
            if last_buffered_at_tokens is None
            else last_buffered_at_tokens
        ),
    )


def activate(
    record: OMRecord,
    count: int,
    *,
    observations: str,
    observation_tokens: int,
    now: datetime,
) -> OMRecord:
    if count < 1 or count > len(record.chunks):
        raise StoreError(f"cannot activate {count} of {len(record.chunks)} buffered chunks")
    activated, remaining = record.chunks[:count], record.chunks[count:]
    cursor = dict(record.cursor)
    for chunk in activated:
        for r in chunk.ranges:
            cursor[r.thread_id] = max(cursor.get(r.thread_id, 0), r.last_seq)
    removed = sum(c.message_tokens for c in activated)
    return _bump(
        record,
        now,
        observations=observations,
        observation_tokens=observation_tokens,
        cursor=cursor,
        chunks=remaining,
        pending_message_tokens=max(0, record.pending_message_tokens - removed),
        total_tokens_observed=record.total_tokens_observed + removed,
    )


def commit_observation(
    record: OMRecord,
    *,
    observations: str,
    observation_tokens: int,
    cursor: Mapping[str, int],
    message_counts: Mapping[str, int],
    pending_message_tokens: int | None,
    observed_tokens: int,
    now: datetime,
    expected_cursor: Mapping[str, int] | None = None,
) -> OMRecord:
    if expected_cursor is not None:
        for thread_id in {*expected_cursor, *cursor}:
            seq = expected_cursor.get(thread_id, 0)
            actual = record.cursor.get(thread_id, 0)
            if actual != seq:
                raise ConflictError(
                    f"thread {thread_id} was observed through seq {actual} meanwhile, not "
                    f"{seq}; this observation is stale"
                )
    new_cursor = dict(record.cursor)
    for thread_id, seq in cursor.items():
        _check_thread(record, thread_id)
        old = record.cursor.get(thread_id, 0)
        if seq < old:
            raise StoreError(
                f"the cursor of thread {thread_id} would move backwards ({old} -> {seq})"
            )
        _check_exists(thread_id, seq, message_counts)
        new_cursor[thread_id] = seq
    kept: list[BufferedChunk] = []
    for chunk in record.chunks:
        covered = [r for r in chunk.ranges if r.last_seq <= new_cursor.get(r.thread_id, 0)]
        if len(covered) == len(chunk.ranges):
            continue  # the observation made this chunk redundant
        for r in chunk.ranges:
            if r.first_seq <= new_cursor.get(r.thread_id, 0) < r.last_seq or covered:
                raise StoreError(
                    f"the observation would split buffered chunk {chunk.id}; activate it first "
                    "or observe through its end"
                )
        kept.append(chunk)
    # The kept chunks must still continue right after the new cursor.
    probe = replace(record, cursor=new_cursor, chunks=())
    for chunk in kept:
        for r in chunk.ranges:
            if r.first_seq != probe.covered_through(r.thread_id) + 1:
                raise StoreError(
                    f"the observation would leave a gap before buffered chunk {chunk.id}"
                )
        probe = replace(probe, chunks=(*probe.chunks, chunk))
    return _bump(
        record,
        now,
        observations=observations,
        observation_tokens=observation_tokens,
        cursor=new_cursor,
        chunks=tuple(kept),
        pending_message_tokens=(0 if pending_message_tokens is None else pending_message_tokens),
        total_tokens_observed=record.total_tokens_observed + observed_tokens,
    )


def set_buffered_reflection(
    record: OMRecord, reflection: BufferedReflection | None, *, now: datetime
) -> OMRecord:
    if reflection is not None:
        lines = record.observations.count("\n") + 1 if record.observations else 0
        if reflection.line_count > lines:
            raise StoreError(
                f"buffered reflection covers {reflection.line_count} lines; the log has {lines}"
            )
    return _bump(record, now, buffered_reflection=reflection)


def reflect(
    record: OMRecord, *, observations: str, observation_tokens: int, now: datetime
) -> tuple[OMRecord, OMRecord]:
    """Returns (the retired record, the new head). Chunks stay with the key."""
    new_id = new_record_id()
    retired = replace(record, superseded_by=new_id, updated_at=now)
    head = replace(
        record,
        id=new_id,
        generation=record.generation + 1,
        origin="reflection",
        version=record.version + 1,
        observations=observations,
        observation_tokens=observation_tokens,
        buffered_reflection=None,
        superseded_by=None,
        created_at=now,
        updated_at=now,
    )
    return retired, head


def update_counters(
    record: OMRecord,
    *,
    pending_message_tokens: int | None,
    last_buffered_at_tokens: int | None,
    now: datetime,
) -> OMRecord:
    for name, value in (
        ("pending_message_tokens", pending_message_tokens),
        ("last_buffered_at_tokens", last_buffered_at_tokens),
    ):
        if value is not None and value < 0:
            raise StoreError(f"{name} cannot be negative ({value})")
    return _bump(
        record,
        now,
        pending_message_tokens=(
            record.pending_message_tokens
            if pending_message_tokens is None
            else pending_message_tokens
        ),
        last_buffered_at_tokens=(
            record.last_buffered_at_tokens
            if last_buffered_at_tokens is None
            else last_buffered_at_tokens
        ),
    )


def check_thread_owner(thread: Thread, resource_id: str) -> None:
    if thread.resource_id != resource_id:
        raise StoreError(
            f"thread {thread.id!r} belongs to another resource; use a different thread id"
        )


def check_message_thread(message: Message, thread: Thread) -> None:
    if message.thread_id is not None and message.thread_id != thread.id:
        raise StoreError(
            f"message {message.id} names thread {message.thread_id!r} but is being appended to "
            f"{thread.id!r}"
        )
    if message.resource_id is not None and message.resource_id != thread.resource_id:
        raise StoreError(
            f"message {message.id} names resource {message.resource_id!r} but thread "
            f"{thread.id!r} belongs to another resource"
        )
