"""Agent and Memory through the public API: the seed's example, offline."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from obsmem import ImagePart, Message
from obsmem.agent import Agent, Finish, TextDelta, ToolCall, ToolResult
from obsmem.memory import Memory
from obsmem.stores import InMemoryStore, Store
from obsmem.testing import scripted_observer, scripted_reflector

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8 + (64).to_bytes(4, "big") + (48).to_bytes(4, "big")


class Actor:
    """A FunctionModel actor that remembers what it was sent and answers from it."""

    def __init__(self) -> None:
        self.seen: list[list[pa.ModelMessage]] = []

    def text_seen(self, call: int = -1) -> str:
        out: list[str] = []
        for message in self.seen[call]:
            for part in message.parts:
                content = getattr(part, "content", None)
                if isinstance(content, str):
                    out.append(content)
        return "\n".join(out)

    def model(self) -> FunctionModel:
        def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
            self.seen.append(list(messages))
            text = self.text_seen()
            reply = "Your favorite color is blue." if "blue" in text else "I do not know yet."
            return pa.ModelResponse(parts=[pa.TextPart(content=reply)])

        async def stream(messages: list[pa.ModelMessage], info: AgentInfo):  # type: ignore[no-untyped-def]
            self.seen.append(list(messages))
            for word in ("Your ", "favorite ", "color ", "is ", "blue."):
                yield word

        return FunctionModel(answer, stream_function=stream)


def om_options(**observation: Any) -> dict[str, Any]:
    return {
        "observation": {"model": scripted_observer(), "bufferTokens": False, **observation},
        "reflection": {"model": scripted_reflector()},
    }


OPTS = {"resource": "user-123", "thread": "conversation-123"}


async def test_the_second_call_sees_the_first_exchange_raw(store: Store) -> None:
    actor = Actor()
    memory = Memory(store, observational_memory=om_options())
    agent = Agent(id="a", instructions="You are helpful.", model=actor.model(), memory=memory)
    await agent.generate("Remember that my favorite color is blue.", memory=OPTS)
    result = await agent.generate("What is my favorite color?", memory=OPTS)
    assert "blue" in result.text
    assert "Remember that my favorite color is blue." in actor.text_seen()
    stored = await memory.messages("conversation-123")
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert [m.seq for m in stored] == [1, 2, 3, 4]


async def test_past_the_threshold_it_sees_observations_instead(store: Store) -> None:
    actor = Actor()
    memory = Memory(store, observational_memory=om_options(messageTokens=150))
    agent = Agent(id="a", instructions="You are helpful.", model=actor.model(), memory=memory)
    filler = " It matters a great deal to me and I want you to keep it in mind." * 4
    await agent.generate("Remember that my favorite color is blue." + filler, memory=OPTS)
    second = await agent.generate("Also, I live in Lisbon." + filler, memory=OPTS)
    assert any(e.type == "data-om-observation-end" for e in second.events)
    result = await agent.generate("What is my favorite color?", memory=OPTS)
    assert "blue" in result.text
    system = [
        m for m in result.context if m.role == "system" and "favorite color is blue" in m.text
    ]
    assert system, "the first exchange reaches the actor as observations"
    raw_users = [
        m.text
        for m in result.context
        if m.role == "user" and not (m.metadata.get("obsmem") or {}).get("synthetic")
    ]
    assert raw_users[-1] == "What is my favorite color?"
    assert not any("favorite color is blue" in u for u in raw_users), "observed, so not raw"


async def test_threads_are_isolated_in_thread_scope(store: Store) -> None:
    actor = Actor()
    memory = Memory(store, observational_memory=om_options(messageTokens=150))
    agent = Agent(id="a", instructions="Hi.", model=actor.model(), memory=memory)
    await agent.generate("My favorite color is blue. " * 8, memory=OPTS)
    await agent.generate("Noted? " * 20, memory=OPTS)
    other = await agent.generate("What is my favorite color?", memory={**OPTS, "thread": "other"})
    assert "blue" not in actor.text_seen()
    assert "do not know" in other.text


async def test_resource_scope_shares_memory_across_threads(store: Store) -> None:
    actor = Actor()
    memory = Memory(
        store,
        observational_memory={**om_options(messageTokens=150), "scope": "resource"},
    )
    agent = Agent(id="a", instructions="Hi.", model=actor.model(), memory=memory)
    await agent.generate("My favorite color is blue. " * 8, memory=OPTS)
    await agent.generate("Noted? " * 20, memory=OPTS)
    other = await agent.generate("What is my favorite color?", memory={**OPTS, "thread": "other"})
    assert "blue" in actor.text_seen()
    assert "blue" in other.text


async def test_stream_delivers_events_text_and_tools_in_order() -> None:
    calls: list[str] = []

    def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        if not any(isinstance(p, pa.ToolReturnPart) for m in messages for p in m.parts):
            return pa.ModelResponse(
                parts=[
                    pa.ToolCallPart(tool_name="lookup", args={"key": "color"}, tool_call_id="c1")
                ]
            )
        return pa.ModelResponse(parts=[pa.TextPart(content="blue")])

    async def stream(messages: list[pa.ModelMessage], info: AgentInfo):  # type: ignore[no-untyped-def]
        if not any(isinstance(p, pa.ToolReturnPart) for m in messages for p in m.parts):
            yield {0: DeltaToolCall(name="lookup", json_args='{"key": "color"}', tool_call_id="c1")}
        else:
            yield "bl"
            yield "ue"

    def lookup(key: str) -> str:
        calls.append(key)
        return "blue"

    memory = Memory(InMemoryStore(), observational_memory=om_options())
    seen_by_listener: list[str] = []
    memory.subscribe(lambda e: seen_by_listener.append(e.type))
    agent = Agent(
        id="a",
        instructions="Hi.",
        model=FunctionModel(answer, stream_function=stream),
        memory=memory,
        tools=[lookup],
    )
    parts = [p async for p in agent.stream("What color?", memory=OPTS)]
    types = [p.type for p in parts]
    assert types[0] == "data-om-status"
    assert types.index("tool-call") < types.index("tool-result") < types.index("text-delta")
    assert types[-1] == "finish"
    assert "".join(p.text for p in parts if isinstance(p, TextDelta)) == "blue"
    call = next(p for p in parts if isinstance(p, ToolCall))
    assert call.tool_name == "lookup"
    result = next(p for p in parts if isinstance(p, ToolResult))
    assert result.content == "blue"
    assert calls == ["color"]
    finish = parts[-1]
    assert isinstance(finish, Finish)
    assert [m.role for m in finish.result.messages] == ["assistant", "tool", "assistant"]
    assert "data-om-status" in seen_by_listener
    stored = await memory.messages("conversation-123")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]


def test_several_agents_share_one_memory_and_generate_sync_works(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from obsmem.stores import SQLiteStore

    store = SQLiteStore(tmp_path / "obsmem.db")
    memory = Memory(store, observational_memory=om_options())
    first = Agent(id="one", instructions="Hi.", model=Actor().model(), memory=memory)
    second_actor = Actor()
    second = Agent(id="two", instructions="Hi.", model=second_actor.model(), memory=memory)
    first.generate_sync("My favorite color is blue.", memory=OPTS)
    result = second.generate_sync("What is my favorite color?", memory=OPTS)
    assert "blue" in result.text


async def test_an_image_reaches_the_observer_as_placeholder_and_attachment() -> None:
    received: list[list[Any]] = []

    def observer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        for m in messages:
            for p in m.parts:
                if isinstance(p, pa.UserPromptPart):  # text only comes as one string
                    received.append([p.content] if isinstance(p.content, str) else list(p.content))
        return pa.ModelResponse(
            parts=[
                pa.TextPart(
                    content="<observations>\n* 🔴 (10:00) User shared a board.\n</observations>"
                )
            ]
        )

    async def run(forward: bool) -> list[Any]:
        received.clear()
        memory = Memory(
            InMemoryStore(),
            observational_memory={
                "observation": {
                    "model": FunctionModel(observer),
                    "messageTokens": 100,
                    "bufferTokens": False,
                    "observeAttachments": forward,
                },
                "reflection": {"model": scripted_reflector()},
            },
        )
        agent = Agent(id="a", instructions="Hi.", model=Actor().model(), memory=memory)
        image = ImagePart(data=PNG, media_type="image/png", filename="board.png")
        await agent.generate(
            [Message(role="user", parts=(image,)), Message.user("Here is our board. " * 30)],
            memory=OPTS,
        )
        await agent.generate("Thoughts?", memory=OPTS)
        assert received, "the Observer ran"
        return received[0]

    forwarded = await run(True)
    text = "\n".join(c for c in forwarded if isinstance(c, str))
    assert "[Image #1: board.png]" in text
    binaries = [c for c in forwarded if isinstance(c, pa.BinaryContent)]
    assert [b.media_type for b in binaries] == ["image/png"]
    placeholder_only = await run(False)
    assert "[Image #1: board.png]" in "\n".join(c for c in placeholder_only if isinstance(c, str))
    assert not [c for c in placeholder_only if isinstance(c, pa.BinaryContent)]


async def test_titles_come_from_the_observer_unless_pinned(store: Store) -> None:
    """The Observer is asked for a title when the thread has none (and again only after a
    reflection), never for a pinned one."""
    asked: list[bool] = []

    def observer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        system = "".join(
            p.content for m in messages for p in m.parts if isinstance(p, pa.SystemPromptPart)
        )
        asked.append("<thread-title>" in system)
        return pa.ModelResponse(
            parts=[
                pa.TextPart(
                    content=f"<observations>\n* 🔴 (10:00) User plans a trip {len(asked)}.\n"
                    "</observations>\n<thread-title>Trip to Lisbon</thread-title>"
                )
            ]
        )

    memory = Memory(
        store,
        observational_memory={
            "observation": {
                "model": FunctionModel(observer),
                "messageTokens": 100,
                "bufferTokens": False,
                "threadTitle": True,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    events: list[Any] = []
    memory.subscribe(events.append)
    agent = Agent(id="a", instructions="Hi.", model=Actor().model(), memory=memory)
    await agent.generate("Let us plan a trip to Lisbon. " * 10, memory=OPTS)
    for question in ("Which month is best?", "And which district? " * 10, "Trains? " * 20):
        await agent.generate(question, memory=OPTS)
    thread = await memory.thread("conversation-123")
    assert thread is not None
    assert thread.title == "Trip to Lisbon"
    [update] = [e for e in events if e.type == "data-om-thread-update"]
    assert update.old_title is None
    assert update.new_title == "Trip to Lisbon"
    assert len(asked) >= 2
    assert asked == [True] + [False] * (len(asked) - 1)

    asked.clear()
    await memory.store.create_thread("pinned", "user-123")
    await memory.set_thread_title("pinned", "My own title")
    pinned = {"resource": "user-123", "thread": "pinned"}
    await agent.generate("Let us plan a trip to Lisbon. " * 10, memory=pinned)
    await agent.generate("Which month is best?", memory=pinned)
    thread = await memory.thread("pinned")
    assert thread is not None
    assert thread.title == "My own title"
    assert asked
    assert not any(asked)


async def test_images_inside_tool_results_reach_the_observer_too() -> None:
    from obsmem import ToolCallPart, ToolResultPart

    received: list[list[Any]] = []

    def observer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        for m in messages:
            for p in m.parts:
                if isinstance(p, pa.UserPromptPart):  # text only comes as one string
                    received.append([p.content] if isinstance(p.content, str) else list(p.content))
        return pa.ModelResponse(
            parts=[
                pa.TextPart(content="<observations>\n* 🟡 (10:00) A screenshot.\n</observations>")
            ]
        )

    memory = Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {
                "model": FunctionModel(observer),
                "bufferTokens": False,
                "messageTokens": 100,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    shot = ImagePart(data=PNG, media_type="image/png", filename="screen.png")
    await memory.save(
        __import__("obsmem.memory", fromlist=["ThreadRef"]).ThreadRef.of(OPTS),
        [
            Message(
                role="assistant", parts=(ToolCallPart(tool_call_id="c1", tool_name="screenshot"),)
            ),
            Message(
                role="tool",
                parts=(
                    ToolResultPart(
                        tool_call_id="c1",
                        tool_name="screenshot",
                        content="taken " * 60,
                        attachments=(shot,),
                    ),
                ),
            ),
        ],
        actor_model=None,
    )
    agent = Agent(id="a", instructions="Hi.", model=Actor().model(), memory=memory)
    await agent.generate("What did the screenshot show? " * 5, memory=OPTS)
    assert received
    text = "\n".join(c for c in received[0] if isinstance(c, str))
    assert "[Image #1: screen.png]" in text
    assert [b.media_type for b in received[0] if isinstance(b, pa.BinaryContent)] == ["image/png"]


@pytest.mark.parametrize(
    ("observer", "mime", "forwarded"),
    [
        ("openai/gpt-5-mini", "image/png", True),
        ("openai/gpt-5-mini", "application/pdf", True),
        ("deepseek/deepseek-chat", "image/png", False),
        ("google/gemini-2.5-flash", "audio/mpeg", True),
        ("anthropic/claude-haiku-4-5", "audio/mpeg", False),
    ],
)
def test_observe_attachments_auto_follows_the_observer_model(
    observer: str, mime: str, forwarded: bool
) -> None:
    from obsmem.cycles import attachment_filter
    from obsmem.options import resolve_options

    options = resolve_options(
        {
            "observation": {"model": observer, "observeAttachments": "auto"},
            "reflection": {"model": observer},
        }
    )
    assert options is not None
    assert attachment_filter(options)(mime) is forwarded


def _looping(steps: int) -> FunctionModel:
    async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        done = sum(isinstance(p, pa.ToolReturnPart) for m in messages for p in m.parts)
        if done < steps:
            return pa.ModelResponse(parts=[pa.ToolCallPart("tick", {}, tool_call_id=f"t{done}")])
        return pa.ModelResponse(parts=[pa.TextPart(f"{done} ticks")])

    return FunctionModel(answer)


def tick() -> str:
    """One tick."""
    return "ok"


async def test_a_long_tool_loop_runs_past_fifty_steps() -> None:
    """The seed's browsing agent takes 50 steps and more in one turn; max_steps bounds it."""
    agent = Agent("loop", "Tick.", _looping(80), tools=[tick])
    assert (await agent.generate("Go.")).text == "80 ticks"
    from pydantic_ai.exceptions import UsageLimitExceeded

    short = Agent("loop", "Tick.", _looping(80), tools=[tick], max_steps=10)
    with pytest.raises(UsageLimitExceeded, match="request_limit of 10"):
        await short.generate("Go.")


