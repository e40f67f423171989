"""obsmem.integrations.pydantic_ai against pydantic-ai itself, with FunctionModel actors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import Agent
from pydantic_ai import messages as pa
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.integrations.pydantic_ai import ObservationalMemoryCapability, history_processor
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector

from .helpers import (
    RESOURCE,
    TURNS,
    Sent,
    answer_text,
    assert_memory_in_context,
    assert_pairs_intact,
    assert_reflected,
    make_memory,
    user_turn,
)

THREAD = "pai-thread"


def sent_of(messages: list[pa.ModelMessage]) -> Sent:
    system: list[str] = []
    plain: list[str] = []
    calls: list[str] = []
    events: list[tuple[str, str]] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, pa.SystemPromptPart):
                system.append(part.content)
            elif isinstance(part, pa.UserPromptPart | pa.TextPart) and isinstance(
                part.content, str
            ):
                plain.append(part.content)
            elif isinstance(part, pa.ToolCallPart):
                calls.append(part.tool_call_id)
                events.append(("call", part.tool_call_id))
            elif isinstance(part, pa.ToolReturnPart):
                events.append(("result", part.tool_call_id))
    return Sent(
        system_text="\n".join(system),
        plain_text="\n".join(plain),
        calls=tuple(calls),
        events=tuple(events),
    )


class Actor:
    """Calls the ``weather`` tool once per turn, then answers; records every input."""

    def __init__(self) -> None:
        self.inputs: list[list[pa.ModelMessage]] = []
        self.turn = 0

    def model(self) -> FunctionModel:
        def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
            self.inputs.append(list(messages))
            last = messages[-1]
            if any(isinstance(p, pa.UserPromptPart) for p in last.parts):
                call = pa.ToolCallPart("weather", {"city": "Lisbon"}, tool_call_id=f"c{self.turn}")
                return pa.ModelResponse(parts=[call])
            text = answer_text(self.turn)
            self.turn += 1
            return pa.ModelResponse(parts=[pa.TextPart(text)])

        return FunctionModel(answer)


def agent_with(actor: Actor, **kwargs: Any) -> Agent[None, str]:
    agent = Agent(actor.model(), **kwargs)

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    return agent


async def test_capability_observes_reflects_and_keeps_tool_pairs() -> None:
    memory = make_memory()
    actor = Actor()
    capability = ObservationalMemoryCapability(memory, resource=RESOURCE, thread=THREAD)
    agent = agent_with(actor, capabilities=[capability], system_prompt="Be brief.")
    for i in range(TURNS):
        result = await agent.run(user_turn(i))
        assert result.output == answer_text(i)
        await memory.settle()

    stored = await memory.messages(THREAD)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"] * TURNS
    assert [m.text for m in stored if m.role == "user"] == [user_turn(i) for i in range(TURNS)]
    assert not any("Be brief." in m.text for m in stored), "the system prompt is not stored"
    inputs = [sent_of(m) for m in actor.inputs]
    assert all("Be brief." in s.system_text for s in inputs), "the system prompt is always sent"
    assert_pairs_intact(inputs)
    assert_memory_in_context(inputs)
    await assert_reflected(memory, THREAD)
    # the history pydantic-ai keeps is its own: the capability changes only the request
    assert [type(m) for m in result.all_messages()] == [
        pa.ModelRequest,
        pa.ModelResponse,
        pa.ModelRequest,
        pa.ModelResponse,
    ]


async def test_capability_with_message_history_stores_each_message_once() -> None:
    memory = make_memory()
    actor = Actor()
    capability = ObservationalMemoryCapability(memory, resource=RESOURCE, thread=THREAD)
    agent = agent_with(actor, capabilities=[capability])
    history: list[pa.ModelMessage] = []
    for i in range(4):
        result = await agent.run(user_turn(i), message_history=history)
        history = result.all_messages()
    stored = await memory.messages(THREAD)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"] * 4
    assert len(history) == 16, "pydantic-ai still returns the whole history"


async def test_a_prior_history_is_imported_once() -> None:
    memory = make_memory()
    actor = Actor()
    agent = agent_with(
        actor, capabilities=[ObservationalMemoryCapability(memory, resource=RESOURCE, thread="t2")]
    )
    before = [
        pa.ModelRequest(parts=[pa.UserPromptPart("Earlier: I live in Lisbon.")]),
        pa.ModelResponse(parts=[pa.TextPart("Noted.")]),
    ]
    await agent.run(user_turn(1), message_history=before)
    stored = await memory.messages("t2")
    assert [m.text for m in stored][:2] == ["Earlier: I live in Lisbon.", "Noted."]
    assert len(stored) == 6


async def test_history_processor_through_process_history() -> None:
    memory = make_memory(InMemoryStore())
    actor = Actor()
    processor = history_processor(memory, resource=RESOURCE, thread=THREAD)
    agent = agent_with(actor, capabilities=[ProcessHistory(processor)])
    history: list[pa.ModelMessage] = []
    for i in range(TURNS):
        result = await agent.run(user_turn(i), message_history=history)
        history = result.all_messages()
        await memory.settle()
    await agent.run("One more thing.", message_history=history)  # stores the last answer

    stored = await memory.messages(THREAD)
    assert [m.role for m in stored][: 4 * TURNS] == ["user", "assistant", "tool", "assistant"] * (
        TURNS
    )
    assert [m.text for m in stored if m.role == "user"][:TURNS] == [
        user_turn(i) for i in range(TURNS)
    ]
    inputs = [sent_of(m) for m in actor.inputs]
    assert_pairs_intact(inputs)
    assert any("User said: Turn 0" in s.system_text for s in inputs)
    assert "<observations>" in inputs[-1].system_text
    await assert_reflected(memory, THREAD)


def test_repr_names_the_thread() -> None:
    capability = ObservationalMemoryCapability(make_memory(), resource="u", thread="t")
    assert "thread='t'" in repr(capability)


async def test_capability_offers_recall_when_retrieval_is_on() -> None:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai import messages as pam
    from pydantic_ai.models.function import FunctionModel

    from obsmem import Memory
    from obsmem.integrations.pydantic_ai import ObservationalMemoryCapability
    from obsmem.stores import InMemoryStore
    from obsmem.testing import scripted_observer, scripted_reflector

    offered: list[list[str]] = []
    recalled: list[str] = []

    def model(messages: list[pam.ModelMessage], info: AgentInfo) -> pam.ModelResponse:
        offered.append([t.name for t in info.function_tools])
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, pam.ToolReturnPart)]
        if returns:
            recalled.append(str(returns[0].content))
            return pam.ModelResponse(parts=[pam.TextPart(content="done")])
        return pam.ModelResponse(parts=[pam.ToolCallPart("recall", {"page": 1}, "r1")])

    memory = Memory(
        InMemoryStore(),
        observational_memory={
            "retrieval": True,
            "observation": {"model": scripted_observer(), "bufferTokens": False},
            "reflection": {"model": scripted_reflector()},
        },
    )
    agent = PydanticAgent(
        FunctionModel(model),
        capabilities=[ObservationalMemoryCapability(memory, resource="u1", thread="t1")],
    )
    await agent.run("My favorite color is teal.")
    assert "recall" in offered[0]
    assert "My favorite color is teal." in recalled[0]


# --- one module-level agent, per-run conversations -------------------------------------------


def _echo_model(seen: list[str]) -> FunctionModel:
    """Answers with everything it was sent (so a leak between users would show), and records
    the request text."""

    def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        text = sent_of(messages).system_text + "\n" + sent_of(messages).plain_text
        seen.append(text)
        return pa.ModelResponse(parts=[pa.TextPart(content="ok")])

    async def stream(messages: list[pa.ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        answer(messages, info)
        yield "ok"

    return FunctionModel(answer, stream_function=stream)


async def test_one_agent_serves_many_users_through_deps() -> None:
    """pydantic-ai's idiom: one module-level agent, the user in ``deps``. Each run's thread and
    resource come from the run context; nothing of one user reaches the other's requests or
    store."""
    from dataclasses import dataclass

    @dataclass
    class Deps:
        user_id: str
        chat_id: str

    memory = make_memory()
    seen: list[str] = []
    agent = Agent(
        _echo_model(seen),
        deps_type=Deps,
        capabilities=[
            ObservationalMemoryCapability(
                memory,
                resource=lambda ctx: ctx.deps.user_id,
                thread=lambda ctx: ctx.deps.chat_id,
            )
        ],
    )
    ana, bo = Deps("ana", "ana-chat"), Deps("bo", "bo-chat")
    for i in range(4):
        await agent.run(f"Ana fact {i}: my cat is called Miso. " * 6, deps=ana)
        await agent.run(f"Bo fact {i}: my dog is called Rex. " * 6, deps=bo)
    await memory.settle()
    ana_sent = [s for s in seen if "Ana fact" in s]
    bo_sent = [s for s in seen if "Bo fact" in s]
    assert len(ana_sent) == len(bo_sent) == 4
    assert not any("Rex" in s for s in ana_sent)
    assert not any("Miso" in s for s in bo_sent)
    stored_ana = " ".join(str(m.parts) for m in await memory.messages("ana-chat"))
    stored_bo = " ".join(str(m.parts) for m in await memory.messages("bo-chat"))
    assert "Miso" in stored_ana
    assert "Rex" not in stored_ana
    assert "Rex" in stored_bo
    assert "Miso" not in stored_bo
    thread = await memory.thread("bo-chat")
    assert thread is not None
    assert thread.resource_id == "bo"


async def test_run_metadata_names_the_conversation_and_a_missing_one_says_how() -> None:
    import pytest

    from obsmem.errors import ConfigError

    memory = make_memory()
    agent = Agent(_echo_model([]), capabilities=[ObservationalMemoryCapability(memory)])
    await agent.run("Hello there.", metadata={"resource": "u9", "thread": "t9"})
    assert [m.role for m in await memory.messages("t9")] == ["user", "assistant"]
    with pytest.raises(ConfigError, match=r"metadata=\{\"thread\": \"...\"\}"):
        await agent.run("Hello again.", metadata={"resource": "u9"})


async def test_recall_is_bound_to_each_runs_conversation() -> None:
    from obsmem import Memory

    recalled: list[str] = []

    def model(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, pa.ToolReturnPart)]
        if returns:
            recalled.append(str(returns[0].content))
            return pa.ModelResponse(parts=[pa.TextPart(content="done")])
        return pa.ModelResponse(parts=[pa.ToolCallPart("recall", {"page": 1}, "r1")])

    memory = Memory(
        InMemoryStore(),
        observational_memory={
            "retrieval": True,
            "observation": {"model": scripted_observer(), "bufferTokens": False},
            "reflection": {"model": scripted_reflector()},
        },
    )
    agent = Agent(FunctionModel(model), capabilities=[ObservationalMemoryCapability(memory)])
    await agent.run("I am Ana and I like teal.", metadata={"resource": "ana", "thread": "a"})
    await agent.run("I am Bo and I like red.", metadata={"resource": "bo", "thread": "b"})
    assert "teal" in recalled[0]
    assert "red" not in recalled[0]
    assert "red" in recalled[1]
    assert "teal" not in recalled[1]


async def test_memory_events_reach_the_runs_event_stream() -> None:
    """Observation and activation happen inside a run; the run's own event stream carries them
    as ``MemoryEvent``s (what ``event_stream_handler`` and the UI adapters see)."""
    from obsmem.integrations.pydantic_ai import MemoryEvent

    memory = make_memory()
    agent = Agent(
        _echo_model([]),
        capabilities=[ObservationalMemoryCapability(memory, resource=RESOURCE, thread=THREAD)],
    )
    kinds: list[str] = []

    async def handler(ctx: object, events: Any) -> None:
        async for event in events:
            if isinstance(event, MemoryEvent):
                kinds.append(event.om_type)
                assert event.fields["type"] == event.om_type

    for i in range(TURNS):
        await agent.run(user_turn(i), event_stream_handler=handler)
    assert "data-om-observation-end" in kinds
    assert "data-om-status" in kinds


# --- the example, offline ------------------------------------------------------------------------


def _example(name: str) -> Any:
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


async def test_the_approval_example_pauses_resumes_and_remembers() -> None:
    """examples/pydantic_ai_approval.py with pydantic-ai's FunctionModel: each booking pauses for
    approval and resumes, the call and its result are stored once as a pair, a refusal is
    stored as the tool's answer, two users share the module-level agent without a leak, and
    memory events reach the run's stream."""
    from obsmem.messages import ToolCallPart, ToolResultPart

    example = _example("pydantic_ai_approval")
    seen: list[str] = []

    def brain(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        sent = sent_of(messages)
        seen.append(sent.system_text + "\n" + sent.plain_text)
        last = messages[-1]
        if any(isinstance(p, pa.ToolReturnPart) for p in last.parts):
            [result] = [p for p in last.parts if isinstance(p, pa.ToolReturnPart)]
            return pa.ModelResponse(parts=[pa.TextPart(content=f"Done: {result.content}")])
        if "Book" in sent.plain_text.rsplit("\n", 1)[-1]:
            args = {"restaurant": "Tasca", "people": 2}
            call = pa.ToolCallPart("book_table", args, tool_call_id=f"b{len(seen)}")
            return pa.ModelResponse(parts=[call])
        return pa.ModelResponse(parts=[pa.TextPart(content="Noted. " * 20)])

    async def stream(messages: list[pa.ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        response = brain(messages, info)
        part = response.parts[0]
        if isinstance(part, pa.ToolCallPart):
            yield {
                0: DeltaToolCall(
                    name=part.tool_name,
                    json_args=part.args_as_json_str(),
                    tool_call_id=part.tool_call_id,
                )
            }
        else:
            assert isinstance(part, pa.TextPart)
            yield part.content

    from pydantic_ai.models.function import DeltaToolCall

    memory = make_memory()
    agent = example.build_agent(FunctionModel(brain, stream_function=stream), memory)
    ana = example.Deps(user_id="ana", chat_id="ana-dinner")
    bo = example.Deps(user_id="bo", chat_id="bo-dinner")
    events: list[str] = []
    asked: list[str] = []

    def approve(call: Any) -> bool | str:
        asked.append(call.tool_name)
        return True

    answer = await example.converse(agent, ana, "I am vegetarian. Book Tasca.", approve, events)
    assert answer.startswith("Done: Booked Tasca for 2 (confirmation for ana)")
    before_bo = len(seen)
    refused = await example.converse(agent, bo, "Book Tasca.", lambda call: "Too expensive.")
    bo_saw = seen[before_bo:]
    assert bo_saw
    assert not any("vegetarian" in text for text in bo_saw)  # Ana's fact never reaches Bo
    assert refused.startswith("Done:")
    assert "Too expensive." in refused
    for i in range(6):
        await example.converse(agent, ana, f"Tell me more, part {i}. " * 8, approve, events)
    assert asked == ["book_table"]
    assert "data-om-observation-end" in events  # memory worked, and the stream showed it

    for chat, outcome in (("ana-dinner", "Booked Tasca"), ("bo-dinner", "Too expensive.")):
        stored = await memory.messages(chat)
        calls = [p for m in stored for p in m.parts if isinstance(p, ToolCallPart)]
        results = [p for m in stored for p in m.parts if isinstance(p, ToolResultPart)]
        assert len(calls) == 1, chat
        assert len(results) == 1, chat
        assert results[0].tool_call_id == calls[0].tool_call_id
        assert outcome in str(results[0].content)
    bo_stored = " ".join(str(m.parts) for m in await memory.messages("bo-dinner"))
    assert "vegetarian" not in bo_stored
    await memory.aclose()


class _ProviderModel(FunctionModel):
    """A scripted model that says which provider it is (as a real provider's model does)."""

    def __init__(self, provider: str, name: str) -> None:
        def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
            return pa.ModelResponse(parts=[pa.TextPart(content="Noted, and glad to help. " * 8)])

        super().__init__(answer, model_name=name)
        self._provider = provider

    @property
    def system(self) -> str:
        return self._provider


async def test_the_history_processor_notices_a_provider_change() -> None:
    """Each run's answer is stored as the reply of the model that gave it, so when the next
    run's model is another provider's, buffered chunks activate (``activateOnProviderChange``).
    """
    from obsmem import Memory
    from obsmem.events import ActivationEvent, Event

    memory = Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {
                "model": scripted_observer(),
                "messageTokens": 3_000,
                "activateOnProviderChange": True,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 20_000},
        },
    )
    events: list[Event] = []
    memory.subscribe(events.append)
    processor = ProcessHistory(history_processor(memory, resource=RESOURCE, thread=THREAD))
    history: list[pa.ModelMessage] = []
    before = Agent(_ProviderModel("openai", "gpt-5-mini"), capabilities=[processor])
    for i in range(4):
        text = user_turn(i) + " " + "tell me more about the harbour. " * 40
        history = (await before.run(text, message_history=history)).all_messages()
        await memory.settle()
    assert not [e for e in events if isinstance(e, ActivationEvent)]
    record = await memory.store.get_record(f"thread:{THREAD}")
    assert record is not None
    assert record.chunks, "a chunk is buffered"
    after = Agent(_ProviderModel("anthropic", "claude-haiku-4-5"), capabilities=[processor])
    await after.run("And now?", message_history=history)
    [activation, *_] = [e for e in events if isinstance(e, ActivationEvent)]
    assert activation.triggered_by == "provider_change"
    assert (activation.previous_model, activation.current_model) == (
        "openai/gpt-5-mini",
        "anthropic/claude-haiku-4-5",
    )
    await memory.aclose()
