"""Network round trips on PostgreSQL, counted on the wire: a loopback forwarder in front of the
test server counts each time a client sends after the server last spoke. A plain turn takes at
most two (one per store call), a turn that observes four, and a lost commit race two. The same
forwarder, gone silent, is a network that stops answering."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import pytest

from obsmem.engine import ObservationalMemory
from obsmem.errors import ConflictError, StoreError
from obsmem.messages import Message
from obsmem.snapshot import Subject
from obsmem.stores import Commit, CommitObservation, LoadRequest, PostgresStore
from obsmem.stores import schema as sql
from obsmem.stores import transitions as tr
from obsmem.stores.flows import Batch, Call, Flow, Op
from obsmem.stores.rows import THREADS
from obsmem.testing import scripted_observer, scripted_reflector

from ..wire_counter import WireCounter
from .helpers import Conversation, Recorder


@contextlib.asynccontextmanager
async def _forwarded(
    postgres_dsn: str, **options: Any
) -> AsyncIterator[tuple[PostgresStore, WireCounter]]:
    """A store whose connections go through a WireCounter in front of the test server."""
    url = urlsplit(postgres_dsn)
    assert url.hostname is not None
    assert url.port is not None
    counter = WireCounter(url.hostname, url.port)
    await counter.start()
    store = PostgresStore(postgres_dsn.replace(f":{url.port}/", f":{counter.port}/"), **options)
    try:
        yield store, counter
    finally:
        await store.aclose()
        await counter.aclose()


@pytest.fixture
async def counted(postgres_dsn: str) -> AsyncIterator[tuple[PostgresStore, WireCounter]]:
    async with _forwarded(postgres_dsn, min_size=1, max_size=1) as both:
        yield both


def _engine(store: PostgresStore, conv: Conversation) -> ObservationalMemory:
    return ObservationalMemory(
        store,
        {
            "observation": {
                "model": scripted_observer(),
                "messageTokens": 1_000,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector()},
        },
        clock=conv.clock,
    )


async def test_plain_and_observing_turns_on_the_wire(
    counted: tuple[PostgresStore, WireCounter],
) -> None:
    store, counter = counted
    conv = Conversation()
    om = _engine(store, conv)
    events = Recorder()
    om.subscribe(events)
    await om.prepare("t1", "u1", [conv.user(50)])  # creates the schema, thread and head
    await om.record("t1", "u1", [conv.assistant(50)])
    await om.settle()
    counter.take()
    plain = observing = 0
    for _ in range(12):
        observed = len(events.of("data-om-observation-end"))
        await om.prepare("t1", "u1", [conv.user(200)])
        await om.record("t1", "u1", [conv.assistant(200)])
        await om.settle()
        trips = counter.take()
        if len(events.of("data-om-observation-end")) > observed:
            observing += 1
            # The load, the cycle's commit (its reads, then its writes with the reload), the
            # reply's load.
            assert trips <= 4, trips
        else:
            plain += 1
            assert trips <= 2, trips
    assert plain >= 3, plain
    assert observing >= 2, observing
    snapshot = await store.load(LoadRequest(subject=om.subject("t1", "u1")))
    assert snapshot.main.thread.message_count == 26  # nothing lost or doubled on the way
    assert [m.seq for m in snapshot.main.unobserved] == list(
        range(snapshot.record.cursor["t1"] + 1, 27)
    )
    await om.aclose()


async def test_a_turn_with_an_actor_model_is_two_round_trips(
    counted: tuple[PostgresStore, WireCounter],
) -> None:
    """Every door names the actor's model: the reply writes it only when the thread as last
    loaded names another (the write is a patch, which the reply's one-batch load does not
    take), so a plain turn stays at one round trip per store call; another model is written."""
    store, counter = counted
    conv = Conversation()
    om = _engine(store, conv)
    await om.prepare("t1", "u1", [conv.user(20)], actor_model="openai:gpt-5.2")
    await om.record("t1", "u1", [conv.assistant(20)], actor_model="openai:gpt-5.2")
    counter.take()
    for _ in range(3):
        await om.prepare("t1", "u1", [conv.user(20)], actor_model="openai:gpt-5.2")
        await om.record("t1", "u1", [conv.assistant(20)], actor_model="openai:gpt-5.2")
        assert counter.take() <= 2
    await om.prepare("t1", "u1", [conv.user(20)], actor_model="anthropic:x")
    await om.record("t1", "u1", [conv.assistant(20)], actor_model="anthropic:x")
    thread = await store.get_thread("t1")
    assert thread is not None
    assert thread.metadata["om:last_actor_model"] == "anthropic/x"
    await om.aclose()


async def test_a_lost_commit_race_costs_two_round_trips(
    counted: tuple[PostgresStore, WireCounter],
) -> None:
    store, counter = counted
    subject = Subject(scope="thread", thread_id="t1", resource_id="u1")
    record = (await store.load(LoadRequest(subject=subject))).record
    change = CommitObservation(observations="* seen", observation_tokens=3, cursor=(("t1", 0),))
    commit = Commit(
        key=record.key, record_id=record.id, expected_version=record.version, change=change
    )
    counter.take()
    won = await store.commit(commit)
    assert counter.take() <= 2
    with pytest.raises(ConflictError) as lost:
        await store.commit(commit)
    assert counter.take() <= 2  # the reads, then the end of the transaction
    assert lost.value.current is not None
    assert lost.value.current.version == won.record.version


async def test_a_whole_transaction_in_one_batch_is_all_or_nothing(
    counted: tuple[PostgresStore, WireCounter],
) -> None:
    """A batch that is a whole transaction is one round trip, failed or not, and when its last
    statement fails, its first is undone too."""
    store, counter = counted
    now = datetime(2026, 1, 1, tzinfo=UTC)
    thread = tr.new_thread("t-whole", "u1", now=now)

    def fails_at_the_end(_: bool) -> Flow[None]:
        yield Batch((Op(sql.INSERT_THREAD, THREADS.row(thread)), Op("SELECT 1/0")), end=True)

    def succeeds(_: bool) -> Flow[None]:
        yield Batch((Op(sql.INSERT_THREAD, THREADS.row(thread)), Op("SELECT 1")), end=True)

    await store.list_resources()  # creates the schema
    counter.take()
    with pytest.raises(StoreError, match="division by zero"):
        await store._driver.run(Call(fails_at_the_end, write=True))  # pyright: ignore[reportPrivateUsage]
    assert counter.take() == 1  # the batch alone: the server rolls it back at its own sync
    assert await store.get_thread("t-whole") is None
    counter.take()
    await store._driver.run(Call(succeeds, write=True))  # pyright: ignore[reportPrivateUsage]
    assert counter.take() == 1
    stored = await store.get_thread("t-whole")
    assert stored is not None
    assert stored.resource_id == "u1"


async def test_a_call_the_network_stops_answering_fails_in_time_and_the_next_works(
    postgres_dsn: str,
) -> None:
    """A server or network that stops answering without closing the connection (a cut cable,
    a frozen host) fails the call at ``call_timeout`` with StoreError, never a hang; its
    connection is dropped, and once the network answers again so does the store."""
    async with _forwarded(postgres_dsn, min_size=1, max_size=2) as (store, counter):
        await store.create_thread("t-cut", "u1")
        counter.silent = True
        # Only the call that meets the silence is this short: the others may take their time
        # on a loaded machine.
        store._pg.call_timeout = 0.5  # pyright: ignore[reportPrivateUsage]
        cut = store.append_messages("t-cut", [Message.user("lost?", id="m-cut")])
        with pytest.raises(StoreError, match=r"no answer from PostgreSQL within 0\.5 s"):
            await asyncio.wait_for(cut, timeout=30)  # a hang fails the test, not the suite
        store._pg.call_timeout = 60.0  # pyright: ignore[reportPrivateUsage]
        counter.silent = False
        await store.append_messages("t-cut", [Message.user("lost?", id="m-cut")])
        assert [m.text for m in await store.list_messages("t-cut")] == ["lost?"]


def test_call_timeout_must_be_a_positive_number() -> None:
    with pytest.raises(ValueError, match=r"call_timeout=0.*above 0"):
        PostgresStore("postgresql://localhost/obsmem", call_timeout=0)
