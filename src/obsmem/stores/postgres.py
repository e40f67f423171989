"""PostgresStore: the store for services with several workers.

psycopg 3 (async) with a connection pool. Every state change is one transaction that first locks
the row it changes (``SELECT ... FOR UPDATE``: the thread when appending messages, the record
for every memory transition), re-reads it, checks the version the caller read, applies the pure
transition (:mod:`obsmem.stores.transitions`) and commits. Workers share nothing but the
database: a worker that loses a race sees the new version after the lock and gets a
ConflictError. The schema and migrations are the SQLite store's (:mod:`obsmem.stores.schema`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ..errors import MissingExtraError, StoreError
from ..messages import Message, utcnow
from ..records import (
    BufferedChunk,
    BufferedReflection,
    GroupEmbedding,
    ObservationGroup,
    OMRecord,
    Scope,
    Thread,
)
from ..vectors import top_k
from . import schema as sql
from . import transitions as tr
from .codec import chunk_from_json, chunk_to_json, dt_to_text, dumps, group_from_row, group_row
from .rows import (
    embedding_row,
    filter_embedding_rows,
    message_from_row,
    message_to_row,
    record_from_row,
    record_to_row,
    record_update_values,
    thread_from_row,
)

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

__all__ = ["PostgresStore"]

T = TypeVar("T")
_MIGRATION_LOCK = 0x6F62736D656D  # "obsmem": one process migrates at a time
_UPSERT_RESOURCE = (
    "INSERT INTO resources (id, metadata, updated_at) VALUES (%s, %s, %s) "
    "ON CONFLICT (id) DO UPDATE SET "
    "metadata = (resources.metadata::jsonb || excluded.metadata::jsonb)::text, "
    "updated_at = excluded.updated_at RETURNING metadata"
)


def _q(statement: str) -> str:
    return sql.pg(statement)


class PostgresStore:
    """Threads, messages and memory state in PostgreSQL.

    ``PostgresStore("postgresql://user@host/db")``; the schema is created on first use. Needs
    ``pip install "obsmem[postgres]"``.
    """

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10) -> None:
        try:
            from psycopg_pool import AsyncConnectionPool  # needs psycopg itself
        except ImportError as exc:
            raise MissingExtraError("PostgreSQL storage", "postgres", package="psycopg") from exc
        self.dsn = dsn
        self._pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn, min_size=min_size, max_size=max_size, open=False
        )
        self._opened = False
        self._closed = False
        self.uses_pgvector = False
        """True once the store found the pgvector extension: search then ranks in SQL."""

    def __repr__(self) -> str:
        return f"PostgresStore({self.dsn.split('@')[-1]!r})"

    # -- plumbing ------------------------------------------------------------------------------

    async def _ready(self) -> AsyncConnectionPool[Any]:
        if self._closed:
            raise StoreError(f"{self!r} was closed")
        if not self._opened:
            self._opened = True
            await self._pool.open()
            async with self._pool.connection() as conn, conn.transaction():
                await _migrate(conn)
                self.uses_pgvector = await _enable_pgvector(conn)
        return self._pool

    async def _read(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        pool = await self._ready()
        try:
            async with pool.connection() as conn:
                return await fn(conn)
        except StoreError:
            raise
        except Exception as exc:
            _reraise(exc, self)

    async def _write(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        pool = await self._ready()
        try:
            async with pool.connection() as conn, conn.transaction():
                return await fn(conn)
        except StoreError:
            raise
        except Exception as exc:
            _reraise(exc, self)

    async def schema_version(self) -> int:
        async def load(conn: Any) -> int:
            row = await (await conn.execute("SELECT max(version) FROM obsmem_schema")).fetchone()
            return int(row[0] or 0)

        return await self._read(load)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._opened:
            await self._pool.close()

    # -- threads -------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self._read(lambda c: _load_thread(c, thread_id))

    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        async def create(c: Any) -> Thread:
            now = dt_to_text(utcnow())
            await c.execute(
                _q(sql.INSERT_THREAD) + " ON CONFLICT (id) DO NOTHING",
                (thread_id, resource_id, title, dumps(dict(metadata or {})), 0, now, now),
            )
            thread = await _load_thread(c, thread_id)
            assert thread is not None
            tr.check_thread_owner(thread, resource_id)
            return thread

        return await self._write(create)

    async def list_threads(self, resource_id: str) -> list[Thread]:
        async def load(c: Any) -> list[Thread]:
            cur = await c.execute(_q(sql.SELECT_THREADS_OF_RESOURCE), (resource_id,))
            return [thread_from_row(r) for r in await cur.fetchall()]

        return await self._read(load)

    async def list_resources(self) -> list[str]:
        async def load(c: Any) -> list[str]:
            cur = await c.execute(_q(sql.SELECT_RESOURCES))
            return [r[0] for r in await cur.fetchall()]

        return await self._read(load)

    async def get_resource(self, resource_id: str) -> dict[str, Any]:
        async def load(c: Any) -> dict[str, Any]:
            cur = await c.execute(_q(sql.SELECT_RESOURCE), (resource_id,))
            row = await cur.fetchone()
            return {} if row is None else dict(_loads(row[0]))

        return await self._read(load)

    async def update_resource(
        self, resource_id: str, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        async def update(c: Any) -> dict[str, Any]:
            cur = await c.execute(
                _UPSERT_RESOURCE, (resource_id, dumps(dict(metadata)), dt_to_text(utcnow()))
            )
            row = await cur.fetchone()
            return dict(_loads(row[0]))

        return await self._write(update)

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        async def update(c: Any) -> Thread:
            thread = await _require_thread(c, thread_id, lock=True)
            thread = replace(
                thread,
                title=thread.title if title is None else title,
                metadata={**thread.metadata, **(metadata or {})},
                updated_at=utcnow(),
            )
            await c.execute(
                _q(sql.UPDATE_THREAD),
                (thread.title, dumps(thread.metadata), dt_to_text(thread.updated_at), thread_id),
            )
            return thread

        return await self._write(update)

    # -- messages ------------------------------------------------------------------------------

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        async def append(c: Any) -> list[Message]:
            thread = await _require_thread(c, thread_id, lock=True)  # serialises seq per thread
            count = thread.message_count
            stored: list[Message] = []
            batch: dict[str, Message] = {}
            for message in messages:
                tr.check_message_thread(message, thread)
                existing = batch.get(message.id) or await _load_message(c, message.id)
                if existing is not None:
                    if existing.thread_id != thread_id:
                        raise StoreError(
                            f"message id {message.id} is already stored in another thread"
                        )
                    stored.append(existing)
                    continue
                count += 1
                msg = replace(
                    message, thread_id=thread_id, resource_id=thread.resource_id, seq=count
                )
                await c.execute(_q(sql.INSERT_MESSAGE), message_to_row(msg))
                batch[msg.id] = msg
                stored.append(msg)
            if count != thread.message_count:
                await c.execute(
                    _q(sql.UPDATE_THREAD_COUNT), (count, dt_to_text(utcnow()), thread_id)
                )
            return stored

        return await self._write(append)

    async def list_messages(
        self,
        thread_id: str,
        *,
        after_seq: int = 0,
        through_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Message]:
        query = f"SELECT {sql.MESSAGE_COLUMNS} FROM messages WHERE thread_id = %s AND seq > %s"
        params: list[Any] = [thread_id, after_seq]
        if through_seq is not None:
            query += " AND seq <= %s"
            params.append(through_seq)
        query += " ORDER BY seq DESC" if newest_first else " ORDER BY seq"
        if limit is not None:
            query += " LIMIT %s"
            params.append(limit)

        async def load(c: Any) -> list[Message]:
            cur = await c.execute(query, params)
            return [message_from_row(r) for r in await cur.fetchall()]

        return await self._read(load)

    async def get_messages(self, ids: Sequence[str], *, resource_id: str) -> list[Message]:
        async def load(c: Any) -> list[Message]:
            out: list[Message] = []
            for message_id in ids:
                msg = await _load_message(c, message_id)
                if msg is not None and msg.resource_id == resource_id:
                    out.append(msg)
            return out

        return await self._read(load)

    # -- records -------------------------------------------------------------------------------

    async def get_record(self, key: str) -> OMRecord | None:
        return await self._read(lambda c: _load_head(c, key))

    async def get_or_create_record(
        self, key: str, *, scope: Scope, thread_id: str | None, resource_id: str | None
    ) -> OMRecord:
        existing = await self.get_record(key)
        if existing is not None:
            return existing

        async def create(c: Any) -> OMRecord:
            record = tr.initial_record(
                key, scope=scope, thread_id=thread_id, resource_id=resource_id, now=utcnow()
            )
            await c.execute(
                _q(sql.INSERT_RECORD) + " ON CONFLICT DO NOTHING",
                record_to_row(record),
            )
            head = await _load_head(c, key)
            assert head is not None
            return head

        return await self._write(create)

    async def _transition(
        self,
        record_id: str,
        expected_version: int,
        apply: Callable[[Any, OMRecord], Awaitable[OMRecord]],
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        async def txn(c: Any) -> OMRecord:
            current = await _load_record(c, record_id, lock=True)
            record = tr.check_current(current, record_id, expected_version)
            new = await apply(c, record)
            await c.execute(_q(sql.UPDATE_RECORD), record_update_values(new))
            await _save_chunks(c, new)
            for group in groups:
                await c.execute(_q(sql.INSERT_GROUP), group_row(group))
            return new

        return await self._write(txn)

    async def add_chunk(
        self,
        record_id: str,
        expected_version: int,
        chunk: BufferedChunk,
        *,
        last_buffered_at_tokens: int | None = None,
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        async def apply(c: Any, record: OMRecord) -> OMRecord:
            return tr.add_chunk(
                record,
                chunk,
                message_counts=await _message_counts(c, [r.thread_id for r in chunk.ranges]),
                last_buffered_at_tokens=last_buffered_at_tokens,
                now=utcnow(),
            )

        return await self._transition(record_id, expected_version, apply, groups)

    async def activate_chunks(
        self,
        record_id: str,
        expected_version: int,
        count: int,
        *,
        observations: str,
        observation_tokens: int,
    ) -> OMRecord:
        async def apply(_: Any, record: OMRecord) -> OMRecord:
            return tr.activate(
                record,
                count,
                observations=observations,
                observation_tokens=observation_tokens,
                now=utcnow(),
            )

        return await self._transition(record_id, expected_version, apply)

    async def commit_observation(
        self,
        record_id: str,
        expected_version: int,
        *,
        observations: str,
        observation_tokens: int,
        cursor: Mapping[str, int],
        pending_message_tokens: int | None = None,
        observed_tokens: int = 0,
        expected_cursor: Mapping[str, int] | None = None,
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        async def apply(c: Any, record: OMRecord) -> OMRecord:
            return tr.commit_observation(
                record,
                observations=observations,
                observation_tokens=observation_tokens,
                cursor=cursor,
                message_counts=await _message_counts(c, list(cursor)),
                pending_message_tokens=pending_message_tokens,
                observed_tokens=observed_tokens,
                expected_cursor=expected_cursor,
                now=utcnow(),
            )

        return await self._transition(record_id, expected_version, apply, groups)

    async def set_buffered_reflection(
        self, record_id: str, expected_version: int, reflection: BufferedReflection | None
    ) -> OMRecord:
        async def apply(_: Any, record: OMRecord) -> OMRecord:
            return tr.set_buffered_reflection(record, reflection, now=utcnow())

        return await self._transition(record_id, expected_version, apply)

    async def start_reflection_generation(
        self,
        record_id: str,
        expected_version: int,
        *,
        observations: str,
        observation_tokens: int,
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        async def txn(c: Any) -> OMRecord:
            current = await _load_record(c, record_id, lock=True)
            record = tr.check_current(current, record_id, expected_version)
            retired, head = tr.reflect(
                record,
                observations=observations,
                observation_tokens=observation_tokens,
                now=utcnow(),
            )
            await c.execute(_q(sql.UPDATE_RECORD), record_update_values(retired))
            await c.execute(_q(sql.INSERT_RECORD), record_to_row(head))
            for group in groups:
                await c.execute(_q(sql.INSERT_GROUP), group_row(group))
            return head

        return await self._write(txn)

    async def update_counters(
        self,
        record_id: str,
        expected_version: int,
        *,
        pending_message_tokens: int | None = None,
        last_buffered_at_tokens: int | None = None,
    ) -> OMRecord:
        async def apply(_: Any, record: OMRecord) -> OMRecord:
            return tr.update_counters(
                record,
                pending_message_tokens=pending_message_tokens,
                last_buffered_at_tokens=last_buffered_at_tokens,
                now=utcnow(),
            )

        return await self._transition(record_id, expected_version, apply)

    async def history(
        self, key: str, *, limit: int | None = None, offset: int = 0
    ) -> list[OMRecord]:
        async def load(c: Any) -> list[OMRecord]:
            cur = await c.execute(_q(sql.SELECT_HISTORY), (key, limit, offset))
            return [await _record(c, r) for r in await cur.fetchall()]

        return await self._read(load)

    async def clear(self, key: str) -> None:
        async def clear(c: Any) -> None:
            await c.execute(_q(sql.DELETE_RECORDS), (key,))
            await c.execute(_q(sql.DELETE_CHUNKS), (key,))
            await c.execute(_q(sql.DELETE_GROUPS), (key,))
            if self.uses_pgvector:
                await c.execute(_DELETE_VECTORS, (key,))
            await c.execute(_q(sql.DELETE_EMBEDDINGS), (key,))

        await self._write(clear)

    async def put_embeddings(self, embeddings: Sequence[GroupEmbedding]) -> None:
        async def put(c: Any) -> None:
            for e in embeddings:
                await c.execute(_q(sql.INSERT_EMBEDDING), embedding_row(e))
                if self.uses_pgvector:
                    await c.execute(_UPSERT_VECTOR, (e.group_id, _vector_literal(e.vector)))

        if embeddings:
            await self._write(put)

    async def search_embeddings(
        self,
        resource_id: str,
        vector: Sequence[float],
        *,
        model: str,
        thread_id: str | None = None,
        after: datetime | None = None,
        before: datetime | None = None,
        limit: int = 10,
    ) -> list[tuple[ObservationGroup, float]]:
        async def search(c: Any) -> list[tuple[ObservationGroup, float]]:
            if self.uses_pgvector:
                best = await _pgvector_search(
                    c, resource_id, vector, model, thread_id, after, before, limit
                )
                return await _groups_by_id(c, resource_id, best)
            cur = await c.execute(_q(sql.SELECT_EMBEDDINGS), (resource_id, model))
            rows = [tuple(r) for r in await cur.fetchall()]
            candidates = filter_embedding_rows(
                rows, thread_id=thread_id, after=after, before=before
            )
            best = top_k(vector, candidates, limit)
            return await _groups_by_id(c, resource_id, best)

        return await self._read(search)

    async def list_observation_groups(
        self, resource_id: str, *, thread_id: str | None = None
    ) -> list[ObservationGroup]:
        async def load(c: Any) -> list[ObservationGroup]:
            if thread_id is None:
                cur = await c.execute(_q(sql.SELECT_GROUPS), (resource_id,))
            else:
                cur = await c.execute(_q(sql.SELECT_GROUPS_OF_THREAD), (resource_id, thread_id))
            return [group_from_row(tuple(r)) for r in await cur.fetchall()]

        return await self._read(load)


# -- pgvector --------------------------------------------------------------------------------------

_UPSERT_VECTOR = (
    "INSERT INTO group_vectors (group_id, embedding) VALUES (%s, %s::vector) "
    "ON CONFLICT (group_id) DO UPDATE SET embedding = excluded.embedding"
)
_DELETE_VECTORS = (
    "DELETE FROM group_vectors WHERE group_id IN "
    "(SELECT group_id FROM group_embeddings WHERE key = %s)"
)


async def _enable_pgvector(conn: Any) -> bool:
    """Use pgvector when the server has it (and we may create it); client-side scoring if not."""
    cur = await conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    if await cur.fetchone() is None:
        return False
    try:
        async with conn.transaction():  # a savepoint: a refusal leaves the outer work intact
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS group_vectors "
                "(group_id TEXT PRIMARY KEY, embedding vector NOT NULL)"
            )
    except Exception:
        return False
    return True


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{float(v):.7g}" for v in vector) + "]"


async def _pgvector_search(
    c: Any,
    resource_id: str,
    vector: Sequence[float],
    model: str,
    thread_id: str | None,
    after: datetime | None,
    before: datetime | None,
    limit: int,
) -> list[tuple[str, float]]:
    literal = _vector_literal(vector)
    query = (
        "SELECT e.group_id, 1 - (v.embedding <=> %s::vector) FROM group_embeddings e "
        "JOIN group_vectors v ON v.group_id = e.group_id "
        "WHERE e.resource_id = %s AND e.model = %s AND e.dims = %s"
    )
    params: list[Any] = [literal, resource_id, model, len(vector)]
    if thread_id is not None:
        query += " AND e.thread_id = %s"
        params.append(thread_id)
    if after is not None:
        query += " AND e.observed_at >= %s"
        params.append(dt_to_text(after))
    if before is not None:
        query += " AND e.observed_at <= %s"
        params.append(dt_to_text(before))
    query += " ORDER BY v.embedding <=> %s::vector LIMIT %s"
    params += [literal, limit]
    cur = await c.execute(query, params)
    return [(str(r[0]), float(r[1])) for r in await cur.fetchall()]


async def _groups_by_id(
    c: Any, resource_id: str, best: list[tuple[str, float]]
) -> list[tuple[ObservationGroup, float]]:
    if not best:
        return []
    marks = ", ".join("%s" for _ in best)
    query = sql.SELECT_GROUPS_BY_ID.format(columns=sql.GROUP_COLUMNS, marks=marks)
    query = query.replace("resource_id = ?", "resource_id = %s")
    cur = await c.execute(query, (resource_id, *[i for i, _ in best]))
    found = {g.id: g for g in (group_from_row(tuple(r)) for r in await cur.fetchall())}
    return [(found[i], score) for i, score in best if i in found]


# -- helpers -----------------------------------------------------------------------------------


def _loads(text: str) -> Any:
    import json

    return json.loads(text)


def _reraise(exc: Exception, store: PostgresStore) -> NoReturn:
    raise StoreError(f"PostgreSQL error on {store!r}: {exc}") from exc


async def _migrate(conn: Any) -> None:
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS obsmem_schema (version INTEGER PRIMARY KEY, applied_at TEXT)"
    )
    row = await (await conn.execute("SELECT max(version) FROM obsmem_schema")).fetchone()
    version = int(row[0] or 0)
    if version > sql.SCHEMA_VERSION:
        raise StoreError(
            f"the database schema is version {version}, newer than this obsmem understands "
            f"({sql.SCHEMA_VERSION}); upgrade obsmem"
        )
    for number, script in enumerate(sql.MIGRATION_SCRIPTS[version:], start=version + 1):
        for statement in sql.statements(script):
            await conn.execute(statement)
        await conn.execute(
            "INSERT INTO obsmem_schema (version, applied_at) VALUES (%s, %s)",
            (number, dt_to_text(utcnow())),
        )


async def _load_thread(c: Any, thread_id: str, *, lock: bool = False) -> Thread | None:
    query = _q(sql.SELECT_THREAD) + (" FOR UPDATE" if lock else "")
    row = await (await c.execute(query, (thread_id,))).fetchone()
    return None if row is None else thread_from_row(tuple(row))


async def _require_thread(c: Any, thread_id: str, *, lock: bool = False) -> Thread:
    thread = await _load_thread(c, thread_id, lock=lock)
    if thread is None:
        raise StoreError(f"no thread {thread_id!r}; create it with create_thread() first")
    return thread


async def _message_counts(c: Any, thread_ids: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for thread_id in thread_ids:
        thread = await _load_thread(c, thread_id)
        if thread is not None:
            counts[thread_id] = thread.message_count
    return counts


async def _load_message(c: Any, message_id: str) -> Message | None:
    row = await (await c.execute(_q(sql.SELECT_MESSAGE_BY_ID), (message_id,))).fetchone()
    return None if row is None else message_from_row(tuple(row))


async def _record(c: Any, row: Any) -> OMRecord:
    values = tuple(row)
    chunks: tuple[BufferedChunk, ...] = ()
    if values[15] is None:  # chunks belong to the key; only the head shows them
        cur = await c.execute(_q(sql.SELECT_CHUNKS), (values[1],))
        chunks = tuple(chunk_from_json(r[0]) for r in await cur.fetchall())
    return record_from_row(values, chunks)


async def _load_head(c: Any, key: str) -> OMRecord | None:
    row = await (await c.execute(_q(sql.SELECT_HEAD), (key,))).fetchone()
    return None if row is None else await _record(c, row)


async def _load_record(c: Any, record_id: str, *, lock: bool = False) -> OMRecord | None:
    query = _q(sql.SELECT_RECORD) + (" FOR UPDATE" if lock else "")
    row = await (await c.execute(query, (record_id,))).fetchone()
    return None if row is None else await _record(c, row)


async def _save_chunks(c: Any, r: OMRecord) -> None:
    await c.execute(_q(sql.DELETE_CHUNKS), (r.key,))
    for i, ch in enumerate(r.chunks):
        await c.execute(_q(sql.INSERT_CHUNK), (r.key, i, ch.id, ch.cycle_id, chunk_to_json(ch)))
