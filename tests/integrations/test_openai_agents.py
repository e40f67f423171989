"""obsmem.integrations.openai_agents against the Agents SDK's Runner, with a scripted Model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from agents import Agent, RunConfig, Runner, Session, SQLiteSession, function_tool
from agents.items import ModelResponse, TResponseInputItem
from agents.models.interface import Model
from agents.testing import ModelCall, assistant_message
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from obsmem import Memory
from obsmem.errors import ConfigError
from obsmem.integrations.openai_agents import ObservationalSession
from obsmem.stores import InMemoryStore, SQLiteStore
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

THREAD = "sdk-thread"
OFFLINE = RunConfig(tracing_disabled=True)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return ""


def sent_of(items: list[dict[str, Any]]) -> Sent:
    system: list[str] = []
    plain: list[str] = []
    calls: list[str] = []
    events: list[tuple[str, str]] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            calls.append(item["call_id"])
            events.append(("call", item["call_id"]))
        elif kind == "function_call_output":
            events.append(("result", item["call_id"]))
        elif item.get("role") in ("system", "developer"):
            system.append(_text(item.get("content")))
        elif "role" in item:
            plain.append(_text(item.get("content")))
    return Sent(
        system_text="\n".join(system),
        plain_text="\n".join(plain),
        calls=tuple(calls),
        events=tuple(events),
    )


class ScriptedModel(Model):
    """Calls ``weather`` once per user turn, then answers; records every input."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []
        self.turn = 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        self.inputs.append([dict(i) for i in items])
        last = items[-1]
        if last.get("type") != "function_call_output":
            out: list[Any] = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"call-{self.turn}",
                    name="weather",
                    arguments=json.dumps({"city": "Lisbon"}),
                    id=f"fc-{self.turn}",
                    status="completed",
                )
            ]
        else:
            text = ResponseOutputText(
                type="output_text", text=answer_text(self.turn), annotations=[]
            )
            out = [
                ResponseOutputMessage(
                    type="message",
                    id=f"msg-{self.turn}",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            ]
            self.turn += 1
        return ModelResponse(output=out, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests run without streaming")


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def make_agent(model: ScriptedModel) -> Agent[Any]:
    return Agent(name="helper", instructions="Be brief.", model=model, tools=[weather])


async def test_session_observes_reflects_and_keeps_tool_pairs() -> None:
    memory = make_memory()
    model = ScriptedModel()
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    agent = make_agent(model)
    for i in range(TURNS):
        result = await Runner.run(agent, user_turn(i), session=session, run_config=OFFLINE)
        assert result.final_output == answer_text(i)
        await memory.settle()

    stored = await memory.messages(THREAD)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"] * TURNS
    assert [m.text for m in stored if m.role == "user"] == [user_turn(i) for i in range(TURNS)]
    inputs = [sent_of(i) for i in model.inputs]
    assert_pairs_intact(inputs)
    assert_memory_in_context(inputs)
    await assert_reflected(memory, THREAD)


async def test_limit_reads_the_raw_tail_as_added() -> None:
    memory = make_memory()
    session = ObservationalSession(memory, session_id=THREAD, resource=RESOURCE)
    items: list[Any] = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}]},
        {"role": "assistant", "content": "Sunny."},
    ]
    await session.add_items(items)
    assert await session.get_items(limit=2) == items[-2:]
    assert await session.get_items(limit=10) == items
    assert await session.get_items(limit=0) == []
    assert await session.get_items() == items, "below the threshold the context is the raw history"


async def test_wrap_keeps_the_full_history_in_the_inner_session() -> None:
    memory = make_memory()
    inner = SQLiteSession("wrapped")
    session = ObservationalSession.wrap(inner, memory, resource=RESOURCE)
    model = ScriptedModel()
    agent = make_agent(model)
    for i in range(TURNS):
        await Runner.run(agent, user_turn(i), session=session, run_config=OFFLINE)
        await memory.settle()
    full = await inner.get_items()
    assert len(full) == 4 * TURNS, "the inner session has every item"
    assert len(await memory.messages("wrapped")) == 4 * TURNS
    assert len(await session.get_items()) < len(full), "the model sees the managed context"
    inputs = [sent_of(i) for i in model.inputs]
    assert_pairs_intact(inputs)
    assert_memory_in_context(inputs)
    inner.close()


async def test_clear_session_with_no_choice_goes_on_in_a_new_thread_forgetting_nothing() -> None:
    memory = make_memory()
    inner = SQLiteSession("undecided")
    session = ObservationalSession.wrap(inner, memory, resource=RESOURCE)
    model = ScriptedModel()
    agent = make_agent(model)
    for i in range(8):
        await Runner.run(agent, user_turn(i), session=session, run_config=OFFLINE)
        await memory.settle()
    assert memory.om is not None
    learned = await memory.om.observations("undecided", RESOURCE)
    assert learned
    stored = await memory.messages("undecided")

    async def clear(any_session: Session) -> None:
        """Code that clears whatever session it is given."""
        await any_session.clear_session()

    assert isinstance(session, Session)
    await clear(session)
    assert session.on_clear == "new_thread"
    assert session.ref.thread == "undecided~1"
    assert await session.get_items() == []
    assert await inner.get_items() == [], "the inner session is cleared"
    assert await memory.messages("undecided") == stored, "the old thread keeps its messages"
    assert await memory.om.observations("undecided", RESOURCE) == learned, "and its memory"
    await Runner.run(agent, user_turn(8), session=session, run_config=OFFLINE)
    assert [m.text for m in await memory.messages("undecided~1") if m.role == "user"] == [
        user_turn(8)
    ]
    inner.close()


def test_forgetting_needs_thread_scope() -> None:
    memory = Memory(
        InMemoryStore(),
        observational_memory={"scope": "resource", "model": scripted_observer()},
    )
    with pytest.raises(ConfigError, match=r'resource scope.*on_clear="new_thread"'):
        ObservationalSession(memory, session_id="t", resource=RESOURCE, on_clear="forget")
    with pytest.raises(ConfigError, match="must be"):
        ObservationalSession(memory, session_id="t", resource=RESOURCE, on_clear="wipe")  # type: ignore[arg-type]


# -- shared with the test_openai_agents_*.py files ------------------------------------------------


def sqlite_memory(tmp_path: Path, **options: Any) -> Memory:
    """A Memory on an SQLite file that observes at 300 tokens, synchronously (``options``
    are laid over the observational-memory options)."""
    observation: dict[str, Any] = {
        "model": scripted_observer(),
        "messageTokens": 300,
        "bufferTokens": False,
    }
    observation.update(options.pop("observation", {}))
    return Memory(
        SQLiteStore(tmp_path / "m.db"),
        observational_memory={
            "observation": observation,
            "reflection": {"model": scripted_reflector()},
            **options,
        },
    )


def answer(text: str, n: int) -> Any:
    """An assistant message output item with an id of its own."""
    return assistant_message(text, item_id=f"msg-{n}")


def item_text(item: Any) -> str:
    """The text an input item shows the model (content, or a tool output)."""
    if not isinstance(item, dict):
        return str(item)
    entry = cast(dict[str, Any], item)
    if entry.get("type") == "function_call_output":
        return str(entry.get("output"))
    if entry.get("type") == "function_call":
        return f"{entry.get('name')}({entry.get('arguments')})"
    return _text(entry.get("content"))


def text_sent(call: ModelCall) -> str:
    """Everything a model call was shown (its instructions and every input item), joined."""
    items = call.input if isinstance(call.input, list) else [call.input]
    return "\n".join([call.system_instructions or "", *(item_text(i) for i in items)])
