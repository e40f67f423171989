"""Tool traffic that must never stop memory, through each of the every front door: a dangling
call, an orphan result, a 5 MB tool result, and recall on a huge part. The same scripted model
drives ``obsmem.Agent``, the pydantic-ai capability, the Agents SDK session and LangGraph."""

from __future__ import annotations

import re

import pytest

from obsmem import Memory
from obsmem.memory import ThreadRef
from obsmem.messages import Message, TextPart, ToolCallPart, ToolResultPart
from obsmem.recall import DEFAULT_BUDGET
from obsmem.stores import InMemoryStore
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector
from obsmem.tokens import HeuristicEstimator

from .drivers import (
    DOORS,
    Brain,
    Reply,
    Tools,
    assert_requests_valid,
    assert_stored_once,
    lookup_then_answer,
    make_driver,
)
from .helpers import RESOURCE

MESSAGE_TOKENS = 1_000
BLOCK_AFTER = 1_200  # 1.2 x message_tokens
THREAD = "door-thread"
REF = ThreadRef(thread=THREAD, resource=RESOURCE)


def _memory(calls: ModelCalls, *, retrieval: bool = False) -> Memory:
    return Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {
                "model": scripted_observer(calls=calls),
                "messageTokens": MESSAGE_TOKENS,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 4_000},
            "retrieval": retrieval,
        },
    )


def _user(text: str) -> Message:
    return Message(role="user", parts=[TextPart(text=text)])


def _turn_text(i: int) -> str:
    return f"Turn {i}: please check the page again and tell me what changed. " + "Details. " * 12


async def _unobserved(memory: Memory) -> int:
    assert memory.om is not None
    return (await memory.om.status(THREAD, RESOURCE)).message_tokens


@pytest.mark.parametrize("door", DOORS)
async def test_a_dangling_call_never_stops_observation(door: str) -> None:
    """A call stored without its result (a crash) and then 40 turns: the window stays at or below
    ``block_after``, the call is observed as interrupted, every request is valid in each
    provider's shape, and every message is stored exactly once."""
    calls = ModelCalls()
    memory = _memory(calls)
    lost = ToolCallPart(tool_name="lookup", args={"query": "report"}, tool_call_id="lost-call")
    await memory.save(
        REF,
        [_user("Open the quarterly report."), Message(role="assistant", parts=[lost])],
        actor_model=None,
    )
    brain = Brain()
    driver = make_driver(door, memory, brain)
    windows: list[int] = []
    for i in range(40):
        assert await driver.turn(_turn_text(i))
        windows.append(await _unobserved(memory))
    await memory.settle()
    assert max(windows) <= BLOCK_AFTER, windows
    assert any("lost-call" in p or "interrupted" in p for p in calls.prompts), "never observed"
    await assert_requests_valid(brain)
    assert_stored_once(await memory.messages(THREAD), turns=40, unanswered=frozenset({"lost-call"}))
    await memory.aclose()


@pytest.mark.parametrize("door", DOORS)
async def test_an_orphan_result_never_fails_a_turn(door: str) -> None:
    """A tool result whose call is gone: every turn answers, the model sees the result as text,
    and the Observer gets it."""
    calls = ModelCalls()
    memory = _memory(calls)
    ghost = ToolResultPart(tool_name="lookup", tool_call_id="ghost-call", content="stale quote 42")
    await memory.save(
        REF, [_user("What was the quote?"), Message(role="tool", parts=[ghost])], actor_model=None
    )
    brain = Brain()
    driver = make_driver(door, memory, brain)
    for i in range(15):
        assert await driver.turn(_turn_text(i))
    await memory.settle()
    await assert_requests_valid(brain)
    first = "\n".join(p.text for m in brain.requests[0] for p in m.parts if isinstance(p, TextPart))
    assert "stale quote 42" in first, "the orphan result was not shown as text"
    assert any("stale quote 42" in p for p in calls.prompts), "the Observer never saw it"
    await memory.aclose()


