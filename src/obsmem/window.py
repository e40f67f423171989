"""The message window: which messages are unobserved, their tokens, and safe cut points.

Pure functions over a snapshot. A *window* is what the actor would see raw right now: every
message after the cursor (per thread), with its token estimate, split into the part already
covered by buffered chunks and the unbuffered rest.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from .messages import Message, ToolCallPart, ToolResultPart
from .meta_keys import (
    META_DEFERRED,
    META_HELD_CALLS,
    META_LAST_MODEL,
    META_RETRACTED,
    META_RETRACTED_THROUGH,
)
from .snapshot import Snapshot, Subject, ThreadState
from .tokens import TokenEstimator

if TYPE_CHECKING:
    from .stores import CoreStore

__all__ = [
    "RETRACTED_THROUGH_KEY",
    "CachedMessages",
    "ThreadWindow",
    "binding_calls",
    "held_calls",
    "is_deferred",
    "is_retracted",
    "mark_deferred",
    "pending_calls",
    "retracted_ids",
    "safe_prefix",
    "take_prefix",
    "visible",
    "windows_of",
]

MAX_CACHED_THREADS = 256
"""Most threads whose unobserved messages one engine caches between steps."""
ERASED = "erased"
"""The incarnation this process gives a thread it erased: no stored thread has it, so work
begun on the thread before stores nothing (stored incarnations are hex)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadWindow:
    """The unobserved messages of one thread and their token counts."""

    thread_id: str
    messages: tuple[Message, ...]
    tokens: tuple[int, ...]
    covered_through: int
    """The seq up to which chunks already cover this thread (≥ the cursor)."""
    held: frozenset[str] = frozenset()
    """Calls the thread holds back while they wait (:func:`held_calls`)."""

    @property
    def binding(self) -> frozenset[str]:
        """Tool calls no cut may separate from their results (:func:`binding_calls`)."""
        return binding_calls(self.messages, self.held)

    @property
    def total(self) -> int:
        return sum(self.tokens)

    def tokens_from(self, seq: int | None) -> int:
        """Tokens of the messages from ``seq`` on (none when ``seq`` is None)."""
        if seq is None:
            return 0
        return sum(
            t for m, t in zip(self.messages, self.tokens, strict=True) if (m.seq or 0) >= seq
        )

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

    def unbuffered_pairs(self) -> tuple[list[Message], list[int]]:
        """The unbuffered messages and their token counts."""
        pairs = [
            (m, t)
            for m, t in zip(self.messages, self.tokens, strict=True)
            if (m.seq or 0) > self.covered_through
        ]
        return [m for m, _ in pairs], [t for _, t in pairs]


def windows_of(
    snapshot: Snapshot, estimator: TokenEstimator, cached: CachedMessages | None = None
) -> tuple[ThreadWindow, ...]:
    """The window of every covered thread in ``snapshot`` (the subject's own thread first);
    ``cached`` reuses counts made before."""
    record = snapshot.record

    def count(message: Message) -> int:
        return (
            cached.tokens(message, estimator)
            if cached is not None
            else estimator.count_message(message)
        )

    return tuple(
        ThreadWindow(
            thread_id=state.id,
            messages=(messages := visible(state)),
            tokens=tuple(count(m) for m in messages),
            covered_through=record.covered_through(state.id),
            held=held_calls(state.thread.metadata),
        )
        for state in snapshot.threads
    )


def visible(state: ThreadState) -> tuple[Message, ...]:
    """A thread's unobserved messages without those taken back (:data:`META_RETRACTED`,
    :data:`META_RETRACTED_THROUGH`)."""
    return tuple(m for m in state.unobserved if not is_retracted(m, state.thread.metadata))


def is_retracted(message: Message, thread_metadata: Mapping[str, Any]) -> bool:
    through = thread_metadata.get(META_RETRACTED_THROUGH)
    if isinstance(through, int) and (message.seq or 0) <= through:
        return True
    retracted = thread_metadata.get(META_RETRACTED)
    return isinstance(retracted, dict) and bool(cast(dict[str, Any], retracted).get(message.id))


async def shown_tail(
    store: CoreStore, thread_id: str, *, page: int = 100
) -> AsyncGenerator[Message]:
    """The thread's messages still shown (not taken back), newest first, read ``page`` at a
    time only as far as the caller goes on: the one pager of the newest messages (an undo, the
    Agents SDK's history, a late tool result's call)."""
    thread = await store.get_thread(thread_id)
    if thread is None:
        return
    meta = thread.metadata
    through = meta.get(META_RETRACTED_THROUGH)
    after = through if isinstance(through, int) else 0
    before: int | None = None
    while True:
        batch = await store.list_messages(
            thread_id, after_seq=after, through_seq=before, limit=page, newest_first=True
        )
        for message in batch:
            if not is_retracted(message, meta):
                yield message
        oldest = batch[-1].seq if batch else None
        if len(batch) < page or oldest is None or oldest <= after + 1:
            return
        before = oldest - 1


