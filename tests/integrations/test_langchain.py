"""obsmem.integrations.langchain: ObservationalMemoryMiddleware in ``create_agent``, driven by
LangChain's own fake chat model (GenericFakeChatModel, emitting tool calls), sync and async."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from pydantic import Field

from obsmem import Memory
from obsmem.errors import ConfigError, StoreError
from obsmem.integrations.langchain import ObservationalMemoryMiddleware
from obsmem.integrations.langgraph import from_langchain
from obsmem.messages import Message, ToolCallPart, ToolResultPart
from obsmem.stores import InMemoryStore, SQLiteStore, Store
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector

from ..engine.property_helpers import orphan_results
from ..provider_shapes import PROVIDERS, unpaired_calls
from .helpers import (
    RESOURCE,
    TURNS,
    answer_text,
    assert_memory_in_context,
    assert_pairs_intact,
    assert_reflected,
    make_memory,
    user_turn,
)
from .test_langgraph import sent_of

THREAD = "lc-thread"
CONFIG: Any = {"configurable": {"thread_id": THREAD, "resource_id": RESOURCE}}

# -- LangChain's fake chat model, scripted -------------------------------------------------------

Policy = Callable[[list[BaseMessage]], AIMessage]
"""What the model answers to the messages it was sent."""


_ONE_AT_A_TIME = threading.Lock()


class Chat(GenericFakeChatModel):
    """``GenericFakeChatModel`` that takes tools and keeps every request and the tools offered."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list[list[BaseMessage]])
    offered: list[list[str]] = Field(default_factory=list[list[str]])

    def bind_tools(self, tools: Any, **kwargs: Any) -> Chat:  # type: ignore[override]
        self.offered.append([t.name if isinstance(t, BaseTool) else str(t) for t in tools])
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        with _ONE_AT_A_TIME:  # concurrent runs: each reply is written from its own request
            self.inputs.append(list(messages))
            return super()._generate(messages, *args, **kwargs)

    def texts(self, since: int = 0) -> str:
        """Everything the model was sent from request ``since`` on, as one text."""
        return "\n".join(m.text for request in self.inputs[since:] for m in request)


def chat(policy: Policy) -> Chat:
    """A :class:`Chat` whose next message ``policy`` writes from the request it just got."""
    made: list[Chat] = []

    def replies() -> Iterator[AIMessage]:
        while True:
            yield policy(made[0].inputs[-1])

    made.append(Chat(messages=replies()))
    return made[0]


def call(name: str, args: dict[str, Any], call_id: str, text: str = "") -> AIMessage:
    return AIMessage(
        content=text, tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]
    )


def lookup_then_answer(answer: Callable[[int], str] = answer_text, tool: str = "lookup") -> Policy:
    """Call ``tool`` once per user message, then answer (``answer(n)`` for the n-th answer)."""
    ids = itertools.count(1)
    answers = itertools.count(0)

    def policy(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content=answer(next(answers)))
        return call(tool, {"query": "the page"}, f"call-{next(ids)}")

    return policy


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"page about {query}"


def om_memory(store: Store | None = None, *, calls: ModelCalls | None = None, **om: Any) -> Memory:
    """Synchronous observation at 300 tokens, reflection far away; ``om``: more options."""
    return Memory(
        store if store is not None else InMemoryStore(),
        observational_memory={
            "observation": {
                "model": scripted_observer(calls=calls),
                "messageTokens": 300,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 4_000},
            **om,
        },
    )


def agent_with(model: Chat, memory: Memory, *extra: Any, tools: Any = (lookup,), **kw: Any) -> Any:
    """``create_agent`` with the memory middleware (``kw`` goes to the middleware), then any
    ``extra`` middleware, and a checkpointer."""
    return create_agent(
        model,
        list(tools),
        system_prompt="Be brief.",
        middleware=[ObservationalMemoryMiddleware(memory, **kw), *extra],
        checkpointer=InMemorySaver(),
    )


def roles(stored: list[Message]) -> list[str]:
    return [m.role for m in stored]


async def assert_requests_valid(model: Chat) -> None:
    """Every request pairs each call with its result in every provider's shape."""
    for n, request in enumerate(model.inputs):
        messages = from_langchain(request)
        assert orphan_results(messages) == [], f"request {n}: results without their call"
        for provider in PROVIDERS:
            assert await unpaired_calls(messages, provider) == [], f"request {n} ({provider})"


