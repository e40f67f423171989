"""Every front door costs the same: a plain turn (nothing due) takes 2 store calls, on every
store (SQLite, PostgreSQL, in memory), with observational memory and without.

A door is one entry of ``DOORS``: a function that, given a memory and a thread, returns the
coroutine function running one user turn through it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pa
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem import Agent, Memory
from obsmem.integrations.pydantic_ai import ObservationalMemoryCapability, history_processor
from obsmem.stores import Store
from obsmem.testing import scripted_observer, scripted_reflector

from ..engine.test_round_trips import CountingStore

RESOURCE = "u1"
Turn = Callable[[str], Awaitable[None]]


def _answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
    return pa.ModelResponse(parts=[pa.TextPart("Noted, thank you.")])


def _actor() -> FunctionModel:
    return FunctionModel(_answer)


def _agent(memory: Memory, thread: str) -> Turn:
    agent = Agent("helper", "You help.", _actor(), memory=memory)

    async def turn(text: str) -> None:
        await agent.generate(text, memory={"resource": RESOURCE, "thread": thread})

    return turn


def _capability(memory: Memory, thread: str) -> Turn:
    capability = ObservationalMemoryCapability(memory, resource=RESOURCE, thread=thread)
    agent = PydanticAgent(_actor(), instructions="You help.", capabilities=[capability])

    async def turn(text: str) -> None:
        await agent.run(text)

    return turn


def _history_processor(memory: Memory, thread: str) -> Turn:
    processor = history_processor(memory, resource=RESOURCE, thread=thread)
    agent = PydanticAgent(
        _actor(), instructions="You help.", capabilities=[ProcessHistory(processor)]
    )
    history: list[pa.ModelMessage] = []

    async def turn(text: str) -> None:
        nonlocal history
        history = (await agent.run(text, message_history=history)).all_messages()

    return turn


def _chat_model() -> Any:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class Answers(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    return Answers(messages=iter(AIMessage("Noted, thank you.") for _ in range(100)))


def _graph_turn(graph: Any, thread: str) -> Turn:
    config: Any = {"configurable": {"thread_id": thread, "resource_id": RESOURCE}}

    async def turn(text: str) -> None:
        await graph.ainvoke({"messages": [("user", text)]}, config)

    return turn


def _langgraph_node(memory: Memory, thread: str) -> Turn:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    from obsmem.integrations.langgraph import LangGraphMemory

    lg = LangGraphMemory(memory)
    model = _chat_model()

    async def chatbot(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        sent = await lg.amodel_input(state["messages"], config)
        reply = await model.ainvoke(sent.messages)
        await lg.asave([reply], config)
        return {"messages": [reply]}

    graph = (
        StateGraph(MessagesState)
        .add_node(chatbot)
        .add_edge(START, "chatbot")
        .add_edge("chatbot", END)
        .compile(checkpointer=InMemorySaver())
    )
    return _graph_turn(graph, thread)


def _langgraph_model_node(memory: Memory, thread: str) -> Turn:
    """``LangGraphMemory.model_node``: the whole model node in one call."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    from obsmem.integrations.langgraph import LangGraphMemory

    graph = (
        StateGraph(MessagesState)
        .add_node("model", LangGraphMemory(memory).model_node(_chat_model()))
        .add_edge(START, "model")
        .add_edge("model", END)
        .compile(checkpointer=InMemorySaver())
    )
    return _graph_turn(graph, thread)


def _langgraph_hooks(memory: Memory, thread: str) -> Turn:
    import warnings

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    from obsmem.integrations.langgraph import post_model_hook, pre_model_hook

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        graph = create_react_agent(
            _chat_model(),
            [],
            pre_model_hook=pre_model_hook(memory),
            post_model_hook=post_model_hook(memory),
            checkpointer=InMemorySaver(),
        )
    return _graph_turn(graph, thread)


def _langgraph_compacting(memory: Memory, thread: str, *, post_hook: bool = False) -> Turn:
    """``create_react_agent`` on ``lg.compacting(llm)``, which stores the answer itself: with
    the pre-model hook only, or with the post-model hook too (which then finds it stored)."""
    import warnings

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    from obsmem.integrations.langgraph import LangGraphMemory

    lg = LangGraphMemory(memory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        graph = create_react_agent(
            lg.compacting(_chat_model()),
            [],
            pre_model_hook=lg.pre_model_hook,
            post_model_hook=lg.post_model_hook if post_hook else None,
            checkpointer=InMemorySaver(),
        )
    return _graph_turn(graph, thread)


def _middleware(memory: Memory, thread: str) -> Turn:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from obsmem.integrations.langchain import ObservationalMemoryMiddleware

    graph = create_agent(
        _chat_model(),
        [],
        system_prompt="You help.",
        middleware=[ObservationalMemoryMiddleware(memory)],
        checkpointer=InMemorySaver(),
    )
    return _graph_turn(graph, thread)


@dataclass(frozen=True, slots=True)
class DoorCase:
    name: str
    make: Callable[[Memory, str], Turn]
    stores_reply_next_turn: bool = False
    """The door stores a turn's answer at the next turn (the history processor: its own store
    call then, so a plain turn costs 2 there too, and the last message waits for the next)."""


DOORS = [
    DoorCase("Agent", _agent),
    DoorCase("capability", _capability),
    DoorCase("history_processor", _history_processor, stores_reply_next_turn=True),
    DoorCase("langgraph_node", _langgraph_node),
    DoorCase("langgraph_model_node", _langgraph_model_node),
    DoorCase("langgraph_hooks", _langgraph_hooks),
    DoorCase("langgraph_compacting", _langgraph_compacting),
    DoorCase(
        "langgraph_compacting_and_post_hook",
        lambda memory, thread: _langgraph_compacting(memory, thread, post_hook=True),
    ),
    DoorCase("create_agent_middleware", _middleware),
]


def counted_memory(store: Store, *, om: bool) -> Memory:
    options: dict[str, Any] | bool = (
        {
            "observation": {"model": scripted_observer(), "messageTokens": 30_000},
            "reflection": {"model": scripted_reflector()},
        }
        if om
        else False
    )
    return Memory(CountingStore(store), observational_memory=options)  # type: ignore[arg-type]


@pytest.mark.parametrize("om", [True, False], ids=["om", "no-om"])
@pytest.mark.parametrize("door", DOORS, ids=[d.name for d in DOORS])
async def test_a_plain_turn_costs_two_store_calls(store: Store, door: DoorCase, om: bool) -> None:
    memory = counted_memory(store, om=om)
    counting: CountingStore = memory.store  # type: ignore[assignment]
    turn = door.make(memory, "t1")
    await turn("Hello, I live in Lisbon.")  # the first turn creates the thread
    await memory.settle()
    counting.take()
    for i in range(3):
        await turn(f"Turn {i}: what is the weather?")
        await memory.settle()
        calls = counting.take()
        assert sum(calls.values()) == 2, (door.name, calls)
    stored = await store.list_messages("t1")
    expected = 2 * 4 - (1 if door.stores_reply_next_turn else 0)
    assert len(stored) == expected
    await memory.aclose()
