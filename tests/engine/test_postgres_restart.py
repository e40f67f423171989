"""PostgreSQL restarted under a PostgresStore whose pool holds several idle connections: the old
server closed them all. Once the new one accepts connections, every call succeeds (none is
handed a connection the server closed) and one WARNING on the ``obsmem`` logger says what
happened. The server is a throwaway of this module's own: the session's serves other tests."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterator

import pytest

from obsmem.errors import StoreError
from obsmem.messages import Message
from obsmem.stores import LoadRequest, PostgresStore
from obsmem.testing.store_conformance.kit import subject

from ..conftest import REQUIRE_POSTGRES
from ..postgres_server import ThrowawayPostgres, create_database

POOLED = 5


@pytest.fixture(scope="module")
def server() -> Iterator[ThrowawayPostgres]:
    try:
        pg = ThrowawayPostgres()
    except RuntimeError as exc:
        if any(os.environ.get(name) for name in REQUIRE_POSTGRES):
            raise
        pytest.skip(f"PostgreSQL is not available here ({exc})")
    try:
        pg.start()
        yield pg
    finally:
        pg.stop()


async def _fill_pool(store: PostgresStore) -> None:
    """``POOLED`` connections in use at once (the pool opens them one by one as calls wait),
    then all given back idle."""
    driver = store._pg  # pyright: ignore[reportPrivateUsage]
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(POOLED):
            conn = await stack.enter_async_context(driver._connection())  # pyright: ignore[reportPrivateUsage]
            await conn.execute("SELECT 1")
    stats = driver._pool.get_stats()  # pyright: ignore[reportPrivateUsage]
    assert (stats["pool_size"], stats["pool_available"]) == (POOLED, POOLED), stats


async def _call(store: PostgresStore, i: int) -> None:
    """Store operations of every kind in turn: a turn's load that stores a message, reads."""
    if i % 3 == 0:
        message = Message.user(f"after the restart {i}", id=f"m-{i}")
        snapshot = await store.load(LoadRequest(subject=subject(), append=[message]))
        assert [m.id for m in snapshot.stored] == [f"m-{i}"]
    elif i % 3 == 1:
        assert await store.get_thread("t1") is not None
    else:
        await store.list_messages("t1")


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_after_a_restart_every_call_succeeds_and_a_warning_says_why(
    server: ThrowawayPostgres, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``fast``: the server ends each session with a termination notice; ``immediate``: as after
    a crash (crash recovery on start)."""
    store = PostgresStore(create_database(server.admin_dsn), min_size=1, max_size=POOLED)
    try:
        await store.load(LoadRequest(subject=subject(), append=[Message.user("before", id="m")]))
        await _fill_pool(store)
        await asyncio.to_thread(server.restart, mode)  # returns once it accepts connections
        caplog.set_level(logging.WARNING, logger="obsmem")
        failures: list[str] = []
        for i in range(12):
            try:
                await _call(store, i)
            except StoreError as exc:
                failures.append(f"call {i}: {exc}")
        assert failures == []
        # (An immediate stop may lose the commit made just before it: test servers run with
        # synchronous_commit=off.)
        texts = [m.text for m in await store.list_messages("t1") if m.id != "m"]
        assert texts == [f"after the restart {i}" for i in range(0, 12, 3)]
        warned = [
            r.getMessage()
            for r in caplog.records
            if r.name == "obsmem" and r.levelno == logging.WARNING
        ]
        assert len(warned) == 1, warned
        assert f"PostgreSQL had closed {POOLED} pooled connections" in warned[0]
        assert "restart" in warned[0]
        assert "replaced" in warned[0]
    finally:
        await store.aclose()
