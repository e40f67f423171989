"""The PostgreSQL driver's pipelines under what goes wrong: a statement failing inside a
transaction of several round trips, a call cancelled while the server is still working, a batch
too large for the socket, pooled connections the server ended, and parameters that would break
SQL if they were quoted into it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest

from obsmem.errors import StoreError
from obsmem.messages import Message, utcnow
from obsmem.stores import PostgresStore
from obsmem.stores import schema as sql
from obsmem.stores import transitions as tr
from obsmem.stores.flows import Batch, Call, Flow, Op
from obsmem.stores.rows import THREADS


@pytest.fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(postgres_dsn, min_size=1, max_size=1)  # every call on the same connection
    await s.list_resources()  # creates the schema
    try:
        yield s
    finally:
        await s.aclose()


def _thread_op(thread_id: str) -> Op:
    return Op(sql.INSERT_THREAD, THREADS.row(tr.new_thread(thread_id, "u1", now=utcnow())))


async def test_a_failure_in_a_later_round_trip_undoes_the_earlier_ones(
    store: PostgresStore,
) -> None:
    """A flow whose transaction spans round trips (BEGIN with the first, COMMIT with the last)
    and fails in the second keeps nothing of the first; the connection, and the statements
    prepared on it before the failure, serve the next call."""

    def fails_later(_: bool) -> Flow[None]:
        yield _thread_op("t-first")  # BEGIN and this, in one round trip
        yield Batch((_thread_op("t-second"), Op("SELECT 1/0")), end=True)

    with pytest.raises(StoreError, match="division by zero"):
        await store._driver.run(Call(fails_later, write=True))  # pyright: ignore[reportPrivateUsage]
    assert await store.get_thread("t-first") is None
    assert await store.get_thread("t-second") is None

    def succeeds(_: bool) -> Flow[None]:  # the same statement again, prepared before the failure
        yield _thread_op("t-first")
        yield Batch((_thread_op("t-second"),), end=True)

    await store._driver.run(Call(succeeds, write=True))  # pyright: ignore[reportPrivateUsage]
    assert await store.get_thread("t-first") is not None
    assert await store.get_thread("t-second") is not None


async def test_a_call_cancelled_mid_exchange_leaves_a_connection_that_works(
    store: PostgresStore, postgres_dsn: str
) -> None:
    """Cancelled while the server runs its statement, the call raises CancelledError and its
    connection is closed (the pool opens another), never handed on with its answer unread."""
    marker = "obsmem-pipeline-cancel-test"

    def slow(_: bool) -> Flow[None]:
        yield Op(f"SELECT pg_sleep(30) /* {marker} */")

    task = asyncio.ensure_future(store._driver.run(Call(slow, write=False)))  # pyright: ignore[reportPrivateUsage]
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as watcher:
        for _ in range(2_000):  # until the server runs it (bounded: 20 s at most)
            cur = await watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND state = 'active'",
                (f"%{marker}%",),
            )
            row = await cur.fetchone()
            if row is not None and row[0] > 0:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the slow statement never reached the server")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await store.create_thread("t-after", "u1")
        await store.append_messages("t-after", [Message.user("still works")])
        assert [m.text for m in await store.list_messages("t-after")] == ["still works"]
        # The server finds the client gone only when it answers: end its sleep now.
        await watcher.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE %s "
            "AND pid <> pg_backend_pid()",
            (f"%{marker}%",),
        )


async def test_a_batch_larger_than_the_socket_buffers_goes_through(store: PostgresStore) -> None:
    """Thirty messages of 400 kB in one append (12 MB, one pipeline): the driver reads the
    server's answers while it is still sending, so neither side waits on the other."""
    await store.create_thread("t-big", "u1")
    messages = [Message.user(f"{i:02d} " + "x" * 400_000) for i in range(30)]
    stored = await store.append_messages("t-big", messages)
    assert [m.seq for m in stored] == list(range(1, 31))
    back = await store.list_messages("t-big")
    assert [m.text for m in back] == [m.text for m in messages]


