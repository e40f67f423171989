"""The engine through its public API, with scripted Observer and Reflector models."""

from __future__ import annotations

from obsmem.stores import InMemoryStore, Store
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector

from .helpers import Conversation, Recorder, assert_no_gap_no_double, engine, raw_messages


def sync_options(**observation: object) -> dict[str, object]:
    return {
        "observation": {
            "model": scripted_observer(),
            "messageTokens": 1_000,
            "bufferTokens": False,
            **observation,
        },
        "reflection": {"model": scripted_reflector(), "observationTokens": 5_000},
    }


async def test_below_the_threshold_everything_stays_raw(store: Store) -> None:
    om = engine(store, sync_options())
    conv = Conversation()
    first = await om.prepare("t1", "u1", [conv.user(100)])
    assert [m.role for m in first.messages] == ["user"]
    await om.record("t1", "u1", [conv.assistant(100)])
    second = await om.prepare("t1", "u1", [conv.user(100)])
    assert [m.role for m in second.messages] == ["user", "assistant", "user"]
    assert second.status.message_tokens > 0
    assert await om.observations("t1", "u1") == ""


async def test_synchronous_observation_at_the_threshold(store: Store) -> None:
    calls = ModelCalls()
    om = engine(store, {**sync_options(model=scripted_observer(calls=calls))})
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    for _ in range(3):
        await om.prepare("t1", "u1", [conv.user(200)])
        await om.record("t1", "u1", [conv.assistant(200)])
    prepared = await om.prepare("t1", "u1", [conv.user(200)])
    # Each Observer call takes at most message_tokens of messages, so 1,200 tokens take two.
    assert calls.count >= 1
    assert "## New Message History to Observe" in calls.prompts[0]
    log = await om.observations("t1", "u1")
    assert "User said:" in log
    # The current input stays raw; everything before it was observed.
    raw = raw_messages(prepared.messages)
    assert [m.role for m in raw] == ["user"]
    assert any("<observations>" in m.text for m in prepared.messages if m.role == "system")
    assert "data-om-observation-start" in events.types()
    end = events.of("data-om-observation-end")[0]
    assert end.operation_type == "observation"
    assert 500 < end.tokens_observed <= 1_000  # at most message_tokens per call
    await assert_no_gap_no_double(store, "thread:t1", ["t1"])


async def test_background_buffering_then_activation() -> None:
    store = InMemoryStore()
    om = engine(
        store,
        {
            "observation": {"model": scripted_observer(), "messageTokens": 3_000},
            "reflection": {"model": scripted_reflector(), "observationTokens": 20_000},
        },
    )
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    for _ in range(12):
        await om.prepare("t1", "u1", [conv.user(150)])
        await om.record("t1", "u1", [conv.assistant(150)])
        await om.settle()
    assert events.of("data-om-buffering-end"), events.types()
    assert events.of("data-om-activation"), events.types()
    record = await store.get_record("thread:t1")
    assert record is not None
    assert record.cursor["t1"] > 0
    status = await om.status("t1", "u1")
    assert status.message_tokens < 3_000 * 1.2
    await assert_no_gap_no_double(store, "thread:t1", ["t1"])
