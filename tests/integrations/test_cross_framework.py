"""One thread, many front doors: a conversation started in one framework continues in another
on the same Memory and sees the earlier observations."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

from obsmem.integrations.langgraph import post_model_hook, pre_model_hook
from obsmem.integrations.openai_agents import ObservationalSession
from obsmem.integrations.pydantic_ai import ObservationalMemoryCapability
from obsmem.messages import Message, TextPart

from . import test_langgraph as lg
from . import test_openai_agents as oa
from . import test_pydantic_ai as pai
from .drivers import DOORS, Brain, assert_requests_valid, assert_stored_once, make_driver
from .helpers import RESOURCE, assert_pairs_intact, make_memory, user_turn

THREAD = "shared"


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
async def test_a_thread_moves_between_frameworks() -> None:
    memory = make_memory()

    actor = pai.Actor()
    capability = ObservationalMemoryCapability(memory, resource=RESOURCE, thread=THREAD)
    agent = pai.agent_with(actor, capabilities=[capability])
    for i in range(5):
        await agent.run(user_turn(i))
        await memory.settle()
    assert memory.om is not None
    assert "Turn 0" in await memory.om.observations(THREAD, RESOURCE)

    sdk_model = oa.ScriptedModel()
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    await oa.Runner.run(
        oa.make_agent(sdk_model), user_turn(5), session=session, run_config=oa.OFFLINE
    )
    await memory.settle()
    sdk_inputs = [oa.sent_of(i) for i in sdk_model.inputs]
    assert "User said: Turn 0" in sdk_inputs[0].system_text
    assert_pairs_intact(sdk_inputs)

    chat = lg.ScriptedChat(messages=lg.script(1), inputs=[])
    graph = create_react_agent(
        chat,
        [lg.weather],
        pre_model_hook=pre_model_hook(memory, resource=RESOURCE, thread=THREAD),
        post_model_hook=post_model_hook(memory, resource=RESOURCE, thread=THREAD),
        checkpointer=InMemorySaver(),
    )
    await graph.ainvoke(
        {"messages": [HumanMessage(user_turn(6))]}, {"configurable": {"thread_id": "g"}}
    )
    await memory.settle()
    lg_inputs = [lg.sent_of(m) for m in chat.inputs]
    assert "User said: Turn 0" in lg_inputs[0].system_text
    assert_pairs_intact(lg_inputs)

    actor.turn = 7
    await agent.run(user_turn(7))
    back = pai.sent_of(actor.inputs[-2])
    assert "User said: Turn 0" in back.system_text
    assert "Turn 6" in back.system_text + back.plain_text, "the LangGraph turn is remembered"
    assert_pairs_intact([pai.sent_of(m) for m in actor.inputs])

    stored = await memory.messages(THREAD)
    assert [m.text for m in stored if m.role == "user"] == [user_turn(i) for i in range(8)]
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"] * 8


def _said(request: list[Message]) -> str:
    return "\n".join(p.text for m in request for p in m.parts if isinstance(p, TextPart))


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
@pytest.mark.parametrize("door", DOORS)
async def test_a_thread_carries_into_each_door_and_back(door: str) -> None:
    """Five turns through the door before ``door`` in :data:`DOORS` (the last one for the
    first), one through ``door``, one back: ``door`` is sent the earlier observations, the first
    door remembers its turn, and every message is stored once."""
    memory = make_memory()
    brain = Brain()
    first = make_driver(DOORS[DOORS.index(door) - 1], memory, brain, thread=THREAD)
    for i in range(5):
        assert await first.turn(user_turn(i))
        await memory.settle()
    assert memory.om is not None
    assert "Turn 0" in await memory.om.observations(THREAD, RESOURCE)

    start = len(brain.requests)
    assert await make_driver(door, memory, brain, thread=THREAD).turn(user_turn(5))
    await memory.settle()
    assert "User said: Turn 0" in _said(brain.requests[start])
    assert "Turn 5:" in _said(brain.requests[start])

    start = len(brain.requests)
    assert await first.turn(user_turn(6))
    assert "Turn 5" in _said(brain.requests[start]), f"the {door} turn is not remembered"
    await assert_requests_valid(brain)
    stored = await memory.messages(THREAD)
    assert [m.text for m in stored if m.role == "user"] == [user_turn(i) for i in range(7)]
    assert_stored_once(stored, turns=7)
    await memory.aclose()
