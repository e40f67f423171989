"""Working memory kept by the agent (a tool) or by the Observer (no tool)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem import Agent, ConfigError, Memory
from obsmem.stores import InMemoryStore
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector

OPTS = {"resource": "user-1", "thread": "t1"}


def _seen(messages: list[pa.ModelMessage]) -> str:
    return "\n".join(
        p.content for m in messages for p in m.parts if isinstance(getattr(p, "content", None), str)
    )


async def test_the_agent_keeps_working_memory_with_its_tool() -> None:
    tools_offered: list[list[str]] = []
    observer_calls = ModelCalls()

    def actor(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        tools_offered.append([t.name for t in info.function_tools])
        last = messages[-1]
        if isinstance(last, pa.ModelRequest) and any(
            isinstance(p, pa.ToolReturnPart) for p in last.parts
        ):
            return pa.ModelResponse(parts=[pa.TextPart(content="Noted, Ana.")])
        if "I am Ana" in _seen(messages[-1:]):
            doc = "# About the user\n- Name: Ana\n- Location: Lisbon\n"
            return pa.ModelResponse(
                parts=[pa.ToolCallPart("update_working_memory", {"content": doc}, "wm1")]
            )
        return pa.ModelResponse(parts=[pa.TextPart(content=_seen(messages)[-300:])])

    memory = Memory(
        InMemoryStore(),
        working_memory=True,
        observational_memory={
            "observation": {
                "model": scripted_observer(calls=observer_calls),
                "messageTokens": 200,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    agent = Agent(id="a", instructions="Hi.", model=FunctionModel(actor), memory=memory)
    await agent.generate("I am Ana and I live in Lisbon. " * 5, memory=OPTS)
    assert "update_working_memory" in tools_offered[0]
    assert "- Name: Ana" in await memory.get_working_memory(OPTS)
    # Resource scope (the default): another thread of the same user sees it.
    other = await agent.generate("Who am I?", memory={**OPTS, "thread": "t2"})
    assert "<working_memory>" in other.text
    assert "- Name: Ana" in other.text
    # Enough messages to be observed; the tool traffic is never shown to the Observer.
    for _ in range(3):
        await agent.generate("Tell me more about the weather in spring. " * 5, memory=OPTS)
    assert observer_calls.prompts
    assert all("update_working_memory" not in p for p in observer_calls.prompts)
    assert all("- Name: Ana" not in p for p in observer_calls.prompts)


async def test_the_observer_keeps_working_memory_when_managed() -> None:
    tools_offered: list[list[str]] = []

    def observer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        prompt = _seen(messages)
        assert "working-memory" in prompt  # the Observer is asked for the section
        return pa.ModelResponse(
            parts=[
                pa.TextPart(
                    content="<observations>\n* 🔴 (10:00) User is Ana from Lisbon.\n"
                    "</observations>\n<working-memory>\n# About the user\n- Name: Ana\n"
                    "- Location: Lisbon\n</working-memory>"
                )
            ]
        )

    def actor(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        tools_offered.append([t.name for t in info.function_tools])
        return pa.ModelResponse(parts=[pa.TextPart(content=_seen(messages)[-400:])])

    memory = Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {
                "model": FunctionModel(observer),
                "messageTokens": 150,
                "bufferTokens": False,
                "manageWorkingMemory": True,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    agent = Agent(id="a", instructions="Hi.", model=FunctionModel(actor), memory=memory)
    await agent.generate("I am Ana and I live in Lisbon. " * 6, memory=OPTS)
    result = await agent.generate("Who am I?", memory=OPTS)
    assert all("update_working_memory" not in names for names in tools_offered)
    assert "- Name: Ana" in await memory.get_working_memory(OPTS)
    [shown] = [m.text for m in result.context if "<working_memory>" in m.text]
    assert "- Name: Ana" in shown
    assert "kept up to date for you" in shown


class Profile(BaseModel):
    name: str
    timezone: str | None = None


async def test_a_schema_rejects_a_bad_update_and_the_agent_retries() -> None:
    attempts: list[Any] = []

    def actor(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        last = messages[-1]
        returned = [p for p in last.parts if isinstance(p, pa.ToolReturnPart)]
        retried = [p for p in returned if p.outcome != "success"]
        if returned and not retried:
            return pa.ModelResponse(parts=[pa.TextPart(content="done")])
        content = json.dumps({"name": "Ana"}) if retried else json.dumps({"nom": "Ana"})
        attempts.append(content)
        call = pa.ToolCallPart("update_working_memory", {"content": content}, f"c{len(attempts)}")
        return pa.ModelResponse(parts=[call])

    memory = Memory(InMemoryStore(), working_memory={"schema": Profile})
    agent = Agent(id="a", instructions="Hi.", model=FunctionModel(actor), memory=memory)
    await agent.generate("I am Ana.", memory=OPTS)
    assert len(attempts) == 2
    stored = json.loads(await memory.get_working_memory(OPTS))
    assert stored == {"name": "Ana", "timezone": None}


def test_working_memory_options_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"working_memory\.scope"):
        Memory(InMemoryStore(), working_memory={"scope": "everywhere"})
    with pytest.raises(ConfigError, match=r"working_memory\.colour"):
        Memory(InMemoryStore(), working_memory={"colour": "blue"})
    with pytest.raises(ConfigError, match="pydantic model"):
        Memory(InMemoryStore(), working_memory={"schema": dict})