def assert_each_call_once(stored: list[Message], count: int) -> None:
    """``count`` tool calls, each stored once and answered once, right after it."""
    calls = [p.tool_call_id for m in stored for p in m.parts if isinstance(p, ToolCallPart)]
    results = [p.tool_call_id for m in stored for p in m.parts if isinstance(p, ToolResultPart)]
    assert len(calls) == count
    assert calls == results
    assert len({m.id for m in stored}) == len(stored)
    for n, message in enumerate(stored):
        if any(isinstance(p, ToolCallPart) for p in message.parts):
            assert stored[n + 1].role == "tool", f"the result of message {n} is not next to it"


# -- async and sync --------------------------------------------------------------------------------


async def test_middleware_observes_reflects_and_stores_each_answer_at_once() -> None:
    memory = make_memory()
    model = chat(lookup_then_answer())
    agent = agent_with(model, memory)
    for i in range(TURNS):
        state = await agent.ainvoke({"messages": [("user", user_turn(i))]}, CONFIG)
        assert state["messages"][-1].text == answer_text(i)
        stored = await memory.messages(THREAD)
        assert stored[-1].text == answer_text(i), "the answer was not stored at once"
        await memory.settle()

    assert len(state["messages"]) == 4 * TURNS, "the checkpoint keeps the full history"
    stored = await memory.messages(THREAD)
    assert roles(stored) == ["user", "assistant", "tool", "assistant"] * TURNS
    inputs = [sent_of(m) for m in model.inputs]
    assert all(s.system_text.startswith("Be brief.") for s in inputs)
    assert all(sum(isinstance(m, SystemMessage) for m in r) == 1 for r in model.inputs)
    assert_pairs_intact(inputs)
    assert_memory_in_context(inputs)
    assert model.offered[0] == ["lookup"], "no recall tool without retrieval"
    await assert_reflected(memory, THREAD)
    await memory.aclose()


def test_sync_invoke_and_stream(tmp_path: Path) -> None:
    """``agent.invoke`` and ``agent.stream`` work: the memory does its work on its own loop."""
    memory = make_memory(SQLiteStore(tmp_path / "m.db"))
    model = chat(lookup_then_answer())
    agent = agent_with(model, memory)
    for i in range(TURNS):
        if i % 2:
            state = agent.invoke({"messages": [("user", user_turn(i))]}, CONFIG)
            assert state["messages"][-1].text == answer_text(i)
        else:
            updates = list(agent.stream({"messages": [("user", user_turn(i))]}, CONFIG))
            assert any("model" in u for u in updates)
        stored = memory.run_sync(memory.messages(THREAD))
        assert stored[-1].text == answer_text(i), "the answer was not stored at once"
        memory.run_sync(memory.settle())

    stored = memory.run_sync(memory.messages(THREAD))
    assert roles(stored) == ["user", "assistant", "tool", "assistant"] * TURNS
    inputs = [sent_of(m) for m in model.inputs]
    assert_pairs_intact(inputs)
    assert_memory_in_context(inputs)
    memory.run_sync(assert_reflected(memory, THREAD))
    memory.close()


# -- one agent, many users -------------------------------------------------------------------------


