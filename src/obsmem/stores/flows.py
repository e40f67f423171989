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

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeAlias, TypeVar

from ..errors import StoreError
from ..messages import Message
from ..records import CycleRecord, GroupEmbedding, ModelExchange, ObservationGroup, OMRecord, Thread
from ..vectors import top_k
from . import schema as sql
from . import transitions as tr
from .changes import ResourcePatch, ThreadChange, ThreadPatch
from .codec import chunk_from_dict, chunks_to_json, dt_to_text, dumps, loads
from .rows import (
    CYCLES,
    EMBEDDINGS,
    GROUPS,
    MESSAGES,
    RECORDS,
    THREADS,
    RecordCache,
    detail_from_text,
    filter_embedding_rows,
    thread_match,
)

__all__ = ["Batch", "Call", "Flow", "NeedsWrite", "Op", "Rows"]

T = TypeVar("T")
Row: TypeAlias = tuple[Any, ...]
Rows: TypeAlias = list[Row]
IN_BATCH = 500
"""Most values in one ``IN (...)`` list."""
NO_LIMIT = 2**62
"""A LIMIT both databases read as "no limit"."""


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
    script: bool = False
    """A whole SQL script without parameters (PostgreSQL migrations only), sent as it is."""

    def locking_sql(self) -> str:
        """The statement with its ``FOR UPDATE`` when it locks (PostgreSQL's form)."""
        if not self.lock:
            return self.sql
        return self.sql + (f" FOR UPDATE OF {self.lock_of}" if self.lock_of else " FOR UPDATE")


@dataclass(frozen=True, slots=True)
class Batch:
    """Statements that do not wait for each other's rows: the flow receives a list with each
    one's rows. A driver may send them together (PostgreSQL sends them in one network round
    trip). ``end``: the transaction ends with them (committed in the same round trip); anything
    the flow yields afterwards runs in a new transaction of the same kind."""

    ops: tuple[Op, ...]
    end: bool = False


Flow: TypeAlias = Generator[Op | Batch, Any, T]
"""Yields an :class:`Op` and receives its :data:`Rows`, or a :class:`Batch` and receives a
list of them."""


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One store call, for a driver to run in one transaction: the flow ``make(write)`` (in a
    write transaction when ``write``); when a read flow raises :class:`NeedsWrite`, the driver
    runs ``make(True)`` in a write transaction."""

    make: Callable[[bool], Flow[T]]
    write: bool
    quick: bool = False
    """A turn's load or a cycle's commit: a few indexed statements."""
    records: int = 0
    """A bulk write of that many records (an import), given time in proportion to its size."""


class NeedsWrite(Exception):
    """A read flow found something to create; run it again in a write transaction."""


def marks(n: int) -> str:
    return ", ".join("?" for _ in range(n))


def in_batches(values: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(values), IN_BATCH):
        yield values[i : i + IN_BATCH]


# -- threads -----------------------------------------------------------------------------------


def get_thread(thread_id: str, *, lock: bool = False) -> Flow[Thread | None]:
    rows = yield Op(sql.SELECT_THREAD, (thread_id,), lock=lock)
    return THREADS.parse(rows[0]) if rows else None


def require_thread(thread_id: str, *, lock: bool = False) -> Flow[Thread]:
    thread = yield from get_thread(thread_id, lock=lock)
    if thread is None:
        raise StoreError(f"no thread {thread_id!r}; create it with create_thread() first")
    return thread


def create_thread(thread: Thread, *, lock: bool = False) -> Flow[Thread]:
    """Store ``thread`` (made by ``transitions.new_thread``) unless its id is stored: then the
    stored thread (a StoreError when it belongs to another resource)."""
    yield Op(sql.INSERT_THREAD, THREADS.row(thread))
    stored = yield from require_thread(thread.id, lock=lock)
    tr.check_thread_owner(stored, thread.resource_id)
    return stored


def list_threads(resource_id: str) -> Flow[list[Thread]]:
    rows = yield Op(sql.SELECT_THREADS_OF_RESOURCE, (resource_id,))
    return [THREADS.parse(r) for r in rows]


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
    for batch in in_batches(unique):
        rows = yield Op(sql.SELECT_MESSAGES_BY_ID.format(marks=marks(len(batch))), tuple(batch))
        for row in rows:
            message = MESSAGES.parse(row)
            found[message.id] = message
    return found


def append_to(thread: Thread, messages: Sequence[Message], *, now: datetime) -> Flow[tr.AppendPlan]:
    """Append to ``thread`` (read with its row locked in this transaction)."""
    existing = yield from _messages_by_id([m.id for m in messages])
    plan = tr.plan_append(thread, messages, existing)
    if plan.new:
        yield Op(sql.INSERT_MESSAGE, [MESSAGES.row(m) for m in plan.new], many=True)
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
    return [MESSAGES.parse(r) for r in rows]


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
    return parse_record(rows[0], records) if rows else None


def get_record_by_id(
    record_id: str, *, lock: bool = False, records: RecordCache | None = None
) -> Flow[OMRecord | None]:
    rows = yield Op(sql.SELECT_RECORD, (record_id,), lock=lock)
    return parse_record(rows[0], records) if rows else None


def parse_record(row: Row, records: RecordCache | None) -> OMRecord:
    """A record row, through the store's cache of parsed long columns when it has one."""
    return records.parse(row) if records is not None else RECORDS.parse(row)


