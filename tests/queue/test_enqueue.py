"""``background="queue"``: the queue's tables come from obsmem's migrations, turns queue their
log's work in the transaction of their write (at most one waiting job per log, ids only), and a
turn whose job cannot be queued goes on and says so."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from starlette.testclient import TestClient

from obsmem import Memory
from obsmem.cli import main
from obsmem.cli.stores import open_store
from obsmem.errors import ConfigError
from obsmem.queue import jobs as queue_jobs
from obsmem.queue import status as queue_status
from obsmem.stores import InMemoryStore, PostgresStore, SQLiteStore
from obsmem.testing import scripted_observer, scripted_reflector
from obsmem.ui.app import create_app

from ..engine.helpers import Conversation, engine
from ..wire_counter import WireCounter

QUEUE_OPTIONS: dict[str, Any] = {
    "background": "queue",
    "observation": {"model": scripted_observer(), "messageTokens": 1_000},
    "reflection": {"model": scripted_reflector()},
}


def _jobs(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT task_name, lock, queueing_lock, status::text, args FROM procrastinate_jobs "
            "ORDER BY id"
        ).fetchall()


async def test_migrations_create_the_queue_and_the_database_stays_obsmem_s(
    postgres_dsn: str,
) -> None:
    store = PostgresStore(postgres_dsn)
    await store.schema_version()
    await store.aclose()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT to_regclass('procrastinate_jobs') IS NOT NULL, "
            "to_regprocedure('procrastinate_fetch_job_v2(character varying[], bigint)') "
            "IS NOT NULL"
        ).fetchone()
    assert found == (True, True)
    open_store(postgres_dsn, read_only=True)  # the check refusing foreign databases accepts it


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_queue_needs_postgres(kind: str, tmp_path: Path) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "obsmem.db")
    with pytest.raises(ConfigError, match=r"PostgresStore.*\"process\""):
        engine(store, QUEUE_OPTIONS)


async def test_a_turn_queues_one_job_per_log_with_ids_only(postgres_dsn: str) -> None:
    conv = Conversation()
    om = engine(PostgresStore(postgres_dsn), QUEUE_OPTIONS, clock=conv.clock)
    try:
        for _ in range(3):
            await om.prepare("t1", "u1", [conv.user(150)])
            await om.record("t1", "u1", [conv.assistant(150)])
        await om.prepare("t2", "u1", [conv.user(40)])
        await om.settle()
        record = await om.store.get_record("thread:t1")
    finally:
        await om.aclose()
    # Buffering was due (in-process it would have run here); the serving engine ran no cycle.
    assert record is not None
    assert record.chunks == ()
    assert record.observations == ""
    jobs = _jobs(postgres_dsn)
    assert [(j[0], j[1], j[2], j[3]) for j in jobs] == [
        ("obsmem.cycle", "thread:t1", "thread:t1", "todo"),
        ("obsmem.cycle", "thread:t2", "thread:t2", "todo"),
    ]
    args = jobs[0][4]
    assert set(args) == {
        "v",
        "step",
        "key",
        "scope",
        "thread_id",
        "resource_id",
        "options",
        "incarnation",
    }
    assert args["thread_id"] == "t1"
    assert args["incarnation"]
    assert "alpha" not in json.dumps(args)  # never message text


async def test_a_turn_that_cannot_queue_goes_on_and_says_so(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    conv = Conversation()
    om = engine(PostgresStore(postgres_dsn), QUEUE_OPTIONS, clock=conv.clock)
    try:
        await om.prepare("t1", "u1", [conv.user(40)])
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE procrastinate_jobs RENAME TO jobs_away")
        with caplog.at_level(logging.WARNING, logger="obsmem"):
            stored = await om.record("t1", "u1", [conv.assistant(40)])
        assert len(stored) == 1
        assert "could not be queued" in caplog.text
        assert len(await om.store.list_messages("t1")) == 2
    finally:
        await om.aclose()


async def test_queue_mode_turns_stay_at_two_round_trips(postgres_dsn: str) -> None:
    """Queuing costs no round trip: the job goes in the batch of the turn's own write (counted on
    the wire, as ``tests/engine/test_wire_round_trips.py`` does; the look at the queue, once a
    minute on a connection of its own, does not come within the test's first minute, and the
    connection that hears workers' events is opened at the first turn)."""
    url = urlsplit(postgres_dsn)
    assert url.hostname is not None
    assert url.port is not None
    counter = WireCounter(url.hostname, url.port)
    await counter.start()
    store = PostgresStore(
        postgres_dsn.replace(f":{url.port}/", f":{counter.port}/"), min_size=1, max_size=1
    )
    conv = Conversation()
    om = engine(store, QUEUE_OPTIONS, clock=conv.clock)
    try:
        await om.prepare("t1", "u1", [conv.user(50)])  # creates the schema, thread and head
        await om.record("t1", "u1", [conv.assistant(50)])
        assert om.queue is not None
        await om.queue.events.listening.wait()  # its own connection, opened at the first turn
        counter.take()
        for _ in range(3):  # buffering is due from the second turn on: queued, not run
            await om.prepare("t1", "u1", [conv.user(150)])
            await om.record("t1", "u1", [conv.assistant(150)])
            assert counter.take() <= 2
        await om.settle()
    finally:
        await om.aclose()
        await counter.aclose()
    assert len(_jobs(postgres_dsn)) == 1


