"""The message window: which stored messages are unobserved, their tokens, and safe cut points.

Pure helpers plus one loader. A *window* is what the actor would see raw right now: every
message after the cursor (per thread), with its token estimate, split into the part already
covered by buffered chunks and the unbuffered rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .messages import Message, ToolCallPart, ToolResultPart
from .records import OMRecord
from .stores import Store
from .tokens import TokenEstimator

__all__ = ["ThreadWindow", "load_window", "safe_prefix", "take_prefix"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadWindow:
    """The unobserved messages of one thread and their token counts."""

    thread_id: str
    messages: tuple[Message, ...]
    tokens: tuple[int, ...]
    covered_through: int
    """The seq up to which chunks already cover this thread (≥ the cursor)."""

    @property
    def total(self) -> int:
        return sum(self.tokens)

    @property
    def unbuffered(self) -> tuple[Message, ...]:
        return tuple(m for m in self.messages if (m.seq or 0) > self.covered_through)

    @property
    def unbuffered_tokens(self) -> int:
        return sum(
            t
            for m, t in zip(self.messages, self.tokens, strict=True)
            if (m.seq or 0) > self.covered_through
        )


async def load_window(
    store: Store, record: OMRecord, thread_ids: Sequence[str], estimator: TokenEstimator
) -> list[ThreadWindow]:
    """The unobserved messages of each thread, after the record's cursor."""
    windows: list[ThreadWindow] = []
    for thread_id in thread_ids:
        after = record.cursor.get(thread_id, 0)
        messages = tuple(await store.list_messages(thread_id, after_seq=after))
        windows.append(
            ThreadWindow(
                thread_id=thread_id,
                messages=messages,
                tokens=tuple(estimator.count_message(m) for m in messages),
                covered_through=record.covered_through(thread_id),
            )
        )
    return windows


def safe_prefix(messages: Sequence[Message]) -> int:
    """How many leading messages can be cut off without splitting a tool call from its result.

    The answer is the largest n such that every tool call in ``messages[:n]`` has its result in
    ``messages[:n]``. A call still waiting for its result ends the safe prefix before it.
    """
    open_calls: set[str] = set()
    safe = 0
    for i, message in enumerate(messages, start=1):
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                open_calls.add(part.tool_call_id)
            elif isinstance(part, ToolResultPart):
                open_calls.discard(part.tool_call_id)
        if not open_calls:
            safe = i
    return safe


def take_prefix(
    messages: Sequence[Message], tokens: Sequence[int], *, at_least: int, at_most: int | None
) -> int:
    """How many leading messages to take: enough to reach ``at_least`` tokens (if possible),
    never more than ``at_most`` tokens (if given, unless one message alone is larger), and only
    at a safe cut point (no tool call split from its result). Returns 0 when no cut is safe."""
    best = 0
    total = 0
    limit = safe_prefix(messages)
    open_calls: set[str] = set()
    for i, (message, count) in enumerate(zip(messages[:limit], tokens[:limit], strict=True), 1):
        if at_most is not None and best and total + count > at_most:
            break
        total += count
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                open_calls.add(part.tool_call_id)
            elif isinstance(part, ToolResultPart):
                open_calls.discard(part.tool_call_id)
        if not open_calls:
            best = i
            if total >= at_least:
                break
    return best
