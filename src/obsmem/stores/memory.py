"""InMemoryStore: the reference semantics, for tests and notebooks.

Each method runs without awaiting in the middle, so on one event loop every method is atomic.
The state is guarded by a ``threading.Lock`` as well, so a store shared with worker threads stays
consistent. The rules are the SQL stores' own (:mod:`obsmem.stores.transitions`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..errors import StoreError
from ..messages import Message, utcnow
from ..records import (
    CycleRecord,
    GroupEmbedding,
    ModelExchange,
    ObservationGroup,
    OMRecord,
    Thread,
    record_key,
)
from ..snapshot import Snapshot, Subject, ThreadState
from ..vectors import encode, top_k
from . import transitions as tr
from .changes import (
    DEFAULT_KEEP_CYCLES,
    DEFAULT_KEEP_DETAIL,
    Commit,
    CommitResult,
    ImportConflicts,
    Imported,
    ImportedResource,
    ImportWrite,
    LoadRequest,
    ResourcePatch,
    ThreadChange,
    ThreadPatch,
)
from .codec import dt_to_text
from .erasure import (
    Erasure,
    erase_thread_from,
    erased_labels,
    traced_to,
    untraced,
    with_tombstone,
)

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
        self._cycles: dict[str, list[CycleRecord]] = {}  # key -> the cycle ledger, as written
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
        thread = tr.new_thread(thread_id, resource_id, now=utcnow(), title=title, metadata=metadata)
        with self._lock:
            return self._create_thread(thread)

    def _create_thread(self, thread: Thread) -> Thread:
        """Store ``thread`` unless its id is stored: then the stored thread (a StoreError when
        it belongs to another resource)."""
        existing = self._threads.get(thread.id)
        if existing is not None:
            tr.check_thread_owner(existing, thread.resource_id)
            return existing
        self._threads[thread.id] = thread
        self._messages[thread.id] = []
        return thread

    async def list_threads(self, resource_id: str) -> list[Thread]:
        self._check_open()
        return self._threads_of(resource_id)

    def _threads_of(self, resource_id: str) -> list[Thread]:
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
        patch = ThreadPatch.merging(thread_id, metadata, title=title)
        with self._lock:
            return self._patch_thread(patch).after

    def _patch_thread(self, patch: ThreadPatch) -> ThreadChange:
        thread = self._require_thread(patch.thread_id)
        after = tr.apply_thread_patch(thread, patch, now=utcnow())
        self._threads[thread.id] = after
        return ThreadChange(before=thread, after=after)

    async def get_resource(self, resource_id: str) -> dict[str, Any]:
        self._check_open()
        return dict(self._resources.get(resource_id, {}))

    async def update_resource(
        self, resource_id: str, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        self._check_open()
        patch = ResourcePatch.merging(resource_id, metadata)
        with self._lock:
            return self._patch_resource(patch)

    def _patch_resource(self, patch: ResourcePatch) -> dict[str, Any]:
        merged = tr.apply_resource_patch(self._resources.get(patch.resource_id, {}), patch)
        self._resources[patch.resource_id] = merged
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
            return list(self._append(self._require_thread(thread_id), messages).stored)

    def _append(self, thread: Thread, messages: Sequence[Message]) -> tr.AppendPlan:
        plan = tr.plan_append(thread, messages, self._message_index)
        for msg in plan.new:
            self._messages[thread.id].append(msg)
            self._message_index[msg.id] = msg
        if plan.new:
            self._threads[thread.id] = replace(
                thread, message_count=plan.count, updated_at=utcnow()
            )
        return plan

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

    # -- memory --------------------------------------------------------------------------------

    async def load(self, request: LoadRequest) -> Snapshot:
        self._check_open()
        subject = request.subject
        with self._lock:
            if request.incarnation is not None:
                expected = ((subject.thread_id, request.incarnation),)
                tr.check_incarnations(expected, self._incarnations(expected))
            found = self._threads.get(subject.thread_id)
            tr.check_copy(subject.thread_id, found, request.expect)
            main = self._create_thread(
                tr.new_thread(subject.thread_id, subject.resource_id, now=utcnow())
            )
            stored: tuple[Message, ...] = ()
            if request.append:
                stored = self._append(main, request.append).stored
            for patch in request.patches:
                self._patch_thread(patch)
            if request.resource_patch is not None:
                self._patch_resource(request.resource_patch)
            generations = self._generations.setdefault(subject.key, [])
            if not generations:
                self._put(tr.initial_record(subject, now=utcnow()))
            self._record_cycles(request.cycles, request.keep_cycles, request.keep_detail)
            return self._state(
                subject, generations[-1], stored=stored, last_reply=request.last_reply
            )

    def _state(
        self,
        subject: Subject,
        record: OMRecord,
        *,
        stored: tuple[Message, ...] = (),
        last_reply: bool = False,
    ) -> Snapshot:
        main = self._require_thread(subject.thread_id)
        threads = [main]
        if subject.scope == "resource":
            threads += [t for t in self._threads_of(subject.resource_id) if t.id != main.id]
        # A thread's messages sit in seq order from seq 1: those after the cursor are a slice.
        states = tuple(
            ThreadState(
                thread=t, unobserved=tuple(self._messages[t.id][record.cursor.get(t.id, 0) :])
            )
            for t in threads
        )
        last_reply_at: datetime | None = None
        if last_reply:
            last_reply_at = next(
                (m.created_at for m in reversed(self._messages[main.id]) if m.role == "assistant"),
                None,
            )
        return Snapshot(
            subject=subject.covering(tuple(t.id for t in threads)),
            record=record,
            threads=states,
            resource_metadata=dict(self._resources.get(subject.resource_id, {})),
            stored=stored,
            last_reply_at=last_reply_at,
        )

    async def commit(self, change: Commit) -> CommitResult:
        self._check_open()
        with self._lock:
            record = self._records.get(change.record_id)
            generations = self._generations.get(change.key)
            head = generations[-1] if generations else None
            current = tr.check_current(record, change.record_id, change.expected_version, head=head)
            tr.check_incarnations(change.incarnations, self._incarnations(change.incarnations))
            for patch in change.threads:  # check before changing anything
                self._require_thread(patch.thread_id)
            counts = {
                t: self._threads[t].message_count
                for t in tr.threads_counted(change.change)
                if t in self._threads
            }
            applied = tr.apply_change(current, change.change, message_counts=counts, now=utcnow())
            self._put(applied.saved)
            if applied.created is not None:
                self._put(applied.created)
            self._groups.extend(change.groups)
            threads = tuple(self._patch_thread(p) for p in change.threads if not p.empty)
            if change.resource is not None and change.resource.set:
                self._patch_resource(change.resource)
            self._record_cycles(change.cycles, change.keep_cycles, change.keep_detail)
            snapshot = None
            if change.reload is not None:
                snapshot = self._state(change.reload, applied.head)
            return CommitResult(record=applied.head, threads=threads, snapshot=snapshot)

    def _incarnations(self, expected: Sequence[tuple[str, str]]) -> dict[str, str]:
        """The stored incarnation of each thread named in ``expected`` that still exists."""
        return {t: self._threads[t].incarnation for t, _ in expected if t in self._threads}

    def _record_cycles(self, cycles: Sequence[CycleRecord], keep: int, keep_detail: int) -> None:
        for key in dict.fromkeys(c.key for c in cycles):
            ledger = self._cycles.setdefault(key, [])
            known = {c.cycle_id for c in ledger}
            ledger.extend(c for c in cycles if c.key == key and c.cycle_id not in known)
            self._cycles[key] = tr.kept_detail(tr.kept_cycles(ledger, keep), keep_detail)

    async def list_cycles(
        self,
        key: str,
        *,
        thread_id: str | None = None,
        kinds: Sequence[str] = (),
        outcomes: Sequence[str] = (),
        limit: int = 100,
        before: datetime | None = None,
    ) -> list[CycleRecord]:
        self._check_open()
        tr.check_cycle_query(kinds, outcomes, limit)
        found = [
            c
            for c in self._cycles.get(key, ())
            if tr.cycle_matches(
                c, thread_id=thread_id, kinds=kinds, outcomes=outcomes, before=before
            )
        ]
        newest = sorted(found, key=tr.cycle_order, reverse=True)[:limit]
        return [replace(c, detail=()) for c in newest]

    async def cycle_detail(self, cycle_id: str) -> list[ModelExchange]:
        self._check_open()
        for ledger in self._cycles.values():
            for c in ledger:
                if c.cycle_id == cycle_id:
                    return list(c.detail)
        return []

    def _put(self, record: OMRecord) -> None:
        generations = self._generations.setdefault(record.key, [])
        for i, old in enumerate(generations):
            if old.id == record.id:
                generations[i] = record
                break
        else:
            generations.append(record)
        self._records[record.id] = record

    async def get_record(self, key: str) -> OMRecord | None:
        self._check_open()
        generations = self._generations.get(key)
        return generations[-1] if generations else None

    async def history(
        self, key: str, *, limit: int | None = None, offset: int = 0
    ) -> list[OMRecord]:
        self._check_open()
        newest_first = list(reversed(self._generations.get(key, [])))[offset:]
        return newest_first if limit is None else newest_first[:limit]

    async def clear(self, key: str) -> None:
        self._check_open()
        with self._lock:
            self._clear(key)

    def _clear(self, key: str) -> None:
        for record in self._generations.pop(key, []):
            self._records.pop(record.id, None)
        self._groups = [g for g in self._groups if g.key != key]
        self._cycles.pop(key, None)
        self._embeddings = {k: e for k, e in self._embeddings.items() if e.key != key}

    # -- an owner's delete ---------------------------------------------------------------------

    async def delete_thread(self, thread_id: str) -> Erasure | None:
        self._check_open()
        with self._lock:
            return self._delete_thread(thread_id, tombstone=True)

    def _delete_thread(self, thread_id: str, *, tombstone: bool) -> Erasure | None:
        """Erase the thread; ``tombstone``: an owner's delete leaves the thread's tombstone
        in its resource's metadata (an import that replaces the thread does not)."""
        thread = self._threads.get(thread_id)
        if thread is None:
            return None
        self._clear(record_key("thread", thread_id=thread_id, resource_id=None))
        key = record_key("resource", thread_id=None, resource_id=thread.resource_id)
        remaining = ""
        now = utcnow()
        erased = [g for g in self._groups if traced_to(g, thread_id)]
        labels = erased_labels(erased, self._groups)
        for record in list(self._generations.get(key, [])):
            after = erase_thread_from(record, thread_id, labels=labels, now=now)
            self._put(after)
            if after.is_head:
                remaining = untraced(after.observations)
        if key in self._cycles:
            self._cycles[key] = [c for c in self._cycles[key] if thread_id not in c.thread_ids]
        traced = {g.id for g in erased}
        self._groups = [g for g in self._groups if g.id not in traced]
        self._embeddings = {k: e for k, e in self._embeddings.items() if k not in traced}
        self._forget_threads({thread_id})
        if tombstone:
            metadata = self._resources.get(thread.resource_id, {})
            self._resources[thread.resource_id] = with_tombstone(
                metadata, thread_id, erased_at=dt_to_text(now)
            )
        return Erasure(thread_ids=(thread_id,), messages=thread.message_count, remaining=remaining)

    async def delete_resource(self, resource_id: str) -> Erasure | None:
        self._check_open()
        with self._lock:
            threads = self._threads_of(resource_id)
            key = record_key("resource", thread_id=None, resource_id=resource_id)
            if not threads and resource_id not in self._resources and key not in self._generations:
                return None
            for thread in threads:
                self._clear(record_key("thread", thread_id=thread.id, resource_id=None))
            self._clear(key)
            self._forget_threads({t.id for t in threads})
            self._groups = [g for g in self._groups if g.resource_id != resource_id]
            self._embeddings = {
                k: e for k, e in self._embeddings.items() if e.resource_id != resource_id
            }
            for cycle_key, rows in list(self._cycles.items()):
                self._cycles[cycle_key] = [c for c in rows if c.resource_id != resource_id]
            self._resources.pop(resource_id, None)
            return Erasure(
                thread_ids=tuple(t.id for t in threads),
                messages=sum(t.message_count for t in threads),
            )

    def _forget_threads(self, thread_ids: set[str]) -> None:
        """The threads, their messages, and the groups and embeddings made of them."""
        for thread_id in thread_ids:
            self._threads.pop(thread_id, None)
            for message in self._messages.pop(thread_id, []):
                self._message_index.pop(message.id, None)
        self._groups = [g for g in self._groups if g.thread_id not in thread_ids]
        self._embeddings = {
            k: e for k, e in self._embeddings.items() if e.thread_id not in thread_ids
        }

    # -- export and import ----------------------------------------------------------------------

    async def find_import_conflicts(
        self,
        *,
        threads: Sequence[str],
        keys: Sequence[str],
        resources: Sequence[str],
        messages: Iterable[str],
    ) -> ImportConflicts:
        self._check_open()
        with self._lock:
            stored = ((m, self._message_index.get(m)) for m in dict.fromkeys(messages))
            return ImportConflicts(
                threads=tuple(sorted(t for t in set(threads) if t in self._threads)),
                keys=tuple(sorted(k for k in set(keys) if self._generations.get(k))),
                resources=tuple(sorted(r for r in set(resources) if self._resources.get(r))),
                messages=tuple(
                    sorted((m, found.thread_id or "") for m, found in stored if found is not None)
                ),
            )

    async def write_import(self, write: ImportWrite) -> int:
        """All or nothing: the state is copied first and put back when an item fails."""
        self._check_open()
        with self._lock:
            saved = self._copy_state()
            try:
                for thread_id in write.replace_threads:
                    self._delete_thread(thread_id, tombstone=False)
                for key in write.replace_keys:
                    self._clear(key)
                written = 0
                for item in write.items():
                    self._insert(item)
                    written += 1
            except BaseException:
                self.__dict__.update(saved)
                raise
            return written

    def _copy_state(self) -> dict[str, Any]:
        return {
            "_threads": dict(self._threads),
            "_messages": {t: list(ms) for t, ms in self._messages.items()},
            "_message_index": dict(self._message_index),
            "_generations": {k: list(rs) for k, rs in self._generations.items()},
            "_records": dict(self._records),
            "_groups": list(self._groups),
            "_resources": dict(self._resources),
            "_embeddings": dict(self._embeddings),
            "_cycles": {k: list(cs) for k, cs in self._cycles.items()},
        }

    def _insert(self, item: Imported) -> None:
        """One imported item; an id already stored is a StoreError (the import rolls back)."""
        if isinstance(item, Thread):
            if item.id in self._threads:
                raise StoreError(f"thread {item.id!r} is stored already")
            self._threads[item.id] = item
            self._messages[item.id] = []
        elif isinstance(item, Message):
            if item.id in self._message_index or item.thread_id not in self._messages:
                raise StoreError(f"message {item.id!r} is stored already, or has no thread")
            self._messages[item.thread_id].append(item)
            self._message_index[item.id] = item
        elif isinstance(item, OMRecord):
            if item.id in self._records:
                raise StoreError(f"log record {item.id!r} is stored already")
            self._generations.setdefault(item.key, []).append(item)
            self._records[item.id] = item
        elif isinstance(item, ObservationGroup):
            if any(g.id == item.id for g in self._groups):
                raise StoreError(f"observation group {item.id!r} is stored already")
            self._groups.append(item)
        elif isinstance(item, GroupEmbedding):
            self._embeddings[item.group_id] = item
        elif isinstance(item, ImportedResource):
            self._resources[item.id] = dict(item.metadata)
        else:
            self._record_cycles([item], DEFAULT_KEEP_CYCLES, DEFAULT_KEEP_DETAIL)

    async def list_embeddings(self, key: str) -> list[GroupEmbedding]:
        self._check_open()
        return sorted(
            (e for e in self._embeddings.values() if e.key == key), key=lambda e: e.group_id
        )

    # -- observation groups --------------------------------------------------------------------

    async def put_embeddings(self, embeddings: Sequence[GroupEmbedding]) -> None:
        self._check_open()
        with self._lock:
            groups = {g.id for g in self._groups}
            for e in embeddings:
                if e.group_id in groups:  # a group erased meanwhile gets no embedding
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
