"""Prompt-cache breakpoints at the Agents SDK door, on the request bodies the SDK's own models
send: a GPT-5.6-or-later actor, which matches a cached prefix only at a breakpoint, gets one at
the end of memory's system messages at every step of a tool loop, on the Responses API and on
Chat Completions (answered in-process); an earlier model gets none; an Anthropic model through
``LitellmModel`` gets Anthropic's ``cache_control`` there (LiteLLM writes the breakpoint so,
against a loopback Messages API)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.models.interface import Model
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI

from obsmem.integrations.openai_agents import ObservationalSession
from obsmem.integrations.openai_agents.models import (
    cache_breakpoint,
    through_litellm,
    with_cache_breakpoint,
)

from ..proxy.helpers import FixedUpstream
from .helpers import RESOURCE, TURNS, answer_text, make_memory, user_turn

BREAKPOINT = {"mode": "explicit"}


def _calls_first(body: dict[str, Any]) -> bool:
    """The request answers a user's message (not a tool's result): the model calls a tool."""
    items = body.get("input", body.get("messages"))
    last = items[-1] if isinstance(items, list) and items else {}
    return last.get("role") == "user"


def _reply(request: httpx2.Request, model: str) -> httpx2.Response:
    """In the shape of the API ``request`` went to: a call of ``lookup`` for a user's message,
    the text answer after its result."""
    call = _calls_first(json.loads(request.content))
    if request.url.path.endswith("/responses"):
        text = {"type": "output_text", "text": answer_text(0), "annotations": []}
        usage = {
            "input_tokens": 1,
            "output_tokens": 1,
            "total_tokens": 2,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        output = {"type": "message", "id": "m", "role": "assistant", "status": "completed"}
        body = {
            "id": "resp",
            "object": "response",
            "created_at": 0,
            "model": model,
            "status": "completed",
            "output": [
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}
                if call
                else {**output, "content": [text]}
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        }
        return httpx2.Response(200, json=body)
    answer: dict[str, Any] = {"role": "assistant", "content": answer_text(0)}
    if call:
        function = {"name": "lookup", "arguments": "{}"}
        answer = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": function}],
        }
    body = {
        "id": "chat",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": answer, "finish_reason": "tool_calls" if call else "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return httpx2.Response(200, json=body)


@function_tool
def lookup() -> str:
    """Look the weather up."""
    return "Sunny in Lisbon, 24 degrees."


async def _bodies(api: str, name: str, *, run_config_model: bool = False) -> list[dict[str, Any]]:
    """Every request body of a conversation long enough to observe, through the session."""
    bodies: list[dict[str, Any]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        return _reply(request, name)

    client = AsyncOpenAI(
        api_key="sk-test", http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handle))
    )
    model: Model = (
        OpenAIResponsesModel(name, openai_client=client)
        if api == "responses"
        else OpenAIChatCompletionsModel(name, openai_client=client)
    )
    actors = await _converse(model, run_config_model=run_config_model)
    assert set(actors) == {f"openai/{name}"}, "memory knows the actor from the first turn"
    assert len(bodies) == 2 * TURNS, "each turn is a tool loop: the call, then the answer"
    return bodies


async def _converse(model: Model, *, run_config_model: bool = False) -> list[str]:
    """A conversation long enough to observe, through the session, on ``model`` (the agent's,
    or with ``run_config_model`` the RunConfig's, which the session is told); the actor's model
    memory noted for the thread after each turn."""
    memory = make_memory()
    session = ObservationalSession(
        memory,
        session_id="sdk-cache",
        resource=RESOURCE,
        model=model if run_config_model else None,
    )
    agent = Agent(
        name="helper",
        instructions="Be brief.",
        model=None if run_config_model else model,
        tools=[lookup],
    )
    config = RunConfig(
        tracing_disabled=True,
        call_model_input_filter=session.call_model_input_filter,
        model=model if run_config_model else None,
    )
    actors: list[str] = []
    for i in range(TURNS):
        result = await Runner.run(agent, user_turn(i), session=session, run_config=config)
        assert result.final_output == answer_text(0)
        await memory.settle()
        thread = await memory.thread("sdk-cache")
        assert thread is not None
        actors.append(str(thread.metadata.get("om:last_actor_model")))
    await memory.aclose()
    return actors


def _leading_system(body: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The body's leading system messages (the agent's instructions, then memory's) and the
    rest."""
    items = body.get("input", body.get("messages"))
    assert isinstance(items, list)
    n = 0
    while n < len(items) and items[n].get("role") in ("system", "developer"):
        n += 1
    return items[:n], items[n:]


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_a_gpt_5_6_actor_gets_a_breakpoint_after_the_observations(api: str) -> None:
    bodies = await _bodies(api, "gpt-6.1-terra")
    observed = [b for b in bodies if "<observations>" in json.dumps(b)]
    assert observed, "memory observed within the conversation"
    for body in bodies:
        system, rest = _leading_system(body)
        if body not in observed:  # no memory yet: nothing of memory's to mark
            assert "prompt_cache_breakpoint" not in json.dumps(body)
            continue
        *before, last = system
        *_, part = last["content"]
        assert part["prompt_cache_breakpoint"] == BREAKPOINT, "memory's prefix ends marked"
        assert "prompt_cache_breakpoint" not in json.dumps([before, rest]), "one breakpoint"
        assert "<observations>" in json.dumps(before), "the breakpoint sits after the log"


async def test_a_run_config_model_the_session_is_told_of_gets_its_breakpoint() -> None:
    """The input filter sees only the agent, whose model a ``RunConfig.model`` replaces (and
    an agent without one runs on the Runner's default): the session's ``model=`` names it."""
    bodies = await _bodies("responses", "gpt-6.1-terra", run_config_model=True)
    observed = [b for b in bodies if "<observations>" in json.dumps(b)]
    assert observed
    for body in observed:
        system, _ = _leading_system(body)
        assert system[-1]["content"][-1]["prompt_cache_breakpoint"] == BREAKPOINT


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_an_earlier_openai_model_gets_no_breakpoint(api: str) -> None:
    bodies = await _bodies(api, "gpt-5-mini")
    assert bodies
    assert not any("prompt_cache_breakpoint" in json.dumps(b) for b in bodies)


def test_a_breakpoint_of_the_agents_own_is_left_alone() -> None:
    own = [
        {"role": "system", "content": [{"type": "input_text", "text": "Rules", "x": 1}]},
        {
            "role": "system",
            "content": [
                {"type": "input_text", "text": "Tools...", "prompt_cache_breakpoint": BREAKPOINT}
            ],
        },
        {"role": "system", "content": "Memory."},
        {"role": "user", "content": "Hi"},
    ]
    assert with_cache_breakpoint(own, BREAKPOINT) == own
    plain = [{"role": "system", "content": "Memory."}, {"role": "user", "content": "Hi"}]
    marked = with_cache_breakpoint(plain, BREAKPOINT)
    assert marked[0] == {
        "role": "system",
        "content": [
            {"type": "input_text", "text": "Memory.", "prompt_cache_breakpoint": BREAKPOINT}
        ],
    }
    assert marked[1] is plain[1]
    assert plain[0] == {"role": "system", "content": "Memory."}, "the given items are unchanged"
    assert with_cache_breakpoint(plain, None) == plain
    assert with_cache_breakpoint(plain[1:], BREAKPOINT) == plain[1:], "no system message"


async def test_an_anthropic_actor_through_litellm_gets_cache_control_after_the_observations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of LiteLLM's price list
    from agents.extensions.models.litellm_model import LitellmModel

    answer = {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": answer_text(0)}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    headers = {"Content-Type": "application/json"}
    async with FixedUpstream(200, json.dumps(answer).encode(), headers) as messages_api:
        url = f"http://127.0.0.1:{messages_api.port}"
        await _converse(LitellmModel("anthropic/claude-haiku-4-5", base_url=url, api_key="test"))
    bodies = [json.loads(body) for body in messages_api.requests]
    observed = [b for b in bodies if "<observations>" in json.dumps(b.get("system"))]
    assert observed
    for body in observed:
        *before, last = body["system"]
        assert last["cache_control"] == {"type": "ephemeral"}, "memory's prefix ends marked"
        assert before[0]["text"] == "Be brief."
        assert "<observations>" in json.dumps(before)
        assert "cache_control" not in json.dumps([before, body["messages"]]), "one breakpoint"
        assert "prompt_cache_breakpoint" not in json.dumps(body), "Anthropic's own field only"


def test_anthropic_gets_a_breakpoint_only_through_litellm() -> None:
    class LitellmLike:
        model = "anthropic/claude-haiku-4-5"

    class Wrapper:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

    assert through_litellm("litellm/anthropic/claude-haiku-4-5")
    assert through_litellm(Wrapper(LitellmLike()))
    assert not through_litellm("gpt-5-mini")
    assert not through_litellm(Wrapper(object()))
    assert not through_litellm(None)
    anthropic = "anthropic/claude-haiku-4-5"
    assert cache_breakpoint(anthropic, litellm=True) == BREAKPOINT
    assert cache_breakpoint(anthropic, litellm=False) is None, "the SDK would drop it"
    assert cache_breakpoint("openai/gpt-6.1-terra", litellm=False) == BREAKPOINT
    assert cache_breakpoint("openai/gpt-5-mini", litellm=True) is None
