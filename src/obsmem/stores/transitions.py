"""Every state change a store makes, as pure functions.

Each function takes the state as read inside the store's transaction and returns what to write,
or raises. Stores load, call these, and persist the result, so every store enforces the same
rules (ARCHITECTURE.md, "Invariants"):

- the cursor never moves backwards;
- buffered chunks continue right after the cursor (no gap, no overlap);
- a chunk is never stranded: chunks belong to the key and carry across generations;
- a change only applies to the head at the version the caller read;
- metadata patches merge into what is stored, never into a stale copy;
- messages are numbered from the thread's count, an id is stored once.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, cast

from ..errors import ConflictError, StoreError
from ..messages import Message, display_text
from ..records import (
    CYCLE_KINDS,
    CYCLE_OUTCOMES,
    BufferedChunk,
    BufferedReflection,
    CycleRecord,
    OMRecord,
    Thread,
)
from ..snapshot import Subject
from .changes import (
    ActivateChunks,
    AddChunk,
    Change,
    CommitObservation,
    MetadataPath,
    ResourcePatch,
    SetBufferedReflection,
    StartGeneration,
    ThreadCopy,
    ThreadPatch,
)

__all__ = [
    "AppendPlan",
    "Applied",
    "activate",
    "add_chunk",
    "apply_change",
    "apply_resource_patch",
    "apply_thread_patch",
    "check_copy",
    "check_current",
    "check_cycle_query",
    "check_incarnations",
    "check_thread_owner",
    "commit_observation",
    "cycle_matches",
    "initial_record",
    "kept_cycles",
    "new_record_id",
    "new_thread",
    "plan_append",
    "reflect",
    "set_buffered_reflection",
    "set_path",
]

MIN_TITLE_LENGTH = 3
TITLE_PINNED = "title_pinned"


def new_record_id() -> str:
    return f"om-{uuid.uuid4().hex}"


def initial_record(subject: Subject, *, now: datetime) -> OMRecord:
    """Generation 0 of the subject's log: empty, nothing covered."""
    return OMRecord(
        id=new_record_id(),
        key=subject.key,
        scope=subject.scope,
        thread_id=subject.thread_id if subject.scope == "thread" else None,
        resource_id=subject.resource_id,
        created_at=now,
        updated_at=now,
    )