def history(key: str, *, limit: int | None, offset: int) -> Flow[list[OMRecord]]:
    rows = yield Op(sql.SELECT_HISTORY, (key, NO_LIMIT if limit is None else limit, offset))
    return [RECORDS.parse(r) for r in rows]


def clear(key: str, *, pgvector: bool) -> Flow[None]:
    yield Op(sql.DELETE_RECORDS, (key,))
    yield Op(sql.DELETE_ALL_CYCLES, (key,))
    yield Op(sql.DELETE_GROUPS, (key,))
    if pgvector:
        yield Op(sql.DELETE_VECTORS, (key,))
    yield Op(sql.DELETE_EMBEDDINGS, (key,))


# -- the cycle ledger ----------------------------------------------------------------------------


def record_cycles(cycles: Sequence[CycleRecord], *, keep: int, keep_detail: int) -> Flow[None]:
    """Store ledger rows and keep the newest ``keep`` of each of their keys, the detail of the
    newest ``keep_detail`` (in the caller's transaction: the commit or the small write they come
    with)."""
    for op in cycle_ops(cycles, keep=keep, keep_detail=keep_detail):
        _ = yield op  # (the rows are sent back: not ``yield from`` a list)


def cycle_ops(cycles: Sequence[CycleRecord], *, keep: int, keep_detail: int) -> list[Op]:
    """The statements of :func:`record_cycles` (none depends on another's rows: a commit sends
    them in its batch of writes)."""
    if not cycles:
        return []
    ops: list[Op] = []
    if keep > 0:
        ops.append(Op(sql.INSERT_CYCLE, [CYCLES.row(c) for c in cycles], many=True))
    for key in dict.fromkeys(c.key for c in cycles):
        if keep > 0:
            ops.append(Op(sql.PRUNE_CYCLES, (key, key, keep - 1)))
            if keep_detail > 0:
                ops.append(Op(sql.PRUNE_CYCLE_DETAIL, (key, key, keep_detail - 1)))
            else:
                ops.append(Op(sql.DROP_CYCLE_DETAIL, (key,)))
        else:
            ops.append(Op(sql.DELETE_ALL_CYCLES, (key,)))
    return ops


def list_cycles(
    key: str,
    *,
    thread_id: str | None,
    kinds: Sequence[str],
    outcomes: Sequence[str],
    limit: int,
    before: datetime | None,
) -> Flow[list[CycleRecord]]:
    tr.check_cycle_query(kinds, outcomes, limit)
    query = sql.SELECT_CYCLES
    params: list[Any] = [key]
    if thread_id is not None:
        query += " AND threads LIKE ?"
        params.append(f"%{thread_match(thread_id)}%")
    if kinds:
        query += f" AND kind IN ({marks(len(kinds))})"
        params += list(kinds)
    if outcomes:
        query += f" AND outcome IN ({marks(len(outcomes))})"
        params += list(outcomes)
    if before is not None:
        query += " AND started_at < ?"
        params.append(dt_to_text(before))
    query += " ORDER BY started_at DESC, cycle_id DESC LIMIT ?"
    params.append(limit)
    rows = yield Op(query, tuple(params))
    return [CYCLES.parse(r) for r in rows]


def cycle_detail(cycle_id: str) -> Flow[list[ModelExchange]]:
    rows = yield Op(sql.SELECT_CYCLE_DETAIL, (cycle_id,))
    return detail_from_text(rows[0][0]) if rows else []


# -- observation groups and embeddings ---------------------------------------------------------


def put_embeddings(embeddings: Sequence[GroupEmbedding], *, pgvector: bool) -> Flow[None]:
    """Only for groups still stored: embeddings computed after a commit find the group erased
    when its thread was deleted meanwhile, and are dropped."""
    yield Op(
        sql.INSERT_EMBEDDING, [(*EMBEDDINGS.row(e), e.group_id) for e in embeddings], many=True
    )
    if pgvector:
        yield Op(
            sql.UPSERT_VECTOR,
            [(e.group_id, vector_literal(e.vector), e.group_id) for e in embeddings],
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
        sql.SELECT_GROUPS_BY_ID.format(marks=marks(len(best))),
        (resource_id, *[i for i, _ in best]),
    )
    found = {g.id: g for g in map(GROUPS.parse, rows)}
    return [(found[i], score) for i, score in best if i in found]


def list_observation_groups(
    resource_id: str, *, thread_id: str | None
) -> Flow[list[ObservationGroup]]:
    if thread_id is None:
        rows = yield Op(sql.SELECT_GROUPS, (resource_id,))
    else:
        rows = yield Op(sql.SELECT_GROUPS_OF_THREAD, (resource_id, thread_id))
    return [GROUPS.parse(r) for r in rows]


# -- migrations --------------------------------------------------------------------------------


def migrate(version: int, *, postgres: bool = False) -> Flow[int]:
    """Apply every migration after ``version``; returns the new version. The driver reads and
    records the version (its own way) in the same transaction. ``postgres``: also run the
    PostgreSQL-only scripts (the job queue), each as one whole script."""
    for number, script in enumerate(sql.MIGRATION_SCRIPTS[version:], start=version + 1):
        step = sql.DATA_STEPS.get(number)
        if step is not None:
            yield from _DATA_STEPS[step]()
        for statement in sql.statements(script):
            yield Op(statement)
        whole = sql.postgres_script(number) if postgres else None
        if whole is not None:
            yield Op(whole, script=True)
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
