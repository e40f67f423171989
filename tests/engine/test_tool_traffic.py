"""Tool traffic that real runs leave behind never stops memory: a call left without its result
(an aborted run) is observed as interrupted and shown closed, a result without its call never
fails a turn, and a call the latest step still waits for stays raw."""

from __future__ import annotations

import pytest

from obsmem.engine import ObservationalMemory
from obsmem.messages import Message, TextPart, ToolCallPart, ToolResultPart
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector

from ..provider_shapes import PROVIDERS, unpaired_calls
from .helpers import Conversation, Recorder, raw_messages


def _engine(conv: Conversation, **observation: object) -> ObservationalMemory:
    return ObservationalMemory(
        InMemoryStore(),
        {
            "observation": {
                "model": scripted_observer(),
                "messageTokens": 3_000,
                **observation,
            },
            "reflection": {"model": scripted_reflector()},
        },
        clock=conv.clock,
    )


def _aborted_step(conv: Conversation) -> Message:
    """An assistant step whose tool call never got its result (the run ended first)."""
    return Message(
        role="assistant",
        parts=(
            TextPart(text="Let me open that page."),
            ToolCallPart(tool_call_id="dangling-1", tool_name="browse", args={"url": "x"}),
        ),
        created_at=conv.assistant(10).created_at,
    )


@pytest.mark.parametrize("buffering", [True, False])
async def test_a_dangling_call_never_stops_observation(buffering: bool) -> None:
    conv = Conversation()
    om = _engine(conv, **({} if buffering else {"bufferTokens": False}))
    events = Recorder()
    om.subscribe(events)
    await om.prepare("t1", "u1", [conv.user(100)])
    await om.record("t1", "u1", [_aborted_step(conv)])
    for turn in range(40):
        prepared = await om.prepare("t1", "u1", [conv.user(150)])
        # The window stays bounded: the open call does not pin everything after it.
        assert prepared.status.message_tokens <= 3_600, turn
        # Every request has each call paired with its result, in every provider's shape.
        if turn % 10 == 0:
            for provider in PROVIDERS:
                assert await unpaired_calls(prepared.messages, provider) == [], provider
        await om.record("t1", "u1", [conv.assistant(150)])
        await om.settle()
    assert await om.observe("t1", "u1")
    log = await om.observations("t1", "u1")
    assert "interrupted" in log  # observed, and observed as interrupted
    record = await om.store.get_record("thread:t1")
    assert record is not None
    assert record.cursor["t1"] >= 2  # the call's message is behind the cursor
    assert not events.of("data-om-observation-failed")
    assert not events.of("data-om-buffering-failed")
    await om.aclose()


async def test_the_latest_steps_pending_call_stays_raw() -> None:
    conv = Conversation()
    om = _engine(conv)
    await om.prepare("t1", "u1", [conv.user(3_500)])
    waiting = Message(
        role="assistant",
        parts=(ToolCallPart(tool_call_id="now-1", tool_name="search", args={"q": "x"}),),
        created_at=conv.assistant(5).created_at,
    )
    await om.record("t1", "u1", [waiting])
    await om.settle()
    # A synchronous observation (past block_after) takes everything but the waiting call.
    assert await om.observe("t1", "u1")
    prepared = await om.prepare("t1", "u1", [])
    assert [m.id for m in raw_messages(prepared.messages)] == [waiting.id]
    # Its result arrives: both are observed together.
    result = Message(
        role="tool",
        parts=(ToolResultPart(tool_call_id="now-1", tool_name="search", content="found"),),
        created_at=conv.assistant(5).created_at,
    )
    await om.record("t1", "u1", [result])
    assert await om.observe("t1", "u1")
    assert "found" in await om.observations("t1", "u1")
    assert "interrupted" not in await om.observations("t1", "u1")
    await om.aclose()


@pytest.mark.parametrize("buffering", [True, False])
async def test_an_orphan_result_never_fails_a_turn(buffering: bool) -> None:
    conv = Conversation()
    om = _engine(conv, **({} if buffering else {"bufferTokens": False}))
    orphan = Message(
        role="tool",
        parts=(
            ToolResultPart(tool_call_id="lost-call", tool_name="lookup", content="orphan value"),
        ),
        created_at=conv.user(5).created_at,
    )
    prepared = await om.prepare("t1", "u1", [orphan, conv.user(100)])
    shown = next(m for m in prepared.messages if m.id == orphan.id)
    assert shown.role == "user"
    assert "orphan value" in shown.text
    for provider in PROVIDERS:
        assert await unpaired_calls(prepared.messages, provider) == []
    for _ in range(30):
        await om.record("t1", "u1", [conv.assistant(150)])
        await om.settle()
        prepared = await om.prepare("t1", "u1", [conv.user(150)])
    assert "orphan value" in await om.observations("t1", "u1")  # stored, then observed
    assert orphan.id not in [m.id for m in raw_messages(prepared.messages)]
    await om.aclose()
