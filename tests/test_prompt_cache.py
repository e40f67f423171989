"""What a provider's prompt cache sees, on the request bodies our agent really sends.

The agent runs a conversation with multi-step tool loops against each provider's API shape
(pydantic-ai's own OpenAI chat, OpenAI Responses, Anthropic and Gemini models, answered
in-process), while memory observes and reflects. Every request body is kept, and each one is
compared with the one before it:

- between memory cycles the new request repeats the whole previous one byte for byte (it only
  appends), so every turn and every tool step reads the cache;
- after an observation cycle it still repeats everything up to the end of the previous log:
  tools, the agent's instructions, the memory preamble and every earlier observation;
- after a reflection (the log is rewritten) the tools and instructions stay.

Anthropic gets cache breakpoints at the end of that stable prefix (the system prompt) and on the
newest message, and so does OpenAI from GPT-5.6 on (explicit breakpoints; it keeps its implicit
one on the newest message); a ``cache`` setting of the user's own is left as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from obsmem import Agent, Memory
from obsmem.events import ActivationEvent, ObservationEndEvent
from obsmem.stores import SQLiteStore
from obsmem.testing import scripted_observer, scripted_reflector

from .captured_requests import PROVIDERS, Call, CapturedApi, prefix_units

_PROVIDER_LABEL = {
    "openai-chat": "openai/",
    "openai-responses": "openai/",
    "anthropic": "anthropic/",
    "gemini": "google",
}

INSTRUCTIONS = "You are a careful travel assistant. Answer briefly."


def lookup(query: str) -> str:
    """Look a fact up in the travel guide."""
    return f"The guide says about {query}: open daily, 9 to 5, tickets 12 euros."


def _script(turns: int) -> list[str | Call]:
    """Every other turn is a tool loop of three lookups, then an answer."""
    steps: list[str | Call] = []
    for turn in range(turns):
        if turn % 2 == 0:
            steps += [Call("lookup", {"query": f"museum {turn}.{n}"}) for n in range(3)]
        steps.append(f"Answer {turn}: the museum opens at nine.")
    return steps


def _joined(provider: str, body: dict[str, Any]) -> str:
    return "\n".join(prefix_units(provider, body))


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


async def _conversation(
    provider: str, tmp_path: Path, turns: int = 14, model_name: str = "", **settings: Any
) -> tuple[CapturedApi, list[tuple[int, str]]]:
    """Run the conversation; returns the API and the memory cycles as (requests sent before
    the cycle took effect, kind)."""
    api = CapturedApi(provider, script=_script(turns), model_name=model_name)
    model = api.model()
    if settings:
        model._settings = {**(model.settings or {}), **settings}  # pyright: ignore[reportPrivateUsage]
    memory = Memory(
        SQLiteStore(tmp_path / "memory.db"),
        observational_memory={
            "observation": {
                "model": scripted_observer(),
                "bufferTokens": False,
                "messageTokens": 400,
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 900},
        },
    )
    cycles: list[tuple[int, str]] = []

    def seen(event: Any) -> None:
        if isinstance(event, ObservationEndEvent | ActivationEvent):
            cycles.append((len(api.requests), event.operation_type))

    memory.subscribe(seen)
    agent = Agent(id="guide", instructions=INSTRUCTIONS, model=model, memory=memory, tools=[lookup])
    try:
        for turn in range(turns):
            result = await agent.generate(
                f"Turn {turn}: I plan to visit museum number {turn} on my trip to Lisbon "
                "with my sister; what should I know about opening hours and tickets?",
                memory={"resource": "traveller", "thread": "lisbon"},
            )
            assert result.text.startswith(f"Answer {turn}")
        # The agent tells memory its model: image and PDF estimates use that provider's rules.
        thread = await memory.thread("lisbon")
        assert thread is not None
        assert thread.metadata["om:last_actor_model"].startswith(_PROVIDER_LABEL[provider])
    finally:
        await memory.aclose()
    return api, cycles


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_requests_repeat_their_prefix_until_a_reflection(
    provider: str, tmp_path: Path
) -> None:
    api, cycles = await _conversation(provider, tmp_path)
    bodies = [_joined(provider, body) for body in api.requests]
    kinds = {kind for _, kind in cycles}
    assert kinds == {"observation", "reflection"}, cycles  # both happened mid-conversation
    assert len(api.requests) == 14 + 7 * 3  # every tool step went out

    checked = {"appended": 0, "observed": 0, "reflected": 0}
    for n in range(1, len(bodies)):
        before, after = bodies[n - 1], bodies[n]
        between = {kind for at, kind in cycles if at == n}
        common = _common(before, after)
        instructions_end = before.index(INSTRUCTIONS) + len(INSTRUCTIONS)
        assert common >= instructions_end, f"request {n}: tools or instructions changed"
        if "reflection" in between:
            checked["reflected"] += 1
        elif "observation" in between:
            # Everything up to the end of the earlier log is repeated byte for byte (the first
            # cycle has no earlier log).
            log_end = before.find("<current-task>")
            if log_end < 0:
                continue
            assert common >= log_end, (
                f"request {n}: the earlier observations changed:\n"
                f"{before[common - 80 : common + 80]!r}\n{after[common - 80 : common + 80]!r}"
            )
            checked["observed"] += 1
        else:
            # Nothing but appended messages: the whole earlier request is the prefix.
            assert common == len(before), (
                f"request {n} did not repeat request {n - 1}:\n"
                f"{before[common - 80 : common + 80]!r}\n{after[common - 80 : common + 80]!r}"
            )
            checked["appended"] += 1
    assert all(checked.values()), checked


def _cache_marks(value: Any, mark: str = "cache_control", path: str = "") -> list[str]:
    """Where ``mark`` (Anthropic's ``cache_control``, OpenAI's ``prompt_cache_breakpoint``)
    sits in a request body."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():  # pyright: ignore[reportUnknownVariableType]
            if key == mark:
                found.append(path or "top")
            found += _cache_marks(item, mark, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):  # pyright: ignore[reportUnknownVariableType]
            found += _cache_marks(item, mark, f"{path}[{i}]")
    return found


