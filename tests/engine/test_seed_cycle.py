"""The seed's cycle at default options over a conversation of more than a million tokens."""

from __future__ import annotations

import statistics

import pytest

from obsmem.messages import Message, ToolCallPart, ToolResultPart
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector
from obsmem.tokens import HeuristicEstimator

from .helpers import Conversation, Recorder, engine, raw_messages, text_of

TURNS = 210


def _turn(conv: Conversation, n: int) -> tuple[Message, list[Message]]:
    user = conv.user(800)
    call = Message(
        role="assistant",
        parts=(ToolCallPart(tool_call_id=f"c{n}", tool_name="search", args={"q": f"q{n}"}),),
        created_at=user.created_at,
    )
    result = Message(
        role="tool",
        parts=(
            ToolResultPart(
                tool_call_id=f"c{n}", tool_name="search", content=text_of(1_600, conv.rng)
            ),
        ),
        created_at=user.created_at,
    )
    return user, [call, result, conv.assistant(2_500)]


@pytest.mark.slow
async def test_a_million_token_conversation_follows_the_seed_cycle() -> None:
    store = InMemoryStore()
    om = engine(
        store,
        {
            "observation": {"model": scripted_observer(words=80)},
            "reflection": {"model": scripted_reflector(keep=0.4, words=40)},
        },
    )
    events = Recorder()
    om.subscribe(events)
    estimator = HeuristicEstimator()
    conv = Conversation(minutes_per_turn=20)
    total = 0
    largest_raw = 0
    largest_log = 0
    after_activation: list[int] = []
    for n in range(TURNS):
        user, reply = _turn(conv, n)
        seen = len(events.events)
        prepared = await om.prepare("t1", "u1", [user])
        raw = sum(estimator.count_message(m) for m in raw_messages(prepared.messages))
        largest_raw = max(largest_raw, raw)
        largest_log = max(largest_log, prepared.record.observation_tokens)
        if any(e.type == "data-om-activation" for e in events.events[seen:]):
            after_activation.append(raw)
        await om.record("t1", "u1", reply)
        await om.settle()
        total += sum(estimator.count_message(m) for m in [user, *reply])

    assert total > 1_000_000

    # Chunks about every 6k tokens, 3k near the threshold.
    buffered = [
        e.tokens_to_buffer
        for e in events.of("data-om-buffering-start")
        if e.operation_type == "observation"
    ]
    assert len(buffered) > 100
    assert all(3_000 <= t <= 6_000 + 2_600 for t in buffered), sorted(buffered)[:5]
    assert 6_000 <= statistics.median(buffered) <= 8_600
    assert any(t < 6_000 for t in buffered), "the interval should halve near the threshold"

    # Activation at >= 30k, leaving about 6k raw (within chunk granularity).
    statuses = events.of("data-om-status")
    activations = [e for e in events.of("data-om-activation") if e.operation_type == "observation"]
    assert activations
    assert all(e.triggered_by == "threshold" for e in activations)
    assert statuses
    assert max(s.message_tokens for s in statuses) >= 30_000
    assert after_activation
    assert all(1_000 <= raw <= 6_000 + 8_600 for raw in after_activation), after_activation
    assert 3_000 <= statistics.median(after_activation) <= 10_000

    # Reflection once the log passes 40k.
    reflections = [
        e
        for e in events.events
        if e.type in ("data-om-activation", "data-om-observation-end")
        and e.operation_type == "reflection"
    ]
    assert reflections, "the log should have been reflected"
    history = await om.history("t1", "u1")
    assert len(history) >= 2
    assert all(r.observation_tokens < 48_000 for r in history)

    # The window never goes past the block_after bounds.
    assert largest_raw <= 36_000
    assert largest_log <= 48_000
    assert not events.of("data-om-observation-failed")