def new_thread(
    thread_id: str,
    resource_id: str,
    *,
    now: datetime,
    title: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Thread:
    return Thread(
        id=thread_id,
        resource_id=resource_id,
        title=display_text(title),
        metadata=dict(metadata or {}),
        created_at=now,
        updated_at=now,
        incarnation=uuid.uuid4().hex,
    )


def check_incarnations(expected: Sequence[tuple[str, str]], stored: Mapping[str, str]) -> None:
    """A ConflictError without a current head (the work is dropped) when a thread the work
    read is gone or was created again since (``stored``: incarnation by thread id)."""
    for thread_id, incarnation in expected:
        if stored.get(thread_id) != incarnation:
            raise ConflictError(
                f"thread {thread_id!r} was deleted while work begun on it was under way; "
                "that work stores nothing",
                current=None,
            )


def check_copy(thread_id: str, thread: Thread | None, expected: ThreadCopy | None) -> None:
    """A ConflictError without a current head (nothing is stored) when the caller's copy of
    the thread (``LoadRequest.expect``) is not the thread as found, before anything is stored,
    in the same transaction."""
    if expected is None or expected.matches(thread):
        return
    if thread is None:
        found = "is gone"
    elif not expected.incarnation:
        found = "was created since"
    elif thread.incarnation != expected.incarnation:
        found = "was deleted and created again"
    elif thread.message_count != expected.message_count:
        found = f"holds {thread.message_count} messages, not {expected.message_count}"
    else:
        keys = [k for k, v in expected.metadata.items() if thread.metadata.get(k) != v]
        found = f"has other values of {', '.join(keys)}"
    raise ConflictError(
        f"thread {thread_id!r} changed since the caller last read it: it {found}; nothing was "
        "stored (read the thread again)",
        current=None,
    )


def check_current(
    record: OMRecord | None, record_id: str, expected_version: int, *, head: OMRecord | None
) -> OMRecord:
    """``record`` if it is the head at ``expected_version``; otherwise a ConflictError that
    carries ``head`` (the key's head as found in the same transaction)."""
    if record is None:
        raise ConflictError(
            f"record {record_id} no longer exists (memory was cleared)", current=head
        )
    if record.superseded_by is not None:
        raise ConflictError(
            f"record {record_id} was retired by a reflection (new head {record.superseded_by})",
            expected_version=expected_version,
            actual_version=record.version,
            current=head,
        )
    if record.version != expected_version:
        raise ConflictError(
            f"record {record_id} is at version {record.version}, not {expected_version}: "
            "another worker changed it; decide again from the current head",
            expected_version=expected_version,
            actual_version=record.version,
            current=record,
        )
    return record


# -- record changes ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """What a change writes: the changed row, and the new head row when a generation starts."""

    saved: OMRecord
    created: OMRecord | None = None

    @property
    def head(self) -> OMRecord:
        return self.created if self.created is not None else self.saved


def apply_change(
    record: OMRecord, change: Change, *, message_counts: Mapping[str, int], now: datetime
) -> Applied:
    """Apply one change to the current head (already checked with :func:`check_current`)."""
    match change:
        case AddChunk(chunk=chunk):
            return Applied(saved=add_chunk(record, chunk, message_counts=message_counts, now=now))
        case ActivateChunks(count=count, observations=text, observation_tokens=tokens):
            return Applied(
                saved=activate(record, count, observations=text, observation_tokens=tokens, now=now)
            )
        case CommitObservation():
            return Applied(
                saved=commit_observation(
                    record,
                    observations=change.observations,
                    observation_tokens=change.observation_tokens,
                    cursor=dict(change.cursor),
                    expected_cursor=(
                        None if change.expected_cursor is None else dict(change.expected_cursor)
                    ),
                    observed_tokens=change.observed_tokens,
                    message_counts=message_counts,
                    now=now,
                )
            )
        case SetBufferedReflection(reflection=reflection):
            return Applied(saved=set_buffered_reflection(record, reflection, now=now))
        case StartGeneration(observations=text, observation_tokens=tokens):
            retired, head = reflect(
                record,
                observations=text,
                observation_tokens=tokens,
                now=now,
                origin=change.origin,
                chunks=change.chunks,
            )
            return Applied(saved=retired, created=head)


def threads_counted(change: Change) -> list[str]:
    """The threads whose message counts a change is checked against."""
    match change:
        case AddChunk(chunk=chunk):
            return [r.thread_id for r in chunk.ranges]
        case CommitObservation(cursor=cursor):
            return [t for t, _ in cursor]
        case _:
            return []


def _bump(record: OMRecord, now: datetime, **changes: Any) -> OMRecord:
    return replace(record, version=record.version + 1, updated_at=now, **changes)


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
    now: datetime,
) -> OMRecord:
    if any(c.cycle_id == chunk.cycle_id for c in record.chunks):
        raise ConflictError(
            f"a chunk of cycle {chunk.cycle_id} is already buffered", current=record
        )
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
                f"next unbuffered message is seq {expected_first}",
                current=record,
            )
        _check_exists(r.thread_id, r.last_seq, message_counts)
    return _bump(record, now, chunks=(*record.chunks, chunk))


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
        total_tokens_observed=record.total_tokens_observed + removed,
    )


def commit_observation(
    record: OMRecord,
    *,
    observations: str,
    observation_tokens: int,
    cursor: Mapping[str, int],
    message_counts: Mapping[str, int],
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
                    f"{seq}; this observation is stale",
                    current=record,
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
    record: OMRecord,
    *,
    observations: str,
    observation_tokens: int,
    now: datetime,
    origin: Literal["reflection", "revision"] = "reflection",
    chunks: tuple[BufferedChunk, ...] | None = None,
) -> tuple[OMRecord, OMRecord]:
    """Returns (the retired record, the new head). The pending chunks move to the new head in
    the same write: chunks belong to the key, never to a retired generation. ``chunks`` (a
    revision) replaces their text only: the same chunks must come back, covering the same
    messages."""
    if chunks is not None and [(c.id, c.ranges) for c in chunks] != [
        (c.id, c.ranges) for c in record.chunks
    ]:
        raise StoreError(
            f"a new generation of {record.key} must keep its buffered chunks (the same ids and "
            "ranges, in order); only their text may change"
        )
    new_id = new_record_id()
    retired = replace(record, superseded_by=new_id, chunks=(), updated_at=now)
    head = replace(
        record,
        id=new_id,
        generation=record.generation + 1,
        origin=origin,
        chunks=record.chunks if chunks is None else chunks,
        version=record.version + 1,
        observations=observations,
        observation_tokens=observation_tokens,
        buffered_reflection=None,
        superseded_by=None,
        created_at=now,
        updated_at=now,
    )
    return retired, head


# -- metadata ----------------------------------------------------------------------------------


def set_path(metadata: Mapping[str, Any], path: MetadataPath, value: Any) -> dict[str, Any]:
    """A copy of ``metadata`` with ``value`` at ``path`` (objects created along the way; what
    sits beside the path is kept; a non-object in the way is replaced by an object)."""
    if not path:
        raise StoreError("a metadata path needs at least one key")
    out = dict(metadata)
    node = out
    for key in path[:-1]:
        child = node.get(key)
        copied: dict[str, Any] = (
            dict(cast(Mapping[str, Any], child)) if isinstance(child, Mapping) else {}
        )
        node[key] = copied
        node = copied
    node[path[-1]] = copy.deepcopy(value)
    return out