async def test_one_compiled_agent_serves_two_users_by_config_alone() -> None:
    """Resource-scoped memory: Alice's facts reach Alice's new thread, never Bob's context or
    store. Alice is named in ``config["configurable"]``, Bob in the runtime context."""
    memory = om_memory(scope="resource")
    model = chat(lookup_then_answer())
    agent = agent_with(model, memory)
    alice = [
        f"Turn {i}: my secret is {w}. " + "Please remember it. " * 12
        for i, w in enumerate(["Pixel", "Zanzibar", "theremin", "okra"])
    ]
    bob = [
        f"Turn {i}: my note is {w}. " + "Please remember it. " * 12
        for i, w in enumerate(["Porto", "atlases", "gondola", "quinoa"])
    ]
    bob_requests: list[int] = []
    for a, b in zip(alice, bob, strict=True):
        await agent.ainvoke(
            {"messages": [("user", a)]}, {"configurable": {"thread_id": "a-1", "user_id": "alice"}}
        )
        start = len(model.inputs)
        await agent.ainvoke(
            {"messages": [("user", b)]},
            {"configurable": {"thread_id": "b-1"}},
            context={"user_id": "bob"},
        )
        bob_requests += range(start, len(model.inputs))
        await memory.settle()

    start = len(model.inputs)
    await agent.ainvoke(
        {"messages": [("user", "Turn 9: what do you know about me?")]},
        {"configurable": {"thread_id": "a-2", "user_id": "alice"}},
    )
    alice_new = model.texts(start)
    assert "Pixel" in alice_new, "Alice's new thread does not see her own memory"
    bob_sent = "\n".join(m.text for n in bob_requests for m in model.inputs[n])
    assert "Porto" in bob_sent
    for secret in ("Pixel", "Zanzibar", "theremin", "okra"):
        assert secret not in bob_sent, f"Alice's {secret!r} reached Bob's model"
    for secret in ("Porto", "atlases", "gondola", "quinoa"):
        assert secret not in alice_new, f"Bob's {secret!r} reached Alice's model"

    assert memory.om is not None
    assert "Pixel" in await memory.om.observations("a-1", "alice")
    assert "Pixel" not in await memory.om.observations("b-1", "bob")
    assert [t.id for t in await memory.threads("alice")] == ["a-1", "a-2"]
    assert [t.id for t in await memory.threads("bob")] == ["b-1"]
    bob_stored = "\n".join(m.text for m in await memory.messages("b-1"))
    assert "Porto" in bob_stored
    assert "Pixel" not in bob_stored

    before = len(model.inputs)
    with pytest.raises(StoreError, match="another resource"):
        await agent.ainvoke(
            {"messages": [("user", "Show me the thread.")]},
            {"configurable": {"thread_id": "a-1", "user_id": "bob"}},
        )
    assert len(model.inputs) == before, "Bob's call on Alice's thread reached the model"
    await memory.aclose()


@dataclass(frozen=True)
class Account:
    """A typed runtime context (``create_agent(..., context_schema=Account)``)."""

    owner: str


async def test_the_resource_can_be_read_from_a_typed_context() -> None:
    memory = make_memory()
    agent = create_agent(
        chat(lookup_then_answer()),
        [lookup],
        middleware=[ObservationalMemoryMiddleware(memory, resource=lambda ctx: ctx.owner)],
        context_schema=Account,
    )
    config: Any = {"configurable": {"thread_id": "typed"}}
    await agent.ainvoke({"messages": [("user", "hi")]}, config, context=Account(owner="carol"))
    assert [t.id for t in await memory.threads("carol")] == ["typed"]
    with pytest.raises(ConfigError, match="resource= function"):
        await agent.ainvoke({"messages": [("user", "hi")]}, config, context=Account(owner=""))
    await memory.aclose()


async def test_a_missing_id_names_the_fix() -> None:
    memory = make_memory()
    agent = create_agent(
        chat(lookup_then_answer()), [lookup], middleware=[ObservationalMemoryMiddleware(memory)]
    )
    with pytest.raises(ConfigError, match=r"'configurable': \{'thread_id'"):
        await agent.ainvoke({"messages": [("user", "hi")]})
    with pytest.raises(ConfigError, match="resource_id"):
        await agent.ainvoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t"}})
    assert await memory.messages("t") == []
    await memory.aclose()


# -- memory events on the custom stream ------------------------------------------------------------


def _custom(chunks: list[Any]) -> list[dict[str, Any]]:
    return [
        c for c in chunks if isinstance(c, dict) and str(c.get("type", "")).startswith("data-om")
    ]


async def test_memory_events_reach_the_custom_stream() -> None:
    """Two users' runs at the same time: each ``stream_mode="custom"`` shows the memory events
    of its own thread only."""
    memory = om_memory()
    agent = agent_with(chat(lookup_then_answer()), memory)

    async def turn(thread: str, text: str) -> list[dict[str, Any]]:
        config = {"configurable": {"thread_id": thread, "user_id": f"user-{thread}"}}
        said = {"messages": [("user", text)]}
        return _custom([c async for c in agent.astream(said, config, stream_mode="custom")])

    seen: dict[str, list[dict[str, Any]]] = {"s-1": [], "s-2": []}
    for i in range(6):
        both = await asyncio.gather(*(turn(thread, user_turn(i)) for thread in seen))
        for thread, events in zip(seen, both, strict=True):
            assert [e["type"] for e in events].count("data-om-status") == 2, "one per model call"
            seen[thread] += events
    for thread, events in seen.items():
        assert {e["thread_id"] for e in events} == {thread}
        kinds = {e["type"] for e in events}
        assert {"data-om-observation-start", "data-om-observation-end"} <= kinds, kinds
    await memory.aclose()


