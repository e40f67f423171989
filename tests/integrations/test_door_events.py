"""Every front door's stream gets a thread's memory events by one rule: the event names the
thread, or it is a resource-scope cycle whose ``thread_ids`` cover it.

In resource scope, a turn on thread ``tb`` (through each door in turn) crosses ``block_after``
with the messages of ``ta`` and ``tb`` together, so a synchronous observation runs: started by
``tb`` (its ``thread_id``), it observes ``ta``'s messages (its ``thread_ids``; ``tb``'s input is
the current step and stays raw). Each door's own stream (``Agent``'s result events, pydantic-ai's
run event stream, the Agents SDK session's ``subscribe``, LangGraph's and ``create_agent``'s
custom stream) shows that cycle's start and end, the very cycle the ledger records for both
threads; a door on ``ta`` listening meanwhile gets the same start and end, by ``thread_ids``.
"""

from __future__ import annotations

from typing import Any

import pytest

from obsmem import Memory
from obsmem.events import Event
from obsmem.integrations.door import Door
from obsmem.memory import ThreadRef
from obsmem.messages import Message, TextPart
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector

from .door_cases import as_fields, streaming_model
from .drivers import (
    DOORS,
    Brain,
    LangGraphDriver,
    Reply,
    SdkDriver,
    Tools,
    _pydantic_ai_model,  # pyright: ignore[reportPrivateUsage]
    make_driver,
)
from .helpers import RESOURCE

FILLER = " ".join(["please", "remember", "this", "detail", "for", "later"] * 6)
CYCLE_TYPES = ("data-om-observation-start", "data-om-observation-end")


def _memory() -> Memory:
    return Memory(
        InMemoryStore(),
        observational_memory={
            "scope": "resource",
            "observation": {
                "model": scripted_observer(words=12),
                "messageTokens": 600,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 40_000},
        },
    )


async def _fill_other_thread(memory: Memory) -> None:
    """Thread ``ta`` of the resource: enough unobserved messages that one more turn on ``tb``
    crosses ``block_after`` (nothing is observed yet)."""
    ref = {"resource": RESOURCE, "thread": "ta"}
    for i in range(5):
        messages = [
            Message(role="user", parts=(TextPart(text=f"On ta, turn {i}: {FILLER}"),)),
            Message(role="assistant", parts=(TextPart(text=f"Noted {i}. {FILLER}"),)),
        ]
        await memory.save(ref, messages, actor_model=None)
    assert (await memory.cycles(ref)) == []


def _answer(messages: list[Message]) -> Reply:
    return Reply(text="Noted, and glad to help.")


async def _turn_collecting(door: str, memory: Memory, text: str) -> list[dict[str, Any]]:
    """One turn on ``tb`` through ``door``; the memory events its own stream handed over."""
    brain, tools = Brain(_answer), Tools()
    got: list[Any] = []
    if door == "agent":
        from obsmem import Agent

        agent = Agent("door", "Be brief.", _pydantic_ai_model(brain), memory=memory)
        result = await agent.generate(text, memory={"resource": RESOURCE, "thread": "tb"})
        got += result.events
    elif door == "pydantic-ai":
        from pydantic_ai import Agent as PydanticAgent

        from obsmem.integrations.pydantic_ai import MemoryEvent, ObservationalMemoryCapability

        model = streaming_model(brain)
        capability = ObservationalMemoryCapability(memory, resource=RESOURCE, thread="tb")
        agent = PydanticAgent(model, capabilities=[capability])

        async def handler(ctx: object, events: Any) -> None:
            async for event in events:
                if isinstance(event, MemoryEvent):
                    got.append(event)

        await agent.run(text, event_stream_handler=handler)
    elif door == "openai-agents":
        driver = SdkDriver(memory, brain, tools, thread="tb", recall=False)
        unsubscribe = driver.session.subscribe(got.append)
        try:
            await driver.turn(text)
        finally:
            unsubscribe()
    else:
        graph_driver = make_driver(door, memory, brain, tools, thread="tb", recall=False)
        assert isinstance(graph_driver, LangGraphDriver)
        async for chunk in graph_driver.graph.astream(
            {"messages": [("user", text)]}, config=graph_driver.config(), stream_mode="custom"
        ):
            got.append(chunk)
    return [as_fields(e) for e in got]


@pytest.mark.parametrize("door", DOORS)
async def test_a_resource_scope_cycle_reaches_the_doors_stream(door: str) -> None:
    memory = _memory()
    await _fill_other_thread(memory)
    listened: list[Event] = []
    other = Door(memory, ThreadRef(thread="ta", resource=RESOURCE))
    unsubscribe = other.subscribe(listened.append)
    try:
        events = await _turn_collecting(door, memory, f"On tb: {FILLER} {FILLER} {FILLER}")
    finally:
        unsubscribe()
    await memory.settle()
    [cycle] = await memory.cycles({"resource": RESOURCE, "thread": "tb"}, kind="observation")
    assert set(cycle.thread_ids) == {"ta", "tb"}  # one cycle observed both threads
    assert await memory.cycles({"resource": RESOURCE, "thread": "ta"}, kind="observation") == [
        cycle
    ]
    # The door's own stream: the cycle's start and end, with both threads.
    mine = [e for e in events if e.get("cycle_id") == cycle.cycle_id]
    assert [e["type"] for e in mine] == list(CYCLE_TYPES), [e.get("type") for e in events]
    # Started by tb's turn, it observed ta's messages (tb's input is the current step, raw).
    assert [(e["thread_id"], tuple(e["thread_ids"])) for e in mine] == [("tb", ("ta",))] * 2
    # A stream of ta, listening meanwhile: the same cycle, start and end, by thread_ids.
    theirs = [e.to_dict() for e in listened if getattr(e, "cycle_id", None) == cycle.cycle_id]
    assert [e["type"] for e in theirs] == list(CYCLE_TYPES)
    assert [(e["thread_id"], tuple(e["thread_ids"])) for e in theirs] == [("tb", ("ta",))] * 2
    await memory.aclose()


async def test_a_cycle_of_another_thread_stays_out_of_the_stream() -> None:
    """Thread scope: a cycle on ``ta`` never reaches a stream of ``tb``."""
    memory = Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {"model": scripted_observer(), "messageTokens": 300},
        },
    )
    got: list[Event] = []
    tb = Door(memory, ThreadRef(thread="tb", resource=RESOURCE))
    unsubscribe = tb.subscribe(got.append)
    ta = {"resource": RESOURCE, "thread": "ta"}
    for i in range(3):
        message = Message(role="user", parts=(TextPart(text=f"{i} {FILLER}"),))
        await memory.save(ta, [message], actor_model=None)
    assert await memory.compact(ta, keep_tokens=0)
    unsubscribe()
    assert await memory.cycles(ta, kind="observation")
    assert got == []
    await memory.aclose()
