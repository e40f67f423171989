"""Context overflow: what providers answer when a request is longer than the model's context,
and the front doors compacting the thread once and sending the request again."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pa
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.agent import Agent, Finish, TextDelta
from obsmem.events import Event
from obsmem.integrations.pydantic_ai import ObservationalMemoryCapability
from obsmem.memory import Memory
from obsmem.models.overflow import (
    context_overflow,
    fit_advice,
    fitting_thresholds,
    is_context_overflow,
    needed_tokens,
)
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector
from obsmem.tokens import HeuristicEstimator

from .strict_server import StrictServer, strict_server

# -- classification ------------------------------------------------------------------------------

OPENAI = {
    "message": "This model's maximum context length is 128000 tokens. However, your messages "
    "resulted in 130512 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded",
}
OPENAI_RESPONSES = {
    "message": "Your input exceeds the context window of this model. Please adjust your input "
    "and try again.",
    "type": "invalid_request_error",
    "param": "input",
    "code": "context_length_exceeded",
}
ANTHROPIC = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 208310 tokens > 200000 maximum",
    },
}
ANTHROPIC_WITH_OUTPUT = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, "
        "decrease input length or `max_tokens` and try again",
    },
}
LLAMA_CPP = {
    "error": {
        "code": 400,
        "message": "request (9012 tokens) exceeds the available context size (8192 tokens), try "
        "increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 9012,
        "n_ctx": 8192,
    }
}
LLAMA_CPP_OLD = {
    "error": {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "invalid_request_error",
    }
}
VLLM = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens. However, you requested 5120 "
    "tokens (4096 in the messages, 1024 in the completion). Please reduce the length of the "
    "messages or completion.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_V1 = {
    "object": "error",
    "message": "The decoder prompt (length 9000) is longer than the maximum model length of "
    "8192. Make sure that `max_model_len` is no smaller than the number of text tokens.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_LENGTH = {
    "object": "error",
    "message": "Input length (5000) exceeds model's maximum context length (4096).",
    "type": "BadRequestError",
    "code": 400,
}


@pytest.mark.parametrize(
    ("status", "body", "limit", "requested"),
    [
        (400, OPENAI, 128000, 130512),
        (400, OPENAI_RESPONSES, None, None),
        (400, ANTHROPIC, 200000, 208310),
        (400, ANTHROPIC_WITH_OUTPUT, 200000, None),
        (400, LLAMA_CPP, 8192, 9012),
        (400, LLAMA_CPP_OLD, None, None),
        (500, LLAMA_CPP_OLD, None, None),  # older servers answered 500
        (400, VLLM, 4096, 5120),
        (400, VLLM_V1, 8192, 9000),
        (400, VLLM_LENGTH, 4096, 5000),
    ],
    ids=[
        "openai",
        "openai-responses",
        "anthropic",
        "anthropic-with-output",
        "llama.cpp",
        "llama.cpp-old",
        "llama.cpp-500",
        "vllm",
        "vllm-v1",
        "vllm-input-length",
    ],
)
def test_overflow_answers_are_recognised_with_their_numbers(
    status: int, body: dict[str, Any], limit: int | None, requested: int | None
) -> None:
    error = ModelHTTPError(status, "some-model", body=body)
    found = context_overflow(error)
    assert found is not None
    assert (found.limit, found.requested) == (limit, requested)
    assert "token" in found.message or "context" in found.message


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (429, {"message": "Rate limit reached", "code": "rate_limit_exceeded"}),
        (503, {"error": {"message": "Loading model", "type": "unavailable_error"}}),
        # An outage never is an overflow, whatever it says.
        (503, LLAMA_CPP),
        (400, {"error": {"message": "Unsupported parameter: 'temperature'"}}),
        (400, {"message": "max_tokens is too large: 100000. This model supports at most 4096"}),
        (401, {"error": {"message": "Incorrect API key provided"}}),
        (500, {"error": {"message": 'can only concatenate str (not "list") to str'}}),
    ],
    ids=["rate-limit", "loading", "outage", "parameter", "max-tokens", "auth", "template"],
)
def test_other_errors_are_not_overflows(status: int, body: dict[str, Any]) -> None:
    assert not is_context_overflow(ModelHTTPError(status, "some-model", body=body))


def test_the_exception_chain_is_walked() -> None:
    """A wrapper (a framework's own error) raised from the provider's answer still counts; the
    numbers come from the body whatever wraps it."""
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(400, json=LLAMA_CPP, request=request)
    found = None
    try:
        try:
            response.raise_for_status()
        except httpx.HTTPStatusError as exc:
            raise RuntimeError("the agent run failed") from exc
    except RuntimeError as wrapped:
        found = context_overflow(wrapped)
    assert found is not None
    assert (found.limit, found.requested) == (8192, 9012)
    group = ExceptionGroup("all failed", [ValueError("no"), ModelHTTPError(400, "m", body=VLLM)])
    overflow = context_overflow(group)
    assert overflow is not None
    assert overflow.limit == 4096
    assert not is_context_overflow(ValueError("the prompt was fine"))


def test_thresholds_that_fit_a_window() -> None:
    for window in (2_048, 4_096, 8_192, 32_768, 131_072):
        fit = fitting_thresholds(window)
        assert needed_tokens(fit.message_tokens, fit.observation_tokens) < window
        assert fit_advice(window, **_as_kwargs(fit)) is None
    advice = fit_advice(8_192, message_tokens=30_000, observation_tokens=40_000)
    assert advice is not None
    assert "--message-tokens 2900" in advice
    assert fit_advice(200_000, message_tokens=30_000, observation_tokens=40_000) is None


def _as_kwargs(fit: Any) -> dict[str, int]:
    return {"message_tokens": fit.message_tokens, "observation_tokens": fit.observation_tokens}


# -- the front doors -----------------------------------------------------------------------------

LIMIT = 2_000
"""The small actor's context, in obsmem's estimated tokens."""


class SmallActor:
    """A FunctionModel actor with a small context: a request larger than ``limit`` estimated
    tokens is refused as OpenAI refuses one (HTTP 400, ``context_length_exceeded``)."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self.sizes: list[int] = []
        self.refused = 0
        self.estimator = HeuristicEstimator()

    def size(self, messages: list[pa.ModelMessage]) -> int:
        total = 0
        for message in messages:
            for part in message.parts:
                content = getattr(part, "content", None)
                if isinstance(content, str):
                    total += self.estimator.count_text(content)
        return total

    def check(self, messages: list[pa.ModelMessage]) -> None:
        size = self.size(messages)
        self.sizes.append(size)
        if size > self.limit:
            self.refused += 1
            raise ModelHTTPError(
                400,
                "small-model",
                body={
                    **OPENAI,
                    "message": f"This model's maximum context length is {self.limit} tokens. "
                    f"However, your messages resulted in {size} tokens. Please reduce the "
                    "length of the messages.",
                },
            )

    def model(self) -> FunctionModel:
        def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
            self.check(messages)
            return pa.ModelResponse(parts=[pa.TextPart(content="Noted.")])

        async def stream(messages: list[pa.ModelMessage], info: AgentInfo):  # type: ignore[no-untyped-def]
            self.check(messages)
            yield "Noted."

        return FunctionModel(answer, stream_function=stream)


def memory() -> Memory:
    """Memory at its default thresholds (30,000 tokens: far past the small actor's context)."""
    return Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {"model": scripted_observer()},
            "reflection": {"model": scripted_reflector()},
        },
    )


