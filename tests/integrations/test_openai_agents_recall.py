"""Recall through the Agents SDK: ``session.tools()`` attaches the ``recall`` tool in one call,
the model can call it and gets the exact words back, and nothing mentions recall to a model
that does not have the tool."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.testing import ModelCall, ModelStep, ScriptedModel, function_call

from obsmem.integrations.openai_agents import ObservationalSession

from .helpers import RESOURCE, user_turn
from .test_openai_agents import answer, item_text, sqlite_memory, text_sent

THREAD = "sdk-recall"
RANGE = re.compile(r"\[recall range ([^:\]\s]+):")


def _config(session: ObservationalSession) -> RunConfig:
    return RunConfig(tracing_disabled=True, call_model_input_filter=session.call_model_input_filter)


async def _chat(agent: Agent[Any], model: ScriptedModel, session: ObservationalSession) -> None:
    for i in range(8):
        model.enqueue([answer(f"Answer {i}: noted.", i)])
        await Runner.run(agent, user_turn(i), session=session, run_config=_config(session))


def _recall_first_range(call: ModelCall) -> Any:
    """Page the raw messages of the first observation group the model was shown."""
    ranges = [r for r in RANGE.findall(text_sent(call)) if r != "FIRST"]  # not the guidance's
    assert ranges, "the model was shown no recall range"
    return [function_call("recall", {"cursor": ranges[0]}, call_id="recall-1")]


async def test_the_model_calls_recall_and_gets_the_exact_words(tmp_path: Path) -> None:
    memory = sqlite_memory(tmp_path, retrieval=True)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    tools = session.tools()
    assert [t.name for t in tools] == ["recall"]
    model = ScriptedModel()
    agent = Agent(name="helper", model=model, tools=tools)
    await _chat(agent, model, session)
    assert user_turn(0) not in text_sent(model.calls[-1]), "turn 0 is only in the notes now"

    model.extend([ModelStep.respond(_recall_first_range), [answer("You said so.", 99)]])
    result = await Runner.run(
        agent, "What exactly did I say first?", session=session, run_config=_config(session)
    )
    assert result.final_output == "You said so."
    asking, answering = model.calls[-2:]
    assert "recall" in [t.name for t in asking.tools]
    assert 'mode "messages"' in text_sent(asking), "the model is told how to use it"
    [output] = [
        i
        for i in answering.input
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    assert user_turn(0) in item_text(output), "recall answered with the exact words"
    await memory.aclose()


async def test_nothing_mentions_recall_to_a_model_without_the_tool(tmp_path: Path) -> None:
    memory = sqlite_memory(tmp_path, retrieval=True)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    model = ScriptedModel()
    await _chat(Agent(name="helper", model=model), model, session)
    assert any("<observations>" in text_sent(call) for call in model.calls), "memory at work"
    for call in model.calls:
        assert "recall" not in text_sent(call).lower()
    await memory.aclose()


async def test_without_the_filter_recall_is_mentioned_once_the_tool_is_taken(
    tmp_path: Path,
) -> None:
    memory = sqlite_memory(tmp_path, retrieval=True)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    model = ScriptedModel()
    agent = Agent(name="helper", model=model)
    for i in range(6):
        model.enqueue([answer(f"Answer {i}: noted.", i)])
        await Runner.run(agent, user_turn(i), session=session)
    context = "\n".join(item_text(i) for i in await session.get_items())
    assert "<observations>" in context
    assert "recall" not in context.lower()
    session.tools()
    assert "[recall range" in "\n".join(item_text(i) for i in await session.get_items())
    await memory.aclose()
