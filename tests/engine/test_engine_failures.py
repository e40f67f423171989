"""A turn is never held hostage by memory (invariant 7), and failures never wipe memory (5)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from obsmem.stores import InMemoryStore, Store
from obsmem.testing import scripted_observer, scripted_reflector

from .helpers import Conversation, Recorder, engine, raw_messages


async def test_a_slow_observer_never_blocks_a_turn_below_block_after() -> None:
    gate = asyncio.Event()  # the Observer answers only when the test says so: arbitrarily slow
    store = InMemoryStore()
    om = engine(
        store,
        {
            "observation": {"model": scripted_observer(gate=gate)},
            "reflection": {"model": scripted_reflector()},
        },
    )
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    async with asyncio.timeout(30):  # a blocked turn would hang here instead of passing
        pending = 0
        while pending < 33_000:
            prepared = await om.prepare("t1", "u1", [conv.user(1_500)])
            await om.record("t1", "u1", [conv.assistant(1_500)])
            pending = prepared.status.message_tokens
        statuses = events.of("data-om-status")
        assert statuses[-1].buffering_status == "running"
        assert statuses[-1].message_tokens >= 30_000  # past the threshold, below block_after
        assert not events.of("data-om-observation-start"), "no synchronous observation"
        assert not events.of("data-om-buffering-end"), "the Observer has not answered yet"
        gate.set()
        await om.settle()
        prepared = await om.prepare("t1", "u1", [conv.user(100)])
    assert events.of("data-om-buffering-end")
    assert events.of("data-om-activation")
    assert prepared.status.message_tokens >= 30_000
    raw = raw_messages(prepared.messages)
    assert len(raw) < 2 * len(events.of("data-om-status"))


async def test_a_hanging_synchronous_observation_ends_at_its_budget(store: Store) -> None:
    om = engine(
        store,
        {
            "observation": {
                "model": scripted_observer(fault=lambda n: "hang"),
                "messageTokens": 1_000,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector()},
        },
        sync_timeout=0.2,
    )
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    sent = []
    for _ in range(4):
        message = conv.user(400)
        sent.append(message.id)
        prepared = await om.prepare("t1", "u1", [message])
    failed = events.of("data-om-observation-failed")
    assert failed, events.types()
    assert failed[0].operation_type == "observation"
    assert "timed out" in failed[0].error
    # The turn went on with the raw history, capped at the threshold: the newest messages are
    # sent, and a note stands for the oldest ones left out.
    shown = [m.id for m in raw_messages(prepared.messages) if not m.id.startswith("obsmem-")]
    assert shown == sent[len(sent) - len(shown) :]
    assert shown[-1] == sent[-1]
    notes = [m for m in prepared.messages if m.id == "obsmem-left-out"]
    left_out = notes[0].metadata["obsmem"]["count"] if notes else 0
    assert left_out == len(sent) - len(shown)
    assert await om.observations("t1", "u1") == ""


async def test_background_failures_are_reported_and_retried_later() -> None:
    failing = {"on": True}
    conv = Conversation()  # five minutes a turn: longer than the first back-offs
    om = engine(
        InMemoryStore(),
        {
            "observation": {
                "model": scripted_observer(fault=lambda n: "error" if failing["on"] else None),
                "messageTokens": 3_000,
            },
            "reflection": {"model": scripted_reflector()},
        },
        clock=conv.clock,
    )
    events = Recorder()
    om.subscribe(events)
    for _ in range(4):
        await om.prepare("t1", "u1", [conv.user(200)])
        await om.record("t1", "u1", [conv.assistant(200)])
        await om.settle()
    assert events.of("data-om-buffering-failed")
    assert not events.of("data-om-buffering-end")
    failing["on"] = False
    for _ in range(3):
        await om.prepare("t1", "u1", [conv.user(200)])
        await om.record("t1", "u1", [conv.assistant(200)])
        await om.settle()
    assert events.of("data-om-buffering-end"), "buffering resumes once the Observer recovers"


async def test_a_failed_reflection_keeps_the_old_log(store: Store) -> None:
    om = engine(
        store,
        {
            "observation": {
                "model": scripted_observer(words=60),
                "messageTokens": 1_000,
                "bufferTokens": False,
            },
            "reflection": {
                "model": scripted_reflector(
                    fault=lambda n: ("empty", "degenerate", "error")[n % 3]
                ),
                "observationTokens": 1_000,
            },
        },
    )
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    logs = []
    for _ in range(12):
        await om.prepare("t1", "u1", [conv.user(400)])
        await om.record("t1", "u1", [conv.assistant(400)])
        logs.append(await om.observations("t1", "u1"))
    failed = [
        e for e in events.of("data-om-observation-failed") if e.operation_type == "reflection"
    ]
    assert failed, events.types()
    assert len(await om.history("t1", "u1")) == 1, "no generation from a failed reflection"
    nonempty = [log for log in logs if log]
    assert nonempty
    # The log only ever grew: nothing was lost to the failing Reflector.
    for before, after in itertools.pairwise(nonempty):
        assert after.startswith(before.rstrip()[:200])


async def test_while_the_observer_is_away_the_context_stays_within_block_after() -> None:
    """An Observer outage past block_after: the turns go on, the raw messages sent stay within
    block_after (the oldest are left out, with a note saying so), and once the Observer answers
    again memory catches up and the note goes away."""
    from obsmem.tokens import HeuristicEstimator

    failing = {"on": True}
    conv = Conversation()
    om = engine(
        InMemoryStore(),
        {
            "observation": {
                "model": scripted_observer(fault=lambda n: "error" if failing["on"] else None),
                "messageTokens": 2_000,
            },
            "reflection": {"model": scripted_reflector()},
        },
        clock=conv.clock,
    )
    block_after = 2_400
    count = HeuristicEstimator().count_messages
    notes = 0
    for _ in range(20):
        prepared = await om.prepare("t1", "u1", [conv.user(200)])
        raw = [
            m for m in prepared.messages if m.role != "system" and not m.id.startswith("obsmem-")
        ]
        assert count(raw) <= block_after, count(raw)
        notes += any(m.id == "obsmem-left-out" for m in prepared.messages)
        await om.record("t1", "u1", [conv.assistant(200)])
        await om.settle()
    assert (await om.status("t1", "u1")).message_tokens > block_after  # nothing was observed
    assert notes > 0
    failing["on"] = False
    for _ in range(8):
        prepared = await om.prepare("t1", "u1", [conv.user(200)])
        await om.record("t1", "u1", [conv.assistant(200)])
        await om.settle()
    assert (await om.status("t1", "u1")).message_tokens <= block_after
    assert not any(m.id == "obsmem-left-out" for m in prepared.messages)
    await om.aclose()


async def test_a_failing_reflector_is_called_rarely_and_never_climbs_the_ladder() -> None:
    """The Reflector answers only errors for 70 turns, 30 s apart: reflection backs off in time
    (5 s doubling to 10 min), so it is tried about a dozen times, not on every turn, and each
    failed try is one call (a failed call does not climb the compression levels). Once it
    answers again, the next due reflection works."""
    from obsmem.testing import ModelCalls

    failing = {"on": True}
    calls = ModelCalls()
    conv = Conversation(minutes_per_turn=0)
    om = engine(
        InMemoryStore(),
        {
            "observation": {"model": scripted_observer(words=40), "messageTokens": 1_000},
            "reflection": {
                "model": scripted_reflector(
                    fault=lambda n: "error" if failing["on"] else None, calls=calls
                ),
                "observationTokens": 600,
            },
        },
        clock=conv.clock,
    )
    events = Recorder()
    om.subscribe(events)
    for _ in range(70):
        await om.prepare("t1", "u1", [conv.user(200)])
        await om.record("t1", "u1", [conv.assistant(200)])
        await om.settle()
    failed = [
        e
        for e in events.of("data-om-observation-failed") + events.of("data-om-buffering-failed")
        if e.operation_type == "reflection"
    ]
    assert failed, events.types()
    assert calls.count == len(failed), "a failed call ended its ladder"
    assert calls.count <= 15, calls.count
    failing["on"] = False
    for _ in range(25):
        await om.prepare("t1", "u1", [conv.user(200)])
        await om.record("t1", "u1", [conv.assistant(200)])
        await om.settle()
    assert len(await om.history("t1", "u1")) > 1, "reflection resumed"
    await om.aclose()


async def test_back_off_state_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine remembers the back-off of at most MAX_REMEMBERED_LOGS logs (the least recently
    failed go first), however many threads fail, and forgets a log's back-off on success."""
    import obsmem.engine as engine_module

    monkeypatch.setattr(engine_module, "MAX_REMEMBERED_LOGS", 8)
    failing = {"on": True}
    conv = Conversation()
    om = engine(
        InMemoryStore(),
        {
            "observation": {
                "model": scripted_observer(fault=lambda n: "error" if failing["on"] else None),
                "messageTokens": 1_000,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector()},
        },
        clock=conv.clock,
    )
    for i in range(30):
        await om.prepare(f"t{i}", "u1", [conv.user(1_200)])
        await om.prepare(f"t{i}", "u1", [conv.user(50)])  # the first is history now: observed
        assert len(om._logs) <= 8
    assert len(om._logs) == 8
    failing["on"] = False
    for i in range(22, 30):
        await om.prepare(f"t{i}", "u1", [conv.user(100)])
    assert not om._logs, "a success clears the back-off"
    await om.aclose()
