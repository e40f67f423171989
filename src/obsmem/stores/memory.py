"""InMemoryStore: the reference semantics, for tests and notebooks.

Each method runs without awaiting in the middle, so on one event loop every transition is atomic.
The state is guarded by a ``threading.Lock`` as well, so a store shared with worker threads stays
consistent.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..errors import StoreError
from ..messages import Message, utcnow
from ..records import (
    BufferedChunk,
    BufferedReflection,
    GroupEmbedding,
    ObservationGroup,
    OMRecord,
    Scope,
    Thread,
)
from ..vectors import encode, top_k
from . import transitions as tr

__all__ = ["InMemoryStore"]


class InMemoryStore:
    """A store that lives in this process and is gone when it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, Thread] = {}
        self._messages: dict[str, list[Message]] = {}  # thread id -> messages in seq order
        self._message_index: dict[str, Message] = {}  # message id -> message
        self._generations: dict[str, list[OMRecord]] = {}  # key -> generations, oldest first
        self._records: dict[str, OMRecord] = {}  # record id -> record
        self._groups: list[ObservationGroup] = []
        self._resources: dict[str, dict[str, Any]] = {}
        self._embeddings: dict[str, GroupEmbedding] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"InMemoryStore(threads={len(self._threads)})"

    async def aclose(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("this InMemoryStore was closed")

    # -- threads -------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> Thread | None:
        self._check_open()
        return self._threads.get(thread_id)

    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        self._check_open()
        with self._lock:
            existing = self._threads.get(thread_id)
            if existing is not None:
                tr.check_thread_owner(existing, resource_id)
                return existing
            now = utcnow()
            thread = Thread(
                id=thread_id,
                resource_id=resource_id,
                title=title,
                metadata=dict(metadata or {}),
                created_at=now,
                updated_at=now,
            )
            self._threads[thread_id] = thread
            self._messages[thread_id] = []
            return thread

    async def list_threads(self, resource_id: str) -> list[Thread]:
        self._check_open()
        found = [t for t in self._threads.values() if t.resource_id == resource_id]
        return sorted(found, key=lambda t: (t.created_at, t.id))

    async def list_resources(self) -> list[str]:
        self._check_open()
        return sorted({t.resource_id for t in self._threads.values()})

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        self._check_open()
        with self._lock:
            thread = self._require_thread(thread_id)
            merged = {**thread.metadata, **(metadata or {})}
            thread = replace(
                thread,
                title=thread.title if title is None else title,
                metadata=merged,
                updated_at=utcnow(),
            )
            self._threads[thread_id] = thread
            return thread

    async def get_resource(self, resource_id: str) -> dict[str, Any]:
        self._check_open()
        return dict(self._resources.get(resource_id, {}))

    async def update_resource(
        self, resource_id: str, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        self._check_open()
        with self._lock:
            merged = {**self._resources.get(resource_id, {}), **metadata}
            self._resources[resource_id] = merged
            return dict(merged)

    def _require_thread(self, thread_id: str) -> Thread:
        thread = self._threads.get(thread_id)
        if thread is None:
            raise StoreError(f"no thread {thread_id!r}; create it with create_thread() first")
        return thread

    # -- messages ------------------------------------------------------------------------------

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        self._check_open()
        with self._lock:
            thread = self._require_thread(thread_id)
            stored: list[Message] = []
            batch: dict[str, Message] = {}
            count = thread.message_count
            for message in messages:
                tr.check_message_thread(message, thread)
                existing = self._message_index.get(message.id) or batch.get(message.id)
                if existing is not None:
                    if existing.thread_id != thread_id:
                        raise StoreError(
                            f"message id {message.id} is already stored in another thread"
                        )
                    stored.append(existing)
                    continue
                count += 1
                msg = replace(
                    message, thread_id=thread_id, resource_id=thread.resource_id, seq=count
                )
                batch[msg.id] = msg
                stored.append(msg)
            for msg in batch.values():
                self._messages[thread_id].append(msg)
                self._message_index[msg.id] = msg
            self._threads[thread_id] = replace(thread, message_count=count, updated_at=utcnow())
            return stored

    async def list_messages(
        self,
        thread_id: str,
        *,
        after_seq: int = 0,
        through_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Message]:
        self._check_open()
        rows = [
            m
            for m in self._messages.get(thread_id, ())
            if m.seq is not None
            and m.seq > after_seq
            and (through_seq is None or m.seq <= through_seq)
        ]
        if newest_first:
            rows.reverse()
        return rows if limit is None else rows[:limit]

    async def get_messages(self, ids: Sequence[str], *, resource_id: str) -> list[Message]:
        self._check_open()
        out: list[Message] = []
        for message_id in ids:
            msg = self._message_index.get(message_id)
            if msg is not None and msg.resource_id == resource_id:
                out.append(msg)
        return out

    # -- records -------------------------------------------------------------------------------

    async def get_record(self, key: str) -> OMRecord | None:
        self._check_open()
        generations = self._generations.get(key)
        return generations[-1] if generations else None

    async def get_or_create_record(
        self, key: str, *, scope: Scope, thread_id: str | None, resource_id: str | None
    ) -> OMRecord:
        self._check_open()
        with self._lock:
            generations = self._generations.setdefault(key, [])
            if generations:
                return generations[-1]
            record = tr.initial_record(
                key, scope=scope, thread_id=thread_id, resource_id=resource_id, now=utcnow()
            )
            generations.append(record)
            self._records[record.id] = record
            return record

    def _current(self, record_id: str, expected_version: int) -> OMRecord:
        return tr.check_current(self._records.get(record_id), record_id, expected_version)

    def _put(self, record: OMRecord) -> OMRecord:
        generations = self._generations[record.key]
        for i, old in enumerate(generations):
            if old.id == record.id:
                generations[i] = record
                break
        else:
            generations.append(record)
        self._records[record.id] = record
        return record

    def _message_counts(self, record: OMRecord, threads: Sequence[str]) -> dict[str, int]:
        return {t: self._threads[t].message_count for t in threads if t in self._threads}

    async def add_chunk(
        self,
        record_id: str,
        expected_version: int,
        chunk: BufferedChunk,
        *,
        last_buffered_at_tokens: int | None = None,
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        self._check_open()
        with self._lock:
            record = self._current(record_id, expected_version)
            counts = self._message_counts(record, [r.thread_id for r in chunk.ranges])
            new = tr.add_chunk(
                record,
                chunk,
                message_counts=counts,
                last_buffered_at_tokens=last_buffered_at_tokens,
                now=utcnow(),
            )
            self._groups.extend(groups)
            return self._put(new)

    async def activate_chunks(
        self,
        record_id: str,
        expected_version: int,
        count: int,
        *,
        observations: str,
        observation_tokens: int,
    ) -> OMRecord:
        self._check_open()
        with self._lock:
            record = self._current(record_id, expected_version)
            new = tr.activate(
                record,
                count,
                observations=observations,
                observation_tokens=observation_tokens,
                now=utcnow(),
            )
            return self._put(new)

    async def commit_observation(
        self,
        record_id: str,
        expected_version: int,
        *,
        observations: str,
        observation_tokens: int,
        cursor: Mapping[str, int],
        pending_message_tokens: int | None = None,
        observed_tokens: int = 0,
        expected_cursor: Mapping[str, int] | None = None,
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        self._check_open()
        with self._lock:
            record = self._current(record_id, expected_version)
            new = tr.commit_observation(
                record,
                observations=observations,
                observation_tokens=observation_tokens,
                cursor=cursor,
                message_counts=self._message_counts(record, list(cursor)),
                pending_message_tokens=pending_message_tokens,
                observed_tokens=observed_tokens,
                expected_cursor=expected_cursor,
                now=utcnow(),
            )
            self._groups.extend(groups)
            return self._put(new)

    async def set_buffered_reflection(
        self, record_id: str, expected_version: int, reflection: BufferedReflection | None
    ) -> OMRecord:
        self._check_open()
        with self._lock:
            record = self._current(record_id, expected_version)
            return self._put(tr.set_buffered_reflection(record, reflection, now=utcnow()))

    async def start_reflection_generation(
        self,
        record_id: str,
        expected_version: int,
        *,
        observations: str,
        observation_tokens: int,
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        self._check_open()
        with self._lock:
            record = self._current(record_id, expected_version)
            retired, head = tr.reflect(
                record,
                observations=observations,
                observation_tokens=observation_tokens,
                now=utcnow(),
            )
            self._put(retired)
            self._groups.extend(groups)
            return self._put(head)

    async def update_counters(
        self,
        record_id: str,
        expected_version: int,
        *,
        pending_message_tokens: int | None = None,
        last_buffered_at_tokens: int | None = None,
    ) -> OMRecord:
        self._check_open()
        with self._lock:
            record = self._current(record_id, expected_version)
            new = tr.update_counters(
                record,
                pending_message_tokens=pending_message_tokens,
                last_buffered_at_tokens=last_buffered_at_tokens,
                now=utcnow(),
            )
            return self._put(new)

    async def history(
        self, key: str, *, limit: int | None = None, offset: int = 0
    ) -> list[OMRecord]:
        self._check_open()
        newest_first = list(reversed(self._generations.get(key, [])))[offset:]
        return newest_first if limit is None else newest_first[:limit]

    async def clear(self, key: str) -> None:
        self._check_open()
        with self._lock:
            for record in self._generations.pop(key, []):
                self._records.pop(record.id, None)
            self._groups = [g for g in self._groups if g.key != key]
            self._embeddings = {k: e for k, e in self._embeddings.items() if e.key != key}

    async def put_embeddings(self, embeddings: Sequence[GroupEmbedding]) -> None:
        self._check_open()
        with self._lock:
            for e in embeddings:
                self._embeddings[e.group_id] = e

    async def search_embeddings(
        self,
        resource_id: str,
        vector: Sequence[float],
        *,
        model: str,
        thread_id: str | None = None,
        after: datetime | None = None,
        before: datetime | None = None,
        limit: int = 10,
    ) -> list[tuple[ObservationGroup, float]]:
        self._check_open()
        candidates = [
            (e.group_id, encode(e.vector))
            for e in self._embeddings.values()
            if e.resource_id == resource_id
            and e.model == model
            and (thread_id is None or e.thread_id == thread_id)
            and (after is None or e.observed_at >= after)
            and (before is None or e.observed_at <= before)
        ]
        groups = {g.id: g for g in self._groups if g.resource_id == resource_id}
        return [(groups[i], score) for i, score in top_k(vector, candidates, limit) if i in groups]

    async def list_observation_groups(
        self, resource_id: str, *, thread_id: str | None = None
    ) -> list[ObservationGroup]:
        self._check_open()
        return [
            g
            for g in self._groups
            if g.resource_id == resource_id and (thread_id is None or g.thread_id == thread_id)
        ]
