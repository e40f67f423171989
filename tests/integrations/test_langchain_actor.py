"""The actor's model at the LangChain and LangGraph doors: the chat model the agent calls reaches
memory (images counted by its provider's rules, a provider change activating buffered chunks),
and a model whose provider takes prompt-cache breakpoints gets one at the end of the system
message (Anthropic's ``cache_control``, OpenAI's ``prompt_cache_breakpoint`` from GPT-5.6 on);
an earlier OpenAI model gets none.

Each door runs with LangChain's fake chat model dressed as a provider's (its ``_llm_type`` and
model name), so nothing leaves the machine."""

from __future__ import annotations

import base64
import json
import warnings
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import create_react_agent
from pydantic import Field

from obsmem import Memory
from obsmem.events import ActivationEvent, Event, StatusEvent
from obsmem.integrations.langchain import ObservationalMemoryMiddleware
from obsmem.integrations.langgraph import (
    LangGraphMemory,
    actor_model_of,
    post_model_hook,
    pre_model_hook,
    with_cache_breakpoint,
)
from obsmem.messages import ImagePart
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector
from obsmem.tokens import HeuristicEstimator

from .helpers import RESOURCE, TURNS, answer_text, make_memory, user_turn

THREAD = "actor-thread"
CONFIG: Any = {"configurable": {"thread_id": THREAD, "resource_id": RESOURCE}}
ANTHROPIC = "anthropic/claude-haiku-4-5"
OPENAI = "openai/gpt-5-mini"
OPENAI_BREAKPOINTS = "openai/gpt-6.1-terra"
"""An OpenAI model that matches a cached prefix only at a breakpoint."""


def _answers() -> Iterator[AIMessage]:
    while True:
        yield AIMessage(answer_text(0))


class _Fake(GenericFakeChatModel):
    """A fake chat model that takes tools and keeps every request."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list[list[BaseMessage]])

    def bind_tools(self, tools: Any, **kwargs: Any) -> _Fake:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.inputs.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


class FakeAnthropic(_Fake):
    model: str = "claude-haiku-4-5"

    @property
    def _llm_type(self) -> str:
        return "anthropic-chat"


class FakeOpenAI(_Fake):
    model_name: str = "gpt-5-mini"

    @property
    def _llm_type(self) -> str:
        return "openai-chat"


def fake(provider: str, name: str = "") -> _Fake:
    """A fake of ``provider``'s chat model, named ``name`` (its usual one when empty)."""
    if provider == "anthropic":
        return FakeAnthropic(messages=_answers())
    return FakeOpenAI(messages=_answers(), model_name=name or "gpt-5-mini")


# -- the doors, each running one user turn on a given chat model ----------------------------------

Turn = Callable[[Any], Awaitable[None]]
"""One user turn (a LangChain message's content) through a door."""


def _middleware(memory: Memory, model: _Fake) -> Turn:
    agent = create_agent(
        model, [], system_prompt="Be brief.", middleware=[ObservationalMemoryMiddleware(memory)]
    )

    async def turn(content: Any) -> None:
        await agent.ainvoke({"messages": [HumanMessage(content)]}, CONFIG)

    return turn


def _hooks(memory: Memory, model: _Fake) -> Turn:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        graph = create_react_agent(
            model,
            [],
            pre_model_hook=pre_model_hook(memory, model=model),
            post_model_hook=post_model_hook(memory, model=model),
        )

    async def turn(content: Any) -> None:  # the state's system message goes first, unstored
        await graph.ainvoke(
            {"messages": [SystemMessage("Be brief."), HumanMessage(content)]}, CONFIG
        )

    return turn


