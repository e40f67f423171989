"""Approval flows: a run pauses on a tool call that waits for a person, memory keeps working
while it waits, and the run resumes. Nothing is duplicated or lost, the waiting call is never
observed as interrupted, and every request stays valid in each provider's shape.

pydantic-ai's deferred tools (through the capability), the Agents SDK's ``needs_approval``
(through the session and its input filter) and LangGraph's ``interrupt`` (through the hooks)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from obsmem import Memory
from obsmem.messages import Message, TextPart, ToolCallPart, ToolResultPart
from obsmem.stores import InMemoryStore
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector
from obsmem.window import is_deferred

from ..provider_shapes import PROVIDERS, unpaired_calls
from .drivers import (
    Brain,
    SdkDriver,
    Tools,
    assert_requests_valid,
    assert_stored_once,
    langchain_model,
)
from .helpers import RESOURCE

THREAD = "approval-thread"


def _memory(calls: ModelCalls) -> Memory:
    return Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {"model": scripted_observer(calls=calls), "messageTokens": 300},
            "reflection": {"model": scripted_reflector(), "observationTokens": 4_000},
        },
    )


def _text(i: int) -> str:
    return f"Turn {i}: look the page up again, please. " + "Context. " * 20


async def _observe_while_waiting(memory: Memory, calls: ModelCalls) -> None:
    """Memory works while the approval waits (another worker observing the thread)."""
    assert memory.om is not None
    await memory.om.observe(THREAD, RESOURCE)
    await memory.settle()
    assert not any("interrupted" in p for p in calls.prompts), "the waiting call was interrupted"


async def _assert_whole(memory: Memory, brain: Brain, *, turns: int) -> None:
    """Each turn's input, each call and result, each answer stored once; every request valid
    in every provider's shape."""
    stored = await memory.messages(THREAD)
    assert_stored_once(stored, turns=turns)
    assert len([p for m in stored for p in m.parts if isinstance(p, ToolCallPart)]) == turns
    await assert_requests_valid(brain)


def _approval_agent(memory: Memory, brain: Brain) -> Any:
    """An ``obsmem.Agent`` whose ``lookup`` tool needs approval."""
    from pydantic_ai import Tool

    from obsmem import Agent

    from .drivers import _pydantic_ai_model  # pyright: ignore[reportPrivateUsage]

    lookup = Tool(Tools().lookup, requires_approval=True)
    return Agent("door", "Be brief.", _pydantic_ai_model(brain), memory=memory, tools=[lookup])


async def test_pydantic_ai_deferred_tool_pauses_and_resumes() -> None:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults

    from obsmem.integrations.pydantic_ai import ObservationalMemoryCapability

    calls = ModelCalls()
    memory = _memory(calls)
    brain = Brain()
    tools = Tools()
    from .drivers import _pydantic_ai_model  # pyright: ignore[reportPrivateUsage]

    agent = Agent(
        _pydantic_ai_model(brain),
        instructions="Be brief.",
        capabilities=[ObservationalMemoryCapability(memory, resource=RESOURCE, thread=THREAD)],
        output_type=[str, DeferredToolRequests],
    )
    agent.tool_plain(requires_approval=True)(tools.lookup)
    for i in range(4):
        paused = await agent.run(_text(i))
        assert isinstance(paused.output, DeferredToolRequests)
        [call] = paused.output.approvals
        stored_call = [
            p
            for m in await memory.messages(THREAD)
            for p in m.parts
            if isinstance(p, ToolCallPart) and p.tool_call_id == call.tool_call_id
        ]
        assert len(stored_call) == 1
        assert is_deferred(stored_call[0]), "the waiting call was not marked deferred"
        await _observe_while_waiting(memory, calls)
        done = await agent.run(
            message_history=paused.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}),
        )
        assert isinstance(done.output, str)
    await _assert_whole(memory, brain, turns=4)
    await memory.aclose()


async def test_obsmem_agent_approval_pauses_and_resumes() -> None:
    calls = ModelCalls()
    memory = _memory(calls)
    brain = Brain()
    agent = _approval_agent(memory, brain)
    ids = {"resource": RESOURCE, "thread": THREAD}
    for i in range(4):
        paused = await agent.generate(_text(i), memory=ids)
        assert paused.text == ""
        [call] = paused.pending
        assert is_deferred(call), "the waiting call was not stored marked deferred"
        await _observe_while_waiting(memory, calls)
        done = await agent.generate(None, memory=ids, approvals={call.tool_call_id: True})
        assert done.text.startswith("Here is what I found.")
        assert done.pending == ()
    await _assert_whole(memory, brain, turns=4)
    await memory.aclose()


