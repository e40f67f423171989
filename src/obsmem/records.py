"""Durable state: threads, observational-memory records, buffered chunks, observation groups.

All of it is frozen data. A store never hands out something a caller could mutate into an
inconsistent state; every change goes through one of the store's transitions
(:mod:`obsmem.stores.base`).

Vocabulary (see ARCHITECTURE.md):

- *key*: what one log covers, ``thread:<id>`` (thread scope) or ``resource:<id>`` (resource scope).
- *record*: one generation of the log for a key. Only the newest (the *head*) changes; a
  reflection retires it (``superseded_by``) and starts the next generation.
- *cursor*: per thread, the ``seq`` of the last message the active log covers. Messages after it
  are raw (unobserved). It only moves forward.
- *cycle record*: one row of the cycle ledger, what one piece of memory work did (kind,
  outcome, timing, model, tokens, the messages it covered, the generation it produced), written
  in the cycle's own commit.
- *cycle detail*: what a cycle's model calls were shown and answered (:class:`ModelExchange`),
  stored with its cycle record for the newest cycles of a key only (``cycle_detail``).
- *chunk*: observations made in the background for the messages right after the cursor, waiting
  to be activated. Chunks belong to the key, not to a generation, so a reflection can never strand
  them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeAlias

__all__ = [
    "CYCLE_KINDS",
    "CYCLE_OUTCOMES",
    "BufferedChunk",
    "BufferedReflection",
    "Cursor",
    "CycleKind",
    "CycleOutcome",
    "CycleRecord",
    "GroupEmbedding",
    "MessageRange",
    "ModelExchange",
    "OMRecord",
    "ObservationGroup",
    "Origin",
    "Scope",
    "Thread",
    "ThreadCopy",
    "record_key",
]

Scope: TypeAlias = Literal["thread", "resource"]
Cursor: TypeAlias = Mapping[str, int]
Origin: TypeAlias = Literal["initial", "reflection", "revision"]
"""thread id -> seq of the last message covered by the active log."""


def record_key(scope: Scope, *, thread_id: str | None, resource_id: str | None) -> str:
    """The lookup key of the log for a thread (thread scope) or a resource (resource scope)."""
    if scope == "thread":
        if not thread_id:
            raise ValueError("thread scope needs a thread id")
        return f"thread:{thread_id}"
    if not resource_id:
        raise ValueError("resource scope needs a resource id")
    return f"resource:{resource_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Thread:
    id: str
    resource_id: str
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict[str, Any])
    created_at: datetime
    updated_at: datetime
    message_count: int = 0
    """How many messages the thread holds; the next message gets ``seq = message_count + 1``."""
    incarnation: str = ""
    """New each time the thread id is created: work that read the thread before it was deleted
    names it, and writes nothing into a thread created again under the same id."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadCopy:
    """What a caller holds of a thread, as it last read or wrote it: the thread's incarnation,
    its message count and the values of the metadata keys the caller acts on (None: absent). A
    load that names one (``LoadRequest.expect``) stores nothing when the thread is found
    otherwise, so the caller may skip reading the thread before a turn and still never act on
    a stale copy."""

    incarnation: str
    """The thread's incarnation; "": the caller found no thread (the load creates it)."""
    message_count: int
    metadata: Mapping[str, Any] = field(default_factory=dict[str, Any])

    def matches(self, thread: Thread | None) -> bool:
        if thread is None:
            return not self.incarnation
        return (
            thread.incarnation == self.incarnation
            and thread.message_count == self.message_count
            and all(thread.metadata.get(k) == v for k, v in self.metadata.items())
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRange:
    """Messages ``first_seq..last_seq`` (inclusive) of one thread."""

    thread_id: str
    first_seq: int
    last_seq: int

    def __post_init__(self) -> None:
        if self.first_seq < 1 or self.last_seq < self.first_seq:
            raise ValueError(
                f"bad message range {self.first_seq}..{self.last_seq} in thread {self.thread_id}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class BufferedChunk:
    """Observations of a run of messages made ahead of time, waiting for activation."""

    id: str
    cycle_id: str
    observations: str
    token_count: int
    """Tokens of ``observations``."""
    message_tokens: int
    """Tokens of the messages the chunk covers (what activation removes from the context)."""
    ranges: tuple[MessageRange, ...]
    """The messages covered, per thread; each starts right after the cursor or the prior chunk."""
    message_ids: tuple[str, ...] = ()
    last_message_at: datetime | None = None
    created_at: datetime
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    extracted_values: Mapping[str, Any] = field(default_factory=dict[str, Any])
    extraction_failures: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class BufferedReflection:
    """A reflection made in the background of the first ``line_count`` lines of the log."""

    cycle_id: str
    text: str
    token_count: int
    input_tokens: int
    line_count: int
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class OMRecord:
    """One generation of the observation log of a key."""

    id: str
    key: str
    scope: Scope
    thread_id: str | None
    resource_id: str | None
    generation: int = 0
    origin: Origin = "initial"
    """How the generation began: ``initial`` (generation 0), ``reflection`` (the Reflector's
    rewrite) or ``revision`` (corrected by hand, ``Memory.revise``)."""
    version: int = 1
    """Bumped by every transition; a transition names the version it read (compare-and-set)."""
    observations: str = ""
    observation_tokens: int = 0
    cursor: Mapping[str, int] = field(default_factory=dict[str, int])
    chunks: tuple[BufferedChunk, ...] = ()
    buffered_reflection: BufferedReflection | None = None
    total_tokens_observed: int = 0
    """Message tokens this key's log has absorbed, over every generation (activations and
    synchronous observations)."""
    superseded_by: str | None = None
    created_at: datetime
    updated_at: datetime

    @property
    def is_head(self) -> bool:
        return self.superseded_by is None

    def covered_through(self, thread_id: str) -> int:
        """The seq up to which messages of ``thread_id`` are observed or buffered (0 if none)."""
        last = self.cursor.get(thread_id, 0)
        for chunk in self.chunks:
            for r in chunk.ranges:
                if r.thread_id == thread_id:
                    last = max(last, r.last_seq)
        return last


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservationGroup:
    """The observations one cycle produced, with the range of messages they came from."""

    id: str
    key: str
    resource_id: str | None
    thread_id: str | None
    cycle_id: str
    start_id: str
    end_id: str
    observations: str
    ranges: tuple[MessageRange, ...] = ()
    created_at: datetime
    metadata: Mapping[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupEmbedding:
    """The embedding of one observation group, for semantic recall."""

    group_id: str
    key: str
    resource_id: str | None
    thread_id: str | None
    observed_at: datetime
    model: str
    vector: tuple[float, ...]

    @classmethod
    def of(cls, group: ObservationGroup, vector: Sequence[float], *, model: str) -> GroupEmbedding:
        """The embedding of ``group`` by ``model``, observed when the group was made."""
        return cls(
            group_id=group.id,
            key=group.key,
            resource_id=group.resource_id,
            thread_id=group.thread_id,
            observed_at=group.created_at,
            model=model,
            vector=tuple(vector),
        )


CycleKind: TypeAlias = Literal["buffering", "observation", "activation", "reflection", "revision"]
CycleOutcome: TypeAlias = Literal["committed", "redundant", "failed"]
CYCLE_KINDS: tuple[CycleKind, ...] = (
    "buffering",
    "observation",
    "activation",
    "reflection",
    "revision",
)
CYCLE_OUTCOMES: tuple[CycleOutcome, ...] = ("committed", "redundant", "failed")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelExchange:
    """One model call of a cycle, as the model saw it: its instructions (``system``), the user
    message (``shown``, attachments as ``[image: name]`` placeholders) and its answer."""

    role: str
    """``observer``, ``reflector`` or ``extractor``."""
    model: str
    system: str
    shown: str
    answer: str

    def to_json(self) -> dict[str, str]:
        return {
            "role": self.role,
            "model": self.model,
            "system": self.system,
            "shown": self.shown,
            "answer": self.answer,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelExchange:
        return cls(
            role=str(data["role"]),
            model=str(data["model"]),
            system=str(data["system"]),
            shown=str(data["shown"]),
            answer=str(data["answer"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleRecord:
    """One cycle of memory work, as the cycle ledger keeps it (newest first per key).

    Written in the cycle's own commit (a failed cycle in the small write that stores the failure
    state; a redundant one, dropped because another worker covered its messages first, in a
    small write of its own). ``kind``: ``buffering`` (an observation chunk or a reflection made
    in the background), ``observation`` (synchronous, on demand or a background catch-up),
    ``activation`` (buffered chunks or a buffered reflection moved into the log),
    ``reflection`` (synchronous) or ``revision`` (the log corrected by hand, a manual cycle
    that calls no model)."""

    cycle_id: str
    key: str
    resource_id: str
    thread_ids: tuple[str, ...]
    """The threads whose messages (or log) the cycle worked on; the cycle's own thread first."""
    kind: CycleKind
    outcome: CycleOutcome
    error: str | None = None
    """Why it failed (``outcome == "failed"``), in words."""
    started_at: datetime
    duration_ms: float
    model: str | None = None
    """The memory model that answered (or was asked, for a failure); None without a call."""
    input_tokens: int | None = None
    """Over every model call of the cycle (Observer or Reflector and extractors), as the
    provider counted them; None when no call answered."""
    output_tokens: int | None = None
    cost_usd: float | None = None
    """None when no call answered or the model is not in the price list."""
    ranges: tuple[MessageRange, ...] = ()
    """The messages the cycle covered, per thread (empty for a reflection)."""
    generation: int | None = None
    """The log generation the cycle's work went into (a reflection: the one it started); None
    when nothing was committed."""
    operation: str = ""
    """What exactly ran, for people: ``observation``, ``catch-up``, ``buffered-observation``,
    ``buffered-reflection``, ``chunk-activation``, ``reflection-activation``, ``reflection``,
    ``revision``."""
    by: str | None = None
    """Who asked for a manual cycle (``Memory.revise(..., by=...)``); None for memory's own."""
    detail: tuple[ModelExchange, ...] = field(default=(), compare=False)
    """The cycle's model calls, on a row being written (``cycle_detail``). Reads of the ledger
    leave it empty: the detail is read on its own (``Store.cycle_detail``)."""

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready values (``started_at`` in ISO 8601, ranges as objects)."""
        return {
            "cycle_id": self.cycle_id,
            "key": self.key,
            "resource_id": self.resource_id,
            "thread_ids": list(self.thread_ids),
            "kind": self.kind,
            "operation": self.operation,
            "outcome": self.outcome,
            "error": self.error,
            "started_at": self.started_at.isoformat(),
            "duration_ms": self.duration_ms,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "ranges": [
                {"thread_id": r.thread_id, "first_seq": r.first_seq, "last_seq": r.last_seq}
                for r in self.ranges
            ],
            "generation": self.generation,
            "by": self.by,
        }
