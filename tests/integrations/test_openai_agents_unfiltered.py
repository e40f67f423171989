"""A run without the session's per-step input filter is never silently without memory: the first
time the Runner calls the model again after a tool (a tool loop) without
``RunConfig(call_model_input_filter=session.call_model_input_filter)``, the session logs a
WARNING on the ``obsmem`` logger naming the fix, once per session. Runs with the filter, and
runs with a single model call, say nothing. Real ``Runner`` runs, with a scripted SDK model."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, function_call

from obsmem.integrations.openai_agents import ObservationalSession

from .helpers import RESOURCE, user_turn
from .test_openai_agents import answer, sqlite_memory

FIX = "RunConfig(call_model_input_filter=session.call_model_input_filter)"
PLAIN = RunConfig(tracing_disabled=True)


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def tool_loop(model: ScriptedModel, n: int) -> None:
    """Script one run of two model calls: a ``weather`` call, then an answer to its output."""
    model.extend(
        [
            [function_call("weather", {"city": "Lisbon"}, call_id=f"w{n}")],
            [answer(f"Sunny, {n}.", n)],
        ]
    )


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "obsmem" and r.levelno == logging.WARNING
    ]


async def test_a_tool_loop_without_the_filter_is_said_once_per_session(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="obsmem")
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id="unfiltered", resource=RESOURCE)
    model = ScriptedModel()
    agent = Agent(name="helper", model=model, tools=[weather])
    for i in range(4):
        tool_loop(model, i)
        result = await Runner.run(agent, user_turn(i), session=session, run_config=PLAIN)
        assert result.final_output == f"Sunny, {i}."
        [said] = warnings_of(caplog)
        assert FIX in said, "the warning names the fix"
        assert "'unfiltered'" in said, "and the session"
    tool_loop(model, 4)
    streamed = Runner.run_streamed(agent, user_turn(4), session=session, run_config=PLAIN)
    async for _ in streamed.stream_events():
        pass
    assert len(warnings_of(caplog)) == 1, "once per session, not per run"
    assert len(model.calls) == 10

    other = ObservationalSession(memory, session_id="another", resource=RESOURCE)
    tool_loop(model, 5)
    await Runner.run(agent, user_turn(5), session=other, run_config=PLAIN)
    assert len(warnings_of(caplog)) == 2, "each session says it once"
    await memory.aclose()


async def test_a_tool_loop_with_the_filter_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="obsmem")
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id="filtered", resource=RESOURCE)
    config = RunConfig(
        tracing_disabled=True, call_model_input_filter=session.call_model_input_filter
    )
    model = ScriptedModel()
    agent = Agent(name="helper", model=model, tools=[weather])
    for i in range(4):
        tool_loop(model, i)
        await Runner.run(agent, user_turn(i), session=session, run_config=config)
    tool_loop(model, 4)
    streamed = Runner.run_streamed(agent, user_turn(4), session=session, run_config=config)
    async for _ in streamed.stream_events():
        pass
    assert len(model.calls) == 10
    assert memory.om is not None
    assert (await memory.om.status("filtered", RESOURCE)).observation_tokens > 0
    assert warnings_of(caplog) == []
    await memory.aclose()


async def test_runs_with_one_model_call_need_no_filter(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="obsmem")
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id="one-step", resource=RESOURCE)
    model = ScriptedModel()
    chat = Agent(name="helper", model=model)
    for i in range(3):
        model.enqueue([answer(f"Answer {i}.", i)])
        await Runner.run(chat, user_turn(i), session=session, run_config=PLAIN)
    # A tool whose output ends the run: the model is called once.
    stopping = Agent(
        name="helper", model=model, tools=[weather], tool_use_behavior="stop_on_first_tool"
    )
    model.enqueue([function_call("weather", {"city": "Porto"}, call_id="w-stop")])
    result = await Runner.run(stopping, user_turn(3), session=session, run_config=PLAIN)
    assert result.final_output == "sunny in Porto"
    model.enqueue([answer("Answer 4.", 4)])
    await Runner.run(chat, user_turn(4), session=session, run_config=PLAIN)
    assert len(model.calls) == 5
    assert warnings_of(caplog) == []
    await memory.aclose()


async def test_items_added_by_hand_say_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="obsmem")
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id="by-hand", resource=RESOURCE)
    loop: list[Any] = [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ]
    await session.add_items(loop[:3])
    await session.add_items(loop[3:])
    assert await session.get_items() == loop
    await session.add_items(loop)
    assert warnings_of(caplog) == [], "no run called a model"
    await memory.aclose()