class CachedMessages:
    """The unobserved messages this process last read, per thread, with their token counts, so
    the next load reads (and the next window counts) only what came after them: stored
    messages are never rewritten. Bounded: the least recently used threads are forgotten
    first, which only costs a fuller read."""

    def __init__(self, max_threads: int = MAX_CACHED_THREADS) -> None:
        self._max = max_threads
        self._messages: OrderedDict[str, tuple[Message, ...]] = OrderedDict()
        self._tokens: dict[str, dict[int, int]] = {}
        self._counted_by: dict[str, TokenEstimator] = {}
        self._covered: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._incarnations: OrderedDict[str, str] = OrderedDict()
        self._last_models: dict[str, object] = {}
        """Per thread, its ``META_LAST_MODEL`` as last loaded (a reply whose actor model is
        that one need not write it again)."""

    def messages(self, subject: Subject) -> dict[str, tuple[Message, ...]]:
        """What is cached for the threads ``subject`` covers (as last loaded)."""
        threads = self._covered.get(subject.key, subject.threads)
        return {t: self._messages[t] for t in threads if t in self._messages}

    def remember(self, snapshot: Snapshot) -> Snapshot:
        """Cache ``snapshot``'s unobserved messages; returns the snapshot."""
        key = snapshot.subject.key
        self._covered[key] = snapshot.subject.threads
        self._covered.move_to_end(key)
        for state in snapshot.threads:
            if self._incarnations.get(state.id, state.thread.incarnation) != (
                state.thread.incarnation
            ):  # deleted and created again: its seqs name other messages now
                self._tokens.pop(state.id, None)
            self._incarnations[state.id] = state.thread.incarnation
            self._incarnations.move_to_end(state.id)
            self._last_models[state.id] = state.thread.metadata.get(META_LAST_MODEL)
            self._messages[state.id] = state.unobserved
            self._messages.move_to_end(state.id)
            counted = self._tokens.setdefault(state.id, {})
            first = (state.unobserved[0].seq or 0) if state.unobserved else None
            if first is None:
                counted.clear()
            elif counted and min(counted) < first:  # observed meanwhile: forget their counts
                self._tokens[state.id] = {s: t for s, t in counted.items() if s >= first}
        while len(self._messages) > self._max:
            thread_id, _ = self._messages.popitem(last=False)
            self._tokens.pop(thread_id, None)
            self._counted_by.pop(thread_id, None)
        while len(self._covered) > self._max:
            self._covered.popitem(last=False)
        while len(self._incarnations) > self._max:
            thread_id, _ = self._incarnations.popitem(last=False)
            self._last_models.pop(thread_id, None)
        return snapshot

    def last_model(self, thread_id: str) -> object:
        """The thread's ``META_LAST_MODEL`` as last loaded (None: none, or not known)."""
        return self._last_models.get(thread_id)

    def incarnations(self, thread_ids: Collection[str]) -> dict[str, str]:
        """The incarnation each of these threads was read from (those known)."""
        return {t: i for t in thread_ids if (i := self._incarnations.get(t)) is not None}

    def incarnation(self, thread_id: str) -> str | None:
        """The incarnation of the thread as last read (``ERASED`` once this process erased it;
        None when not known): work begun on it names it, so it stores nothing once the thread
        was deleted."""
        return self._incarnations.get(thread_id)

    def forget(self, thread_ids: Sequence[str]) -> None:
        """Drop what is cached of these threads (they were erased): work begun on them before
        stores nothing, and the next turn starts them afresh."""
        for thread_id in thread_ids:
            self._incarnations[thread_id] = ERASED
            self._messages.pop(thread_id, None)
            self._tokens.pop(thread_id, None)
            self._counted_by.pop(thread_id, None)

    def tokens(self, message: Message, estimator: TokenEstimator) -> int:
        """``message``'s token estimate, counted once while its thread is cached (and counted
        again when the thread's estimator changes: the actor moved to another provider)."""
        thread_id = message.thread_id or ""
        counted = self._tokens.get(thread_id)
        if counted is None or message.seq is None:
            return estimator.count_message(message)
        if self._counted_by.get(thread_id) is not estimator:
            counted.clear()
            self._counted_by[thread_id] = estimator
        tokens = counted.get(message.seq)
        if tokens is None:
            tokens = counted[message.seq] = estimator.count_message(message)
        return tokens

    def __len__(self) -> int:
        return len(self._messages)


def is_deferred(part: ToolCallPart) -> bool:
    meta = part.metadata.get("obsmem")
    return isinstance(meta, dict) and bool(cast(dict[str, Any], meta).get(META_DEFERRED))


def mark_deferred(message: Message, calls: Collection[str]) -> Message:
    """``message`` with its tool calls among ``calls`` marked deferred (:data:`META_DEFERRED`)."""
    if not calls or not any(
        isinstance(p, ToolCallPart) and p.tool_call_id in calls for p in message.parts
    ):
        return message
    parts = tuple(
        replace(p, metadata={**p.metadata, "obsmem": {**_obsmem(p), META_DEFERRED: True}})
        if isinstance(p, ToolCallPart) and p.tool_call_id in calls
        else p
        for p in message.parts
    )
    return replace(message, parts=parts)


