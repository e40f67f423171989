"""The commit flow: one change of a head and what comes with it, all or nothing.

Two batches: the reads the change depends on (the record locked first, the head, the message
counts, the patched threads and the resource locked), then the writes, ending the transaction,
with the reload of a thread-scope subject in the same batch. A conflict ends after the first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import StoreError
from ..records import OMRecord, Thread
from ..snapshot import Snapshot, Subject, ThreadState, reusable
from . import schema as sql
from . import transitions as tr
from .changes import Commit, CommitResult, ResourcePatch, ThreadChange, ThreadPatch
from .codec import dt_to_text, dumps, loads
from .flows import Batch, Flow, Op, Rows, cycle_ops, in_batches, marks, parse_record, require_thread
from .load_flow import read_state
from .rows import (
    GROUPS,
    MESSAGES,
    RECORDS,
    THREADS,
    RecordCache,
    record_update_values,
)

__all__ = ["commit"]


@dataclass(frozen=True, slots=True)
class _Reads:
    """What the first batch asks for."""

    patches: list[ThreadPatch]
    resource_patch: ResourcePatch | None
    counted: list[str]
    patched: list[str]


def _reads(change: Commit, *, now: datetime) -> tuple[_Reads, tuple[Op, ...]]:
    patches = [p for p in change.threads if not p.empty]
    resource_patch = (
        change.resource if change.resource is not None and change.resource.set else None
    )
    wanted = _Reads(
        patches=patches,
        resource_patch=resource_patch,
        counted=list(dict.fromkeys(tr.threads_counted(change.change))),
        patched=list(dict.fromkeys(p.thread_id for p in patches)),
    )
    ops = [
        Op(sql.SELECT_RECORD, (change.record_id,), lock=True),
        Op(sql.SELECT_HEAD, (change.key,)),
    ]
    ops += [
        Op(sql.SELECT_THREAD_COUNTS.format(marks=marks(len(batch))), tuple(batch))
        for batch in in_batches(wanted.counted)
    ]
    ops += [Op(sql.SELECT_THREAD, (thread_id,), lock=True) for thread_id in wanted.patched]
    if resource_patch is not None:
        ops.append(Op(sql.INSERT_RESOURCE, (resource_patch.resource_id, dt_to_text(now))))
        ops.append(Op(sql.SELECT_RESOURCE, (resource_patch.resource_id,), lock=True))
    if change.incarnations:  # read last; locked, so a delete waits for this commit or wins
        ids = tuple(t for t, _ in change.incarnations)
        ops.append(Op(sql.SELECT_INCARNATIONS.format(marks=marks(len(ids))), ids, lock=True))
    return wanted, tuple(ops)


def _current(change: Commit, found: Iterator[Rows], records: RecordCache | None) -> OMRecord:
    """The record the change is checked against (a ``ConflictError`` with the head if it is not
    current)."""
    rows, head_rows = next(found), next(found)
    record = parse_record(rows[0], records) if rows else None
    head = record
    if record is None or record.superseded_by is not None:
        head = parse_record(head_rows[0], records) if head_rows else None
    return tr.check_current(record, change.record_id, change.expected_version, head=head)


def _stored_threads(patched: Sequence[str], found: Iterator[Rows]) -> dict[str, Thread]:
    stored: dict[str, Thread] = {}
    for thread_id in patched:
        thread_rows = next(found)
        if not thread_rows:
            raise StoreError(f"no thread {thread_id!r}; create it with create_thread() first")
        stored[thread_id] = THREADS.parse(thread_rows[0])
    return stored


def _thread_writes(
    patches: Sequence[ThreadPatch], stored: dict[str, Thread], *, now: datetime
) -> tuple[list[Op], list[ThreadChange]]:
    """The patched threads' updates, applied in order (a thread patched twice gets both)."""
    writes: list[Op] = []
    changes: list[ThreadChange] = []
    for patch in patches:
        before = stored[patch.thread_id]
        after = tr.apply_thread_patch(before, patch, now=now)
        if after is not before:
            values = (
                after.title,
                dumps(dict(after.metadata)),
                dt_to_text(after.updated_at),
                after.id,
            )
            writes.append(Op(sql.UPDATE_THREAD, values))
        stored[patch.thread_id] = after
        changes.append(ThreadChange(before=before, after=after))
    return writes, changes