async def test_status_shows_the_log_s_queue_and_settle_does_not_wait_without_a_worker(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    conv = Conversation()
    memory = Memory(PostgresStore(postgres_dsn), observational_memory=QUEUE_OPTIONS)
    om = memory.om
    assert om is not None
    try:
        await om.prepare("t1", "u1", [conv.user(40)])
        status = await memory.status({"thread": "t1", "resource": "u1"})
        other = await memory.status({"thread": "t2", "resource": "u1"})
        with caplog.at_level(logging.WARNING, logger="obsmem"):
            await memory.settle()  # no worker: it returns, and says why
    finally:
        await memory.aclose()
    assert status.queue is not None
    assert (status.queue.waiting, status.queue.running, status.queue.workers) == (1, 0, 0)
    assert status.queue.oldest_wait is not None
    assert "queue: 1 waiting" in "\n".join(status.lines())
    assert other.queue is not None
    assert other.queue.waiting == 0
    assert "no worker runs" in caplog.text


async def test_work_waiting_with_no_worker_is_a_warning(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_status, "WAIT_WARNING_SECONDS", -1.0)  # any wait is too long
    monkeypatch.setattr(queue_jobs, "CHECK_SECONDS", 0.0)  # look at every turn
    conv = Conversation()
    om = engine(PostgresStore(postgres_dsn), QUEUE_OPTIONS, clock=conv.clock)
    try:
        with caplog.at_level(logging.WARNING, logger="obsmem"):
            await om.prepare("t1", "u1", [conv.user(40)])
            await om.record("t1", "u1", [conv.assistant(40)])  # the second job: a look
            assert om.queue is not None
            await om.queue.aclose()  # the serving process's look at the queue has ended
    finally:
        await om.aclose()
    assert "waited" in caplog.text
    assert "no worker runs" in caplog.text


async def _one_queued_turn(dsn: str) -> None:
    """A serving process's turn on thread t1 that queues its log's job, no worker running."""
    conv = Conversation()
    om = engine(PostgresStore(dsn), QUEUE_OPTIONS, clock=conv.clock)
    try:
        await om.prepare("t1", "u1", [conv.user(40)])
    finally:
        await om.aclose()


async def test_inspect_shows_the_queue(postgres_dsn: str) -> None:
    await _one_queued_turn(postgres_dsn)
    out = io.StringIO()
    assert await asyncio.to_thread(main, ["inspect", "--db", postgres_dsn], out=out) == 0
    text = out.getvalue()
    assert "queue: 1 waiting" in text
    assert "0 workers alive (start one: obsmem worker --db DSN)" in text
    assert "thread:t1: 1 waiting" in text
    out = io.StringIO()
    assert await asyncio.to_thread(main, ["inspect", "--db", postgres_dsn, "--json"], out=out) == 0
    assert json.loads(out.getvalue())["queue"]["logs"]["thread:t1"]["waiting"] == 1


async def test_the_ui_shows_the_log_s_queue(postgres_dsn: str) -> None:
    await _one_queued_turn(postgres_dsn)

    def page() -> str:
        app = create_app(open_store(postgres_dsn, read_only=True))
        with TestClient(app, base_url="http://127.0.0.1") as client:
            return client.get("/thread?id=t1").text

    text = await asyncio.to_thread(page)
    assert "queue: 1 waiting" in text


async def test_work_that_waits_too_long_with_no_worker_makes_the_state_failing(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a user looks (``memory.status()``, the ui's badge on the thread page and in the
    thread list), queued work that has waited too long with no worker alive reads as failing,
    with the fix; before it has waited that long, as healthy."""
    await _one_queued_turn(postgres_dsn)
    memory = Memory(PostgresStore(postgres_dsn), observational_memory=QUEUE_OPTIONS)

    def pages() -> tuple[str, str]:
        app = create_app(open_store(postgres_dsn, read_only=True))
        with TestClient(app, base_url="http://127.0.0.1") as client:
            return client.get("/thread?id=t1").text, client.get("/").text

    try:
        fresh = await memory.status({"thread": "t1", "resource": "u1"})
        fresh_state = (fresh.state, fresh.healthy)  # read now: the wait rule changes below
        fresh_thread, fresh_list = await asyncio.to_thread(pages)
        monkeypatch.setattr(queue_status, "WAIT_WARNING_SECONDS", -1.0)  # any wait is too long
        stalled = await memory.status({"thread": "t1", "resource": "u1"})
        thread_page, thread_list = await asyncio.to_thread(pages)
    finally:
        await memory.aclose()
    assert fresh_state == ("healthy", True)
    assert "badge-healthy" in fresh_thread
    assert "stalled" not in fresh_list
    assert (stalled.state, stalled.healthy) == ("failing", False)
    assert "start one: obsmem worker --db DSN" in "\n".join(stalled.lines())
    for page in (thread_page, thread_list):
        assert "stalled: queued work waits, no worker alive" in page
        assert "badge-failing" in page
        assert "start one: obsmem worker --db DSN" in page