async def test_a_batch_whose_answers_fill_the_socket_while_it_is_sent(
    store: PostgresStore,
) -> None:
    """Forty statements in one pipeline that each echo 400 kB: the server answers the first ones
    while the driver still sends the rest (16 MB each way), and every answer comes back whole."""
    texts = [f"{i:02d}" + "y" * 400_000 for i in range(40)]

    def echo(_: bool) -> Flow[list[str]]:
        results = yield Batch(tuple(Op("SELECT CAST(? AS TEXT)", (t,)) for t in texts), end=True)
        return [rows[0][0] for rows in results]

    run = store._driver.run(Call(echo, write=False))  # pyright: ignore[reportPrivateUsage]
    assert await asyncio.wait_for(run, timeout=60) == texts


HOSTILE = [
    "it's a 'quote'",
    "back\\slash \\' and \\\\",
    "$1 $2 ? %s %(x)s {0}",
    "'); DROP TABLE messages; --",
    "E'\\x00' U&'\\0041' $$dollar$$ $tag$x$tag$",
    "emoji 🧠 and 中文",
]


async def test_parameters_are_never_read_as_sql(store: PostgresStore) -> None:
    """Ids, text and metadata that would break a statement quoted by hand are stored and read
    back exactly: the server binds them."""
    thread_id = "t-'; DROP TABLE threads; --"
    await store.create_thread(thread_id, "u-$1 ?", metadata={"k'": "v\\'"})
    messages = [Message.user(text) for text in HOSTILE]
    await store.append_messages(thread_id, messages)
    back = await store.list_messages(thread_id)
    assert [m.text for m in back] == HOSTILE
    thread = await store.get_thread(thread_id)
    assert thread is not None
    assert thread.resource_id == "u-$1 ?"
    assert thread.metadata == {"k'": "v\\'"}
    assert await store.list_resources() == ["u-$1 ?"]


def test_a_libpq_without_pipelines_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from psycopg import NotSupportedError, capabilities

    def old_libpq(check: bool = False) -> bool:
        if check:
            raise NotSupportedError("the feature 'pipeline' requires libpq 14.0 or newer")
        return False

    monkeypatch.setattr(capabilities, "has_pipeline", old_libpq)
    with pytest.raises(StoreError, match=r'libpq 14\.0 or newer.*pip install "psycopg\[binary\]"'):
        PostgresStore("postgresql://localhost/obsmem")