async def test_obsmem_agent_refuses_approvals_it_cannot_apply() -> None:
    from obsmem.errors import ConfigError

    memory = _memory(ModelCalls())
    agent = _approval_agent(memory, Brain())
    ids = {"resource": RESOURCE, "thread": THREAD}
    paused = await agent.generate(_text(0), memory=ids)
    [call] = paused.pending
    with pytest.raises(ConfigError, match="last step is waiting on"):
        await agent.generate(None, memory=ids, approvals={"no-such-call": True})
    with pytest.raises(ConfigError, match="input=None"):
        await agent.generate("hi", memory=ids, approvals={call.tool_call_id: True})
    with pytest.raises(ConfigError, match="needs memory"):
        await agent.generate(None, approvals={call.tool_call_id: True})
    refused = await agent.generate(None, memory=ids, approvals={call.tool_call_id: "Not today."})
    assert refused.text.startswith("Here is what I found.")
    stored = await memory.messages(THREAD)
    [result] = [p for m in stored for p in m.parts if isinstance(p, ToolResultPart)]
    assert "Not today." in str(result.content)
    await memory.aclose()


async def test_agents_sdk_needs_approval_pauses_and_resumes() -> None:
    from agents import Runner

    calls = ModelCalls()
    memory = _memory(calls)
    brain = Brain()
    driver = SdkDriver(memory, brain, Tools(), thread=THREAD, recall=False)
    agent = driver.agent(needs_approval=True)
    for i in range(4):
        paused = await Runner.run(
            agent, _text(i), session=driver.session, run_config=driver.run_config()
        )
        assert len(paused.interruptions) == 1
        await _observe_while_waiting(memory, calls)
        state = paused.to_state()
        state.approve(paused.interruptions[0])
        done = await Runner.run(
            agent, state, session=driver.session, run_config=driver.run_config()
        )
        assert str(done.final_output).startswith("Here is what I found.")
    await _assert_whole(memory, brain, turns=4)
    await memory.aclose()


async def test_langgraph_interrupt_pauses_and_resumes() -> None:
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent
    from langgraph.types import Command, interrupt

    from obsmem.integrations.langgraph import hold_waiting_calls, post_model_hook, pre_model_hook

    calls = ModelCalls()
    memory = _memory(calls)
    brain = Brain()

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        approved: Any = interrupt({"approve": query})
        return f"approved={approved}: the page"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        graph = create_react_agent(
            langchain_model(brain),
            [lookup],
            pre_model_hook=pre_model_hook(memory, resource=RESOURCE),
            post_model_hook=post_model_hook(memory, resource=RESOURCE),
            checkpointer=InMemorySaver(),
        )
    config: Any = {"configurable": {"thread_id": THREAD}}
    for i in range(4):
        paused = await graph.ainvoke({"messages": [("user", _text(i))]}, config=config)
        assert "__interrupt__" in paused
        held = await hold_waiting_calls(memory, paused, config, resource=RESOURCE)
        assert held == [f"call-{i + 1}"]
        await _observe_while_waiting(memory, calls)
        done = await graph.ainvoke(Command(resume=True), config=config)
        assert str(done["messages"][-1].content).startswith("Here is what I found.")
    await _assert_whole(memory, brain, turns=4)
    await memory.aclose()


async def test_a_deferred_call_waits_across_turns() -> None:
    """The user goes on talking while an approval waits: the call is never observed as
    interrupted, each request shows it answered "waiting" (so providers accept it), and the
    late result, once approved, is kept and shown as text."""
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults

    from obsmem.integrations.pydantic_ai import ObservationalMemoryCapability

    from .drivers import _pydantic_ai_model  # pyright: ignore[reportPrivateUsage]

    calls = ModelCalls()
    memory = _memory(calls)
    asked: list[str] = []

    def policy(messages: list[Message]) -> Any:
        from .drivers import Reply

        user = next(m for m in reversed(messages) if m.role != "system")
        if user.role == "user" and "approve" in user.text:
            asked.append(user.text)
            return Reply(text="Checking.", calls=[("lookup", {"query": "the page"})])
        return Reply(text="Noted. " * 10)

    brain = Brain(policy)
    tools = Tools()
    agent = Agent(
        _pydantic_ai_model(brain),
        capabilities=[ObservationalMemoryCapability(memory, resource=RESOURCE, thread=THREAD)],
        output_type=[str, DeferredToolRequests],
    )
    agent.tool_plain(requires_approval=True)(tools.lookup)
    paused = await agent.run("Please approve a lookup of the page.")
    assert isinstance(paused.output, DeferredToolRequests)
    [call] = paused.output.approvals
    for i in range(8):
        assert await agent.run(_text(i))
    assert not any("interrupted" in p for p in calls.prompts)
    for n, request in enumerate(brain.requests):
        for provider in PROVIDERS:
            assert await unpaired_calls(request, provider) == [], f"request {n} ({provider})"
    tools.page = "approved page"
    await agent.run(
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}),
    )
    stored = await memory.messages(THREAD)
    results = [p for m in stored for p in m.parts if isinstance(p, ToolResultPart)]
    assert [str(r.content) for r in results] == ["approved page"]
    for n, request in enumerate(brain.requests):
        for provider in PROVIDERS:
            assert await unpaired_calls(request, provider) == [], f"request {n} ({provider})"
    await memory.aclose()


