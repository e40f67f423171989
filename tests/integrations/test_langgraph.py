"""obsmem.integrations.langgraph against LangGraph's create_react_agent with a fake chat model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent
from pydantic import Field

from obsmem import Memory
from obsmem.errors import ConfigError
from obsmem.integrations.langgraph import (
    LangGraphMemory,
    from_langchain,
    post_model_hook,
    pre_model_hook,
    to_langchain,
)
from obsmem.messages import ToolCallPart, ToolResultPart
from obsmem.stores import SQLiteStore

from .helpers import (
    FACTS,
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

pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")

THREAD = "lg-thread"


def sent_of(messages: list[BaseMessage]) -> Sent:
    system: list[str] = []
    plain: list[str] = []
    calls: list[str] = []
    events: list[tuple[str, str]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            system.append(message.text)
        elif isinstance(message, ToolMessage):
            events.append(("result", message.tool_call_id))
        else:
            plain.append(message.text)
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    calls.append(str(call["id"]))
                    events.append(("call", str(call["id"])))
    return Sent(
        system_text="\n".join(system),
        plain_text="\n".join(plain),
        calls=tuple(calls),
        events=tuple(events),
    )


def script(turns: int) -> Iterator[AIMessage]:
    for i in range(turns):
        call = {
            "name": "weather",
            "args": {"city": "Lisbon"},
            "id": f"call-{i}",
            "type": "tool_call",
        }
        yield AIMessage(content="", tool_calls=[call])
        yield AIMessage(content=answer_text(i))


class ScriptedChat(GenericFakeChatModel):
    """A fake chat model that accepts tools and records every input."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list[list[BaseMessage]])

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.inputs.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def make_graph(
    model: ScriptedChat, memory: Memory, *, post: bool = True, thread: str | None = THREAD
) -> Any:
    return create_react_agent(
        model,
        [weather],
        prompt="Be brief.",
        pre_model_hook=pre_model_hook(memory, resource=RESOURCE, thread=thread),
        post_model_hook=post_model_hook(memory, resource=RESOURCE, thread=thread) if post else None,
        checkpointer=InMemorySaver(),
    )


@pytest.mark.parametrize("post", [True, False], ids=["with-post-hook", "pre-hook-only"])
async def test_hook_observes_reflects_and_keeps_tool_pairs(post: bool) -> None:
    memory = make_memory()
    model = ScriptedChat(messages=script(TURNS), inputs=[])
    graph = make_graph(model, memory, post=post)
    config = {"configurable": {"thread_id": "graph-1"}}
    for i in range(TURNS):
        state = await graph.ainvoke({"messages": [HumanMessage(user_turn(i))]}, config)
        assert state["messages"][-1].text == answer_text(i)
        await memory.settle()

    assert len(state["messages"]) == 4 * TURNS, "the graph state keeps the full history"
    stored = await memory.messages(THREAD)
    expected = ["user", "assistant", "tool", "assistant"] * TURNS
    assert [m.role for m in stored] == (expected if post else expected[:-1])
    assert [m.text for m in stored if m.role == "user"] == [user_turn(i) for i in range(TURNS)]
    inputs = [sent_of(m) for m in model.inputs]
    assert all(s.system_text.startswith("Be brief.") for s in inputs)
    assert_pairs_intact(inputs)
    assert_memory_in_context(inputs)
    await assert_reflected(memory, THREAD)


async def test_thread_from_the_run_config() -> None:
    memory = make_memory()
    model = ScriptedChat(messages=script(2), inputs=[])
    graph = make_graph(model, memory, thread=None)
    await graph.ainvoke(
        {"messages": [HumanMessage(user_turn(0))]}, {"configurable": {"thread_id": "from-config"}}
    )
    assert [m.role for m in await memory.messages("from-config")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


async def test_restarted_hooks_find_what_is_stored() -> None:
    """A new hook object (another process) stores nothing twice."""
    memory = make_memory()
    messages: list[BaseMessage] = [
        HumanMessage("hi", id="h1"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {}, "id": "c1"}], id="a1"),
        ToolMessage("sunny", tool_call_id="c1", id="t1"),
    ]
    config: Any = {}
    first = await LangGraphMemory(memory, resource=RESOURCE, thread="r").pre_model_hook.ainvoke(
        {"messages": messages[:1]}, config
    )
    assert [m.text for m in first["llm_input_messages"]] == ["hi"]
    again = await LangGraphMemory(memory, resource=RESOURCE, thread="r").pre_model_hook.ainvoke(
        {"messages": messages}, config
    )
    assert [type(m).__name__ for m in again["llm_input_messages"]] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
    ]
    assert [m.role for m in await memory.messages("r")] == ["user", "assistant", "tool"]


