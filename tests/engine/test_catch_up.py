"""Lazy catch-up: a thread that already holds far more than one turn should wait for (it existed
before memory was on, or the Observer was away for long) is observed in the background. Turns
never wait for it; until it is done the actor's raw messages stay within block_after, the oldest
left out with a note."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from obsmem.events import HookContext, Hooks
from obsmem.stores import InMemoryStore, SQLiteStore, Store
from obsmem.testing import scripted_observer, scripted_reflector
from obsmem.tokens import HeuristicEstimator

from .helpers import Conversation, Recorder, assert_no_gap_no_double, engine, raw_messages

count = HeuristicEstimator().count_messages


def _sent(messages: list[Any]) -> list[Any]:
    return [m for m in raw_messages(messages) if m.role != "system"]


@pytest.mark.parametrize("buffering", [True, False])
async def test_a_large_existing_thread_catches_up_in_the_background(
    store: Store, buffering: bool
) -> None:
    gate = asyncio.Event()  # the Observer answers only once the test has seen the turns go on
    triggers: list[str] = []
    observing = asyncio.Event()

    def started(ctx: HookContext) -> None:
        triggers.append(ctx.trigger)
        observing.set()

    om = engine(
        store,
        {
            "observation": {
                "model": scripted_observer(gate=gate),
                "messageTokens": 2_000,
                **({} if buffering else {"bufferTokens": False}),
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 100_000},
        },
        hooks=Hooks(on_observation_start=started),
    )
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    history = [conv.user(200) if i % 2 == 0 else conv.assistant(200) for i in range(100)]
    limit = 2_400 if buffering else 2_000  # block_after, or the threshold without buffering
    async with asyncio.timeout(20):  # a turn that waited for the Observer would hang here
        first = await om.prepare("t1", "u1", history)
        await observing.wait()  # the catch-up has started, in the background
        second = await om.prepare("t1", "u1", [conv.user(200)])
    for prepared in (first, second):
        sent = _sent(prepared.messages)
        assert count(sent) <= limit, count(sent)
        notes = [m for m in prepared.messages if m.id == "obsmem-left-out"]
        assert notes
        assert notes[0].metadata["obsmem"]["count"] > 50
        assert "not in your notes yet" in notes[0].parts[0].text  # type: ignore[union-attr]
    assert _sent(second.messages)[-1].id == second.stored_input[-1].id
    # One catch-up in the background, and nothing synchronous while it runs.
    assert triggers == ["catch-up"]
    assert not events.of("data-om-observation-end")

    gate.set()
    await om.settle()
    assert set(triggers) == {"catch-up"}
    assert len(triggers) >= 20_000 // 2_000, "one Observer call of message_tokens at a time"
    status = await om.status("t1", "u1")
    assert status.message_tokens <= limit
    prepared = await om.prepare("t1", "u1", [conv.user(200)])
    assert not any(m.id == "obsmem-left-out" for m in prepared.messages)
    assert await om.observations("t1", "u1")
    await assert_no_gap_no_double(store, om.key("t1", "u1"), ["t1"])
    await om.aclose()


async def test_a_catch_up_leaves_the_turn_that_started_it_raw() -> None:
    om = engine(
        InMemoryStore(),
        {
            "observation": {"model": scripted_observer(), "messageTokens": 2_000},
            "reflection": {"model": scripted_reflector(), "observationTokens": 100_000},
        },
    )
    conv = Conversation()
    history = [conv.user(200) for _ in range(60)]
    step = [conv.user(300), conv.assistant(300)]
    await om.prepare("t1", "u1", history + step)
    await om.settle()
    prepared = await om.prepare("t1", "u1", [], step_from=61)
    assert [m.id for m in _sent(prepared.messages)][-2:] == [m.id for m in step]
    await om.aclose()


async def test_a_failing_catch_up_backs_off_and_resumes() -> None:
    failing = {"on": True}
    conv = Conversation()  # five minutes a turn: longer than the first back-offs
    om = engine(
        InMemoryStore(),
        {
            "observation": {
                "model": scripted_observer(fault=lambda n: "error" if failing["on"] else None),
                "messageTokens": 2_000,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 100_000},
        },
        clock=conv.clock,
    )
    events = Recorder()
    om.subscribe(events)
    await om.prepare("t1", "u1", [conv.user(200) for _ in range(80)])
    await om.settle()
    failed = len(events.of("data-om-observation-failed"))
    assert failed == 1
    for _ in range(3):
        await om.prepare("t1", "u1", [conv.user(100)])
        await om.settle()
    assert len(events.of("data-om-observation-failed")) <= 1 + 3  # at most one per turn
    failing["on"] = False
    for _ in range(6):
        prepared = await om.prepare("t1", "u1", [conv.user(100)])
        await om.settle()
    assert (await om.status("t1", "u1")).message_tokens <= 2_400
    prepared = await om.prepare("t1", "u1", [conv.user(100)])
    assert not any(m.id == "obsmem-left-out" for m in prepared.messages)
    await om.aclose()


def _catch_up_options(observer: Any) -> dict[str, Any]:
    return {
        "observation": {"model": observer, "messageTokens": 2_000, "bufferTokens": False},
        "reflection": {"model": scripted_reflector(), "observationTokens": 100_000},
    }


async def test_an_abandoned_catch_up_resumes_at_the_next_turn_after_a_restart(
    tmp_path: Path,
) -> None:
    """A process that stops (``aclose(cancel=True)``, as the servers do on SIGTERM) while a
    catch-up waits on the Observer leaves the thread behind with nothing half-done, and the
    next process catches it up at the thread's next turn. Cancelling a wait on ``settle()``
    leaves the work running: only ``aclose(cancel=True)`` abandons it."""
    db = tmp_path / "obsmem.db"
    observing = asyncio.Event()
    first = engine(
        SQLiteStore(db),
        _catch_up_options(scripted_observer(gate=asyncio.Event())),  # never answers
        hooks=Hooks(on_observation_start=lambda ctx: observing.set()),
    )
    conv = Conversation()
    await first.prepare("t1", "u1", [conv.user(200) for _ in range(80)])
    async with asyncio.timeout(20):
        await observing.wait()
    waiting = asyncio.ensure_future(first.settle())
    await asyncio.sleep(0)  # the wait has begun
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert first.background_work == ("catch-up:thread:t1",)
    await first.aclose(cancel=True)
    assert first.background_work == ()

    second = engine(SQLiteStore(db), _catch_up_options(scripted_observer()))
    try:
        assert not await second.observations("t1", "u1")  # still behind
        await second.prepare("t1", "u1", [conv.user(200)])
        await second.settle()
        assert await second.observations("t1", "u1")
        assert (await second.status("t1", "u1")).message_tokens <= 2_000
    finally:
        await second.aclose()
