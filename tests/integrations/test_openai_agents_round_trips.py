"""The Agents SDK session costs what every front door costs: a plain turn (nothing due) through
``ObservationalSession`` and the Runner takes 2 store calls, on every store; its events reach the
session's stream by the one rule (``thread_id``, or ``thread_ids`` covering the thread); and
the agent's model reaches memory."""

from __future__ import annotations

from typing import Any

from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel

from obsmem import Memory
from obsmem.stores import Store
from obsmem.testing import scripted_observer, scripted_reflector

from ..engine.test_round_trips import CountingStore
from .test_openai_agents import answer

RESOURCE = "u1"


def _memory(store: Store, *, om: bool) -> Memory:
    options: dict[str, Any] | bool = (
        {
            "observation": {"model": scripted_observer(), "messageTokens": 30_000},
            "reflection": {"model": scripted_reflector()},
        }
        if om
        else False
    )
    return Memory(CountingStore(store), observational_memory=options)  # type: ignore[arg-type]


async def test_a_plain_turn_costs_two_store_calls(store: Store) -> None:
    from obsmem.integrations.openai_agents import ObservationalSession

    memory = _memory(store, om=True)
    counting: CountingStore = memory.store  # type: ignore[assignment]
    session = ObservationalSession(memory, session_id="t1", resource=RESOURCE)
    model = ScriptedModel()
    agent = Agent(name="helper", instructions="You help.", model=model)
    config = RunConfig(
        tracing_disabled=True, call_model_input_filter=session.call_model_input_filter
    )
    model.enqueue([answer("Noted.", 0)])
    await Runner.run(agent, "Hello, I live in Lisbon.", session=session, run_config=config)
    await memory.settle()
    counting.take()
    for i in range(3):
        model.enqueue([answer(f"Noted {i}.", i + 1)])
        await Runner.run(agent, f"Turn {i}: weather?", session=session, run_config=config)
        await memory.settle()
        calls = counting.take()
        assert sum(calls.values()) == 2, calls
    assert len(await store.list_messages("t1")) == 8
    await memory.aclose()
