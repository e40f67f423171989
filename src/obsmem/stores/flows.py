"""The SQL stores' work, written once for SQLite and PostgreSQL, as flows.

A *flow* is a generator that yields :class:`Op` statements and receives each one's rows; it
returns the method's result. It does no I/O itself: a driver (:mod:`obsmem.stores.sqlite`,
:mod:`obsmem.stores.postgres`) runs it inside one transaction on its own connection, turning the
``?`` placeholders into its own style and adding ``FOR UPDATE`` where an op locks a row. A flow
that raises rolls its transaction back. So both SQL stores run the same statements and the same
rules (:mod:`obsmem.stores.transitions`), and the drivers hold nothing but connections.

A read flow that finds the thread or the head record missing raises :class:`NeedsWrite`; the
driver then runs it again as a write (SQLite cannot safely turn a read transaction into a write
one once another process has written).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeAlias, TypeVar

from ..errors import StoreError
from ..messages import Message
from ..records import GroupEmbedding, ObservationGroup, OMRecord, Thread
from ..snapshot import Snapshot, Subject, ThreadState, reusable
from ..vectors import top_k
from . import schema as sql
from . import transitions as tr
from .changes import Commit, CommitResult, LoadRequest, ResourcePatch, ThreadChange, ThreadPatch
from .codec import (
    chunk_from_dict,
    chunks_to_json,
    dt_from_text,
    dt_to_text,
    dumps,
    group_from_row,
    group_row,
    loads,
)
from .rows import (
    RecordCache,
    embedding_row,
    filter_embedding_rows,
    message_from_row,
    message_to_row,
    record_from_row,
    record_to_row,
    record_update_values,
    thread_from_row,
    thread_to_row,
)

__all__ = ["Flow", "NeedsWrite", "Op", "Rows"]

T = TypeVar("T")
Row: TypeAlias = tuple[Any, ...]
Rows: TypeAlias = list[Row]
IN_BATCH = 500
NO_LIMIT = 2**62
"""A LIMIT both databases read as "no limit"."""
"""Most values in one ``IN (...)`` list."""


@dataclass(frozen=True, slots=True)
class Op:
    """One statement. ``many``: ``params`` is a list of rows for executemany. ``lock``: lock the
    selected rows until the transaction ends (PostgreSQL's ``FOR UPDATE``, of the table
    ``lock_of`` in a join; SQLite's write transaction already holds the database lock)."""

    sql: str
    params: Sequence[Any] = ()
    lock: bool = False
    many: bool = False
    lock_of: str = ""


Flow: TypeAlias = Generator[Op, Rows, T]


class NeedsWrite(Exception):
    """A read flow found something to create; run it again in a write transaction."""


def _marks(n: int) -> str:
    return ", ".join("?" for _ in range(n))


def _batches(values: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(values), IN_BATCH):
        yield values[i : i + IN_BATCH]


# -- threads -----------------------------------------------------------------------------------


def get_thread(thread_id: str, *, lock: bool = False) -> Flow[Thread | None]:
    rows = yield Op(sql.SELECT_THREAD, (thread_id,), lock=lock)
    return thread_from_row(rows[0]) if rows else None


def require_thread(thread_id: str, *, lock: bool = False) -> Flow[Thread]:
    thread = yield from get_thread(thread_id, lock=lock)
    if thread is None:
        raise StoreError(f"no thread {thread_id!r}; create it with create_thread() first")
    return thread


def create_thread(
    thread_id: str,
    resource_id: str,
    *,
    now: datetime,
    title: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    lock: bool = False,
) -> Flow[Thread]:
    """Get or create; a thread that exists under another resource is a StoreError."""
    thread = tr.new_thread(thread_id, resource_id, now=now, title=title, metadata=metadata)
    yield Op(sql.INSERT_THREAD, thread_to_row(thread))
    stored = yield from require_thread(thread_id, lock=lock)
    tr.check_thread_owner(stored, resource_id)
    return stored


def list_threads(resource_id: str) -> Flow[list[Thread]]:
    rows = yield Op(sql.SELECT_THREADS_OF_RESOURCE, (resource_id,))
    return [thread_from_row(r) for r in rows]


def list_resources() -> Flow[list[str]]:
    rows = yield Op(sql.SELECT_RESOURCES)
    return [r[0] for r in rows]


def patch_thread(patch: ThreadPatch, *, now: datetime) -> Flow[ThreadChange]:
    """Merge ``patch`` into the stored thread (locked first)."""
    thread = yield from require_thread(patch.thread_id, lock=True)
    after = tr.apply_thread_patch(thread, patch, now=now)
    if after is not thread:
        yield Op(
            sql.UPDATE_THREAD,
            (after.title, dumps(dict(after.metadata)), dt_to_text(after.updated_at), after.id),
        )
    return ThreadChange(before=thread, after=after)


def get_resource(resource_id: str) -> Flow[dict[str, Any]]:
    rows = yield Op(sql.SELECT_RESOURCE, (resource_id,))
    return dict(loads(rows[0][0])) if rows else {}


def patch_resource(patch: ResourcePatch, *, now: datetime) -> Flow[dict[str, Any]]:
    """Merge ``patch`` into the resource's metadata (the row created and locked first)."""
    yield Op(sql.INSERT_RESOURCE, (patch.resource_id, dt_to_text(now)))
    rows = yield Op(sql.SELECT_RESOURCE, (patch.resource_id,), lock=True)
    merged = tr.apply_resource_patch(loads(rows[0][0]), patch)
    yield Op(sql.UPDATE_RESOURCE, (dumps(merged), dt_to_text(now), patch.resource_id))
    return merged


# -- messages ----------------------------------------------------------------------------------


def _messages_by_id(ids: Sequence[str]) -> Flow[dict[str, Message]]:
    found: dict[str, Message] = {}
    unique = list(dict.fromkeys(ids))
    for batch in _batches(unique):
        rows = yield Op(sql.SELECT_MESSAGES_BY_ID.format(marks=_marks(len(batch))), tuple(batch))
        for row in rows:
            message = message_from_row(row)
            found[message.id] = message
    return found


def append_to(thread: Thread, messages: Sequence[Message], *, now: datetime) -> Flow[tr.AppendPlan]:
    """Append to ``thread`` (read with its row locked in this transaction)."""
    existing = yield from _messages_by_id([m.id for m in messages])
    plan = tr.plan_append(thread, messages, existing)
    if plan.new:
        yield Op(sql.INSERT_MESSAGE, [message_to_row(m) for m in plan.new], many=True)
        yield Op(sql.UPDATE_THREAD_COUNT, (plan.count, dt_to_text(now), thread.id))
    return plan


def append_messages(
    thread_id: str, messages: Sequence[Message], *, now: datetime
) -> Flow[list[Message]]:
    thread = yield from require_thread(thread_id, lock=True)  # serialises seq per thread
    plan = yield from append_to(thread, messages, now=now)
    return list(plan.stored)


def list_messages(
    thread_id: str,
    *,
    after_seq: int = 0,
    through_seq: int | None = None,
    limit: int | None = None,
    newest_first: bool = False,
) -> Flow[list[Message]]:
    query = f"SELECT {sql.MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? AND seq > ?"
    params: list[Any] = [thread_id, after_seq]
    if through_seq is not None:
        query += " AND seq <= ?"
        params.append(through_seq)
    query += " ORDER BY seq DESC" if newest_first else " ORDER BY seq"
    if limit is not None:
        query += " LIMIT ?"
        params.append(limit)
    rows = yield Op(query, tuple(params))
    return [message_from_row(r) for r in rows]


def get_messages(ids: Sequence[str], *, resource_id: str) -> Flow[list[Message]]:
    found = yield from _messages_by_id(ids)
    out: list[Message] = []
    for message_id in ids:
        message = found.get(message_id)
        if message is not None and message.resource_id == resource_id:
            out.append(message)
    return out


# -- records -----------------------------------------------------------------------------------


def get_head(
    key: str, *, lock: bool = False, records: RecordCache | None = None
) -> Flow[OMRecord | None]:
    rows = yield Op(sql.SELECT_HEAD, (key,), lock=lock)
    return _record(rows[0], records) if rows else None


def get_record_by_id(
    record_id: str, *, lock: bool = False, records: RecordCache | None = None
) -> Flow[OMRecord | None]:
    rows = yield Op(sql.SELECT_RECORD, (record_id,), lock=lock)
    return _record(rows[0], records) if rows else None


def _record(row: Row, records: RecordCache | None) -> OMRecord:
    return records.parse(row) if records is not None else record_from_row(row)


def history(key: str, *, limit: int | None, offset: int) -> Flow[list[OMRecord]]:
    rows = yield Op(sql.SELECT_HISTORY, (key, NO_LIMIT if limit is None else limit, offset))
    return [record_from_row(r) for r in rows]


def _message_counts(thread_ids: Sequence[str]) -> Flow[dict[str, int]]:
    counts: dict[str, int] = {}
    unique = list(dict.fromkeys(thread_ids))
    for batch in _batches(unique):
        rows = yield Op(sql.SELECT_THREAD_COUNTS.format(marks=_marks(len(batch))), tuple(batch))
        counts.update({r[0]: int(r[1]) for r in rows})
    return counts


def _ensure_head(subject: Subject, *, now: datetime, write: bool) -> Flow[OMRecord]:
    record = yield from get_head(subject.key)
    if record is not None:
        return record
    if not write:
        raise NeedsWrite
    yield Op(sql.INSERT_RECORD, record_to_row(tr.initial_record(subject, now=now)))
    created = yield from get_head(subject.key)
    if created is None:
        raise StoreError(f"the record of {subject.key} could not be created")
    return created


def load(
    request: LoadRequest, *, now: datetime, write: bool, records: RecordCache | None = None
) -> Flow[Snapshot]:
    """The snapshot of ``request.subject``, after its appends and patches."""
    subject = request.subject
    changing = bool(request.append or request.patches or request.resource_patch)
    if changing and not write:
        raise NeedsWrite
    rows = yield Op(
        sql.SELECT_THREAD_AND_HEAD,
        (subject.key, subject.thread_id),
        lock=changing,
        lock_of="t",
    )
    width = len(sql.THREAD_COLUMNS.split(","))
    if rows:
        main = thread_from_row(rows[0][:width])
        head = _record(rows[0][width:], records) if rows[0][width] is not None else None
    else:
        if not write:
            raise NeedsWrite
        main = yield from create_thread(subject.thread_id, subject.resource_id, now=now, lock=True)
        head = None
    tr.check_thread_owner(main, subject.resource_id)
    stored: tuple[Message, ...] = ()
    if request.append:
        plan = yield from append_to(main, request.append, now=now)
        stored = plan.stored
        if plan.count != main.message_count:
            main = replace(main, message_count=plan.count, updated_at=now)
    for patch in request.patches:
        change = yield from patch_thread(patch, now=now)
        if patch.thread_id == main.id:
            main = change.after
    if request.resource_patch is not None and request.resource_patch.set:
        yield from patch_resource(request.resource_patch, now=now)
    record = head if head is not None else (yield from _ensure_head(subject, now=now, write=write))
    return (
        yield from _read_state(
            subject,
            record,
            main,
            stored=stored,
            last_reply=request.last_reply,
            held=request.held,
            resource_metadata=request.resource_metadata,
        )
    )


def _read_state(
    subject: Subject,
    record: OMRecord,
    main: Thread,
    *,
    stored: tuple[Message, ...] = (),
    last_reply: bool = False,
    held: Mapping[str, Sequence[Message]] | None = None,
    resource_metadata: bool = True,
) -> Flow[Snapshot]:
    """Everything after the record: the covered threads with their unobserved messages (only
    those after what the caller ``held``, and what this transaction ``stored``, are read), the
    resource's metadata (when asked), and (when asked) when the assistant last spoke."""
    threads = [main]
    if subject.scope == "resource":
        rows = yield Op(sql.SELECT_THREADS_OF_RESOURCE, (subject.resource_id,))
        threads += [t for t in map(thread_from_row, rows) if t.id != main.id]
    states: list[ThreadState] = []
    for thread in threads:
        cursor = record.cursor.get(thread.id, 0)
        known = reusable((held or {}).get(thread.id, ()), cursor)
        after = (known[-1].seq or 0) if known else cursor
        if thread.id == main.id and stored:
            # What this transaction appended follows on without a read.
            fresh = [m for m in stored if (m.seq or 0) > after]
            if fresh and fresh[0].seq == after + 1:
                known = (*known, *reusable(fresh, after))
                after = (known[-1].seq or 0) if known else cursor
        if after > thread.message_count:
            known, after = (), cursor  # held from some other store: read everything
        new: tuple[Message, ...] = ()
        if after < thread.message_count:
            rows = yield Op(sql.SELECT_MESSAGES_AFTER, (thread.id, after))
            new = tuple(message_from_row(r) for r in rows)
        states.append(ThreadState(thread=thread, unobserved=(*known, *new)))
    resource = (yield from get_resource(subject.resource_id)) if resource_metadata else {}
    last_reply_at: datetime | None = None
    if last_reply:
        rows = yield Op(sql.SELECT_LAST_REPLY, (main.id,))
        last_reply_at = dt_from_text(rows[0][0]) if rows else None
    return Snapshot(
        subject=subject.covering(tuple(t.id for t in threads)),
        record=record,
        threads=tuple(states),
        resource_metadata=resource,
        stored=stored,
        last_reply_at=last_reply_at,
    )


def commit(
    change: Commit, *, now: datetime, records: RecordCache | None = None
) -> Flow[CommitResult]:
    """Apply one change of the head of ``change.key`` and what comes with it, all or nothing."""
    record = yield from get_record_by_id(change.record_id, lock=True, records=records)
    head = record
    if record is None or record.superseded_by is not None:
        head = yield from get_head(change.key, records=records)
    current = tr.check_current(record, change.record_id, change.expected_version, head=head)
    counts = yield from _message_counts(tr.threads_counted(change.change))
    applied = tr.apply_change(current, change.change, message_counts=counts, now=now)
    yield Op(sql.UPDATE_RECORD, record_update_values(applied.saved))
    if applied.created is not None:
        yield Op(sql.INSERT_RECORD, record_to_row(applied.created))
    if change.groups:
        yield Op(sql.INSERT_GROUP, [group_row(g) for g in change.groups], many=True)
    threads: list[ThreadChange] = []
    for patch in change.threads:
        if not patch.empty:
            threads.append((yield from patch_thread(patch, now=now)))
    if change.resource is not None and change.resource.set:
        yield from patch_resource(change.resource, now=now)
    snapshot: Snapshot | None = None
    if change.reload is not None:
        main = yield from require_thread(change.reload.thread_id)
        snapshot = yield from _read_state(
            change.reload,
            applied.head,
            main,
            held=change.held,
            resource_metadata=change.resource_metadata,
        )
    return CommitResult(record=applied.head, threads=tuple(threads), snapshot=snapshot)


def clear(key: str, *, pgvector: bool) -> Flow[None]:
    yield Op(sql.DELETE_RECORDS, (key,))
    yield Op(sql.DELETE_GROUPS, (key,))
    if pgvector:
        yield Op(sql.DELETE_VECTORS, (key,))
    yield Op(sql.DELETE_EMBEDDINGS, (key,))


# -- observation groups and embeddings ---------------------------------------------------------


def put_embeddings(embeddings: Sequence[GroupEmbedding], *, pgvector: bool) -> Flow[None]:
    yield Op(sql.INSERT_EMBEDDING, [embedding_row(e) for e in embeddings], many=True)
    if pgvector:
        yield Op(
            sql.UPSERT_VECTOR,
            [(e.group_id, vector_literal(e.vector)) for e in embeddings],
            many=True,
        )


def vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{float(v):.7g}" for v in vector) + "]"


