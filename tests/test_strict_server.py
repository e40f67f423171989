"""Memory-model calls against a strict OpenAI-compatible server on loopback (the rules of
llama.cpp's and vLLM's chat templates), and answers that run away."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from obsmem.errors import ObserverOutputError
from obsmem.llm import LLMRequest, LLMResult, ModelCaller
from obsmem.messages import Message
from obsmem.models.streaming import CHECK_EVERY_CHARS
from obsmem.observer import ObserverInput, observe, observer_output_cap
from obsmem.tokens import HeuristicEstimator

from .strict_server import StrictServer, endless, rambling, strict_server

OBSERVATION = (
    "<observations>\nDate: Dec 1, 2025\n* 🔴 (09:00) User's favourite colour is blue.\n"
    "</observations>\n<current-task>Chat about colours</current-task>\n"
    "<suggested-response>Ask about other colours</suggested-response>"
)


def _model(server: StrictServer, name: str = "smollm2") -> object:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIChatModel(name, provider=OpenAIProvider(base_url=server.base_url, api_key="x"))


async def _ask(server: StrictServer, *, cap: int) -> LLMResult:
    return await ModelCaller().call(
        LLMRequest(
            role="observer",
            model=_model(server),  # type: ignore[arg-type]
            system="Observe.",
            user=["hello"],
            max_output_tokens=cap,
        )
    )


def _messages(n: int = 3) -> list[Message]:
    return [Message.user(f"My favourite colour is blue, note {i}.") for i in range(n)]


async def test_the_observer_speaks_what_a_strict_server_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model named through OPENAI_BASE_URL, as a user points obsmem at llama.cpp: one system
    message, string content, a streamed answer with an output cap."""
    from obsmem.models import resolve_model

    async with strict_server(answer=lambda request: OBSERVATION) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        parsed, _ = await observe(
            ObserverInput(messages=_messages()),
            model=resolve_model("openai/smollm2"),
            caller=ModelCaller(),
            estimator=HeuristicEstimator(),
        )
    assert server.refusals == []
    assert "favourite colour is blue" in parsed.observations
    [request] = server.requests
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert all(isinstance(m["content"], str) for m in request["messages"])
    assert request["stream"] is True
    # The output cap (pydantic-ai sends max_tokens as max_completion_tokens).
    assert request["max_completion_tokens"] == observer_output_cap(0)  # small input: the floor


async def test_the_strict_server_refuses_what_llama_cpp_and_vllm_refuse() -> None:
    """The loopback server is only useful if it is as strict as the real ones."""
    server = StrictServer(reject_params=frozenset({"temperature"}))
    text = {"role": "user", "content": "hi"}
    assert server.check({"messages": [{"role": "user", "content": [{"type": "text"}]}]}) == (
        500,
        'can only concatenate str (not "list") to str',
    )
    two_systems = [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}, text]
    assert server.check({"messages": two_systems})[1].startswith("System message")  # type: ignore[index]
    late_system = [text, {"role": "system", "content": "a"}]
    assert server.check({"messages": late_system})[1].startswith("System message")  # type: ignore[index]
    assert server.check({"messages": [text, text]})[1].startswith("Conversation roles")  # type: ignore[index]
    assert server.check({"messages": [text], "temperature": 0.3})[0] == 400  # type: ignore[index]
    tool_turn = [
        text,
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "It is 42."},
        text,
    ]
    assert server.check({"messages": [{"role": "system", "content": "s"}, *tool_turn]}) is None


async def test_a_model_that_never_stops_costs_at_most_the_cap() -> None:
    """A server that streams forever without repeating itself: each call is cut off at the
    output cap (the connection closed, so the server stops), and the Observer reports the two
    cut-off answers instead of waiting for ever."""
    async with strict_server(answer=rambling()) as server:
        with pytest.raises(ObserverOutputError, match="cut off by obsmem past the output cap"):
            await observe(
                ObserverInput(messages=_messages()),
                model=_model(server),  # type: ignore[arg-type]
                caller=ModelCaller(),
                estimator=HeuristicEstimator(),
            )
        await server.wait_hung_up(2)  # each answer was cut off by closing its stream
    assert server.requests[0]["max_completion_tokens"] == observer_output_cap(0)


