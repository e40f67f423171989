"""Two cycles at once on one thread, each writing its own values to the thread's metadata: a
background observation (an extracted value and a title) and a background reflection (another
extracted value). Both read the same snapshot; both values survive, because each commit merges
its paths into what is stored inside the store's transaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem import Extractor
from obsmem.engine import ObservationalMemory
from obsmem.stores import PostgresStore, SQLiteStore, Store
from obsmem.testing.store_conformance.kit import observe, open_record

from .helpers import Conversation, Recorder


@pytest.fixture(params=["sqlite", "postgres"])
async def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store = (
        SQLiteStore(tmp_path / "obsmem.db")
        if request.param == "sqlite"
        else PostgresStore(request.getfixturevalue("postgres_dsn"))
    )
    try:
        yield s
    finally:
        await s.aclose()


def _gated(answer: str, gate: asyncio.Event, started: asyncio.Event) -> FunctionModel:
    async def respond(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        started.set()
        await gate.wait()
        return pa.ModelResponse(parts=[pa.TextPart(content=answer)])

    return FunctionModel(respond)


async def test_concurrent_cycles_keep_each_others_values(sql_store: Store) -> None:
    conv = Conversation()
    # A log big enough for a background reflection to start (half of 400 tokens).
    log = "\n".join(f"* 🟡 (09:{i:02d}) The user planned step {i} of the trip" for i in range(40))
    await sql_store.create_thread("t1", "u1", metadata={"keep": "me", "om:extracted": {"old": 1}})
    await sql_store.append_messages("t1", [conv.user(20)])
    record = await open_record(sql_store, "t1", "u1")
    await observe(sql_store, record, observations=log, observation_tokens=450, cursor={"t1": 1})

    gate = asyncio.Event()
    observer_started, reflector_started = asyncio.Event(), asyncio.Event()
    observer = _gated(
        "<observations>\n* 🟡 (10:00) The user asked about trains\n</observations>\n"
        "<thread-title>Trip planning</thread-title>\n<mood>cheerful</mood>",
        gate,
        observer_started,
    )
    reflector = _gated(
        "<observations>\n* 🟡 (09:00) The user planned a trip\n</observations>\n"
        "<summary>a trip in steps</summary>",
        gate,
        reflector_started,
    )
    om = ObservationalMemory(
        sql_store,
        {
            "observation": {
                "model": observer,
                "messageTokens": 1_000,
                "threadTitle": True,
                "extract": [Extractor("mood", "the user's mood")],
            },
            "reflection": {
                "model": reflector,
                "observationTokens": 400,
                "extract": [Extractor("summary", "the story so far in a few words")],
            },
        },
        clock=conv.clock,
    )
    events = Recorder()
    om.subscribe(events)
    await om.prepare("t1", "u1", [conv.user(300)])
    await om.record("t1", "u1", [conv.assistant(300)])
    # Both cycles have read the same snapshot and wait for their models.
    await asyncio.wait_for(asyncio.gather(observer_started.wait(), reflector_started.wait()), 30)
    gate.set()
    await om.settle()

    ended = {e.operation_type for e in events.of("data-om-buffering-end")}
    assert ended == {"observation", "reflection"}
    thread = await sql_store.get_thread("t1")
    assert thread is not None
    assert thread.title == "Trip planning"
    assert thread.metadata["keep"] == "me"
    assert thread.metadata["om:extracted"] == {
        "old": 1,
        "mood": "cheerful",
        "summary": "a trip in steps",
    }
    head = await sql_store.get_record("thread:t1")
    assert head is not None
    assert head.chunks
    assert head.buffered_reflection is not None
    [update] = events.of("data-om-thread-update")
    assert (update.old_title, update.new_title) == (None, "Trip planning")
    await om.aclose()