def words(n: int, turn: int) -> str:
    return " ".join(f"fact{turn}-{i} about the garden" for i in range(n))


REF = {"resource": "u1", "thread": "t1"}


async def test_agent_generate_compacts_once_and_retries(caplog: pytest.LogCaptureFixture) -> None:
    actor = SmallActor()
    mem = memory()
    events: list[Event] = []
    mem.subscribe(events.append)
    agent = Agent("a", "Be brief.", actor.model(), memory=mem)
    caplog.set_level(logging.WARNING, logger="obsmem")
    for turn in range(12):
        result = await agent.generate(words(40, turn), memory=REF)
        assert result.text == "Noted."
        await mem.settle()
    assert actor.refused >= 1
    # Every refusal was followed by one retry that fitted: no request was refused twice in a row.
    refused_at = [i for i, size in enumerate(actor.sizes) if size > LIMIT]
    assert all(actor.sizes[i + 1] <= LIMIT for i in refused_at)
    starts = [e for e in events if e.type == "data-om-observation-start"]
    assert any(getattr(e, "trigger", None) == "overflow" for e in starts)
    compacted = [r for r in caplog.records if "compacted thread t1" in r.getMessage()]
    assert len(compacted) == actor.refused
    assert f"the model's context is {LIMIT:,} tokens" in compacted[0].getMessage()
    assert "observation.message_tokens=" in compacted[0].getMessage()
    await mem.aclose()