def _approve_on_request(messages: list[Message]) -> Any:
    """Call ``lookup`` when the user asks for an approval; otherwise just answer."""
    from .drivers import Reply

    last = next(m for m in reversed(messages) if m.role != "system")
    if last.role == "user" and "approve" in last.text:
        return Reply(text="Checking.", calls=[("lookup", {"query": "the page"})])
    if last.role == "tool":
        return Reply(text="Here is what I found. " + "Done. " * 5)
    return Reply(text="Noted. " * 10)


async def test_agents_sdk_approval_waits_across_turns() -> None:
    """The Agents SDK run stops on an approval, the user goes on with new runs, then the saved
    run is approved: the call is held back meanwhile (never observed as interrupted), every
    request is valid, and the late result is stored once."""
    from agents import Runner

    calls = ModelCalls()
    memory = _memory(calls)
    brain = Brain(_approve_on_request)
    tools = Tools()
    driver = SdkDriver(memory, brain, tools, thread=THREAD, recall=False)
    agent = driver.agent(needs_approval=True)
    paused = await Runner.run(
        agent, "Please approve a lookup.", session=driver.session, run_config=driver.run_config()
    )
    [waiting] = paused.interruptions
    state = paused.to_state()
    for i in range(8):
        await Runner.run(agent, _text(i), session=driver.session, run_config=driver.run_config())
    assert not any("interrupted" in p for p in calls.prompts), "the waiting call was interrupted"
    tools.page = "approved page"
    state.approve(waiting)
    await Runner.run(agent, state, session=driver.session, run_config=driver.run_config())
    stored = await memory.messages(THREAD)
    results = [p for m in stored for p in m.parts if isinstance(p, ToolResultPart)]
    assert [str(r.content) for r in results] == ["approved page"]
    texts = [p.text for m in stored for p in m.parts if isinstance(p, TextPart)]
    for i in range(8):
        assert sum(t.startswith(f"Turn {i}:") for t in texts) == 1, i
    await assert_requests_valid(brain)
    await memory.aclose()


async def test_a_held_call_waits_until_it_is_let_go() -> None:
    """``Memory.hold_calls``: a held call is answered "waiting" in the context and never
    observed while held; once let go it is observed as interrupted and observation moves on."""
    from obsmem.context import WAITING
    from obsmem.memory import ThreadRef

    calls = ModelCalls()
    memory = _memory(calls)
    assert memory.om is not None
    ref = ThreadRef(thread=THREAD, resource=RESOURCE)
    call = ToolCallPart(tool_name="lookup", args={}, tool_call_id="asked")
    await memory.save(
        ref,
        [Message.user("Ask the boss."), Message(role="assistant", parts=(call,))],
        actor_model=None,
    )
    await memory.hold_calls(ref, ["asked"])
    for i in range(6):
        context = await memory.context(ref, [Message.user(_text(i))], actor_model=None)
        await memory.save(ref, [Message.assistant("Noted. " * 10)], actor_model=None)
        answers = [p for m in context.messages for p in m.parts if isinstance(p, ToolResultPart)]
        assert [str(a.content) for a in answers] == [WAITING]
    await memory.settle()
    assert not any("interrupted" in p for p in calls.prompts)
    assert (await memory.om.status(THREAD, RESOURCE)).message_tokens > 300
    await memory.hold_calls(ref, ["asked"], held=False)
    await memory.context(ref, [Message.user("And now?")], actor_model=None)
    await memory.settle()
    assert any("interrupted" in p for p in calls.prompts)
    assert (await memory.om.status(THREAD, RESOURCE)).message_tokens <= 360
    await memory.aclose()