def apply_thread_patch(thread: Thread, patch: ThreadPatch, *, now: datetime) -> Thread:
    """The thread after ``patch``, merged into its stored state."""
    metadata: Mapping[str, Any] = thread.metadata
    for path, value in patch.set:
        metadata = set_path(metadata, path, value)
    title = thread.title
    if patch.title is not None:
        title = display_text(patch.title)
    elif patch.suggested_title is not None:
        suggested = display_text(patch.suggested_title.strip()) or ""
        if (
            len(suggested) >= MIN_TITLE_LENGTH
            and suggested != thread.title
            and not metadata.get(TITLE_PINNED)
        ):
            title = suggested
    if title == thread.title and metadata == thread.metadata:
        return thread
    return replace(thread, title=title, metadata=dict(metadata), updated_at=now)


def apply_resource_patch(metadata: Mapping[str, Any], patch: ResourcePatch) -> dict[str, Any]:
    out = dict(metadata)
    for path, value in patch.set:
        out = set_path(out, path, value)
    return out


# -- threads and messages ----------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendPlan:
    """What appending a batch does: every message as stored (input order), the new rows, and
    the thread's new message count."""

    stored: tuple[Message, ...]
    new: tuple[Message, ...]
    count: int


def plan_append(
    thread: Thread, messages: Sequence[Message], existing: Mapping[str, Message]
) -> AppendPlan:
    """Number new messages from the thread's count. ``existing`` holds the already-stored
    messages with any of the batch's ids; one stored in another thread is an error."""
    count = thread.message_count
    stored: list[Message] = []
    new: dict[str, Message] = {}
    for message in messages:
        check_message_thread(message, thread)
        found = new.get(message.id) or existing.get(message.id)
        if found is not None:
            if found.thread_id != thread.id:
                raise StoreError(f"message id {message.id} is already stored in another thread")
            stored.append(found)
            continue
        count += 1
        msg = replace(message, thread_id=thread.id, resource_id=thread.resource_id, seq=count)
        new[msg.id] = msg
        stored.append(msg)
    return AppendPlan(stored=tuple(stored), new=tuple(new.values()), count=count)


# -- the cycle ledger --------------------------------------------------------------------------


def kept_cycles(cycles: Sequence[CycleRecord], keep: int) -> list[CycleRecord]:
    """The ledger rows of one key kept after a write: the ``keep`` newest by start time, and
    any that started at the same instant as the last of them (``schema.PRUNE_CYCLES``); none
    when ``keep`` is 0."""
    if keep <= 0:
        return []
    if len(cycles) <= keep:
        return list(cycles)
    edge = sorted((c.started_at for c in cycles), reverse=True)[keep - 1]
    return [c for c in cycles if c.started_at >= edge]


def kept_detail(cycles: Sequence[CycleRecord], keep: int) -> list[CycleRecord]:
    """The rows of one key with the detail of the ``keep`` newest kept, as
    ``schema.PRUNE_CYCLE_DETAIL`` keeps it (0: none)."""
    newest = kept_cycles(cycles, keep)
    kept = {c.cycle_id for c in newest}
    return [c if c.cycle_id in kept or not c.detail else replace(c, detail=()) for c in cycles]


def check_cycle_query(kinds: Sequence[str], outcomes: Sequence[str], limit: int) -> None:
    """A ``list_cycles`` query names known kinds and outcomes and a positive limit."""
    for name, given, known in (
        ("kind", kinds, CYCLE_KINDS),
        ("outcome", outcomes, CYCLE_OUTCOMES),
    ):
        unknown = [v for v in given if v not in known]
        if unknown:
            raise StoreError(
                f"unknown cycle {name} {', '.join(map(repr, unknown))}; "
                f"use one of {', '.join(known)}"
            )
    if limit < 1:
        raise StoreError(f"list_cycles needs a limit of at least 1 (got {limit})")


def cycle_matches(
    cycle: CycleRecord,
    *,
    thread_id: str | None,
    kinds: Sequence[str],
    outcomes: Sequence[str],
    before: datetime | None,
) -> bool:
    """Whether a ledger row passes a ``list_cycles`` query's filters."""
    return (
        (thread_id is None or thread_id in cycle.thread_ids)
        and (not kinds or cycle.kind in kinds)
        and (not outcomes or cycle.outcome in outcomes)
        and (before is None or cycle.started_at < before)
    )


def cycle_order(cycle: CycleRecord) -> tuple[datetime, str]:
    """Sort key of the ledger (used newest first)."""
    return (cycle.started_at, cycle.cycle_id)