def test_memory_events_reach_the_sync_custom_stream(tmp_path: Path) -> None:
    memory = om_memory(SQLiteStore(tmp_path / "m.db"))
    agent = agent_with(chat(lookup_then_answer()), memory)
    events: list[dict[str, Any]] = []
    for i in range(6):
        chunks = list(
            agent.stream({"messages": [("user", user_turn(i))]}, CONFIG, stream_mode="custom")
        )
        events += _custom(chunks)
    kinds = [e["type"] for e in events]
    assert kinds.count("data-om-status") == 12, kinds
    assert "data-om-observation-end" in kinds
    assert all(e["thread_id"] == THREAD for e in events)
    memory.close()


# -- a trimmed checkpoint --------------------------------------------------------------------------


async def test_trim_checkpoint_keeps_the_state_to_what_memory_has_not_observed() -> None:
    memory = make_memory()
    model = chat(lookup_then_answer())
    saver = InMemorySaver()
    agent = create_agent(
        model,
        [lookup],
        middleware=[ObservationalMemoryMiddleware(memory, trim_checkpoint=True)],
        checkpointer=saver,
    )
    sizes: list[int] = []
    for i in range(TURNS):
        state = await agent.ainvoke({"messages": [("user", user_turn(i))]}, CONFIG)
        assert state["messages"][-1].text == answer_text(i)
        sizes.append(len(state["messages"]))
        await memory.settle()

    stored = await memory.messages(THREAD)
    assert roles(stored) == ["user", "assistant", "tool", "assistant"] * TURNS, "store has all"
    checkpointed = (await agent.aget_state(CONFIG)).values["messages"]
    assert len(checkpointed) < 2 * TURNS, sizes
    assert max(sizes) < 4 * TURNS
    assert memory.om is not None
    record = await memory.store.get_record(memory.om.key(THREAD, RESOURCE))
    assert record is not None
    cursor = record.cursor[THREAD]
    seqs = {m.id: m.seq for m in stored}
    kept = [seqs[f"lc-{THREAD}-{m.id}"] for m in checkpointed]
    assert all(seq is not None and seq > cursor for seq in kept), (kept, cursor)
    assert not isinstance(checkpointed[0], ToolMessage), "trimming split a call from its result"
    inputs = [sent_of(m) for m in model.inputs]
    assert_pairs_intact(inputs)
    assert_memory_in_context(inputs)
    await memory.aclose()


# -- a long tool loop ------------------------------------------------------------------------------

STEPS = 12


def _page(step: int) -> str:
    return f"Page {step}: " + " ".join(f"fact{step}-{n}" for n in range(120))


async def test_memory_works_between_the_steps_of_a_tool_loop() -> None:
    """One turn of many tool steps: memory observes in the middle of the loop, so later steps
    are sent observations instead of the early pages."""
    memory = om_memory()
    observed_at: list[int] = []
    memory.subscribe(
        lambda e: (
            observed_at.append(len(model.inputs)) if e.type == "data-om-observation-end" else None
        )
    )

    def policy(messages: list[BaseMessage]) -> AIMessage:
        step = len(model.inputs)
        if step > STEPS:
            return AIMessage(content="All pages read.")
        return call("fetch_page", {"step": step}, f"c{step}", f"Step {step}.")

    @tool
    def fetch_page(step: int) -> str:
        """Fetch one page."""
        return _page(step)

    model = chat(policy)
    agent = agent_with(model, memory, tools=[fetch_page])
    config = {**CONFIG, "recursion_limit": 200}
    state = await agent.ainvoke({"messages": [("user", "Read the pages.")]}, config)
    assert state["messages"][-1].text == "All pages read."
    assert len(model.inputs) == STEPS + 1
    assert observed_at, "memory never observed"
    assert min(observed_at) < STEPS, "memory did not work inside the loop"
    last = sent_of(model.inputs[-1])
    assert "<observations>" in last.system_text
    assert "fact1-100" not in last.plain_text, "the first page is still sent raw"
    stored = await memory.messages(THREAD)
    assert roles(stored) == ["user"] + ["assistant", "tool"] * STEPS + ["assistant"]
    assert [m.seq for m in stored] == list(range(1, len(stored) + 1))
    assert_pairs_intact([sent_of(m) for m in model.inputs])
    await memory.aclose()