def _node(memory: Memory, model: _Fake) -> Turn:
    lg = LangGraphMemory(memory, model=model)

    async def chatbot(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        system = SystemMessage("Be brief.")
        sent = await lg.amodel_input([system, *state["messages"]], config)
        reply = await model.ainvoke(sent.messages)
        await lg.asave([reply], config)
        return {"messages": [reply]}

    graph = (
        StateGraph(MessagesState)
        .add_node(chatbot)
        .add_edge(START, "chatbot")
        .add_edge("chatbot", END)
        .compile()
    )

    async def turn(content: Any) -> None:
        await graph.ainvoke({"messages": [HumanMessage(content)]}, CONFIG)

    return turn


@dataclass(frozen=True, slots=True)
class Door:
    name: str
    make: Callable[[Memory, _Fake], Turn]


DOORS = [Door("middleware", _middleware), Door("hooks", _hooks), Door("node", _node)]
DOOR_IDS = [d.name for d in DOORS]


def _events(memory: Memory) -> list[Event]:
    seen: list[Event] = []
    memory.subscribe(seen.append)
    return seen


# -- naming the actor ------------------------------------------------------------------------------


def test_chat_models_are_named_as_memory_names_models() -> None:
    openai = ChatOpenAI(model="gpt-5-mini", api_key="sk-test")  # type: ignore[arg-type]
    assert actor_model_of(openai) == OPENAI
    assert actor_model_of(openai.bind_tools([])) == OPENAI, "a model with tools bound"
    assert actor_model_of(fake("anthropic")) == ANTHROPIC, "told by its _llm_type"
    assert actor_model_of(fake("openai")) == OPENAI
    assert actor_model_of(GenericFakeChatModel(messages=_answers())) is None
    assert actor_model_of("anthropic/claude-sonnet-4-5") == "anthropic/claude-sonnet-4-5"
    assert actor_model_of(None) is None


# -- images by the actor's rules, a provider change ------------------------------------------------


def png(width: int, height: int) -> bytes:
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x02\x00\x00\x00"
    chunk = b"IHDR" + ihdr
    crc = zlib.crc32(chunk).to_bytes(4, "big")
    return b"\x89PNG\r\n\x1a\n" + len(ihdr).to_bytes(4, "big") + chunk + crc


def _quiet_memory(**observation: Any) -> Memory:
    return Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {"model": scripted_observer(), "messageTokens": 3_000, **observation},
            "reflection": {"model": scripted_reflector(), "observationTokens": 20_000},
        },
    )


@pytest.mark.parametrize("door", DOORS, ids=DOOR_IDS)
async def test_an_image_is_counted_by_the_actor_provider_rules(door: Door) -> None:
    image = png(1000, 1000)
    url = "data:image/png;base64," + base64.b64encode(image).decode()
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    counted: dict[str, int] = {}
    for provider in ("anthropic", "openai"):
        memory = _quiet_memory(bufferTokens=False)
        events = _events(memory)
        await door.make(memory, fake(provider))(content)
        [status, *_] = [e for e in events if isinstance(e, StatusEvent)]
        counted[provider] = status.message_tokens
        await memory.aclose()
    rules = {
        provider: HeuristicEstimator(spec).count_image(
            ImagePart(media_type="image/png", data=image)
        )
        for provider, spec in (("anthropic", ANTHROPIC), ("openai", OPENAI))
    }
    assert rules["anthropic"] != rules["openai"]
    assert counted["anthropic"] - counted["openai"] == rules["anthropic"] - rules["openai"]


@pytest.mark.parametrize("door", DOORS, ids=DOOR_IDS)
async def test_a_provider_change_activates_buffered_chunks(door: Door) -> None:
    memory = _quiet_memory(activateOnProviderChange=True)
    events = _events(memory)
    before = door.make(memory, fake("openai"))
    for i in range(3):
        await before(user_turn(i) + " " + "tell me more about the harbour. " * 40)
        await memory.settle()
    assert not [e for e in events if isinstance(e, ActivationEvent)]
    assert (await memory.om.store.get_record(f"thread:{THREAD}")).chunks, "a chunk is buffered"  # type: ignore[union-attr]
    await door.make(memory, fake("anthropic"))("And now?")
    [activation, *_] = [e for e in events if isinstance(e, ActivationEvent)]
    assert activation.triggered_by == "provider_change"
    assert (activation.previous_model, activation.current_model) == (OPENAI, ANTHROPIC)
    await memory.aclose()


# -- prompt-cache breakpoints --------------------------------------------------------------------


def _system_blocks(request: list[BaseMessage]) -> list[Any]:
    [system] = [m for m in request if isinstance(m, SystemMessage)]
    assert request[0] is system, "one leading system message"
    return system.content if isinstance(system.content, list) else [system.content]


_MARKS = {
    "anthropic": ("cache_control", {"type": "ephemeral"}),
    "openai": ("prompt_cache_breakpoint", {"mode": "explicit"}),
}


def _has_breakpoint(block: Any) -> bool:
    return isinstance(block, dict) and any(block.get(k) == v for k, v in _MARKS.values())