@pytest.mark.parametrize("where", ["tool result", "user text"])
@pytest.mark.parametrize("door", DOORS)
async def test_a_5mb_part_is_observed_within_the_cap(door: str, where: str) -> None:
    """A 5 MB tool result, or a 5 MB message from the user: the Observer sees it capped, it gets
    observed, and observation carries on for the turns after it; the stored part stays whole."""
    calls = ModelCalls()
    memory = _memory(calls)
    tools = Tools()
    brain = Brain()
    driver = make_driver(door, memory, brain, tools)
    huge = "".join(f"<div id=n{i}>node {i} of the snapshot</div>\n" for i in range(130_000))
    assert len(huge) > 5_000_000
    assert await driver.turn(_turn_text(0))
    if where == "tool result":
        tools.page = huge
        assert await driver.turn(_turn_text(1))
        tools.page = "nothing special"
    else:
        assert await driver.turn(_turn_text(1) + huge)
    for i in range(2, 14):
        assert await driver.turn(_turn_text(i))
    await memory.settle()
    assert max(len(p) for p in calls.prompts) < 100_000, "the Observer got the whole part"
    assert any("node 0 of the snapshot" in p for p in calls.prompts), "never observed"
    assert any("Turn 10:" in p for p in calls.prompts), "observation stopped after it"
    assert await _unobserved(memory) <= BLOCK_AFTER
    stored = await memory.messages(THREAD)
    sizes = [
        len(p.text if isinstance(p, TextPart) else str(p.content))
        for m in stored
        for p in m.parts
        if isinstance(p, TextPart | ToolResultPart)
    ]
    assert max(sizes) >= len(huge), "the stored part was cut"
    await memory.aclose()


_RANGE = re.compile(r"\[recall range (?!FIRST)([^:\]\s]+):([^\]\s]+)\]")


_CONTINUE = re.compile(r'continue with recall cursor="([^"]+)"')


class Recalling:
    """Looks things up; when asked to RECALL, acts as a model following recall's hints: page
    from the first observed range with full detail, follow the "continue" hint, then read that
    message's first part from an offset. (Memory may observe this turn's earlier steps between
    its steps, the user's request included, so what it was asked and read is remembered.)"""

    def __init__(self) -> None:
        self.answers: list[str] = []
        self.asked = False

    def __call__(self, messages: list[Message]) -> Reply:
        user = next(m for m in reversed(messages) if m.role == "user")
        if any(isinstance(p, TextPart) and "RECALL" in p.text for p in user.parts):
            self.asked = True
        if not self.asked or len(self.answers) == 3:
            return lookup_then_answer(messages)
        last = next(m for m in reversed(messages) if m.role != "system")
        self.answers += [
            str(p.content)
            for p in last.parts
            if isinstance(p, ToolResultPart) and p.tool_name == "recall"
        ]
        if not self.answers:
            found = _RANGE.search(_system_text(messages))
            assert found is not None, "no recall range in the context"
            return Reply(calls=[("recall", {"cursor": found.group(1), "detail": "high"})])
        hint = _CONTINUE.search(self.answers[0])
        assert hint is not None, self.answers[0]
        if len(self.answers) == 1:
            return Reply(calls=[("recall", {"cursor": hint.group(1), "detail": "high"})])
        if len(self.answers) == 2:
            args = {"cursor": hint.group(1), "part_index": 0, "char_offset": 4_000}
            return Reply(calls=[("recall", args)])
        return Reply(text="That is the page.")


@pytest.mark.parametrize("door", DOORS)
async def test_recall_stays_within_its_budget(door: str) -> None:
    """Through each framework's own recall tool: a 240 KB tool result read back with full
    detail never returns more than the recall budget; the context explains recall."""
    calls = ModelCalls()
    memory = _memory(calls, retrieval=True)
    tools = Tools()
    recalling = Recalling()
    brain = Brain(recalling)
    driver = make_driver(door, memory, brain, tools)
    tools.page = "row " * 60_000  # 240 KB
    assert await driver.turn(_turn_text(0))
    tools.page = "nothing special"
    for i in range(1, 8):
        assert await driver.turn(_turn_text(i))
    assert await driver.turn("RECALL the first page exactly.")
    results = recalling.answers
    assert len(results) == 3, results
    estimator = HeuristicEstimator()
    for text in results:
        assert estimator.count_text(text) <= DEFAULT_BUDGET, estimator.count_text(text)
    assert "row row" in results[1]
    assert "row row" in results[2]
    assert "char_offset" in results[2], "no hint to read on"
    assert 'mode "messages"' in _system_text(brain.requests[-1])
    await memory.aclose()