async def test_a_rambling_answer_is_cut_at_the_output_cap() -> None:
    """The cap holds even when the server ignores max_tokens: what was read stops within one
    check (CHECK_EVERY_CHARS) past it, and what the server generated within what the socket
    buffers on top."""
    count = HeuristicEstimator().count_text
    async with strict_server(answer=rambling()) as server:
        result = await _ask(server, cap=2_000)
        await server.wait_hung_up(1)
    assert result.cut_off == "past the output cap of 2000 tokens"
    assert 2_000 < count(result.text) <= 2_000 + count("x" * CHECK_EVERY_CHARS) + 50
    generated = count("".join(itertools.islice(rambling()({}), server.streamed_pieces)))
    assert generated < 2 * 2_000, generated


async def test_a_model_stuck_in_a_loop_is_cut_off_long_before_the_cap() -> None:
    async with strict_server(answer=endless()) as server:
        result = await _ask(server, cap=100_000)
        await server.wait_hung_up(1)
    assert result.cut_off == "repeating itself"
    assert len(result.text) < 10_000


async def test_a_parameter_the_model_rejects_is_not_sent() -> None:
    """An OpenAI reasoning model (gpt-5-mini) rejects temperature while it reasons: the Observer's
    default temperature is left out (without pydantic-ai's warning on every call), and the
    Observer asks it to reason little."""
    async with strict_server(
        answer=lambda request: OBSERVATION, reject_params=frozenset({"temperature", "top_p"})
    ) as server:
        parsed, _ = await observe(
            ObserverInput(messages=_messages()),
            model=_model(server, "gpt-5-mini"),  # type: ignore[arg-type]
            caller=ModelCaller(),
            model_settings={"temperature": 0.3},
            estimator=HeuristicEstimator(),
        )
    assert server.refusals == []
    assert parsed.observations
    [request] = server.requests
    assert "temperature" not in request
    assert request["reasoning_effort"] == "low"