def test_an_invalid_tool_call_is_stored_with_its_error_answer() -> None:
    """create_agent answers a malformed call with an error ToolMessage: both are kept, paired."""
    bad = AIMessage(
        "", invalid_tool_calls=[{"name": "weather", "args": "{oops", "id": "c9", "error": "x"}]
    )
    read = from_langchain([bad, ToolMessage("malformed", tool_call_id="c9", status="error")])
    [call] = read[0].parts
    assert isinstance(call, ToolCallPart)
    assert (call.tool_call_id, call.tool_name, call.args) == ("c9", "weather", "{oops")
    assert to_langchain(read)[0] == bad


def test_messages_round_trip() -> None:
    messages: list[BaseMessage] = [
        SystemMessage("sys", id="s"),
        HumanMessage("hi", id="h"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "L"}, "id": "c1"}], id="a"),
        ToolMessage("boom", tool_call_id="c1", status="error", id="t"),
    ]
    read = from_langchain(messages, thread="x")
    assert [m.id for m in read] == ["lc-x-s", "lc-x-h", "lc-x-a", "lc-x-t"]
    assert [m.role for m in read] == ["system", "user", "assistant", "tool"]
    assert to_langchain(read) == messages
    result = read[3].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error
    assert result.tool_name == "weather"


# -- per-call ids, sync runs, events, trimming, recall ---------------------------------------------


def react_agent(model: Any, hooks: LangGraphMemory, tools: Any = (weather,)) -> Any:
    return create_react_agent(
        model,
        list(tools),
        prompt="Be brief.",
        pre_model_hook=hooks.pre_model_hook,
        post_model_hook=hooks.post_model_hook,
        checkpointer=InMemorySaver(),
    )


def test_sync_invoke_and_stream_with_the_ids_of_the_config(tmp_path: Path) -> None:
    """The hooks run in ``invoke``/``stream``; thread and resource come from the config; the
    custom stream shows the thread's memory events; each answer is stored at once."""
    memory = make_memory(SQLiteStore(tmp_path / "m.db"))
    model = ScriptedChat(messages=script(TURNS), inputs=[])
    graph = react_agent(model, LangGraphMemory(memory))
    config: Any = {"configurable": {"thread_id": "sync-1", "user_id": "alice"}}
    events: list[dict[str, Any]] = []
    for i in range(TURNS):
        turn = {"messages": [HumanMessage(user_turn(i))]}
        if i % 2:
            state = graph.invoke(turn, config)
        else:
            for mode, chunk in graph.stream(turn, config, stream_mode=["custom", "values"]):
                if mode == "custom":
                    events.append(chunk)
                else:
                    state = chunk
        assert state["messages"][-1].text == answer_text(i)
        assert memory.run_sync(memory.messages("sync-1"))[-1].text == answer_text(i)
        memory.run_sync(memory.settle())

    assert [t.id for t in memory.run_sync(memory.threads("alice"))] == ["sync-1"]
    stored = memory.run_sync(memory.messages("sync-1"))
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"] * TURNS
    kinds = [e["type"] for e in events]
    assert kinds.count("data-om-status") == TURNS // 2 * 2, kinds
    assert "data-om-observation-end" in kinds
    assert {e["thread_id"] for e in events} == {"sync-1"}
    inputs = [sent_of(m) for m in model.inputs]
    assert_pairs_intact(inputs)
    assert_memory_in_context(inputs)
    memory.close()


async def test_one_graph_serves_two_users_by_config() -> None:
    from .test_langchain import om_memory

    memory = om_memory(scope="resource")
    model = ScriptedChat(messages=script(8), inputs=[])
    graph = react_agent(model, LangGraphMemory(memory))
    bob_sent: list[str] = []
    for i in range(4):
        alice = {"configurable": {"thread_id": "a-1", "resource_id": "alice"}}
        await graph.ainvoke({"messages": [HumanMessage(f"Turn {i}: {FACTS[i]}. " * 6)]}, alice)
        start = len(model.inputs)
        bob = {"configurable": {"thread_id": "b-1", "resource_id": "bob"}}
        await graph.ainvoke({"messages": [HumanMessage(f"Turn {i}: hello. " * 6)]}, bob)
        bob_sent += [m.text for request in model.inputs[start:] for m in request]
        await memory.settle()
    assert memory.om is not None
    assert FACTS[0] in await memory.om.observations("a-1", "alice")
    for fact in FACTS[:4]:
        assert not any(fact in text for text in bob_sent), fact
        assert all(fact not in m.text for m in await memory.messages("b-1"))
    await memory.aclose()


async def test_a_missing_resource_names_the_fix() -> None:
    memory = make_memory()
    graph = react_agent(ScriptedChat(messages=script(1), inputs=[]), LangGraphMemory(memory))
    with pytest.raises(ConfigError, match="resource_id"):
        await graph.ainvoke(
            {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}}
        )
    await memory.aclose()


