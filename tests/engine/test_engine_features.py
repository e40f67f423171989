"""Engine features through the public API: early activation, scopes, idle buffering, lazy
processing of old threads, huge messages, hooks and the cache-stable context."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

from pydantic_ai.models.test import TestModel

from obsmem.events import Hooks
from obsmem.messages import Message
from obsmem.stores import InMemoryStore, Store
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector
from obsmem.tokens import HeuristicEstimator

from .helpers import Conversation, Recorder, assert_no_gap_no_double, engine, raw_messages


def buffered(**observation: object) -> dict[str, object]:
    return {
        "observation": {"model": scripted_observer(), "messageTokens": 3_000, **observation},
        "reflection": {"model": scripted_reflector(), "observationTokens": 20_000},
    }


async def _fill(om, conv: Conversation, turns: int, tokens: int = 300) -> None:  # type: ignore[no-untyped-def]
    for _ in range(turns):
        await om.prepare("t1", "u1", [conv.user(tokens)])
        await om.record("t1", "u1", [conv.assistant(tokens)])
        await om.settle()


async def test_idle_ttl_activates_buffered_chunks_early() -> None:
    conv = Conversation()
    om = engine(InMemoryStore(), buffered(activateAfterIdle="5m"), clock=conv.clock)
    events = Recorder()
    om.subscribe(events)
    await _fill(om, conv, 2)  # ~1,200 tokens: one chunk buffered, far below the threshold
    record = await om.store.get_record("thread:t1")
    assert record is not None
    assert record.chunks
    assert not events.of("data-om-activation")
    conv.now += timedelta(minutes=6)  # the prompt cache is gone anyway
    await om.prepare("t1", "u1", [conv.user(100)])
    [activation, *_] = events.of("data-om-activation")
    assert activation.triggered_by == "ttl"
    assert activation.ttl_expired_ms is not None
    assert activation.ttl_expired_ms >= 5 * 60_000


async def test_auto_ttl_follows_the_actor_provider() -> None:
    conv = Conversation()
    om = engine(InMemoryStore(), buffered(activateAfterIdle="auto"), clock=conv.clock)
    events = Recorder()
    om.subscribe(events)
    await _fill(om, conv, 2)
    conv.now += timedelta(minutes=10)
    # Gemini keeps its cache for 24 hours: 10 minutes idle is not enough.
    await om.prepare("t1", "u1", [conv.user(100)], actor_model="google/gemini-2.5-flash")
    assert not events.of("data-om-activation")
    conv.now += timedelta(minutes=10)
    # OpenAI's gpt-5 cache lasts 5 minutes: activate now.
    await om.prepare("t1", "u1", [conv.user(100)], actor_model="openai/gpt-5-mini")
    assert events.of("data-om-activation")[0].triggered_by == "ttl"


async def test_provider_change_activates_buffered_chunks() -> None:
    conv = Conversation()
    om = engine(InMemoryStore(), buffered(activateOnProviderChange=True), clock=conv.clock)
    events = Recorder()
    om.subscribe(events)
    for _ in range(2):
        await om.prepare("t1", "u1", [conv.user(300)], actor_model="openai/gpt-5-mini")
        await om.record("t1", "u1", [conv.assistant(300)], actor_model="openai/gpt-5-mini")
        await om.settle()
    assert not events.of("data-om-activation")
    await om.prepare("t1", "u1", [conv.user(100)], actor_model="anthropic/claude-haiku-4-5")
    [activation, *_] = events.of("data-om-activation")
    assert activation.triggered_by == "provider_change"
    assert activation.previous_model == "openai/gpt-5-mini"
    assert activation.current_model == "anthropic/claude-haiku-4-5"


async def test_buffer_on_idle_buffers_every_finished_turn() -> None:
    om = engine(InMemoryStore(), buffered(bufferOnIdle=True))
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    await _fill(om, conv, 1, tokens=50)  # far below any interval
    [end] = events.of("data-om-buffering-end")
    assert end.tokens_buffered < 200


async def test_an_old_thread_is_processed_lazily(store: Store) -> None:
    conv = Conversation()
    await store.create_thread("old", "u1")
    await store.append_messages(
        "old", [conv.user(500) if i % 2 == 0 else conv.assistant(500) for i in range(200)]
    )
    om = engine(
        store,
        {
            "observation": {"model": scripted_observer(), "messageTokens": 10_000},
            "reflection": {"model": scripted_reflector()},
        },
    )
    prepared = await om.prepare("old", "u1", [conv.user(50)])
    estimator = HeuristicEstimator()
    raw = sum(estimator.count_message(m) for m in raw_messages(prepared.messages))
    assert raw <= 12_000  # block_after, though the thread held ~100k tokens before
    await om.settle()  # the catch-up ran in the background; the turn did not wait for it
    assert "User said:" in await om.observations("old", "u1")
    await assert_no_gap_no_double(store, "thread:old", ["old"])


async def test_a_single_message_larger_than_the_threshold_is_observed(store: Store) -> None:
    om = engine(
        store,
        {
            "observation": {"model": scripted_observer(), "messageTokens": 2_000},
            "reflection": {"model": scripted_reflector()},
        },
    )
    conv = Conversation()
    huge = conv.user(10_000)
    first = await om.prepare("t1", "u1", [huge])
    assert [m.id for m in raw_messages(first.messages)] == [huge.id]  # this turn sees it raw
    await om.record("t1", "u1", [conv.assistant(100)])
    second = await om.prepare("t1", "u1", [conv.user(100)])
    assert huge.id not in [m.id for m in raw_messages(second.messages)]
    await om.settle()
    record = await store.get_record("thread:t1")
    assert record is not None
    assert record.cursor["t1"] >= 1


async def test_resource_scope_observes_every_thread_of_the_resource(store: Store) -> None:
    calls = ModelCalls()
    om = engine(
        store,
        {
            "scope": "resource",
            "observation": {
                "model": scripted_observer(calls=calls),
                "messageTokens": 1_500,
                "maxTokensPerBatch": 800,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    conv = Conversation()
    for thread in ("a", "b", "c"):
        await om.prepare(thread, "u1", [conv.user(300)])
        await om.record(thread, "u1", [conv.assistant(200)])
    prepared = await om.prepare("a", "u1", [conv.user(100)])
    log = await om.observations("a", "u1")
    assert '<thread id="b">' in log
    assert '<thread id="c">' in log
    assert calls.count >= 2, "threads are batched by max_tokens_per_batch"
    record = await store.get_record("resource:u1")
    assert record is not None
    assert set(record.cursor) >= {"b", "c"}
    # Thread a's context holds only thread a's raw messages.
    assert {m.thread_id for m in raw_messages(prepared.messages)} <= {"a"}
    await assert_no_gap_no_double(store, "resource:u1", ["a", "b", "c"])


async def test_earlier_log_segments_stay_byte_identical_between_turns() -> None:
    conv = Conversation(minutes_per_turn=1)
    om = engine(InMemoryStore(), buffered(), clock=conv.clock)
    snapshots: list[list[str]] = []
    for _ in range(30):
        prepared = await om.prepare("t1", "u1", [conv.user(300)])
        await om.record("t1", "u1", [conv.assistant(300)])
        await om.settle()
        snapshots.append(
            [
                m.text
                for m in prepared.messages
                if (m.metadata.get("obsmem") or {}).get("synthetic") == "segment"
            ]
        )
    assert len(await om.history("t1", "u1")) == 1, "no reflection in this test"
    grew = 0
    for before, after in itertools.pairwise(snapshots):
        # Every log segment the previous turn saw is unchanged, byte for byte; only the last
        # one may differ (after a boundary, new text is appended as a new segment).
        assert after[: len(before)] == before
        grew += len(after) > len(before)
    assert grew >= 2


async def test_transform_hooks_shape_what_is_observed(store: Store) -> None:
    seen: list[int] = []

    def before(messages):  # type: ignore[no-untyped-def]
        seen.append(len(messages))
        return messages

    async def after(observations: str) -> str:
        return observations + "\n* ✅ (00:00) checked by a hook"

    om = engine(
        store,
        {
            "observation": {
                "model": scripted_observer(),
                "messageTokens": 800,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector()},
        },
        hooks=Hooks(before_observation=before, after_observation=after),
    )
    conv = Conversation()
    for _ in range(3):
        await om.prepare("t1", "u1", [conv.user(300)])
        await om.record("t1", "u1", [conv.assistant(300)])
    assert seen
    assert "checked by a hook" in await om.observations("t1", "u1")


async def test_test_model_drives_the_observer_offline(store: Store) -> None:
    observer = TestModel(custom_output_text="<observations>\n* 🔴 (09:00) noted\n</observations>")
    om = engine(
        store,
        {
            "observation": {"model": observer, "messageTokens": 500, "bufferTokens": False},
            "reflection": {"model": scripted_reflector()},
        },
    )
    conv = Conversation()
    for _ in range(3):
        await om.prepare("t1", "u1", [conv.user(200)])
        await om.record("t1", "u1", [Message.assistant("ok", created_at=conv.now)])
    assert "noted" in await om.observations("t1", "u1")


async def test_temporal_markers_reach_the_observer(store: Store) -> None:
    calls = ModelCalls()
    om = engine(
        store,
        {
            "temporalMarkers": True,
            "observation": {
                "model": scripted_observer(calls=calls),
                "messageTokens": 1_500,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    conv = Conversation(minutes_per_turn=125)
    contexts = []
    for _ in range(4):
        contexts.append((await om.prepare("t1", "u1", [conv.user(300)])).messages)
        await om.record("t1", "u1", [conv.assistant(300)])
    gaps = [m.text for messages in contexts for m in messages if "later —" in m.text]
    assert gaps, "the actor sees the gap reminder"
    assert "2 hours 5 minutes later" in gaps[0]
    assert calls.prompts
    assert "2 hours 5 minutes later" in calls.prompts[0]


async def test_reflection_provider_change_works_on_its_own() -> None:
    """``reflection.activate_on_provider_change`` alone (the observation one off) swaps a
    finished background reflection in when the actor's model changes."""
    conv = Conversation()
    om = engine(
        InMemoryStore(),
        {
            "observation": {"model": scripted_observer(words=40), "messageTokens": 800},
            "reflection": {
                "model": scripted_reflector(),
                "observationTokens": 2_000,
                "activateOnProviderChange": True,
            },
        },
        clock=conv.clock,
    )
    events = Recorder()
    om.subscribe(events)
    model = "openai/gpt-5-mini"
    for _ in range(40):
        await om.prepare("t1", "u1", [conv.user(200)], actor_model=model)
        await om.record("t1", "u1", [conv.assistant(200)], actor_model=model)
        await om.settle()
        record = await om.store.get_record("thread:t1")
        if record is not None and record.buffered_reflection is not None:
            break
    else:
        raise AssertionError("no background reflection was buffered")
    # From now on the actor switches provider every turn: once the swap is worth it (enough
    # new lines since the reflection started), a provider change makes it, before the threshold.
    models = ["anthropic/claude-haiku-4-5", "openai/gpt-5-mini"]
    swaps: list[Any] = []
    for turn in range(40):
        model = models[turn % 2]
        await om.prepare("t1", "u1", [conv.user(200)], actor_model=model)
        swaps = [e for e in events.of("data-om-activation") if e.operation_type == "reflection"]
        if swaps:
            break
        await om.record("t1", "u1", [conv.assistant(200)], actor_model=model)
        await om.settle()
    assert swaps
    assert swaps[0].triggered_by == "provider_change"
    await om.aclose()
