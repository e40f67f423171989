"""The load flow: the snapshot a turn starts from, after its appends and patches.

A plain thread-scope turn is one batch that ends its transaction (:func:`_load_at_once`; with
a copy of the thread to check, ``LoadRequest.expect``, it ends after the check); what that
cannot do (a new thread or head, patches, resource scope, cycle rows) runs statement by
statement. :func:`read_state` reads everything after the record, and is shared with the
commit flow's reload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..errors import StoreError
from ..messages import Message
from ..records import OMRecord, Thread
from ..snapshot import Snapshot, Subject, ThreadState, reusable
from . import schema as sql
from . import transitions as tr
from .changes import LoadRequest, QueuedJob
from .codec import dt_from_text, dt_to_text, dumps, loads
from .flows import (
    Batch,
    Flow,
    NeedsWrite,
    Op,
    Rows,
    append_to,
    create_thread,
    get_head,
    get_resource,
    parse_record,
    patch_resource,
    patch_thread,
    record_cycles,
)
from .rows import MESSAGES, RECORDS, THREADS, RecordCache

__all__ = ["load", "read_state"]

AT_ONCE_MESSAGES = 100
"""Most messages a load appends in its one batch (more are appended statement by statement)."""


def _ensure_head(subject: Subject, *, now: datetime, write: bool) -> Flow[OMRecord]:
    record = yield from get_head(subject.key)
    if record is not None:
        return record
    if not write:
        raise NeedsWrite
    yield Op(sql.INSERT_RECORD, RECORDS.row(tr.initial_record(subject, now=now)))
    created = yield from get_head(subject.key)
    if created is None:
        raise StoreError(f"the record of {subject.key} could not be created")
    return created


def load(
    request: LoadRequest,
    *,
    now: datetime,
    write: bool,
    records: RecordCache | None = None,
    known_head: OMRecord | None = None,
) -> Flow[Snapshot]:
    """The snapshot of ``request.subject``, after its appends and patches. A plain turn's load
    is one batch (:func:`_load_at_once`); what it cannot do runs statement by statement."""
    subject = request.subject
    changing = bool(request.append or request.patches or request.resource_patch or request.cycles)
    if changing and not write:
        raise NeedsWrite
    snapshot = yield from _load_at_once(request, now=now, records=records, known_head=known_head)
    if snapshot is not None:
        return snapshot
    rows = yield Op(
        sql.SELECT_THREAD_AND_HEAD,
        (subject.key, subject.thread_id),
        lock=changing,
        lock_of="t",
    )
    width = len(sql.THREAD_COLUMNS.split(","))
    if request.incarnation is not None:
        found = {r[0]: THREADS.parse(r[:width]).incarnation for r in rows}
        tr.check_incarnations(((subject.thread_id, request.incarnation),), found)
    if request.expect is not None:
        as_found = THREADS.parse(rows[0][:width]) if rows else None
        tr.check_copy(subject.thread_id, as_found, request.expect)
    if rows:
        main = THREADS.parse(rows[0][:width])
        head = parse_record(rows[0][width:], records) if rows[0][width] is not None else None
    else:
        if not write:
            raise NeedsWrite
        thread = tr.new_thread(subject.thread_id, subject.resource_id, now=now)
        main = yield from create_thread(thread, lock=True)
        if main.incarnation != thread.incarnation:  # another transaction made it meanwhile
            tr.check_copy(subject.thread_id, main, request.expect)
        head = None
    tr.check_thread_owner(main, subject.resource_id)
    stored: tuple[Message, ...] = ()
    if request.append:
        plan = yield from append_to(main, request.append, now=now)
        stored = plan.stored
        if plan.count != main.message_count:
            main = replace(main, message_count=plan.count, updated_at=now)
    for patch in request.patches:
        change = yield from patch_thread(patch, now=now)
        if patch.thread_id == main.id:
            main = change.after
    if request.resource_patch is not None and request.resource_patch.set:
        yield from patch_resource(request.resource_patch, now=now)
    yield from record_cycles(
        request.cycles, keep=request.keep_cycles, keep_detail=request.keep_detail
    )
    if request.enqueue is not None:
        yield enqueue_op(request.enqueue, subject.thread_id)
    record = head if head is not None else (yield from _ensure_head(subject, now=now, write=write))
    return (
        yield from read_state(
            subject,
            record,
            main,
            stored=stored,
            last_reply=request.last_reply,
            held=request.held,
            held_incarnations=request.held_incarnations,
            resource_metadata=request.resource_metadata,
        )
    )


def enqueue_op(job: QueuedJob, thread_id: str) -> Op:
    """The statement that queues ``job`` for ``thread_id`` unless one of its lock waits."""
    args = dumps(dict(job.args))
    return Op(sql.ENQUEUE_JOB, (job.queue, job.task, job.lock, job.lock, args, thread_id))


# -- a plain turn in one batch -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _AtOnce:
    """What a one-batch load sends (``ops``) and what reading their rows needs: the input
    numbered 1..n (``new``), the messages the caller held, the head as last seen (``known``) and
    the seq the message read starts after (None: no message is read in the batch)."""

    new: tuple[Message, ...]
    held: tuple[Message, ...]
    known: OMRecord | None
    read_after: int | None
    ops: tuple[Op, ...]


def _at_once(request: LoadRequest, *, now: datetime, known_head: OMRecord | None) -> _AtOnce | None:
    """The batch of a thread-scope load without patches or cycle rows; None: it goes step by
    step."""
    subject = request.subject
    if (
        subject.scope != "thread"
        or request.patches
        or request.resource_patch is not None
        or request.cycles
    ):
        return None
    ids = [m.id for m in request.append]
    n = len(ids)
    if len(set(ids)) != n or n > AT_ONCE_MESSAGES:
        return None
    # Numbered 1..n (and checked against the subject) here; the statement adds the count.
    plan = tr.plan_append(
        tr.new_thread(subject.thread_id, subject.resource_id, now=now), request.append, {}
    )
    held = tuple(request.held.get(subject.thread_id, ()))
    known = known_head if known_head is not None and known_head.key == subject.key else None
    read_after = held[-1].seq if held else known.cursor.get(subject.thread_id, 0) if known else None
    ops = [_thread_and_head(subject, known, lock=n > 0)]
    if n:
        ops += _append_at_end(subject, plan.new, now=now, incarnation=request.incarnation)
    if read_after is not None:
        ops.append(
            Op(
                sql.SELECT_MESSAGES_BEFORE_APPENDED,
                (subject.thread_id, read_after, subject.thread_id, n),
            )
        )
    if request.resource_metadata:
        ops.append(Op(sql.SELECT_RESOURCE, (subject.resource_id,)))
    if request.last_reply:
        ops.append(Op(sql.SELECT_LAST_REPLY, (subject.thread_id,)))
    if request.enqueue is not None:
        ops.append(enqueue_op(request.enqueue, subject.thread_id))
    return _AtOnce(plan.new, held, known, read_after, tuple(ops))


def _thread_and_head(subject: Subject, known: OMRecord | None, *, lock: bool) -> Op:
    """The thread and its head in one row; with ``known``, the head's long columns only when it
    changed."""
    if known is None:
        return Op(
            sql.SELECT_THREAD_AND_HEAD, (subject.key, subject.thread_id), lock=lock, lock_of="t"
        )
    same = (known.id, known.version) * len(sql.HEAVY_RECORD_COLUMNS)
    return Op(
        sql.SELECT_THREAD_AND_KNOWN_HEAD,
        (*same, subject.key, subject.thread_id),
        lock=lock,
        lock_of="t",
    )


def _append_at_end(
    subject: Subject, new: Sequence[Message], *, now: datetime, incarnation: str | None
) -> list[Op]:
    """The input stored and counted by statements that change nothing unless the thread is the
    subject's (of ``incarnation`` when given), the key has a head and no input id is stored
    yet."""
    ids = [m.id for m in new]
    values: list[Any] = []
    for message in new:
        row = MESSAGES.row(message)
        values += [row[0], message.seq, *row[4:]]
    n = len(ids)
    return [
        Op(
            sql.insert_messages_at_end(n),
            (*values, subject.thread_id, subject.resource_id, incarnation, subject.key, *ids),
        ),
        Op(sql.COUNT_APPENDED, (n, dt_to_text(now), subject.thread_id, ids[-1], n)),
    ]


def _load_at_once(
    request: LoadRequest, *, now: datetime, records: RecordCache | None, known_head: OMRecord | None
) -> Flow[Snapshot | None]:
    """A thread-scope load without patches in one batch that ends the transaction (after the
    check of ``request.expect``, when given, against the thread as read first): the thread
    and head (locked when appending), the input stored (:func:`_append_at_end`), and the reads,
    the messages from after the last held one (or from the thread's cursor in ``known_head``,
    the head as last seen, whose long columns are not sent again) on, but not the ones just
    stored. None: nothing was stored; the caller goes step by step."""
    batch = _at_once(request, now=now, known_head=known_head)
    if batch is None:
        return None
    subject, n = request.subject, len(batch.new)
    # With a copy to check, the transaction ends after the check (it rolls back on a mismatch).
    results: list[Rows] = yield Batch(batch.ops, end=request.expect is None)
    found = iter(results)
    rows = next(found)
    if n:
        next(found)
        if not next(found):
            return None  # nothing stored: a new thread or head, a stored id, another resource
    width = len(sql.THREAD_COLUMNS.split(","))
    if not rows or rows[0][width] is None:
        return None
    main = THREADS.parse(rows[0][:width])
    if request.incarnation not in (None, main.incarnation):
        return None  # deleted meanwhile: the step-by-step load says so
    tr.check_copy(subject.thread_id, main, request.expect)  # as read before the input
    tr.check_thread_owner(main, subject.resource_id)
    head_row, known = rows[0][width:], batch.known
    if known is not None and head_row[0] == known.id and head_row[7] == known.version:
        record = known
    else:
        record = parse_record(head_row, records)
    before = main.message_count
    stored = tuple(replace(m, seq=before + (m.seq or 0)) for m in batch.new)
    if n:
        main = replace(main, message_count=before + n, updated_at=now)
    by_seq: dict[int, Message] = {m.seq or 0: m for m in stored}
    reached = before  # by_seq holds every message after ``reached``
    if batch.read_after is not None:
        for row in next(found):
            message = MESSAGES.parse(row)
            by_seq.setdefault(message.seq or 0, message)
        reached = min(reached, batch.read_after)
    resource: dict[str, Any] = {}
    if request.resource_metadata and (resource_rows := next(found)):
        resource = dict(loads(resource_rows[0][0]))
    last_reply_at: datetime | None = None
    if request.last_reply and (reply_rows := next(found)):
        last_reply_at = dt_from_text(reply_rows[0][0])
    held = held_of(main, {main.id: batch.held}, request.held_incarnations)
    unobserved = yield from _unobserved(main, record, held, by_seq, reached)
    return Snapshot(
        subject=subject,
        record=record,
        threads=(ThreadState(thread=main, unobserved=unobserved),),
        resource_metadata=resource,
        stored=stored,
        last_reply_at=last_reply_at,
    )


def _unobserved(
    main: Thread,
    record: OMRecord,
    held: Sequence[Message],
    by_seq: dict[int, Message],
    reached: int,
) -> Flow[tuple[Message, ...]]:
    """The thread's messages after the record's cursor: the held ones still usable, then
    ``by_seq`` (every message after ``reached``). Messages are never rewritten, so what the
    batch did not reach (the cursor moved back, nothing held) is read from the range in
    between."""
    cursor = record.cursor.get(main.id, 0)
    known = reusable(held, cursor)
    after = (known[-1].seq or 0) if known else cursor
    if after > main.message_count:
        known, after = (), cursor  # held from some other store: read everything
    if after < reached:
        between = yield Op(sql.SELECT_MESSAGES_BETWEEN, (main.id, after, reached))
        for row in between:
            message = MESSAGES.parse(row)
            by_seq.setdefault(message.seq or 0, message)
    try:
        new = tuple(by_seq[seq] for seq in range(after + 1, main.message_count + 1))
    except KeyError as exc:
        raise StoreError(f"thread {main.id!r} lacks message seq {exc.args[0]}") from None
    return (*known, *new)


# -- after the record ------------------------------------------------------------------------------


def held_of(
    thread: Thread,
    held: Mapping[str, Sequence[Message]] | None,
    incarnations: Mapping[str, str] | None,
) -> Sequence[Message]:
    """The messages held of ``thread``, unless they were read from an incarnation of it that
    was deleted since."""
    read_from = (incarnations or {}).get(thread.id, thread.incarnation)
    return (held or {}).get(thread.id, ()) if read_from == thread.incarnation else ()


def read_state(
    subject: Subject,
    record: OMRecord,
    main: Thread,
    *,
    stored: tuple[Message, ...] = (),
    last_reply: bool = False,
    held: Mapping[str, Sequence[Message]] | None = None,
    held_incarnations: Mapping[str, str] | None = None,
    resource_metadata: bool = True,
) -> Flow[Snapshot]:
    """Everything after the record: the covered threads with their unobserved messages (only
    those after what the caller ``held``, and what this transaction ``stored``, are read), the
    resource's metadata (when asked), and (when asked) when the assistant last spoke."""
    threads = [main]
    if subject.scope == "resource":
        rows = yield Op(sql.SELECT_THREADS_OF_RESOURCE, (subject.resource_id,))
        threads += [t for t in map(THREADS.parse, rows) if t.id != main.id]
    states: list[ThreadState] = []
    for thread in threads:
        cursor = record.cursor.get(thread.id, 0)
        known = reusable(held_of(thread, held, held_incarnations), cursor)
        after = (known[-1].seq or 0) if known else cursor
        if thread.id == main.id and stored:
            # What this transaction appended follows on without a read.
            fresh = [m for m in stored if (m.seq or 0) > after]
            if fresh and fresh[0].seq == after + 1:
                known = (*known, *reusable(fresh, after))
                after = (known[-1].seq or 0) if known else cursor
        if after > thread.message_count:
            known, after = (), cursor  # held from some other store: read everything
        new: tuple[Message, ...] = ()
        if after < thread.message_count:
            rows = yield Op(sql.SELECT_MESSAGES_AFTER, (thread.id, after))
            new = tuple(MESSAGES.parse(r) for r in rows)
        states.append(ThreadState(thread=thread, unobserved=(*known, *new)))
    resource = (yield from get_resource(subject.resource_id)) if resource_metadata else {}
    last_reply_at: datetime | None = None
    if last_reply:
        rows = yield Op(sql.SELECT_LAST_REPLY, (main.id,))
        last_reply_at = dt_from_text(rows[0][0]) if rows else None
    return Snapshot(
        subject=subject.covering(tuple(t.id for t in threads)),
        record=record,
        threads=tuple(states),
        resource_metadata=resource,
        stored=stored,
        last_reply_at=last_reply_at,
    )