async def test_agent_stream_compacts_once_and_retries() -> None:
    actor = SmallActor()
    mem = memory()
    agent = Agent("a", "Be brief.", actor.model(), memory=mem)
    for turn in range(12):
        text = ""
        finished = False
        async for part in agent.stream(words(40, turn), memory=REF):
            if isinstance(part, TextDelta):
                text += part.text
            finished = finished or isinstance(part, Finish)
        assert (text, finished) == ("Noted.", True)
        await mem.settle()
    assert actor.refused >= 1
    refused_at = [i for i, size in enumerate(actor.sizes) if size > LIMIT]
    assert all(actor.sizes[i + 1] <= LIMIT for i in refused_at)
    await mem.aclose()


async def test_a_step_that_alone_overflows_is_retried_once_then_raises() -> None:
    """Compaction keeps the current step raw: when the input alone is too long, the one retry
    fails too and the model's own error reaches the caller."""
    actor = SmallActor()
    mem = memory()
    agent = Agent("a", "Be brief.", actor.model(), memory=mem)
    await agent.generate(words(40, 0), memory=REF)
    with pytest.raises(ModelHTTPError) as raised:
        await agent.generate(words(LIMIT // 4, 1), memory=REF)
    assert is_context_overflow(raised.value)
    assert actor.refused == 2  # the first attempt and the one retry after compacting
    await mem.aclose()


async def test_nothing_to_compact_raises_the_models_error_without_a_retry() -> None:
    actor = SmallActor()
    mem = memory()
    agent = Agent("a", "Be brief.", actor.model(), memory=mem)
    with pytest.raises(ModelHTTPError):
        await agent.generate(words(LIMIT // 4, 0), memory=REF)
    assert actor.refused == 1  # only the input is raw: nothing to observe, no retry
    await mem.aclose()


async def test_the_pydantic_ai_capability_compacts_and_retries() -> None:
    actor = SmallActor()
    mem = memory()
    agent = PydanticAgent(
        actor.model(),
        instructions="Be brief.",
        capabilities=[ObservationalMemoryCapability(mem, resource="u1", thread="t1")],
    )
    for turn in range(12):
        run = await agent.run(words(40, turn))
        assert run.output == "Noted."
        await mem.settle()
    assert actor.refused >= 1
    refused_at = [i for i, size in enumerate(actor.sizes) if size > LIMIT]
    assert all(actor.sizes[i + 1] <= LIMIT for i in refused_at)
    await mem.aclose()


# -- a llama.cpp server with a small context ------------------------------------------------------


def _noted(request: dict[str, Any]) -> str:
    return "Noted."


def _local(server: StrictServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The actor as a user points obsmem at a local server (``OPENAI_BASE_URL``)."""
    from obsmem.models import resolve_model

    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return resolve_model("openai/local")


async def test_a_local_server_with_a_small_context_keeps_answering(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp with ``--ctx-size 2048`` and memory at its default thresholds: the conversation
    grows past the window, the server refuses with its real error, memory compacts the thread
    and the request goes again, every turn answered."""
    caplog.set_level(logging.WARNING, logger="obsmem")
    async with strict_server(answer=_noted, context_size=2_048) as server:
        mem = memory()
        events: list[Event] = []
        mem.subscribe(events.append)
        agent = Agent("a", "Be brief.", _local(server, monkeypatch), memory=mem)
        for turn in range(10):
            result = await agent.generate(words(40, turn), memory=REF)
            assert result.text == "Noted."
            await mem.settle()
        await mem.aclose()
    overflows = [r for r in server.refusals if "exceeds the available context size" in r]
    assert overflows
    assert len(server.refusals) == len(overflows)  # nothing else was refused
    # Each refusal is followed by one accepted retry.
    assert len(server.requests) == 10 + len(overflows)
    starts = [e for e in events if e.type == "data-om-observation-start"]
    assert any(getattr(e, "trigger", None) == "overflow" for e in starts)
    [first, *_] = [
        r.getMessage() for r in caplog.records if "compacted thread t1" in r.getMessage()
    ]
    assert "the model's context is 2,048 tokens" in first
    assert "did not fit" in first
    assert "--message-tokens" in first


# -- obsmem doctor reads the window ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("serves", "model", "env", "source"),
    [
        ("llama.cpp", "openai/local", "OPENAI_BASE_URL", "llama.cpp /props"),
        ("vllm", "openai/local", "OPENAI_BASE_URL", "max_model_len"),
        ("ollama", "ollama/local", "OLLAMA_BASE_URL", "Ollama num_ctx"),
    ],
)
async def test_doctor_reads_the_context_window_of_a_local_server(
    serves: str, model: str, env: str, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from obsmem.cli.doctor import context_window

    async with strict_server(context_size=4_096, serves=serves) as server:
        monkeypatch.setenv(env, server.base_url)
        found = await context_window(model)
    assert found is not None
    assert found[0] == 4_096
    assert source in found[1]
    assert server.requests == []  # no chat request was made to learn it


async def test_doctor_asks_no_cloud_api_and_no_server_that_does_not_say(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from obsmem.cli.doctor import context_window

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert await context_window("anthropic/claude-sonnet-4-5") is None
    assert await context_window("openai/gpt-5-mini") is None  # OpenAI's own API: not asked
    async with strict_server() as server:  # a server that tells no window
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        assert await context_window("openai/local") is None


OBSERVATION = (
    "<observations>\nDate: Apr 20, 2026\n* 🔴 (09:00) User is Ana, planning a Lisbon trip.\n"
    "</observations>\n<current-task>Plan the trip</current-task>\n"
    "<suggested-response>Ask about dates</suggested-response>"
)


async def test_doctor_says_when_the_default_thresholds_cannot_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from obsmem.cli.doctor import _doctor  # pyright: ignore[reportPrivateUsage]

    def answer(request: dict[str, Any]) -> str:
        return "OK" if "single word OK" in str(request["messages"][0]) else OBSERVATION

    async with strict_server(answer=answer, context_size=8_192) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        out = io.StringIO()
        code = await _doctor("openai/local", 60.0, out)
    text = out.getvalue()
    assert code == 0, text
    assert "context        8,192 tokens (llama.cpp /props)" in text
    assert "--message-tokens 2900 --observation-tokens 2700" in text
    assert "verdict: ready for memory work." in text


# -- LangChain's create_agent middleware ---------------------------------------------------------


def _small_chat_model(actor: SmallActor) -> Any:
    """A LangChain chat model with the small context: a request past the limit is refused as
    ``ChatOpenAI`` reports OpenAI's refusal (``openai.BadRequestError``, HTTP 400)."""
    import openai
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class SmallChat(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "small"

        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
            size = sum(actor.estimator.count_text(str(m.content)) for m in messages)
            actor.sizes.append(size)
            if size > actor.limit:
                actor.refused += 1
                body = {
                    **OPENAI,
                    "message": f"This model's maximum context length is {actor.limit} tokens. "
                    f"However, your messages resulted in {size} tokens.",
                }
                request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
                raise openai.BadRequestError(
                    body["message"],
                    response=httpx.Response(400, json={"error": body}, request=request),
                    body=body,
                )
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="Noted."))])

    return SmallChat()


async def _twelve_turns(
    graph: Any,
    config: Any,
    mem: Memory,
    actor: SmallActor,
    *,
    sync: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Twelve turns through ``graph`` (sync from a thread, or async): every answer given, each
    refused request compacted once (a WARNING says so) and the next one fitting."""
    import asyncio

    caplog.set_level(logging.WARNING, logger="obsmem")
    for turn in range(12):
        state = {"messages": [("user", words(40, turn))]}
        if sync:
            result = await asyncio.to_thread(graph.invoke, state, config)
        else:
            result = await graph.ainvoke(state, config)
        assert result["messages"][-1].content == "Noted."
        await asyncio.to_thread(mem.run_sync, mem.settle()) if sync else await mem.settle()
    assert actor.refused >= 1
    refused_at = [i for i, size in enumerate(actor.sizes) if size > LIMIT]
    assert all(actor.sizes[i + 1] <= LIMIT for i in refused_at)
    compacted = [r for r in caplog.records if "compacted thread t1" in r.getMessage()]
    assert len(compacted) == actor.refused


@pytest.mark.parametrize("sync", [False, True], ids=["ainvoke", "invoke"])
async def test_the_create_agent_middleware_compacts_once_and_retries(
    sync: bool, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    from langchain.agents import create_agent

    from obsmem.integrations.langchain import ObservationalMemoryMiddleware

    actor = SmallActor()
    mem = memory()
    agent = create_agent(
        _small_chat_model(actor), [], middleware=[ObservationalMemoryMiddleware(mem)]
    )
    config = {"configurable": {"thread_id": "t1", "resource_id": "u1"}}
    await _twelve_turns(agent, config, mem, actor, sync=sync, caplog=caplog)
    if sync:
        await asyncio.to_thread(mem.close)
    else:
        await mem.aclose()


# -- LangGraph: a hand-built graph's model node ---------------------------------------------------


@pytest.mark.parametrize("sync", [False, True], ids=["ainvoke", "invoke"])
async def test_the_langgraph_model_node_compacts_once_and_retries(
    sync: bool, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    from langgraph.graph import START, MessagesState, StateGraph

    from obsmem.integrations.langgraph import LangGraphMemory

    actor = SmallActor()
    mem = memory()
    lg = LangGraphMemory(mem, resource="u1")
    builder = StateGraph(MessagesState)
    builder.add_node("model", lg.model_node(_small_chat_model(actor)))
    builder.add_edge(START, "model")
    from langgraph.checkpoint.memory import InMemorySaver

    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    await _twelve_turns(graph, config, mem, actor, sync=sync, caplog=caplog)
    stored = await mem.store.list_messages("t1") if not sync else None
    if stored is not None:
        assert len(stored) == 24  # every question and answer once, the answers at once
    if sync:
        await asyncio.to_thread(mem.close)
    else:
        await mem.aclose()


# -- LangGraph: create_react_agent's model, wrapped ---------------------------------------------


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
@pytest.mark.parametrize("sync", [False, True], ids=["ainvoke", "invoke"])
async def test_create_react_agents_compacting_model_compacts_once_and_retries(
    sync: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """``create_react_agent(lg.compacting(llm), ..., pre_model_hook=lg.pre_model_hook)``: the
    hooks cannot retry, the wrapped model does, with the agent's prompt kept in front."""
    import asyncio

    from langchain_core.messages import SystemMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    from obsmem.integrations.langgraph import LangGraphMemory

    actor = SmallActor()
    prompts: list[bool] = []
    chat = _small_chat_model(actor)
    generate = chat._generate  # pyright: ignore[reportPrivateUsage]

    def noting(messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        systems = [m for m in messages if isinstance(m, SystemMessage)]
        prompts.append(systems == messages[:1] and str(messages[0].content).startswith("Be brief."))
        return generate(messages, *args, **kwargs)

    object.__setattr__(chat, "_generate", noting)
    mem = memory()
    lg = LangGraphMemory(mem, resource="u1")
    agent = create_react_agent(
        lg.compacting(chat),
        [],
        prompt="Be brief.",
        pre_model_hook=lg.pre_model_hook,
        post_model_hook=lg.post_model_hook,
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t1"}}
    await _twelve_turns(agent, config, mem, actor, sync=sync, caplog=caplog)
    assert all(prompts), "one system message, the agent's prompt first, the retry included"
    assert "<observations>" in str(agent.get_state(config).values["llm_input_messages"][0].content)
    if sync:
        stored = await asyncio.to_thread(mem.run_sync, mem.store.list_messages("t1"))
        await asyncio.to_thread(mem.close)
    else:
        stored = await mem.store.list_messages("t1")
        await mem.aclose()
    assert len(stored) == 24  # every question and answer once


async def test_the_compacting_model_raises_what_is_not_an_overflow_of_its_hooks_input() -> None:
    """Another error, or an overflow on an input the pre-model hook did not make (the model
    called on its own), is the model's error as it is: no compaction, no retry."""
    from langchain_core.messages import HumanMessage

    from obsmem.integrations.langgraph import LangGraphMemory

    actor = SmallActor(limit=5)
    mem = memory()
    lg = LangGraphMemory(mem, resource="u1", thread="t1")
    model = lg.compacting(_small_chat_model(actor))
    with pytest.raises(Exception, match="maximum context length"):
        await model.ainvoke([HumanMessage(words(40, 0))])
    unbound = LangGraphMemory(mem).compacting(_small_chat_model(actor))  # no conversation
    with pytest.raises(Exception, match="maximum context length"):
        await unbound.ainvoke([HumanMessage(words(40, 0))])
    assert actor.refused == 2
    assert await mem.store.list_messages("t1") == []
    await mem.aclose()
