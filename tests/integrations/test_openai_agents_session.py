"""The Session protocol as the Agents SDK means it, on memory: an approved call resumed from
saved state keeps its tool's name, ``pop_item`` takes an item back for good, ``clear_session``
starts over either way, a wrapped session follows along, and ``SessionSettings(limit=...)`` is
honoured on top of memory. A scripted SDK ``Model`` (``agents.testing.ScriptedModel``) records
what each call was sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, RunState, SQLiteSession, function_tool
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, function_call

from obsmem import Memory
from obsmem.errors import ConfigError
from obsmem.integrations.openai_agents import ObservationalSession
from obsmem.messages import ToolResultPart
from obsmem.stores import SQLiteStore
from obsmem.testing import ModelCalls, scripted_observer

from .helpers import RESOURCE, user_turn
from .test_openai_agents import answer, item_text, sqlite_memory, text_sent

THREAD = "sdk-session"


def run_config(session: ObservationalSession, **kwargs: Any) -> RunConfig:
    return RunConfig(
        tracing_disabled=True, call_model_input_filter=session.call_model_input_filter, **kwargs
    )


@function_tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def _chat(
    session: ObservationalSession, model: ScriptedModel, turns: range, **config: Any
) -> None:
    """One run per turn: ``user_turn(i)`` answered by ``"Answer i: noted."``."""
    agent = Agent(name="helper", model=model)
    for i in turns:
        model.enqueue([answer(f"Answer {i}: noted.", i)])
        await Runner.run(agent, user_turn(i), session=session, run_config=run_config(session))


def _history(call_input: Any) -> list[str]:
    """The earlier turns' items a model call was sent raw (not memory's notes)."""
    return [t for t in map(item_text, call_input) if t.startswith(("Turn ", "Answer "))]


# -- an approval resumed from saved state ----------------------------------------------------------


async def test_an_approved_call_resumed_from_saved_state_keeps_its_tool_name(
    tmp_path: Path,
) -> None:
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    asking = ScriptedModel([[function_call("delete_file", {"path": "a.txt"}, call_id="call-1")]])
    agent = Agent(name="files", model=asking, tools=[delete_file])
    paused = await Runner.run(
        agent, "Delete a.txt.", session=session, run_config=run_config(session)
    )
    assert len(paused.interruptions) == 1
    saved = paused.to_state().to_string()
    await memory.aclose()

    # Another process: a new Memory on the same file, a new session, the saved run.
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    answering = ScriptedModel([[answer("Deleted.", 1)]])
    agent = Agent(name="files", model=answering, tools=[delete_file])
    state = await RunState.from_string(agent, saved)
    state.approve(state.get_interruptions()[0])
    done = await Runner.run(agent, state, session=session, run_config=run_config(session))
    assert done.final_output == "Deleted."

    stored = await memory.messages(THREAD)
    [result] = [p for m in stored for p in m.parts if isinstance(p, ToolResultPart)]
    assert result.tool_name == "delete_file", "stored under the name of its call"
    assert result.content == "deleted a.txt"
    [call] = answering.calls
    assert [item_text(i) for i in call.input] == [
        "Delete a.txt.",
        'delete_file({"path":"a.txt"})',
        "deleted a.txt",
    ]
    await memory.aclose()


# -- pop_item --------------------------------------------------------------------------------------


async def test_a_popped_turn_is_never_shown_again_nor_observed(tmp_path: Path) -> None:
    observer = ModelCalls()
    memory = sqlite_memory(tmp_path, observation={"model": scripted_observer(calls=observer)})
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    model = ScriptedModel()
    agent = Agent(name="helper", model=model)
    config = run_config(session)
    model.enqueue([answer("Got it.", 0)])
    await Runner.run(agent, "My name is Rui.", session=session, run_config=config)
    model.enqueue([answer("I will keep it safe.", 1)])
    await Runner.run(agent, "My card PIN is 4321.", session=session, run_config=config)

    popped_answer = await session.pop_item()
    popped_input = await session.pop_item()
    assert popped_answer is not None
    assert item_text(popped_answer) == "I will keep it safe."
    assert popped_input == {"role": "user", "content": "My card PIN is 4321."}
    assert [item_text(i) for i in await session.get_items(limit=5)] == [
        "My name is Rui.",
        "Got it.",
    ]

    await _chat(session, model, range(6))
    assert memory.om is not None
    await memory.om.observe(THREAD, RESOURCE)
    await memory.settle()
    after_pop = model.calls[2:]
    assert all("4321" not in text_sent(call) for call in after_pop), "the model saw it again"
    assert "My name is Rui." in text_sent(after_pop[0]), "what was not popped is still sent"
    assert "My name is Rui." in "\n".join(observer.prompts), "memory observed the rest"
    assert all("4321" not in prompt for prompt in observer.prompts), "memory observed it"
    stored = await memory.messages(THREAD)
    assert any("4321" in m.text for m in stored), "storage keeps what was taken back"
    await memory.aclose()


async def test_pop_item_on_an_empty_session_is_none(tmp_path: Path) -> None:
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    assert await session.pop_item() is None
    await memory.aclose()


# -- clear_session ---------------------------------------------------------------------------------


async def test_clear_on_a_new_thread_starts_over_and_every_process_goes_on_there(
    tmp_path: Path,
) -> None:
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)  # the default
    model = ScriptedModel()
    await _chat(session, model, range(6))
    assert memory.om is not None
    learned = await memory.om.status(THREAD, RESOURCE)
    assert learned.observation_tokens > 0

    await session.clear_session()
    assert session.ref.thread == f"{THREAD}~1"
    await _chat(session, model, range(6, 7))
    fresh = text_sent(model.calls[-1])
    assert "Turn 0:" not in fresh
    assert "Turn 5:" not in fresh
    assert "<observations>" not in fresh
    assert "Turn 6:" in fresh
    kept = await memory.om.status(THREAD, RESOURCE)
    assert kept.observation_tokens == learned.observation_tokens, "what memory learned stays"

    later = ObservationalSession(
        memory, session_id=THREAD, resource=RESOURCE, on_clear="new_thread"
    )
    assert [item_text(i) for i in await later.get_items()] == [user_turn(6), "Answer 6: noted."]
    assert later.ref.thread == f"{THREAD}~1"
    await later.clear_session()
    assert later.ref.thread == f"{THREAD}~2"
    assert await later.get_items() == []
    await memory.aclose()


async def test_clear_on_a_new_thread_in_resource_scope_still_shows_what_was_learned(
    tmp_path: Path,
) -> None:
    memory = sqlite_memory(tmp_path, scope="resource")
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    model = ScriptedModel()
    await _chat(session, model, range(6))
    await session.clear_session()
    await _chat(session, model, range(6, 7))
    fresh = model.calls[-1]
    assert "User said: Turn 0" in text_sent(fresh), "the resource's notes are still shown"
    assert _history(fresh.input) == [user_turn(6)], "none of the old items, raw"
    await memory.aclose()


async def test_clear_by_forgetting_drops_the_thread_memory(tmp_path: Path) -> None:
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE, on_clear="forget")
    model = ScriptedModel()
    await _chat(session, model, range(6))
    assert memory.om is not None
    assert (await memory.om.status(THREAD, RESOURCE)).observation_tokens > 0

    await session.clear_session()
    assert session.ref.thread == THREAD
    assert await session.get_items() == []
    assert await session.get_items(limit=10) == []
    assert (await memory.om.status(THREAD, RESOURCE)).observation_tokens == 0
    await _chat(session, model, range(6, 7))
    fresh = text_sent(model.calls[-1])
    assert "Turn 0" not in fresh
    assert "<observations>" not in fresh
    assert len(await memory.messages(THREAD)) == 14, "storage keeps the messages, marked"
    await memory.aclose()


async def test_a_wrapped_session_pops_and_clears_with_memory(tmp_path: Path) -> None:
    memory = sqlite_memory(tmp_path)
    inner = SQLiteSession("wrapped", tmp_path / "inner.db")
    session = ObservationalSession.wrap(inner, memory, resource=RESOURCE)
    model = ScriptedModel()
    await _chat(session, model, range(2))
    full = await inner.get_items()
    assert len(full) == 4

    assert await session.pop_item() == full[-1]
    assert await inner.get_items() == full[:-1]
    assert await session.get_items() == full[:-1], "memory took it back too"

    await session.clear_session()
    assert await inner.get_items() == []
    assert await session.get_items() == []
    await _chat(session, model, range(2, 3))
    assert _history(model.calls[-1].input) == [user_turn(2)]
    assert len(await inner.get_items()) == 2
    inner.close()
    await memory.aclose()


# -- SessionSettings(limit=...) --------------------------------------------------------------------


async def test_a_run_config_limit_applies_on_top_of_memory(tmp_path: Path) -> None:
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    model = ScriptedModel()
    await _chat(session, model, range(8))
    unlimited = model.calls[-1]
    assert "<observations>" in text_sent(unlimited)
    assert len(_history(unlimited.input)) > 2, "enough raw history for the limit to matter"

    agent = Agent(name="helper", model=model, tools=[weather])
    model.extend(
        [[function_call("weather", {"city": "Lisbon"}, call_id="w1")], [answer("Sunny.", 99)]]
    )
    limited = run_config(session, session_settings=SessionSettings(limit=1))
    await Runner.run(agent, "And the weather?", session=session, run_config=limited)
    first, second = model.calls[-2:]
    for call in (first, second):
        assert "<observations>" in text_sent(call), "memory's notes stay"
        assert _history(call.input) == ["Answer 7: noted."], "one item of earlier history"
    assert [item_text(i) for i in second.input][-3:] == [
        "And the weather?",
        'weather({"city":"Lisbon"})',
        "sunny in Lisbon",
    ], "the run's own items are never cut"
    assert [item_text(i) for i in await session.get_items(limit=2)] == [
        "sunny in Lisbon",
        "Sunny.",
    ], "get_items(limit=...) is still the raw tail"

    await _chat(session, model, range(8, 9))
    assert len(_history(model.calls[-1].input)) > 2, "the next run has no limit again"
    await memory.aclose()


async def test_a_session_limit_is_the_default_a_run_config_overrides(tmp_path: Path) -> None:
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(
        memory,
        session_id=THREAD,
        resource=RESOURCE,
        session_settings=SessionSettings(limit=2),
    )
    assert session.limit == 2
    settings = session.session_settings
    assert settings is not None
    assert settings.limit is None, "the Runner is never handed the limit (it would read the tail)"
    model = ScriptedModel()
    await _chat(session, model, range(8))
    last = model.calls[-1]
    assert "<observations>" in text_sent(last)
    assert _history(last.input) == [user_turn(6), "Answer 6: noted.", user_turn(7)]

    agent = Agent(name="helper", model=model)
    model.enqueue([answer("Answer 8: noted.", 8)])
    wider = run_config(session, session_settings=SessionSettings(limit=4))
    await Runner.run(agent, user_turn(8), session=session, run_config=wider)
    assert _history(model.calls[-1].input) == [
        user_turn(6),
        "Answer 6: noted.",
        user_turn(7),
        "Answer 7: noted.",
        user_turn(8),
    ]

    session.session_settings = SessionSettings(limit=0)
    await _chat(session, model, range(9, 10))
    assert _history(model.calls[-1].input) == [user_turn(9)]
    await memory.aclose()


def test_a_limit_below_zero_is_refused() -> None:
    with pytest.raises(ConfigError, match="whole number >= 0"):
        ObservationalSession(
            Memory(observational_memory=False),
            session_id=THREAD,
            resource=RESOURCE,
            session_settings={"limit": -1},
        )


async def test_a_limit_never_leaves_a_result_without_its_call(tmp_path: Path) -> None:
    memory = sqlite_memory(tmp_path)
    session = ObservationalSession(
        memory, session_id=THREAD, resource=RESOURCE, session_settings={"limit": 2}
    )
    items: list[Any] = [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ]
    await session.add_items(items)
    assert await session.get_items() == items[-1:], "the result went with its call"
    session.limit = 3
    assert await session.get_items() == items[1:]
    await memory.aclose()


async def test_without_observational_memory_pop_and_clear_still_work(tmp_path: Path) -> None:
    memory = Memory(SQLiteStore(tmp_path / "plain.db"))
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE, on_clear="forget")
    items: list[Any] = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    await session.add_items(items)
    assert await session.pop_item() == items[1]
    assert await session.get_items() == items[:1]
    assert await session.get_items(limit=5) == items[:1]
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.get_items(limit=5) == []
    await memory.aclose()