async def test_anthropic_breakpoints_sit_on_memory_and_the_newest_message(
    tmp_path: Path,
) -> None:
    api, _ = await _conversation("anthropic", tmp_path, turns=6)
    with_memory = [b for b in api.requests if "<observations>" in str(b.get("system"))]
    assert with_memory
    for body in with_memory:
        system = body["system"]
        assert isinstance(system, list)
        assert system
        last: dict[str, Any] = system[-1]
        assert "cache_control" in last, "no breakpoint at the end of the memory prefix"
        assert "<current-task>" in last["text"]
        assert last["text"].startswith(INSTRUCTIONS)
        marks = _cache_marks(body)
        # The newest message is cached too (Anthropic's automatic breakpoint, top level).
        newest = f"messages[{len(body['messages']) - 1}]"
        assert "top" in marks or any(m.startswith(newest) for m in marks)
        assert len(marks) <= 4  # Anthropic's limit


async def test_gpt_5_6_and_later_get_a_breakpoint_at_the_end_of_memory(tmp_path: Path) -> None:
    api, _ = await _conversation("openai-responses", tmp_path, turns=6, model_name="gpt-6.1-terra")
    with_memory = [b for b in api.requests if "<observations>" in str(b["input"])]
    assert with_memory
    for body in with_memory:
        items: list[dict[str, Any]] = body["input"]
        leading = 0
        while items[leading].get("role") == "system":
            leading += 1
        marks = _cache_marks(body, "prompt_cache_breakpoint")
        assert marks == [f"input[{leading - 1}].content[0]"], "one, on memory's last message"
        assert "<observations>" in str(items[: leading - 1])
        assert body["prompt_cache_options"]["mode"] == "implicit", "the newest message too"
    api, _ = await _conversation("openai-responses", tmp_path / "early", turns=4)
    assert not any(_cache_marks(b, "prompt_cache_breakpoint") for b in api.requests), (
        "gpt-4o caches without them"
    )


async def test_a_cache_setting_of_the_users_own_is_left_alone(tmp_path: Path) -> None:
    api, _ = await _conversation("anthropic", tmp_path, turns=4, cache=False)
    assert all(not _cache_marks(body) for body in api.requests)