def _obsmem(part: ToolCallPart) -> dict[str, Any]:
    meta = part.metadata.get("obsmem")
    return dict(cast(dict[str, Any], meta)) if isinstance(meta, dict) else {}


def _answered(messages: Sequence[Message]) -> set[str]:
    return {p.tool_call_id for m in messages for p in m.parts if isinstance(p, ToolResultPart)}


RETRACTED_THROUGH_KEY = META_RETRACTED_THROUGH
"""Deprecated: :data:`obsmem.meta_keys.META_RETRACTED_THROUGH`, kept for one release."""


def retracted_ids(thread_metadata: Mapping[str, Any]) -> frozenset[str]:
    """The messages of a thread that were taken back, from its metadata."""
    retracted = thread_metadata.get(META_RETRACTED)
    if not isinstance(retracted, dict):
        return frozenset()
    return frozenset(str(k) for k, v in cast(dict[str, Any], retracted).items() if v)


def held_calls(thread_metadata: Mapping[str, Any]) -> frozenset[str]:
    """The calls a thread holds back while they wait (``Memory.hold_calls``), from its
    metadata: ``{META_HELD_CALLS: {call_id: True}}``."""
    held = thread_metadata.get(META_HELD_CALLS)
    if not isinstance(held, dict):
        return frozenset()
    return frozenset(str(k) for k, v in cast(dict[str, Any], held).items() if v)


def pending_calls(
    messages: Sequence[Message], held: Collection[str] = frozenset()
) -> frozenset[str]:
    """Tool calls still waiting for their result in ``messages`` (a thread's unobserved
    messages, in order): the unanswered calls of the latest step (the last assistant message,
    while nothing but tool results came after it), unanswered calls marked deferred, and those
    among ``held`` (:func:`held_calls`). Any other unanswered call was interrupted (an aborted
    run, a crash): it will get no result."""
    answered = _answered(messages)
    pending: set[str] = set()
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=None)
    if last is not None and all(_only_results(m) for m in messages[last + 1 :]):
        pending |= {
            p.tool_call_id
            for p in messages[last].parts
            if isinstance(p, ToolCallPart) and p.tool_call_id not in answered
        }
    pending |= {
        p.tool_call_id
        for m in messages
        for p in m.parts
        if isinstance(p, ToolCallPart)
        and p.tool_call_id not in answered
        and (is_deferred(p) or p.tool_call_id in held)
    }
    return frozenset(pending)


def _only_results(message: Message) -> bool:
    return bool(message.parts) and all(isinstance(p, ToolResultPart) for p in message.parts)


def binding_calls(
    messages: Sequence[Message], held: Collection[str] = frozenset()
) -> frozenset[str]:
    """The tool calls a cut must not separate from their results: those answered in
    ``messages`` and those still pending. An interrupted call binds nothing."""
    return frozenset(_answered(messages)) | pending_calls(messages, held)


def safe_prefix(messages: Sequence[Message], binding: frozenset[str] | None = None) -> int:
    """How many leading messages can be cut off without splitting a tool call from its result.

    The answer is the largest n such that every binding call in ``messages[:n]`` (answered or
    pending, :func:`binding_calls`, taken from ``messages`` unless given) has its result in
    ``messages[:n]``. A pending call ends the safe prefix before it; an interrupted one does not.
    """
    binding = binding_calls(messages) if binding is None else binding
    cuts = _safe_cuts(messages, binding)
    return cuts[-1] if cuts else 0


def _safe_cuts(messages: Sequence[Message], binding: frozenset[str]) -> list[int]:
    """Every n (ascending) for which no binding call in ``messages[:n]`` waits for its result:
    where a cut splits no call from its result."""
    open_calls: set[str] = set()
    cuts: list[int] = []
    for i, message in enumerate(messages, start=1):
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_call_id in binding:
                open_calls.add(part.tool_call_id)
            elif isinstance(part, ToolResultPart):
                open_calls.discard(part.tool_call_id)
        if not open_calls:
            cuts.append(i)
    return cuts


def take_prefix(
    messages: Sequence[Message],
    tokens: Sequence[int],
    *,
    at_least: int,
    at_most: int | None,
    binding: frozenset[str] | None = None,
) -> int:
    """How many leading messages to take: enough to reach ``at_least`` tokens (if possible),
    never more than ``at_most`` tokens (if given, unless one message alone is larger), and only
    at a safe cut point (no binding tool call split from its result). Returns 0 when no cut is
    safe."""
    binding = binding_calls(messages) if binding is None else binding
    best = 0
    total = 0
    cuts = _safe_cuts(messages, binding)
    if cuts and len(tokens) < cuts[-1]:
        raise ValueError("take_prefix needs a token count for every message")
    for cut in cuts:
        taken = sum(tokens[best:cut])  # the messages from the last cut taken to this one
        if at_most is not None and best and total + taken > at_most:
            break
        total += taken
        best = cut
        if total >= at_least:
            break
    return best
