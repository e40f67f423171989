"""Shared pieces of the engine tests: conversations, engines, event capture, invariant checks."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from obsmem.engine import ObservationalMemory
from obsmem.events import Event
from obsmem.messages import Message
from obsmem.options import resolve_options
from obsmem.stores import Store

WORDS = [
    "alpha",
    "budget",
    "cabin",
    "delta",
    "engine",
    "falcon",
    "garden",
    "harbor",
    "island",
    "jacket",
    "kettle",
    "lantern",
    "meadow",
    "needle",
    "orchard",
    "pepper",
    "quartz",
    "ribbon",
    "saddle",
    "timber",
    "umbrella",
    "velvet",
    "walnut",
    "yonder",
    "zephyr",
    "planning",
    "venue",
    "schedule",
    "invoice",
    "deployment",
    "database",
    "migration",
    "customer",
    "feedback",
    "release",
]

T0 = datetime(2025, 12, 1, 9, 0, tzinfo=UTC)


def text_of(tokens: int, rng: random.Random) -> str:
    """About ``tokens`` estimated tokens of prose (the heuristic counts ~1.3 tokens a word)."""
    return " ".join(rng.choice(WORDS) for _ in range(max(1, int(tokens / 1.35))))


@dataclass
class Conversation:
    """Makes turns with increasing timestamps."""

    seed: int = 0
    minutes_per_turn: int = 5
    now: datetime = T0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def clock(self) -> datetime:
        return self.now

    def user(self, tokens: int) -> Message:
        self.now += timedelta(minutes=self.minutes_per_turn)
        return Message.user(text_of(tokens, self.rng), created_at=self.now)

    def assistant(self, tokens: int) -> Message:
        self.now += timedelta(seconds=30)
        return Message.assistant(text_of(tokens, self.rng), created_at=self.now)


@dataclass
class Recorder:
    events: list[Event] = field(default_factory=list[Event])

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, type_: str) -> list[Any]:
        return [e for e in self.events if e.type == type_]

    def types(self) -> list[str]:
        return [e.type for e in self.events]


def engine(store: Store, options: Any, **kwargs: Any) -> ObservationalMemory:
    resolved = resolve_options(options)
    assert resolved is not None
    return ObservationalMemory(store, resolved, **kwargs)


def memory_messages(messages: list[Message]) -> Iterator[Message]:
    for m in messages:
        if (m.metadata.get("obsmem") or {}).get("synthetic"):
            yield m


def raw_messages(messages: list[Message]) -> list[Message]:
    return [m for m in messages if not (m.metadata.get("obsmem") or {}).get("synthetic")]


async def assert_no_gap_no_double(store: Store, key: str, thread_ids: list[str]) -> None:
    """Every stored message is either covered by the cursor or raw, and chunks are contiguous."""
    record = await store.get_record(key)
    assert record is not None
    for thread_id in thread_ids:
        thread = await store.get_thread(thread_id)
        assert thread is not None
        cursor = record.cursor.get(thread_id, 0)
        assert 0 <= cursor <= thread.message_count
        covered = cursor
        for chunk in record.chunks:
            for r in chunk.ranges:
                if r.thread_id == thread_id:
                    assert r.first_seq == covered + 1
                    covered = r.last_seq
        assert covered <= thread.message_count