def search_embeddings(
    resource_id: str,
    vector: Sequence[float],
    *,
    model: str,
    thread_id: str | None,
    after: datetime | None,
    before: datetime | None,
    limit: int,
    pgvector: bool,
) -> Flow[list[tuple[ObservationGroup, float]]]:
    if pgvector:
        literal = vector_literal(vector)
        query = sql.SEARCH_VECTORS
        params: list[Any] = [literal, resource_id, model, len(vector)]
        if thread_id is not None:
            query += " AND e.thread_id = ?"
            params.append(thread_id)
        if after is not None:
            query += " AND e.observed_at >= ?"
            params.append(dt_to_text(after))
        if before is not None:
            query += " AND e.observed_at <= ?"
            params.append(dt_to_text(before))
        query += " ORDER BY v.embedding <=> ?::vector LIMIT ?"
        params += [literal, limit]
        rows = yield Op(query, tuple(params))
        best = [(str(r[0]), float(r[1])) for r in rows]
    else:
        rows = yield Op(sql.SELECT_EMBEDDINGS, (resource_id, model))
        candidates = filter_embedding_rows(rows, thread_id=thread_id, after=after, before=before)
        best = top_k(vector, candidates, limit)
    if not best:
        return []
    rows = yield Op(
        sql.SELECT_GROUPS_BY_ID.format(marks=_marks(len(best))),
        (resource_id, *[i for i, _ in best]),
    )
    found = {g.id: g for g in map(group_from_row, rows)}
    return [(found[i], score) for i, score in best if i in found]


