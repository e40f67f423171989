"""SQLiteStore: the embedded default. One file, WAL mode, safe for several processes.

The stdlib ``sqlite3`` driver runs on one worker thread per store (SQLite calls block), so the
event loop never waits on disk. Every state change is one ``BEGIN IMMEDIATE`` transaction: it
takes SQLite's write lock first, re-reads the record inside the lock, checks the version the caller
read, applies the pure transition and commits. Another process doing the same waits on the lock
(``busy_timeout``) and then sees the new version, so it raises ConflictError instead of
overwriting.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from ..errors import StoreError
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
from .codec import (
    chunk_from_json,
    chunk_to_json,
    dt_to_text,
    dumps,
    group_from_row,
    group_row,
    loads,
)
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

__all__ = ["SQLiteStore"]

T = TypeVar("T")
Row = tuple[Any, ...]


class SQLiteStore:
    """Threads, messages and memory state in one SQLite file.

    ``SQLiteStore("memory.db")``; the file and its schema are created on first use. Several
    stores (in this process or others) may open the same file.
    """

    def __init__(
        self, path: str | os.PathLike[str] = "obsmem.db", *, busy_timeout_ms: int = 30_000
    ):
        self.path = str(path)
        self.busy_timeout_ms = busy_timeout_ms
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="obsmem-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- plumbing ------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreError(f"{self!r} was closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, fn)

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            conn = self._conn if self._conn is not None else self._open()
            return fn(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite error on {self.path}: {exc}") from exc

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` inside one ``BEGIN IMMEDIATE`` transaction."""

        def txn(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

        return await self._run(txn)

    def _open(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.busy_timeout_ms / 1000,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        if self.path != ":memory:":
            mode = self._switch_to_wal(conn)
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: could not switch to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        self._migrate(conn)
        self._conn = conn
        return conn

    def _switch_to_wal(self, conn: sqlite3.Connection) -> str:
        """``PRAGMA journal_mode = WAL``, waiting out a writer that holds the new file's lock
        (SQLite does not apply ``busy_timeout`` to this pragma)."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        delay = 0.005
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        if conn.execute("PRAGMA user_version").fetchone()[0] >= sql.SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait, then skip
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > sql.SCHEMA_VERSION:
                raise StoreError(
                    f"the database schema is version {version}, newer than this obsmem "
                    f"understands ({sql.SCHEMA_VERSION}); upgrade obsmem"
                )
            for number, script in enumerate(sql.MIGRATION_SCRIPTS[version:], start=version + 1):
                for statement in sql.statements(script):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    async def schema_version(self) -> int:
        return await self._run(lambda c: int(c.execute("PRAGMA user_version").fetchone()[0]))

    async def aclose(self) -> None:
        if self._closed:
            return

        def close(_: sqlite3.Connection) -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        if self._conn is not None:
            await self._run(close)
        self._closed = True
        self._executor.shutdown(wait=True)

    # -- threads -------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self._run(lambda c: _load_thread(c, thread_id))

    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        def create(c: sqlite3.Connection) -> Thread:
            existing = _load_thread(c, thread_id)
            if existing is not None:
                tr.check_thread_owner(existing, resource_id)
                return existing
            now = utcnow()
            thread = Thread(
                id=thread_id,
                resource_id=resource_id,
                title=title,
                metadata=dict(metadata or {}),
                created_at=now,
                updated_at=now,
            )
            c.execute(
                sql.INSERT_THREAD,
                (
                    thread_id,
                    resource_id,
                    title,
                    dumps(thread.metadata),
                    0,
                    dt_to_text(now),
                    dt_to_text(now),
                ),
            )
            return thread

        return await self._write(create)

    async def list_threads(self, resource_id: str) -> list[Thread]:
        def load(c: sqlite3.Connection) -> list[Thread]:
            return [
                thread_from_row(r)
                for r in c.execute(sql.SELECT_THREADS_OF_RESOURCE, (resource_id,))
            ]

        return await self._run(load)

    async def list_resources(self) -> list[str]:
        def load(c: sqlite3.Connection) -> list[str]:
            return [r[0] for r in c.execute(sql.SELECT_RESOURCES)]

        return await self._run(load)

    async def get_resource(self, resource_id: str) -> dict[str, Any]:
        def load(c: sqlite3.Connection) -> dict[str, Any]:
            row = c.execute(sql.SELECT_RESOURCE, (resource_id,)).fetchone()
            return {} if row is None else dict(loads(row[0]))

        return await self._run(load)

    async def update_resource(
        self, resource_id: str, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        def update(c: sqlite3.Connection) -> dict[str, Any]:
            row = c.execute(sql.SELECT_RESOURCE, (resource_id,)).fetchone()
            merged = {**({} if row is None else loads(row[0])), **metadata}
            c.execute(sql.UPSERT_RESOURCE, (resource_id, dumps(merged), dt_to_text(utcnow())))
            return merged

        return await self._write(update)

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        def update(c: sqlite3.Connection) -> Thread:
            thread = _require_thread(c, thread_id)
            thread = replace(
                thread,
                title=thread.title if title is None else title,
                metadata={**thread.metadata, **(metadata or {})},
                updated_at=utcnow(),
            )
            c.execute(
                sql.UPDATE_THREAD,
                (thread.title, dumps(thread.metadata), dt_to_text(thread.updated_at), thread_id),
            )
            return thread

        return await self._write(update)

    # -- messages ------------------------------------------------------------------------------

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        def append(c: sqlite3.Connection) -> list[Message]:
            thread = _require_thread(c, thread_id)
            count = thread.message_count
            stored: list[Message] = []
            batch: dict[str, Message] = {}
            for message in messages:
                tr.check_message_thread(message, thread)
                existing = batch.get(message.id) or _load_message(c, message.id)
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
                c.execute(sql.INSERT_MESSAGE, message_to_row(msg))
                batch[msg.id] = msg
                stored.append(msg)
            if count != thread.message_count:
                c.execute(sql.UPDATE_THREAD_COUNT, (count, dt_to_text(utcnow()), thread_id))
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
        query = f"SELECT {sql.MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? AND seq > ?"
        params: list[Any] = [thread_id, after_seq]
        if through_seq is not None:
            query += " AND seq <= ?"
            params.append(through_seq)
        query += " ORDER BY seq DESC" if newest_first else " ORDER BY seq"
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)

        def load(c: sqlite3.Connection) -> list[Message]:
            return [message_from_row(r) for r in c.execute(query, params)]

        return await self._run(load)

    async def get_messages(self, ids: Sequence[str], *, resource_id: str) -> list[Message]:
        def load(c: sqlite3.Connection) -> list[Message]:
            out: list[Message] = []
            for message_id in ids:
                msg = _load_message(c, message_id)
                if msg is not None and msg.resource_id == resource_id:
                    out.append(msg)
            return out

        return await self._run(load)

    # -- records -------------------------------------------------------------------------------

    async def get_record(self, key: str) -> OMRecord | None:
        return await self._run(lambda c: _load_head(c, key))

    async def get_or_create_record(
        self, key: str, *, scope: Scope, thread_id: str | None, resource_id: str | None
    ) -> OMRecord:
        existing = await self.get_record(key)
        if existing is not None:
            return existing

        def create(c: sqlite3.Connection) -> OMRecord:
            head = _load_head(c, key)
            if head is not None:
                return head
            record = tr.initial_record(
                key, scope=scope, thread_id=thread_id, resource_id=resource_id, now=utcnow()
            )
            c.execute(sql.INSERT_RECORD, record_to_row(record))
            return record

        return await self._write(create)

    async def _transition(
        self,
        record_id: str,
        expected_version: int,
        apply: Callable[[sqlite3.Connection, OMRecord], OMRecord],
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        def txn(c: sqlite3.Connection) -> OMRecord:
            record = tr.check_current(_load_record(c, record_id), record_id, expected_version)
            new = apply(c, record)
            _save_record(c, new)
            _save_chunks(c, new)
            for group in groups:
                c.execute(sql.INSERT_GROUP, group_row(group))
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
        def apply(c: sqlite3.Connection, record: OMRecord) -> OMRecord:
            return tr.add_chunk(
                record,
                chunk,
                message_counts=_message_counts(c, [r.thread_id for r in chunk.ranges]),
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
        def apply(_: sqlite3.Connection, record: OMRecord) -> OMRecord:
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
        def apply(c: sqlite3.Connection, record: OMRecord) -> OMRecord:
            return tr.commit_observation(
                record,
                observations=observations,
                observation_tokens=observation_tokens,
                cursor=cursor,
                message_counts=_message_counts(c, list(cursor)),
                pending_message_tokens=pending_message_tokens,
                observed_tokens=observed_tokens,
                expected_cursor=expected_cursor,
                now=utcnow(),
            )

        return await self._transition(record_id, expected_version, apply, groups)

    async def set_buffered_reflection(
        self, record_id: str, expected_version: int, reflection: BufferedReflection | None
    ) -> OMRecord:
        def apply(_: sqlite3.Connection, record: OMRecord) -> OMRecord:
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
        def txn(c: sqlite3.Connection) -> OMRecord:
            record = tr.check_current(_load_record(c, record_id), record_id, expected_version)
            retired, head = tr.reflect(
                record,
                observations=observations,
                observation_tokens=observation_tokens,
                now=utcnow(),
            )
            _save_record(c, retired)
            c.execute(sql.INSERT_RECORD, record_to_row(head))
            for group in groups:
                c.execute(sql.INSERT_GROUP, group_row(group))
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
        def apply(_: sqlite3.Connection, record: OMRecord) -> OMRecord:
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
        def load(c: sqlite3.Connection) -> list[OMRecord]:
            rows = c.execute(sql.SELECT_HISTORY, (key, -1 if limit is None else limit, offset))
            return [_record(c, r) for r in rows.fetchall()]

        return await self._run(load)

    async def clear(self, key: str) -> None:
        def clear(c: sqlite3.Connection) -> None:
            c.execute(sql.DELETE_RECORDS, (key,))
            c.execute(sql.DELETE_CHUNKS, (key,))
            c.execute(sql.DELETE_GROUPS, (key,))
            c.execute(sql.DELETE_EMBEDDINGS, (key,))

        await self._write(clear)

    async def put_embeddings(self, embeddings: Sequence[GroupEmbedding]) -> None:
        def put(c: sqlite3.Connection) -> None:
            c.executemany(sql.INSERT_EMBEDDING, [embedding_row(e) for e in embeddings])

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
        def search(c: sqlite3.Connection) -> list[tuple[ObservationGroup, float]]:
            rows = c.execute(sql.SELECT_EMBEDDINGS, (resource_id, model)).fetchall()
            candidates = filter_embedding_rows(
                rows, thread_id=thread_id, after=after, before=before
            )
            best = top_k(vector, candidates, limit)
            if not best:
                return []
            marks = ", ".join("?" for _ in best)
            query = sql.SELECT_GROUPS_BY_ID.format(columns=sql.GROUP_COLUMNS, marks=marks)
            found = {
                g.id: g
                for g in map(group_from_row, c.execute(query, (resource_id, *[i for i, _ in best])))
            }
            return [(found[i], score) for i, score in best if i in found]

        return await self._run(search)

    async def list_observation_groups(
        self, resource_id: str, *, thread_id: str | None = None
    ) -> list[ObservationGroup]:
        def load(c: sqlite3.Connection) -> list[ObservationGroup]:
            if thread_id is None:
                rows = c.execute(sql.SELECT_GROUPS, (resource_id,))
            else:
                rows = c.execute(sql.SELECT_GROUPS_OF_THREAD, (resource_id, thread_id))
            return [group_from_row(r) for r in rows]

        return await self._run(load)


# -- row mapping -------------------------------------------------------------------------------


def _load_thread(c: sqlite3.Connection, thread_id: str) -> Thread | None:
    row = c.execute(sql.SELECT_THREAD, (thread_id,)).fetchone()
    return None if row is None else thread_from_row(row)


def _require_thread(c: sqlite3.Connection, thread_id: str) -> Thread:
    thread = _load_thread(c, thread_id)
    if thread is None:
        raise StoreError(f"no thread {thread_id!r}; create it with create_thread() first")
    return thread


def _message_counts(c: sqlite3.Connection, thread_ids: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for thread_id in thread_ids:
        thread = _load_thread(c, thread_id)
        if thread is not None:
            counts[thread_id] = thread.message_count
    return counts


def _load_message(c: sqlite3.Connection, message_id: str) -> Message | None:
    row = c.execute(sql.SELECT_MESSAGE_BY_ID, (message_id,)).fetchone()
    return None if row is None else message_from_row(row)


def _record(c: sqlite3.Connection, row: Row) -> OMRecord:
    chunks: tuple[BufferedChunk, ...] = ()
    if row[15] is None:  # chunks belong to the key; only the head shows them
        chunks = tuple(chunk_from_json(r[0]) for r in c.execute(sql.SELECT_CHUNKS, (row[1],)))
    return record_from_row(row, chunks)


def _save_record(c: sqlite3.Connection, r: OMRecord) -> None:
    c.execute(sql.UPDATE_RECORD, record_update_values(r))


def _load_head(c: sqlite3.Connection, key: str) -> OMRecord | None:
    row = c.execute(sql.SELECT_HEAD, (key,)).fetchone()
    return None if row is None else _record(c, row)


def _load_record(c: sqlite3.Connection, record_id: str) -> OMRecord | None:
    row = c.execute(sql.SELECT_RECORD, (record_id,)).fetchone()
    return None if row is None else _record(c, row)


def _save_chunks(c: sqlite3.Connection, r: OMRecord) -> None:
    c.execute(sql.DELETE_CHUNKS, (r.key,))
    c.executemany(
        sql.INSERT_CHUNK,
        [(r.key, i, ch.id, ch.cycle_id, chunk_to_json(ch)) for i, ch in enumerate(r.chunks)],
    )