@pytest.mark.parametrize("bad", [0, -1, True, "many"])
def test_max_steps_must_be_a_positive_count(bad: Any) -> None:
    from obsmem.errors import ConfigError

    with pytest.raises(ConfigError, match="max_steps"):
        Agent("loop", "Tick.", _looping(1), max_steps=bad)


async def test_a_cancelled_call_leaves_no_task_behind() -> None:
    """Cancelling ``generate`` while the model answers (Ctrl-C in ``obsmem chat``) ends all of
    the call's tasks: a task left pending is reported as destroyed when it is collected."""
    import asyncio

    asked = asyncio.Event()

    async def never(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    memory = Memory(InMemoryStore(), observational_memory=om_options())
    agent = Agent("hang", "Answer.", FunctionModel(never), memory=memory)
    call = asyncio.create_task(agent.generate("Hello?", memory=OPTS))
    await asked.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await memory.aclose()
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_max_output_tokens_cuts_off_a_model_whose_server_ignores_max_tokens() -> None:
    """A server that streams forever whatever ``max_tokens`` says: the answer is read as a
    stream and cut at the cap (the server sees the client hang up), it ends as an answer cut
    at ``max_tokens`` ends, and the cut reply is what the thread keeps."""
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from obsmem.tokens import HeuristicEstimator

    from .strict_server import rambling, strict_server

    async with strict_server(answer=rambling()) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        model = OpenAIChatModel("local", provider=OpenAIProvider(openai_client=client))
        memory = Memory(InMemoryStore(), observational_memory=om_options())
        agent = Agent("ramble", "Answer.", model, memory=memory, max_output_tokens=300)
        result = await agent.generate("Tell me everything.", memory=OPTS)
        await server.wait_hung_up(1)
        [request] = server.requests
        assert request["stream"] is True
        assert request["max_completion_tokens"] == 300  # pydantic-ai's name for max_tokens
        assert result.cut_off
        assert 300 < HeuristicEstimator().count_text(result.text) < 400
        stored = await memory.messages(OPTS["thread"])
        assert [m.role for m in stored] == ["user", "assistant"]
        assert stored[-1].text == result.text

        parts = [p async for p in agent.stream("And again?", memory=OPTS)]
        await server.wait_hung_up(2)
        finish = parts[-1]
        assert isinstance(finish, Finish)
        assert finish.result.cut_off
        assert "".join(p.text for p in parts if isinstance(p, TextDelta)) == finish.result.text
        await memory.aclose()


@pytest.mark.parametrize("bad", [0, -1, True, "many"])
def test_max_output_tokens_must_be_a_positive_count(bad: Any) -> None:
    from obsmem.errors import ConfigError

    with pytest.raises(ConfigError, match="max_output_tokens"):
        Agent("cap", "Answer.", _looping(1), max_output_tokens=bad)