def list_observation_groups(
    resource_id: str, *, thread_id: str | None
) -> Flow[list[ObservationGroup]]:
    if thread_id is None:
        rows = yield Op(sql.SELECT_GROUPS, (resource_id,))
    else:
        rows = yield Op(sql.SELECT_GROUPS_OF_THREAD, (resource_id, thread_id))
    return [group_from_row(r) for r in rows]


# -- migrations --------------------------------------------------------------------------------


def migrate(version: int) -> Flow[int]:
    """Apply every migration after ``version``; returns the new version. The driver reads and
    records the version (its own way) in the same transaction."""
    for number, script in enumerate(sql.MIGRATION_SCRIPTS[version:], start=version + 1):
        step = sql.DATA_STEPS.get(number)
        if step is not None:
            yield from _DATA_STEPS[step]()
        for statement in sql.statements(script):
            yield Op(statement)
    return len(sql.MIGRATION_SCRIPTS)


def migration_4() -> Flow[None]:
    """Buffered chunks move from ``om_chunks`` into their head record's ``chunks`` column."""
    yield Op(sql.ADD_CHUNKS_COLUMN)
    rows = yield Op(sql.SELECT_OLD_CHUNKS)
    by_key: dict[str, list[Any]] = {}
    for key, data in rows:
        by_key.setdefault(key, []).append(loads(data))
    for key, raw in by_key.items():
        chunks = tuple(chunk_from_dict(c) for c in raw)
        yield Op(sql.SET_HEAD_CHUNKS, (chunks_to_json(chunks), key))


_DATA_STEPS = {"migration_4": migration_4}