def commit(
    change: Commit, *, now: datetime, records: RecordCache | None = None
) -> Flow[CommitResult]:
    """Apply one change of the head of ``change.key`` and what comes with it, all or nothing, in
    two batches (the module's text says which)."""
    wanted, reads = _reads(change, now=now)
    found = iter((yield Batch(reads)))
    current = _current(change, found, records)
    counts: dict[str, int] = {}
    for _ in in_batches(wanted.counted):
        counts.update({r[0]: int(r[1]) for r in next(found)})
    stored_threads = _stored_threads(wanted.patched, found)
    resource_rows: Rows = []
    if wanted.resource_patch is not None:
        next(found)
        resource_rows = next(found)
    if change.incarnations:
        tr.check_incarnations(change.incarnations, {r[0]: r[1] for r in next(found)})
    applied = tr.apply_change(current, change.change, message_counts=counts, now=now)
    writes = [Op(sql.UPDATE_RECORD, record_update_values(applied.saved))]
    if applied.created is not None:
        writes.append(Op(sql.INSERT_RECORD, RECORDS.row(applied.created)))
    if change.groups:
        writes.append(Op(sql.INSERT_GROUP, [GROUPS.row(g) for g in change.groups], many=True))
    thread_writes, threads = _thread_writes(wanted.patches, stored_threads, now=now)
    writes += thread_writes
    if (patch := wanted.resource_patch) is not None:
        merged = tr.apply_resource_patch(loads(resource_rows[0][0]), patch)
        writes.append(Op(sql.UPDATE_RESOURCE, (dumps(merged), dt_to_text(now), patch.resource_id)))
    writes += cycle_ops(change.cycles, keep=change.keep_cycles, keep_detail=change.keep_detail)
    reload = change.reload
    snapshot: Snapshot | None = None
    if reload is not None and reload.scope == "thread":
        snapshot = yield from _write_and_reload(change, reload, applied.head, writes)
    else:
        yield Batch(tuple(writes), end=reload is None)
        if reload is not None:
            main = yield from require_thread(reload.thread_id)
            snapshot = yield from read_state(
                reload,
                applied.head,
                main,
                held=change.held,
                resource_metadata=change.resource_metadata,
            )
    return CommitResult(record=applied.head, threads=tuple(threads), snapshot=snapshot)


def _write_and_reload(
    change: Commit, reload: Subject, head: OMRecord, writes: list[Op]
) -> Flow[Snapshot]:
    """The writes, then a thread-scope reload in the same batch: the thread and its messages
    after what is held."""
    held = tuple(change.held.get(reload.thread_id, ()))
    cursor = head.cursor.get(reload.thread_id, 0)
    known = reusable(held, cursor)
    after = (known[-1].seq or 0) if known else cursor
    first_read = len(writes)
    ops = [
        *writes,
        Op(sql.SELECT_THREAD, (reload.thread_id,)),
        Op(sql.SELECT_MESSAGES_AFTER, (reload.thread_id, after)),
    ]
    if change.resource_metadata:
        ops.append(Op(sql.SELECT_RESOURCE, (reload.resource_id,)))
    results: list[Rows] = yield Batch(tuple(ops), end=True)
    thread_rows, message_rows = results[first_read], results[first_read + 1]
    if not thread_rows:
        raise StoreError(f"no thread {reload.thread_id!r}; create it with create_thread() first")
    main = THREADS.parse(thread_rows[0])
    resource: dict[str, Any] = {}
    if change.resource_metadata and results[-1]:
        resource = dict(loads(results[-1][0][0]))
    if after > main.message_count:  # held from some other store: read everything
        known, after = (), cursor
        message_rows = yield Op(sql.SELECT_MESSAGES_AFTER, (main.id, after))
    new = tuple(m for m in map(MESSAGES.parse, message_rows) if (m.seq or 0) <= main.message_count)
    return Snapshot(
        subject=reload,
        record=head,
        threads=(ThreadState(thread=main, unobserved=(*known, *new)),),
        resource_metadata=resource,
    )