# -- approvals and interrupts ----------------------------------------------------------------------


def _text(i: int) -> str:
    return f"Turn {i}: look the page up again, please. " + "Context. " * 20


def _found(_: int) -> str:
    return "Here is what I found. " + "All noted and done. " * 4


@tool
def ask_first(query: str) -> str:
    """Look something up, once a person approves."""
    approved: Any = interrupt({"approve": query})
    return f"approved={approved}: page about {query}"


def _approval_agent(flow: str, memory: Memory, model: Chat) -> Any:
    middleware: list[Any] = [ObservationalMemoryMiddleware(memory)]
    tools: list[Any] = [ask_first] if flow == "interrupt-in-a-tool" else [lookup]
    if flow == "approval-then-memory":
        middleware.insert(0, HumanInTheLoopMiddleware({"lookup": True}))
    elif flow == "memory-then-approval":
        middleware.append(HumanInTheLoopMiddleware({"lookup": True}))
    return create_agent(model, tools, middleware=middleware, checkpointer=InMemorySaver())


def _resume(flow: str) -> Command[Any]:
    if flow == "interrupt-in-a-tool":
        return Command(resume=True)
    return Command(resume={"decisions": [{"type": "approve"}]})


@pytest.mark.parametrize(
    "flow", ["approval-then-memory", "memory-then-approval", "interrupt-in-a-tool"]
)
async def test_an_approval_pauses_and_resumes(flow: str) -> None:
    """The run stops on the call, memory observes while it waits (never as interrupted), the run
    resumes: each call and its result stored once, as a pair; every request valid."""
    calls = ModelCalls()
    memory = om_memory(calls=calls)
    name = "ask_first" if flow == "interrupt-in-a-tool" else "lookup"
    model = chat(lookup_then_answer(_found, name))
    agent = _approval_agent(flow, memory, model)
    for i in range(4):
        paused = await agent.ainvoke({"messages": [("user", _text(i))]}, CONFIG)
        assert "__interrupt__" in paused
        waiting = paused["messages"][-1]
        assert isinstance(waiting, AIMessage)
        assert waiting.tool_calls
        stored = await memory.messages(THREAD)
        if flow != "memory-then-approval":
            assert stored[-1].id == f"lc-{THREAD}-{waiting.id}", "the waiting call is stored"
        assert memory.om is not None
        await memory.om.observe(THREAD, RESOURCE)
        await memory.settle()
        assert not any("interrupted" in p for p in calls.prompts), (
            "the waiting call was interrupted"
        )
        done = await agent.ainvoke(_resume(flow), CONFIG)
        assert done["messages"][-1].text.startswith("Here is what I found.")
    stored = await memory.messages(THREAD)
    assert roles(stored) == ["user", "assistant", "tool", "assistant"] * 4
    assert_each_call_once(stored, 4)
    assert sum("Here is what I found." in m.text for m in stored) == 4
    assert calls.count > 0, "memory never observed"
    await assert_requests_valid(model)
    await memory.aclose()


async def test_a_rejected_call_is_stored_with_the_reviewer_answer() -> None:
    memory = om_memory()
    model = chat(lookup_then_answer(_found))
    agent = _approval_agent("memory-then-approval", memory, model)
    await agent.ainvoke({"messages": [("user", _text(0))]}, CONFIG)
    decision = {"type": "reject", "message": "Not today."}
    await agent.ainvoke(Command(resume={"decisions": [decision]}), CONFIG)
    stored = await memory.messages(THREAD)
    assert roles(stored) == ["user", "assistant", "tool", "assistant"]
    [result] = [p for m in stored for p in m.parts if isinstance(p, ToolResultPart)]
    assert "Not today." in str(result.content)
    assert result.is_error
    await assert_requests_valid(model)
    await memory.aclose()


