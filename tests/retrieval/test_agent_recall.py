"""Retrieval end to end: observation groups with message ranges, the recall tool in an agent's
hands, semantic search with the real local embedder, and strict isolation."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem import Agent, Memory, Message
from obsmem.recall import RECALL_GUIDANCE
from obsmem.stores import InMemoryStore, Store
from obsmem.testing import scripted_observer, scripted_reflector

OPTS = {"resource": "alice", "thread": "t1"}
CODE = "4417-alpha-zulu"


def _options(**retrieval: Any) -> dict[str, Any]:
    return {
        "retrieval": retrieval or True,
        "observation": {
            "model": scripted_observer(words=8),
            "messageTokens": 400,
            "bufferTokens": False,
        },
        "reflection": {"model": scripted_reflector(), "observationTokens": 5_000},
    }


def _text(messages: list[pa.ModelMessage]) -> str:
    return "\n".join(
        p.content for m in messages for p in m.parts if isinstance(getattr(p, "content", None), str)
    )


async def test_an_agent_pages_back_to_the_exact_wording(store: Store) -> None:
    calls: list[dict[str, Any]] = []

    def actor(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        seen = _text(messages)
        last = messages[-1]
        returned = [p for p in last.parts if isinstance(p, pa.ToolReturnPart)]
        if returned:
            found = re.search(r"\d{4}-alpha-zulu", str(returned[0].content))
            return pa.ModelResponse(
                parts=[pa.TextPart(content=f"The code is {found[0] if found else '?'}")]
            )
        if "exactly" in str(last.parts[-1].content if hasattr(last.parts[-1], "content") else ""):
            assert "recall" in [t.name for t in info.function_tools]
            start = re.search(r"\[recall range (msg-[^:\]]+):", seen)
            assert start, "the observations carry their message range"
            args = {"cursor": start[1], "page": 1, "limit": 5, "detail": "high"}
            calls.append(args)
            return pa.ModelResponse(parts=[pa.ToolCallPart("recall", args, "r1")])
        return pa.ModelResponse(parts=[pa.TextPart(content="Noted.")])

    memory = Memory(store, observational_memory=_options())
    agent = Agent(id="a", instructions="Hi.", model=FunctionModel(actor), memory=memory)
    await agent.generate(
        "Please store this for the trip: our cabin has a keypad, and after a long story about "
        f"the landlord and the snow, the door code is {CODE}.",
        memory=OPTS,
    )
    for i in range(6):
        await agent.generate(
            f"Unrelated chat number {i} about the weather and the roads. " * 4, memory=OPTS
        )
    log = await memory.om.observations("t1", "alice")  # type: ignore[union-attr]
    assert CODE not in log, "the Observer kept only the gist"
    result = await agent.generate("What was the door code, exactly?", memory=OPTS)
    assert calls
    assert CODE in result.text
    guidance = [m.text for m in result.context if m.role == "system" and "recall" in m.text]
    assert guidance
    assert RECALL_GUIDANCE.splitlines()[0] in guidance[0]


async def test_groups_carry_ranges_and_survive_reflection() -> None:
    store = InMemoryStore()
    memory = Memory(
        store,
        observational_memory={
            "retrieval": True,
            "observation": {
                "model": scripted_observer(words=30),
                "messageTokens": 300,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 200},
        },
    )
    agent = Agent(
        id="a",
        instructions="Hi.",
        model=FunctionModel(lambda m, i: pa.ModelResponse(parts=[pa.TextPart(content="ok " * 30)])),
        memory=memory,
    )
    for i in range(10):
        await agent.generate(
            f"Message {i}: " + "planning the garden and the budget " * 8, memory=OPTS
        )
    groups = await store.list_observation_groups("alice")
    kinds = [g.metadata.get("kind") for g in groups]
    assert "observation" in kinds
    assert "reflection" in kinds, "the log was reflected and the reflection is a group too"
    history = await memory.om.history("t1", "alice")  # type: ignore[union-attr]
    assert len(history) >= 2
    stored_ids = [m.id for m in await store.list_messages("t1")]
    for g in groups:
        assert g.start_id in stored_ids
        assert g.end_id in stored_ids
        assert stored_ids.index(g.start_id) <= stored_ids.index(g.end_id)
    reflection = next(g for g in groups if g.metadata.get("kind") == "reflection")
    first_obs = next(g for g in groups if g.metadata.get("kind") == "observation")
    assert reflection.start_id == first_obs.start_id  # it spans its sources' ranges


async def test_retrieval_instructions_are_appended_never_replacing() -> None:
    memory = Memory(InMemoryStore(), observational_memory=_options(instructions="Prefer recall."))
    seen: list[str] = []

    def actor(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        seen.append(_text(messages))
        return pa.ModelResponse(parts=[pa.TextPart(content="ok")])

    agent = Agent(id="a", instructions="Hi.", model=FunctionModel(actor), memory=memory)
    await agent.generate("hello", memory=OPTS)
    assert RECALL_GUIDANCE.splitlines()[0] in seen[0]
    assert "### Additional recall guidance\nPrefer recall." in seen[0]


local = pytest.importorskip("obsmem.embeddings")


def _local_model_installed() -> bool:
    try:
        local.resolve_embedder("local")
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _local_model_installed(), reason=local.INSTALL_LOCAL)
async def test_search_finds_a_paraphrase_with_the_local_embedder() -> None:
    store = InMemoryStore()
    memory = Memory(store, observational_memory=_options(vector=True))
    agent = Agent(
        id="a",
        instructions="Hi.",
        model=FunctionModel(lambda m, i: pa.ModelResponse(parts=[pa.TextPart(content="Sure.")])),
        memory=memory,
    )
    topics = [
        "I always drink a dark roast espresso first thing in the morning.",
        "The deployment failed because the database connection pool was exhausted.",
        "We are planning a trip to Lisbon with my parents in December.",
        "My daughter started piano lessons and practices every evening.",
    ]
    for topic in topics:
        await agent.generate(topic + " " + topic, memory=OPTS)
        await agent.generate("Tell me more. " * 25, memory=OPTS)
    recall = memory.recall_function(OPTS)
    answer = await recall(mode="search", query="What coffee does the user like?", limit=2)
    first = answer.split("\n### ")[0]
    assert "espresso" in first
    assert "raw messages" in first  # the hit names its message range
    other = await memory.recall_function({"resource": "mallory", "thread": "m1"})(
        mode="search", query="espresso"
    )
    assert "espresso" not in other


async def test_recall_tool_is_bound_to_its_resource() -> None:
    store = InMemoryStore()
    memory = Memory(store, observational_memory=_options())
    await memory.context(
        memory_ref := __import__("obsmem.memory", fromlist=["ThreadRef"]).ThreadRef(
            thread="secret-thread", resource="mallory"
        ),
        [Message.user("mallory's secret is 0000", id="secret")],
        actor_model=None,
    )
    assert memory_ref.resource == "mallory"
    recall = memory.recall_function(OPTS)
    for attack in (
        {"cursor": "secret"},
        {"thread_id": "secret-thread"},
        {"cursor": "secret", "part_index": 0},
        {"mode": "threads"},
    ):
        assert "0000" not in await recall(**attack)