@pytest.mark.parametrize("actor", [ANTHROPIC, OPENAI_BREAKPOINTS])
@pytest.mark.parametrize("door", DOORS, ids=DOOR_IDS)
async def test_an_actor_that_takes_breakpoints_gets_one_after_the_observations(
    door: Door, actor: str
) -> None:
    memory = make_memory()
    provider, name = actor.split("/")
    model = fake(provider, name)
    field, value = _MARKS[provider]
    turn = door.make(memory, model)
    for i in range(TURNS):
        await turn(user_turn(i))
        await memory.settle()
    for request in model.inputs:
        blocks = _system_blocks(request)
        assert blocks[-1][field] == value, "the system message ends with the breakpoint"
        assert not any(_has_breakpoint(b) for b in blocks[:-1]), "one breakpoint"
        assert not any(_has_breakpoint(b) for m in request[1:] for b in _blocks(m))
    last = "\n".join(b["text"] for b in _system_blocks(model.inputs[-1]))
    assert last.startswith("Be brief.")
    assert "<observations>" in last, "the breakpoint sits after memory's observations"
    await memory.aclose()


def _blocks(message: BaseMessage) -> list[Any]:
    return message.content if isinstance(message.content, list) else []


@pytest.mark.parametrize("door", DOORS, ids=DOOR_IDS)
async def test_an_openai_model_before_gpt_5_6_gets_no_breakpoint(door: Door) -> None:
    memory = make_memory()
    model = fake("openai")
    turn = door.make(memory, model)
    for i in range(TURNS):
        await turn(user_turn(i))
        await memory.settle()
    for request in model.inputs:
        assert not any(_has_breakpoint(b) for m in request for b in _blocks(m))
        [system] = [m for m in request if isinstance(m, SystemMessage)]
        assert isinstance(system.content, str), "a plain system message, as before"
    assert "<observations>" in model.inputs[-1][0].text
    await memory.aclose()


def test_a_breakpoint_set_by_the_agent_is_left_alone() -> None:
    own = SystemMessage(
        [
            {
                "type": "text",
                "text": "Tools...",
                "cache_control": {"type": "ephemeral", "ttl": "1h"},
            },
            {"type": "text", "text": "Be brief."},
        ]
    )
    assert with_cache_breakpoint(own, ANTHROPIC) is own
    assert with_cache_breakpoint(own, OPENAI_BREAKPOINTS) is own
    plain = SystemMessage("Be brief.")
    assert with_cache_breakpoint(plain, OPENAI) is plain
    assert with_cache_breakpoint(plain, None) is plain
    marked = with_cache_breakpoint(plain, ANTHROPIC)
    assert marked is not None
    assert marked.content == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    assert plain.content == "Be brief.", "the given message is not changed"


def _openai_reply(request: httpx2.Request) -> httpx2.Response:
    """A text answer in the shape of the API ``request`` went to."""
    usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
    if request.url.path.endswith("/responses"):
        text = {"type": "output_text", "text": answer_text(0), "annotations": []}
        message = {"type": "message", "id": "m", "role": "assistant", "status": "completed"}
        return httpx2.Response(
            200,
            json={
                "id": "resp",
                "object": "response",
                "created_at": 0,
                "model": "gpt-6.1-terra",
                "status": "completed",
                "output": [{**message, "content": [text]}],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": usage,
            },
        )
    answer = {"role": "assistant", "content": answer_text(0)}
    return httpx2.Response(
        200,
        json={
            "id": "chat",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-6.1-terra",
            "choices": [{"index": 0, "message": answer, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        },
    )


@pytest.mark.parametrize("responses_api", [False, True], ids=["chat", "responses"])
async def test_chat_openai_sends_the_breakpoint_on_the_wire(responses_api: bool) -> None:
    """langchain-openai carries the breakpoint into the request body it sends, on Chat
    Completions and on the Responses API."""
    bodies: list[dict[str, Any]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        return _openai_reply(request)

    llm = ChatOpenAI(
        model="gpt-6.1-terra",
        api_key="sk-test",  # type: ignore[arg-type]
        use_responses_api=responses_api,
        http_async_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handle)),
    )
    memory = make_memory()
    agent = create_agent(
        llm, [], system_prompt="Be brief.", middleware=[ObservationalMemoryMiddleware(memory)]
    )
    for i in range(TURNS):
        await agent.ainvoke({"messages": [HumanMessage(user_turn(i))]}, CONFIG)
        await memory.settle()
    await memory.aclose()
    [system, *rest] = bodies[-1]["input" if responses_api else "messages"]
    assert system["role"] == "system"
    *_, last = system["content"]
    assert last["prompt_cache_breakpoint"] == {"mode": "explicit"}
    assert "<observations>" in last["text"]
    assert "prompt_cache_breakpoint" not in json.dumps(rest), "one breakpoint, on memory's end"