async def test_trim_checkpoint_with_the_hooks() -> None:
    memory = make_memory()
    model = ScriptedChat(messages=script(TURNS), inputs=[])
    graph = react_agent(model, LangGraphMemory(memory, resource=RESOURCE, trim_checkpoint=True))
    config: Any = {"configurable": {"thread_id": THREAD}}
    for i in range(TURNS):
        state = await graph.ainvoke({"messages": [HumanMessage(user_turn(i))]}, config)
        assert state["messages"][-1].text == answer_text(i)
        await memory.settle()
    assert len(state["messages"]) < 2 * TURNS
    stored = await memory.messages(THREAD)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"] * TURNS
    inputs = [sent_of(m) for m in model.inputs]
    assert_pairs_intact(inputs)
    assert_memory_in_context(inputs)
    await memory.aclose()


async def test_the_context_mentions_recall_only_when_the_hooks_gave_the_tool() -> None:
    from .test_langchain import FIRST, SECOND, assert_recalled, chat, om_memory, recall_then_answer

    memory = om_memory(retrieval=True)
    model = ScriptedChat(messages=script(6), inputs=[])
    graph = react_agent(model, LangGraphMemory(memory))
    config: Any = {"configurable": {"thread_id": "no-recall", "user_id": "u"}}
    for i in range(6):
        await graph.ainvoke({"messages": [HumanMessage(user_turn(i))]}, config)
        await memory.settle()
    assert "<observations>" in sent_of(model.inputs[-1]).system_text
    assert all("recall" not in m.text.lower() for request in model.inputs for m in request)

    hooks = LangGraphMemory(memory)
    recalling = chat(recall_then_answer)
    graph = react_agent(recalling, hooks, tools=[hooks.recall_tool()])
    config = {"configurable": {"thread_id": "with-recall", "user_id": "u"}}
    await graph.ainvoke(FIRST, config)
    assert_recalled(recalling, await graph.ainvoke(SECOND, config))
    await memory.aclose()


async def test_create_react_agent_on_a_small_strict_server_with_the_compacting_model() -> None:
    """``create_react_agent(lg.compacting(ChatOpenAI(...)), tools, prompt=..., hooks)`` against
    a strict llama.cpp-like server with a small context: tool loops, the agent's prompt and
    memory's observations in one system message (a second one is refused), and each request
    refused as too long compacted and sent again inside the run."""
    from langchain_openai import ChatOpenAI

    from obsmem.stores import InMemoryStore
    from obsmem.testing import scripted_observer, scripted_reflector

    from ..strict_server import ToolCalls, strict_server

    left = 0

    def actor(body: dict[str, Any]) -> str | ToolCalls:
        nonlocal left
        if body["messages"][-1]["role"] == "user":  # a new turn: two measurements, then answer
            left = 2
        if left:
            left -= 1
            asked = sum(m["role"] == "user" for m in body["messages"])
            return ToolCalls(("measure", {"room": f"room {asked}.{left} upstairs"}))
        return "Noted."

    @tool
    def measure(room: str) -> str:
        """Measure a room."""
        return f"The {room} is 4 by 5 metres, with a window facing north."

    async with strict_server(answer=actor, context_size=1_800) as server:
        memory = Memory(
            InMemoryStore(),
            observational_memory={
                "observation": {"model": scripted_observer()},
                "reflection": {"model": scripted_reflector()},
            },
        )
        lg = LangGraphMemory(memory, resource=RESOURCE)
        llm = ChatOpenAI(model="local", base_url=server.base_url, api_key="x", max_retries=0)  # type: ignore[arg-type]
        agent = create_react_agent(
            lg.compacting(llm),
            [measure],
            prompt="Be brief.",
            pre_model_hook=lg.pre_model_hook,
            post_model_hook=lg.post_model_hook,
            checkpointer=InMemorySaver(),
        )
        config: Any = {"configurable": {"thread_id": THREAD}}
        for turn in range(6):
            text = " ".join(f"fact{turn}-{i} about the garden" for i in range(40))
            result = await agent.ainvoke({"messages": [("user", text)]}, config)
            assert result["messages"][-1].content == "Noted."
            await memory.settle()
        stored = await memory.messages(THREAD)
        await memory.aclose()
    too_long = [r for r in server.refusals if "exceed" in r or "context" in r]
    assert too_long, "the small context was exceeded at least once"
    assert [r for r in server.refusals if r not in too_long] == []
    last = server.requests[-1]["messages"]
    assert [m["role"] for m in last].count("system") == 1
    assert last[0]["content"].startswith("Be brief.")
    assert "<observations>" in last[0]["content"]
    assert lg.actor_model == "openai/local"
    assert sum(p.kind == "tool-result" for m in stored for p in m.parts) == 6 * 2
    assert len(stored) == 6 * 6  # each question, two calls, two results and the answer, once
