"""Schema migrations: a database written by an earlier obsmem keeps its memory; a database
written by a newer one is refused."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from obsmem.errors import StoreError
from obsmem.messages import utcnow
from obsmem.records import BufferedChunk, CycleRecord, MessageRange
from obsmem.stores import LoadRequest, PostgresStore, SQLiteStore, Store
from obsmem.stores import schema as sql
from obsmem.stores.codec import chunk_to_dict, dt_to_text, dumps
from obsmem.testing.store_conformance.kit import assert_record_invariants, open_record, subject

NOW = dt_to_text(utcnow())


def _chunk(n: int, first: int, last: int) -> BufferedChunk:
    return BufferedChunk(
        id=f"chunk-{n}",
        cycle_id=f"cycle-{n}",
        observations=f"* chunk {n}",
        token_count=3,
        message_tokens=100 * n,
        ranges=(MessageRange(thread_id="t1", first_seq=first, last_seq=last),),
        created_at=utcnow(),
        current_task=f"task {n}",
    )


def _version_3(execute: Callable[[str, tuple[Any, ...]], object]) -> None:
    """A database as obsmem 0.1 left it: schema 3, a thread of four messages, a retired and a
    head record, two chunks in ``om_chunks``."""
    for script in sql.MIGRATION_SCRIPTS[:3]:
        for statement in sql.statements(script):
            execute(statement, ())
    execute(
        "INSERT INTO threads VALUES (?, ?, ?, ?, ?, ?, ?)", ("t1", "r1", None, "{}", 4, NOW, NOW)
    )
    for seq in range(1, 5):
        execute(
            "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (f"m{seq}", "t1", "r1", seq, "user", '[{"kind":"text","text":"hi"}]', "{}", NOW),
        )
    for record_id, generation, superseded_by in (("old", 0, "head"), ("head", 1, None)):
        execute(
            f"INSERT INTO om_records VALUES ({', '.join('?' * 19)})",
            (
                record_id,
                "thread:t1",
                "thread",
                "t1",
                "r1",
                generation,
                "initial" if generation == 0 else "reflection",
                3,
                "* observed",
                2,
                '{"t1": 1}',
                None,
                500,
                7,
                100,
                superseded_by,
                '{"unused": true}',
                NOW,
                NOW,
            ),
        )
    for position, chunk in enumerate([_chunk(1, 2, 3), _chunk(2, 4, 4)]):
        execute(
            "INSERT INTO om_chunks VALUES (?, ?, ?, ?, ?)",
            ("thread:t1", position, chunk.id, chunk.cycle_id, dumps(chunk_to_dict(chunk))),
        )


async def _check_migrated(store: Store) -> None:
    head = await store.get_record("thread:t1")
    assert head is not None
    assert head.id == "head"
    assert [c.id for c in head.chunks] == ["chunk-1", "chunk-2"]
    assert head.chunks[0].current_task == "task 1"
    assert head.chunks[1].ranges[0].first_seq == 4
    assert head.total_tokens_observed == 100
    [_, old] = await store.history("thread:t1")
    assert old.chunks == ()  # chunks belong to the head only
    await assert_record_invariants(store, "thread:t1")
    assert (await open_record(store)).id == "head"
    # Migration 5: the cycle ledger starts empty and takes rows.
    assert await store.list_cycles("thread:t1") == []
    failed = CycleRecord(
        cycle_id="obs-1",
        key="thread:t1",
        resource_id="r1",
        thread_ids=("t1",),
        kind="observation",
        outcome="failed",
        error="HTTP 500",
        started_at=utcnow(),
        duration_ms=3.0,
    )
    await store.load(LoadRequest(subject=subject(), cycles=[failed]))
    assert await store.list_cycles("thread:t1") == [failed]


async def test_sqlite_moves_chunks_into_the_head_row(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path, isolation_level=None)
    _version_3(conn.execute)
    conn.execute("PRAGMA user_version = 3")
    conn.close()
    store = SQLiteStore(path)
    try:
        await _check_migrated(store)
        assert await store.schema_version() == sql.SCHEMA_VERSION
    finally:
        await store.aclose()
    conn = sqlite3.connect(path)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(om_records)")}
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert "chunks" in columns
    assert not columns & {"pending_message_tokens", "last_buffered_at_tokens", "metadata"}
    assert "om_chunks" not in tables


async def test_postgres_moves_chunks_into_the_head_row(postgres_dsn: str) -> None:
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        _version_3(lambda q, p: conn.execute(q.replace("?", "%s"), p))  # type: ignore[arg-type]
        conn.execute("CREATE TABLE obsmem_schema (version INTEGER PRIMARY KEY, applied_at TEXT)")
        conn.execute("INSERT INTO obsmem_schema VALUES (1, ''), (2, ''), (3, '')")
    store = PostgresStore(postgres_dsn)
    try:
        await _check_migrated(store)
        assert await store.schema_version() == sql.SCHEMA_VERSION
    finally:
        await store.aclose()


async def test_sqlite_refuses_a_database_from_a_newer_obsmem(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    store = SQLiteStore(path)
    await store.list_resources()
    await store.aclose()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {sql.SCHEMA_VERSION + 1}")
    conn.close()
    store = SQLiteStore(path)
    try:
        with pytest.raises(StoreError, match="newer than this obsmem understands"):
            await store.list_resources()
    finally:
        await store.aclose()


async def test_an_unreachable_postgres_is_a_store_error_that_says_what_to_check() -> None:
    """No server on the port: the call fails within the store's timeout with a StoreError that
    names what to check (not the pool's own timeout error after 30 s), and the next call tries
    again."""
    import logging

    pool_log = logging.getLogger("psycopg.pool")
    level = pool_log.level
    pool_log.setLevel(logging.CRITICAL)  # its own reconnect warnings
    store = PostgresStore("postgresql://obsmem@127.0.0.1:1/none", timeout=0.3)
    try:
        for _ in range(2):
            with pytest.raises(StoreError, match=r"within 0.3 s; is the server running") as failed:
                await store.list_threads("r")
            assert failed.value.__cause__ is not None
    finally:
        await store.aclose()
        pool_log.setLevel(level)


@pytest.mark.parametrize(
    "dsn",
    [
        "host=127.0.0.1 port=1 user=obsmem password=hunter2 dbname=none",
        "postgresql://obsmem:hunter2@127.0.0.1:1/none?sslmode=disable",
    ],
)
async def test_a_store_names_its_database_without_the_password(dsn: str) -> None:
    """Errors and logs name the store as host:port/database, whatever form the DSN has."""
    import logging

    pool_log = logging.getLogger("psycopg.pool")
    level = pool_log.level
    pool_log.setLevel(logging.CRITICAL)
    store = PostgresStore(dsn, timeout=0.3)
    try:
        assert repr(store) == "PostgresStore('127.0.0.1:1/none')"
        with pytest.raises(StoreError) as failed:
            await store.list_threads("r")
        assert "127.0.0.1:1/none" in str(failed.value)
        assert "hunter2" not in str(failed.value)
    finally:
        await store.aclose()
        pool_log.setLevel(level)


class _Forwarder:
    """A TCP port that leads to PostgreSQL only once opened: a database that comes up late."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task[Any]] = set()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()  # nothing listens here until open()

    async def open(self) -> None:
        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65_536):
                    writer.write(data)
                    await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self.tasks.add(task)
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            self.writers |= {writer, up_writer}
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

        self.server = await asyncio.start_server(serve, "127.0.0.1", self.port)

    async def aclose(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in self.writers:
                writer.close()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.server.wait_closed()


async def _first_answer(call: Callable[[], Any]) -> Any:
    """What ``call`` returns once the pool has reconnected (its own back-off takes a second or
    two): every call before fails with the store's StoreError saying what to check."""
    for _ in range(60):
        try:
            return await call()
        except StoreError as exc:
            if "is the server running" not in str(exc):
                raise
    raise AssertionError("the store never reconnected")


@contextlib.asynccontextmanager
async def _late_database(postgres_dsn: str) -> AsyncIterator[tuple[PostgresStore, _Forwarder]]:
    """A store whose database is not reachable yet (its port leads nowhere until the forwarder
    opens), with the pool's own reconnect warnings silenced."""
    import logging

    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    info = conninfo_to_dict(postgres_dsn)
    target = (str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432))
    forwarder = _Forwarder(*target)
    pool_log = logging.getLogger("psycopg.pool")
    level = pool_log.level
    pool_log.setLevel(logging.CRITICAL)
    store = PostgresStore(
        make_conninfo(postgres_dsn, host="127.0.0.1", port=forwarder.port), timeout=0.5
    )
    try:
        with pytest.raises(StoreError, match="is the server running"):
            await store.list_resources()
        yield store, forwarder
    finally:
        await store.aclose()
        await forwarder.aclose()
        pool_log.setLevel(level)


async def test_a_store_started_before_its_database_recovers_when_it_comes_up(
    postgres_dsn: str,
) -> None:
    """The first calls fail (nothing answers yet) with a StoreError; once the database is up,
    the next call connects, migrates and works."""
    async with _late_database(postgres_dsn) as (store, forwarder):
        await forwarder.open()
        assert await _first_answer(store.list_resources) == []
        assert await store.schema_version() == sql.SCHEMA_VERSION


async def test_postgres_refuses_a_newer_schema_even_after_a_failed_first_call(
    postgres_dsn: str,
) -> None:
    import psycopg

    store = PostgresStore(postgres_dsn)
    await store.list_resources()
    await store.aclose()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO obsmem_schema VALUES (%s, '')", (sql.SCHEMA_VERSION + 1,))
    async with _late_database(postgres_dsn) as (store, forwarder):
        await forwarder.open()
        with pytest.raises(StoreError, match="newer than this obsmem understands"):
            await _first_answer(store.list_resources)
        with pytest.raises(StoreError, match="newer than this obsmem understands"):
            await store.list_resources()