async def _end_sessions(postgres_dsn: str, postgres_admin: str) -> None:
    """End every session on the test's database as an administrator would, and return once
    their server processes are gone (a restart or failover ends them the same way)."""
    database = postgres_dsn.rsplit("/", 1)[1]
    async with await psycopg.AsyncConnection.connect(postgres_admin, autocommit=True) as admin:
        cur = await admin.execute(
            "SELECT bool_and(pg_terminate_backend(pid, 20000)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        )
        row = await cur.fetchone()
        assert row is not None
        assert row[0] is True


async def test_connections_the_server_ended_are_replaced_before_a_call_meets_them(
    postgres_dsn: str, postgres_admin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A pooled connection the server ended while it sat idle is found before use (its socket
    has the server's farewell to read), never handed to a call: no call fails, and one WARNING
    says how many were replaced."""
    store = PostgresStore(postgres_dsn, min_size=2, max_size=2)
    try:
        await store.create_thread("t-ended", "u1")
        await asyncio.gather(*(store.get_thread("t-ended") for _ in range(4)))
        await _end_sessions(postgres_dsn, postgres_admin)
        caplog.set_level(logging.WARNING, logger="obsmem")
        await store.append_messages("t-ended", [Message.user("after", id="m-after")])
        assert [m.text for m in await store.list_messages("t-ended")] == ["after"]
        warned = [r.getMessage() for r in caplog.records if r.name == "obsmem"]
        assert len(warned) == 1, warned
        assert "PostgreSQL had closed" in warned[0]
    finally:
        await store.aclose()


async def test_a_connection_ended_after_its_look_before_use_fails_its_call_only(
    postgres_dsn: str, postgres_admin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection whose end the look before use did not see yet (here: a look that sees
    nothing) fails the call that meets it with StoreError, and the call is not run again (the
    server may have committed it); the pool replaces it and the calls after work, with nothing
    stored twice."""
    from obsmem.stores import pg_pipeline

    monkeypatch.setattr(pg_pipeline, "may_be_closed", lambda conn: False)
    store = PostgresStore(postgres_dsn, min_size=2, max_size=2)
    try:
        await store.create_thread("t-ended", "u1")
        await store.append_messages("t-ended", [Message.user("before", id="m-before")])
        await _end_sessions(postgres_dsn, postgres_admin)
        errors: list[str] = []
        for _ in range(4):  # two pooled connections to meet, then fresh ones
            try:
                await store.append_messages("t-ended", [Message.user("after", id="m-after")])
                break
            except StoreError as exc:
                errors.append(str(exc))
        else:
            pytest.fail(f"the store never healed: {errors}")
        assert 1 <= len(errors) <= 2, errors
        assert all("server closed the connection" in e for e in errors), errors
        back = await store.list_messages("t-ended")
        assert [(m.seq, m.text) for m in back] == [(1, "before"), (2, "after")]
    finally:
        await store.aclose()


def _backend_pid(_: bool) -> Flow[int]:
    rows = yield Op("SELECT pg_backend_pid()")
    return int(rows[0][0])


async def _pid(store: PostgresStore) -> int:
    return await store._driver.run(Call(_backend_pid, write=False))  # pyright: ignore[reportPrivateUsage]


async def test_a_pooled_connection_with_a_notification_to_read_is_pinged_and_kept(
    store: PostgresStore,
    postgres_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Something unasked on an idle connection's socket that is not the server's farewell (a
    notification) costs the next call one ping; the call runs on that connection and nothing
    is replaced or logged."""
    from obsmem.stores import pg_pipeline

    driver = store._pg  # pyright: ignore[reportPrivateUsage]
    pings: list[object] = []

    async def counted_ping(conn: object) -> None:
        pings.append(conn)
        await pg_pipeline.ping(conn)

    monkeypatch.setattr(driver, "_ping", counted_ping)
    pid = await _pid(store)
    assert pings == []  # nothing to read: no ping
    async with driver._connection() as conn:  # pyright: ignore[reportPrivateUsage]
        await conn.execute("LISTEN obsmem_test")
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as other:
            await other.execute("NOTIFY obsmem_test")
        await pg_pipeline._ready(conn.pgconn.socket, write=False)  # pyright: ignore[reportPrivateUsage]
    caplog.set_level(logging.WARNING)
    assert await _pid(store) == pid
    assert len(pings) == 1
    assert driver._pool.get_stats().get("connections_lost", 0) == 0  # pyright: ignore[reportPrivateUsage]
    assert [r.getMessage() for r in caplog.records] == []


async def test_a_commit_that_fails_at_the_sync_names_its_error_and_keeps_the_connection(
    store: PostgresStore, postgres_dsn: str
) -> None:
    """A whole-transaction batch whose commit fails (a deferred constraint checked at the
    pipeline's sync) raises that error, and the connection serves the next call."""
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
        await admin.execute(
            "CREATE TABLE deferred_ids (id INT, CONSTRAINT one_each UNIQUE (id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
    pid = await _pid(store)

    def twice(_: bool) -> Flow[None]:
        insert = Op("INSERT INTO deferred_ids (id) VALUES (?)", (1,))
        yield Batch((insert, insert), end=True)

    with pytest.raises(StoreError, match="one_each"):
        await store._driver.run(Call(twice, write=True))  # pyright: ignore[reportPrivateUsage]
    assert await _pid(store) == pid
    await store.create_thread("t-next", "u1")
    assert await store.get_thread("t-next") is not None


async def test_statements_the_server_dropped_or_invalidated_are_prepared_again(
    store: PostgresStore,
) -> None:
    """A pooler that resets the session (DEALLOCATE ALL) or another worker's schema change
    ("cached plan must not change result type") costs the call that meets it one more round
    trip, never an error, on the same connection."""
    await store.create_thread("t-stale", "u1")
    pid = await _pid(store)
    async with store._pg._connection() as conn:  # pyright: ignore[reportPrivateUsage]
        await conn.execute("DEALLOCATE ALL")  # behind the driver's back
    assert (await store.get_thread("t-stale")) is not None
    async with store._pg._connection() as conn:  # pyright: ignore[reportPrivateUsage]
        await conn.execute("ALTER TABLE threads ALTER COLUMN title TYPE VARCHAR(500)")
    thread = await store.get_thread("t-stale")
    assert thread is not None
    assert thread.resource_id == "u1"
    assert await _pid(store) == pid


async def test_a_value_psycopg_refuses_fails_the_call_and_keeps_the_connection(
    store: PostgresStore,
) -> None:
    pid = await _pid(store)
    with pytest.raises(StoreError, match="NUL"):
        await store.create_thread("t-\x00", "u1")
    assert await _pid(store) == pid


async def test_prepared_statements_per_connection_are_bounded(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``MAX_PREPARED`` distinct statements a connection's are deallocated and prepared
    again as used, so a long-lived connection's server process does not grow without end."""
    from obsmem.stores import pg_pipeline

    monkeypatch.setattr(pg_pipeline, "MAX_PREPARED", 4)

    def add(k: int) -> Callable[[bool], Flow[int]]:
        def flow(_: bool) -> Flow[int]:
            rows = yield Op(f"SELECT CAST(? AS INT) + {k}", (1,))
            return int(rows[0][0])

        return flow

    def prepared(_: bool) -> Flow[int]:
        rows = yield Op("SELECT count(*) FROM pg_prepared_statements")
        return int(rows[0][0])

    for k in range(12):
        assert await store._driver.run(Call(add(k), write=False)) == 1 + k  # pyright: ignore[reportPrivateUsage]
        count = await store._driver.run(Call(prepared, write=False))  # pyright: ignore[reportPrivateUsage]
        assert count <= 4 + 1, count  # what was kept, and this statement


async def test_closed_connections_are_not_kept_alive_by_the_driver(postgres_dsn: str) -> None:
    """What the driver keeps per connection goes with the connection: a closed store leaves no
    connection object behind."""
    import gc

    def alive() -> int:
        gc.collect()
        return sum(isinstance(o, psycopg.AsyncConnection) for o in gc.get_objects())

    before = alive()
    store = PostgresStore(postgres_dsn, min_size=2, max_size=2)
    await store.create_thread("t-gone", "u1")
    await asyncio.gather(*(store.get_thread("t-gone") for _ in range(4)))
    assert alive() > before
    await store.aclose()
    assert alive() == before


async def test_calls_one_after_another_reuse_the_connection_given_back_last(
    postgres_dsn: str,
) -> None:
    """Once overlapping calls have made the pool open several connections, calls one after
    another run on the one given back last (its server process warm), not on each in turn."""
    store = PostgresStore(postgres_dsn, min_size=1, max_size=3)
    try:

        def overlapping(_: bool) -> Flow[None]:
            yield Op("SELECT pg_sleep(0.05)")  # long enough for the three to overlap

        await asyncio.gather(*(store._driver.run(Call(overlapping, write=False)) for _ in range(3)))  # pyright: ignore[reportPrivateUsage]
        assert store._pg._pool.get_stats()["pool_size"] >= 2  # pyright: ignore[reportPrivateUsage]
        pids = [await _pid(store) for _ in range(6)]
        assert len(set(pids)) == 1, pids
    finally:
        await store.aclose()