def _system_text(request: list[Message]) -> str:
    return "\n".join(
        p.text for m in request if m.role == "system" for p in m.parts if isinstance(p, TextPart)
    )


@pytest.mark.parametrize("door", [d for d in DOORS if d != "agent"])
async def test_the_context_never_mentions_recall_without_the_tool(door: str) -> None:
    """Retrieval on, but the agent was not given the recall tool: no request mentions recall
    (neither the guidance nor the log's recall ranges)."""
    calls = ModelCalls()
    memory = _memory(calls, retrieval=True)
    brain = Brain()
    driver = make_driver(door, memory, brain, recall=False)
    for i in range(10):
        assert await driver.turn(_turn_text(i))
    assert any("<observations>" in _system_text(r) for r in brain.requests), "nothing observed"
    for request in brain.requests:
        assert "recall" not in _system_text(request).lower()
    await memory.aclose()


class ModelDown(RuntimeError):
    """The model fails mid-turn (a crash, an outage)."""


@pytest.mark.parametrize("door", DOORS)
async def test_a_crash_mid_turn_loses_no_step_already_taken(door: str) -> None:
    """The model fails at the fourth request of a tool loop: the turn fails, and its input and
    the three steps already taken (each call with its result) are stored."""
    memory = _memory(ModelCalls())

    def policy(messages: list[Message]) -> Reply:
        if brain.calls >= 3:
            raise ModelDown("the model went away")
        return Reply(text="Next page.", calls=[("lookup", {"query": f"page {brain.calls}"})])

    brain = Brain(policy)
    driver = make_driver(door, memory, brain)
    with pytest.raises(Exception) as failure:  # noqa: PT011 - each framework wraps it its own way
        await driver.turn(_turn_text(0))
    assert "the model went away" in repr(failure.value) + repr(failure.value.__cause__)
    stored = await memory.messages(THREAD)
    calls = [p.tool_call_id for m in stored for p in m.parts if isinstance(p, ToolCallPart)]
    results = [p.tool_call_id for m in stored for p in m.parts if isinstance(p, ToolResultPart)]
    assert calls == results == ["call-1", "call-2", "call-3"]
    assert stored[0].role == "user"
    await memory.aclose()


async def test_the_langchain_recall_tool_works_in_create_agent() -> None:
    """The same LangChain recall tool in ``langchain.agents.create_agent``: the model pages a
    stored 240 KB result within the budget, bound to the run's thread."""
    from langchain.agents import create_agent

    from obsmem.integrations.langgraph import recall_tool

    from .drivers import langchain_model

    memory = _memory(ModelCalls(), retrieval=True)
    big = Message(role="user", parts=(TextPart(text="row " * 60_000),))
    [stored] = await memory.save(REF, [big], actor_model=None)

    def policy(messages: list[Message]) -> Reply:
        if messages[-1].role == "tool":
            return Reply(text="Read it.")
        return Reply(calls=[("recall", {"cursor": stored.id, "part_index": 0})])

    brain = Brain(policy)
    agent = create_agent(langchain_model(brain), [recall_tool(memory, resource=RESOURCE)])
    await agent.ainvoke(
        {"messages": [("user", "What did I paste?")]},
        config={"configurable": {"thread_id": THREAD}},
    )
    [answer] = brain.tool_results("recall")
    assert "row row" in answer
    assert HeuristicEstimator().count_text(answer) <= DEFAULT_BUDGET
    await memory.aclose()
