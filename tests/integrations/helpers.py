"""Shared pieces of the integration tests: a Memory that observes and reflects quickly, turns
long enough to cross the thresholds, and checks on what a model was sent."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from obsmem import Memory
from obsmem.stores import InMemoryStore, Store
from obsmem.testing import scripted_observer, scripted_reflector

RESOURCE = "user-1"
TURNS = 14
"""Enough turns (with a tool call each) to activate observation and then reflect."""

FACTS = [
    "my favorite color is blue",
    "I live in Lisbon",
    "my dog is called Pixel",
    "I work as a baker",
    "my sister is Ana",
    "I play the cello",
    "I am allergic to nuts",
    "I drive a green van",
    "my birthday is in May",
    "I collect old maps",
    "I swim every Tuesday",
    "my car is electric",
    "I grow tomatoes",
    "I speak Portuguese",
    "I read at night",
    "I visit Porto often",
]


def user_turn(i: int) -> str:
    """A user message carrying fact ``i`` and enough words to count."""
    filler = " ".join(["please", "remember", "this", "detail", "for", "later"] * 4)
    return f"Turn {i}: {FACTS[i % len(FACTS)]}. What is the weather in Lisbon? {filler}"


def answer_text(i: int) -> str:
    return f"Answer {i}: it is sunny in Lisbon and I noted that. " + "Glad to help. " * 6


def make_memory(store: Store | None = None) -> Memory:
    """Observation at ~400 tokens (synchronous, no buffering), reflection at 800 tokens."""
    return Memory(
        store if store is not None else InMemoryStore(),
        observational_memory={
            "observation": {
                "model": scripted_observer(words=14),
                "messageTokens": 400,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector(keep=0.6), "observationTokens": 800},
        },
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Sent:
    """One model call's input, reduced to what the checks need (in order)."""

    system_text: str
    """The system / developer content, joined."""
    plain_text: str
    """The user and assistant content, joined."""
    calls: tuple[str, ...]
    """Tool-call ids in the order they appear, each at its call."""
    events: tuple[tuple[str, str], ...]
    """("call" | "result", tool_call_id) in order."""


def orphaned_results(events: Iterable[tuple[str, str]]) -> list[str]:
    """Tool results with no call before them in the same input."""
    called: set[str] = set()
    orphans: list[str] = []
    for kind, call_id in events:
        if kind == "call":
            called.add(call_id)
        elif call_id not in called:
            orphans.append(call_id)
    return orphans


def unanswered_calls(events: Sequence[tuple[str, str]]) -> list[str]:
    """Tool calls with no result after them (the last call of an input may wait for none)."""
    results = {call_id for kind, call_id in events if kind == "result"}
    return [call_id for kind, call_id in events if kind == "call" and call_id not in results]


async def assert_reflected(memory: Memory, thread: str) -> None:
    assert memory.om is not None
    status = await memory.om.status(thread, RESOURCE)
    assert status.generation >= 1, f"expected a reflection, got {status}"


def assert_memory_in_context(inputs: Sequence[Sent]) -> None:
    """Turn 0 reached the model as an observation (not raw) once it was observed, and the last
    call still sees an observation log while turn 0 is no longer sent raw."""
    assert any("User said: Turn 0" in s.system_text for s in inputs), "turn 0 never observed"
    last = inputs[-1]
    assert "<observations>" in last.system_text, "the last call was sent no observations"
    assert "User said: Turn" in last.system_text
    assert "Turn 0:" not in last.plain_text, "turn 0 is still sent raw"


def assert_pairs_intact(inputs: Sequence[Sent]) -> None:
    for n, sent in enumerate(inputs):
        assert orphaned_results(sent.events) == [], f"model call {n}: orphaned tool results"
        assert unanswered_calls(sent.events) == [], f"model call {n}: calls without results"
