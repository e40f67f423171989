"""What a piece of memory work is about, and the state it decides from.

A :class:`Subject` names the work: the log (its key and scope), the thread whose turn or cycle
it is, that thread's resource, and the threads whose messages the log covers. A
:class:`Snapshot` is everything a turn or a background cycle decides from, read by the store in
one round trip: the head record with its chunks, every covered thread with its unobserved
messages and metadata, and the resource's metadata. The planner and the context builder only
ever look at a snapshot; nothing decides from a second, later read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from .messages import Message
from .records import OMRecord, Scope, Thread, record_key

__all__ = ["Snapshot", "Subject", "ThreadState", "reusable"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """What one piece of memory work is about."""

    scope: Scope
    thread_id: str
    """The thread whose turn (or cycle) this is."""
    resource_id: str
    thread_ids: tuple[str, ...] = ()
    """Resource scope: the resource's threads the log covers, as last loaded (the thread alone
    until then). Thread scope: always the thread alone."""

    @property
    def key(self) -> str:
        """The log's key: ``thread:<id>`` or ``resource:<id>``."""
        return record_key(self.scope, thread_id=self.thread_id, resource_id=self.resource_id)

    @property
    def threads(self) -> tuple[str, ...]:
        """The covered threads, the subject's own thread first."""
        if self.scope == "thread" or not self.thread_ids:
            return (self.thread_id,)
        others = tuple(t for t in self.thread_ids if t != self.thread_id)
        return (self.thread_id, *others)

    def covering(self, thread_ids: tuple[str, ...]) -> Subject:
        """The same subject with the covered threads as loaded."""
        if self.scope == "thread":
            return self
        return replace(self, thread_ids=thread_ids)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadState:
    """One covered thread in a snapshot: its row and the messages after the record's cursor."""

    thread: Thread
    unobserved: tuple[Message, ...] = ()

    @property
    def id(self) -> str:
        return self.thread.id


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Everything one turn or cycle decides from, as of one store transaction."""

    subject: Subject
    record: OMRecord
    """The head record of ``subject.key``, with its buffered chunks."""
    threads: tuple[ThreadState, ...]
    """Every covered thread, the subject's own thread first."""
    resource_metadata: Mapping[str, Any] = field(default_factory=dict[str, Any])
    stored: tuple[Message, ...] = ()
    """The messages the load appended, as stored (with their ``seq``)."""
    last_reply_at: datetime | None = None
    """When the assistant last spoke in the subject's thread (only when asked for)."""

    @property
    def main(self) -> ThreadState:
        """The subject's own thread."""
        return self.threads[0]

    def thread(self, thread_id: str) -> ThreadState | None:
        return next((t for t in self.threads if t.id == thread_id), None)

    @property
    def thread_metadata(self) -> Mapping[str, Any]:
        """The subject's own thread's metadata."""
        return self.main.thread.metadata


def reusable(cached: Sequence[Message], after_seq: int) -> tuple[Message, ...]:
    """The messages of ``cached`` (one thread's messages read before, a run of consecutive
    seqs in order) that can stand in for reading the thread after ``after_seq``: those after
    it, when the run reaches back to ``after_seq + 1``. Stored messages are never rewritten
    (invariant 1), so a message read once is the message for good."""
    if not cached:
        return ()
    first, last = cached[0].seq, cached[-1].seq
    if first is None or last is None or last - first != len(cached) - 1:
        return ()  # not one run of consecutive seqs
    if after_seq < first - 1 or after_seq >= last:
        return ()
    return tuple(cached[after_seq - first + 1 :])
