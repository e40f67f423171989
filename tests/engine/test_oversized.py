"""A part far larger than anything a model takes (a 5 MB paste) is observed within the cap, and
observation carries on after it; the stored message stays whole."""

from __future__ import annotations

from obsmem.engine import ObservationalMemory
from obsmem.messages import Message
from obsmem.stores import InMemoryStore
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector
from obsmem.tokens import HeuristicEstimator

from .helpers import Conversation, Recorder


async def test_a_5mb_message_is_observed_within_the_cap_and_observation_goes_on() -> None:
    conv = Conversation()
    calls = ModelCalls()
    om = ObservationalMemory(
        InMemoryStore(),
        {
            "observation": {
                "model": scripted_observer(calls=calls),
                "messageTokens": 3_000,
                "maxPartTokens": 2_000,
            },
            "reflection": {"model": scripted_reflector()},
        },
        clock=conv.clock,
    )
    events = Recorder()
    om.subscribe(events)
    huge = Message.user("lorem ipsum dolor sit amet " * 200_000, created_at=conv.user(1).created_at)
    assert len(huge.text) > 5_000_000
    await om.prepare("t1", "u1", [huge])
    await om.record("t1", "u1", [conv.assistant(100)])
    await om.settle()
    for _ in range(12):
        await om.prepare("t1", "u1", [conv.user(150)])
        await om.record("t1", "u1", [conv.assistant(150)])
        await om.settle()
    assert await om.observe("t1", "u1")
    estimator = HeuristicEstimator()
    assert calls.count >= 2  # the huge message's cycle, and later ones
    for prompt in calls.prompts:
        assert estimator.count_text(prompt) < 6_000  # the cap, the prompt, a few messages
    assert any(f'recall cursor="{huge.id}" part_index=0' in p for p in calls.prompts)
    assert not events.of("data-om-observation-failed")
    assert not events.of("data-om-buffering-failed")
    record = await om.store.get_record("thread:t1")
    assert record is not None
    stored = await om.store.list_messages("t1")
    assert record.cursor["t1"] == len(stored)  # everything observed, the huge message included
    assert stored[0].text == huge.text  # stored whole
    await om.aclose()