async def test_an_agent_with_memory_speaks_what_a_strict_server_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The actor's context (the agent's instructions, memory's system messages, memory's notes
    and the user's turn) reaches an OPENAI_BASE_URL server as one leading system message and
    alternating turns, with observations in it, step after step."""
    from obsmem import Agent, Memory
    from obsmem.stores import InMemoryStore
    from obsmem.testing import scripted_observer, scripted_reflector

    from .loopback_openai import answer

    async with strict_server(answer=answer) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        memory = Memory(
            InMemoryStore(),
            observational_memory={
                "observation": {
                    "model": scripted_observer(),
                    "messageTokens": 300,
                    "bufferTokens": False,
                },
                "reflection": {"model": scripted_reflector()},
            },
        )
        agent = Agent(id="a", instructions="Be brief.", model="openai/local-test", memory=memory)
        opts = {"resource": "u1", "thread": "t1"}
        await agent.generate("My favorite color is blue. " * 20, memory=opts)
        for i in range(4):
            await agent.generate(f"Tell me something about the number {i}. " * 10, memory=opts)
        result = await agent.generate("What is my favorite color?", memory=opts)
        await memory.aclose()
    assert server.refusals == []
    last = server.requests[-1]["messages"]
    assert [m["role"] for m in last][:1] == ["system"]
    assert "<observations>" in last[0]["content"]
    assert last[0]["content"].startswith("Be brief.\n\n"), "the agent's instructions first"
    assert "blue" in result.text


async def test_a_server_that_refuses_attachments_gets_their_placeholders() -> None:
    """A text-only model on llama.cpp answers a list of content parts with a 500: the call is
    sent again as text (the attachment's placeholder is in it), and later calls go as text at
    once; a vision model keeps getting the image."""
    request = _with_image()
    for multimodal in (False, True):
        async with strict_server(answer=lambda body: OBSERVATION, multimodal=multimodal) as s:
            caller = ModelCaller()
            for _ in range(2):
                await caller.call(_with_model(request, s))
        kinds = [type(b["messages"][1]["content"]).__name__ for b in s.requests]
        if multimodal:
            assert kinds == ["list", "list"]
        else:  # (the OpenAI client itself tries a 500 again before giving up)
            assert kinds[-2:] == ["str", "str"]
            assert set(kinds[:-2]) == {"list"}


async def test_an_outage_does_not_turn_attachments_off() -> None:
    """A 503 is an outage, not a refusal: retried, and the image still goes once it is back."""
    request = _with_image()

    async def no_wait(seconds: float) -> None:
        pass

    # Three 503s: the OpenAI client's own two retries, then obsmem's retry gets through.
    async with strict_server(answer=lambda body: OBSERVATION, multimodal=True, outage=3) as s:
        caller = ModelCaller(sleep=no_wait)
        await caller.call(_with_model(request, s))
        await caller.call(_with_model(request, s))
    assert [type(b["messages"][1]["content"]).__name__ for b in s.requests] == ["list"] * 5


def _with_image() -> LLMRequest:
    """An Observer request with an image (and its placeholder in the text)."""
    from obsmem.messages import ImagePart

    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
    return LLMRequest(
        role="observer",
        model="openai/x",
        system="Observe.",
        user=["Image: [Image #1: board.png]", ImagePart(data=png, media_type="image/png")],
    )


def _with_model(request: LLMRequest, server: StrictServer) -> LLMRequest:
    from dataclasses import replace

    return replace(request, model=_model(server))  # type: ignore[arg-type]


async def test_tool_loops_with_memory_speak_what_a_strict_server_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local server serving both the agent and its Observer: turns with four-step tool loops,
    memory observing between them, every request accepted (string content, one leading system
    message, tool results right after their call, alternating turns), every tool step answered,
    and the facts of the early turns still known at the end."""
    from obsmem import Agent, Memory
    from obsmem.stores import InMemoryStore
    from obsmem.testing import scripted_reflector

    from .loopback_openai import answer, is_memory_call
    from .strict_server import ToolCalls

    left = 0  # tool steps still to take in this turn

    def actor_or_observer(body: dict[str, Any]) -> str | ToolCalls:
        nonlocal left
        messages: list[dict[str, Any]] = body["messages"]
        if messages[0]["role"] == "system" and is_memory_call(messages[0]["content"]):
            return answer(body)
        if messages[-1]["role"] == "user":  # a new turn: three measurements, then the answer
            left = 3
        if left:
            left -= 1
            return ToolCalls(("measure", {"room": f"room-{left}"}))
        return answer(body)

    def measure(room: str) -> str:
        """Measure a room."""
        return f"{room} is 4 by 5 metres. " * 6

    async with strict_server(answer=actor_or_observer) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        memory = Memory(
            InMemoryStore(),
            observational_memory={
                "observation": {
                    "model": "openai/local-observer",
                    "messageTokens": 400,
                    "bufferTokens": False,
                },
                "reflection": {"model": scripted_reflector()},
            },
        )
        events: list[str] = []
        memory.subscribe(lambda event: events.append(event.type))
        agent = Agent(
            id="a", instructions="Be brief.", model="openai/local", memory=memory, tools=[measure]
        )
        opts = {"resource": "u1", "thread": "t1"}
        await agent.generate("My favorite color is blue. Measure my flat.", memory=opts)
        for i in range(5):
            await agent.generate(f"Now measure floor {i} as well, please.", memory=opts)
        result = await agent.generate("What is my favorite color?", memory=opts)
        stored = await memory.messages("t1")
        await memory.aclose()
    assert server.refusals == []
    assert "data-om-observation-end" in events
    assert "data-om-observation-failed" not in events
    assert sum(p.kind == "tool-result" for m in stored for p in m.parts) == 7 * 3
    last = server.requests[-1]["messages"]
    assert "<observations>" in last[0]["content"]
    assert "blue" in last[0]["content"]
    assert "blue" in result.text


async def test_an_empty_stream_is_an_empty_answer_asked_again() -> None:
    """Small local models sometimes end a stream with nothing in it: that is an empty answer
    (asked once more, then a failed attempt naming the model's output), not a model error that
    says to check the account."""
    from .strict_server import EMPTY_STREAM

    answers: Iterator[object] = iter([EMPTY_STREAM, OBSERVATION])
    async with strict_server(answer=lambda request: next(answers)) as server:
        parsed, _ = await observe(
            ObserverInput(messages=_messages()),
            caller=ModelCaller(),
            model=_model(server),  # type: ignore[arg-type]
            estimator=HeuristicEstimator(),
        )
    assert len(server.requests) == 2
    assert "favourite colour is blue" in parsed.observations