async def test_an_abandoned_approval_is_shown_as_interrupted() -> None:
    """A new input instead of the resume: LangGraph drops the interrupt, and memory answers the
    call that will never run as interrupted, so the request stays valid."""
    memory = om_memory()
    model = chat(lookup_then_answer(_found))
    agent = _approval_agent("approval-then-memory", memory, model)
    await agent.ainvoke({"messages": [("user", _text(0))]}, CONFIG)
    await agent.ainvoke({"messages": [("user", "Never mind, just say hi.")]}, CONFIG)
    first_after = model.inputs[1]
    shown = [m for m in first_after if isinstance(m, ToolMessage)]
    [answer] = shown
    assert "interrupted" in answer.text
    await assert_requests_valid(model)
    await memory.aclose()


# -- recall ----------------------------------------------------------------------------------------


def recall_then_answer(messages: list[BaseMessage]) -> AIMessage:
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(content="Found it.")
    if isinstance(last, HumanMessage) and "look back" in last.text:
        return call("recall", {"page": 1}, "r1")
    return AIMessage(content="Noted.")


def assert_recalled(model: Chat, state: dict[str, Any]) -> None:
    assert all("recall" in names for names in model.offered)
    [result] = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert result.name == "recall"
    assert "My favorite color is teal." in result.text
    assert "recall" in sent_of(model.inputs[-1]).system_text, "the context says how to recall"


FIRST: Any = {"messages": [("user", "My favorite color is teal.")]}
SECOND: Any = {"messages": [("user", "Please look back at what I said.")]}


async def test_the_middleware_gives_the_recall_tool_and_it_answers() -> None:
    memory = om_memory(retrieval=True)
    model = chat(recall_then_answer)
    agent = agent_with(model, memory)
    await agent.ainvoke(FIRST, CONFIG)
    assert_recalled(model, await agent.ainvoke(SECOND, CONFIG))
    await memory.aclose()


def test_the_recall_tool_answers_in_a_sync_run(tmp_path: Path) -> None:
    memory = om_memory(SQLiteStore(tmp_path / "m.db"), retrieval=True)
    model = chat(recall_then_answer)
    agent = agent_with(model, memory)
    agent.invoke(FIRST, CONFIG)
    assert_recalled(model, agent.invoke(SECOND, CONFIG))
    memory.close()


async def test_a_sync_run_works_where_an_event_loop_runs() -> None:
    """``agent.invoke`` from a thread whose loop runs (a notebook cell, an async server) blocks
    while memory's own loop does the work."""
    memory = om_memory(retrieval=True)
    model = chat(recall_then_answer)
    agent = agent_with(model, memory)
    agent.invoke(FIRST, CONFIG)
    assert_recalled(model, agent.invoke(SECOND, CONFIG))
    stored = await asyncio.to_thread(memory.run_sync, memory.messages(THREAD))
    assert roles(stored) == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    await asyncio.to_thread(memory.close)


async def test_without_the_tool_nothing_mentions_recall() -> None:
    """Retrieval on, ``recall=False``: no recall tool, and no request mentions recall, even once
    observations (whose recall ranges are for a model that can recall) are sent."""
    memory = om_memory(retrieval=True)
    model = chat(lookup_then_answer())
    agent = agent_with(model, memory, recall=False)
    for i in range(6):
        await agent.ainvoke({"messages": [("user", user_turn(i))]}, CONFIG)
        await memory.settle()
    assert all(names == ["lookup"] for names in model.offered)
    assert "<observations>" in sent_of(model.inputs[-1]).system_text
    assert "recall" not in model.texts().lower()
    await memory.aclose()


async def test_with_the_tool_the_context_mentions_recall() -> None:
    """The control for the test above: the same run with the tool mentions it."""
    memory = om_memory(retrieval=True)
    model = chat(lookup_then_answer())
    agent = agent_with(model, memory)
    for i in range(6):
        await agent.ainvoke({"messages": [("user", user_turn(i))]}, CONFIG)
        await memory.settle()
    assert all(sorted(names) == ["lookup", "recall"] for names in model.offered)
    assert "recall" in sent_of(model.inputs[-1]).system_text.lower()
    await memory.aclose()


def test_a_langchain_without_agent_middleware_names_the_fix(tmp_path: Path) -> None:
    """langchain before 1.0 is installed often; importing the middleware then says how to get
    one that has it, instead of a bare ModuleNotFoundError."""
    fake = tmp_path / "langchain"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", "import obsmem.integrations.langchain"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 1
    assert "MissingExtraError" in done.stderr
    assert 'pip install "obsmem[langgraph]"' in done.stderr
