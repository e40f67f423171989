"""The SQL stores' delete of a thread or a resource, each one flow (one transaction).

The rules (what a resource log keeps of an erased thread) are :mod:`obsmem.stores.erasure`'s;
this module only says which rows go. Rows are deleted before the thread rows their foreign keys
point at.
"""

from __future__ import annotations

from datetime import datetime

from ..records import record_key
from . import schema as sql
from .codec import dt_to_text, dumps, loads
from .erasure import (
    Erasure,
    erase_thread_from,
    erased_labels,
    traced_to,
    untraced,
    with_tombstone,
)
from .flows import Flow, Op, clear, get_thread, in_batches, list_threads, marks
from .rows import GROUPS, RECORDS, record_update_values, thread_match

__all__ = ["delete_resource", "delete_thread"]


def delete_thread(
    thread_id: str, *, now: datetime, pgvector: bool, jobs: bool = False, tombstone: bool = True
) -> Flow[Erasure | None]:
    """Erase the thread (None when there is no such thread). ``jobs``: also its queued and
    finished jobs (a running one stays to its worker, and commits nothing). ``tombstone``: an
    owner's delete leaves the thread's tombstone in its resource's metadata (an import that
    replaces the thread does not)."""
    thread = yield from get_thread(thread_id, lock=True)
    if thread is None:
        return None
    if jobs:
        yield Op(sql.DELETE_JOBS_OF_THREAD, (thread_id,))
    yield Op(sql.DELETE_MESSAGES_OF_THREAD, (thread_id,))
    yield from clear(record_key("thread", thread_id=thread_id, resource_id=None), pgvector=pgvector)
    if pgvector:
        yield Op(sql.DELETE_VECTORS_OF_THREAD, (thread_id,))
    yield Op(sql.DELETE_EMBEDDINGS_OF_THREAD, (thread_id,))
    rows = yield Op(sql.SELECT_GROUPS, (thread.resource_id,))
    groups = [GROUPS.parse(row) for row in rows]
    erased = [g for g in groups if traced_to(g, thread_id)]
    labels = erased_labels(erased, groups)
    yield Op(sql.DELETE_GROUPS_OF_THREAD, (thread_id,))
    for batch in in_batches([g.id for g in erased]):
        ids = marks(len(batch))
        if pgvector:
            yield Op(sql.DELETE_VECTORS_BY_ID.format(marks=ids), tuple(batch))
        yield Op(sql.DELETE_EMBEDDINGS_BY_ID.format(marks=ids), tuple(batch))
        yield Op(sql.DELETE_GROUPS_BY_ID.format(marks=ids), tuple(batch))
    key = record_key("resource", thread_id=None, resource_id=thread.resource_id)
    yield Op(sql.DELETE_CYCLES_OF_THREAD, (key, f"%{thread_match(thread_id)}%"))
    remaining = ""
    rows = yield Op(sql.SELECT_GENERATIONS, (key,), lock=True)
    for record in map(RECORDS.parse, rows):
        after = erase_thread_from(record, thread_id, labels=labels, now=now)
        if after is not record:
            yield Op(sql.UPDATE_RECORD, record_update_values(after))
        if after.is_head:
            remaining = untraced(after.observations)
    yield Op(sql.DELETE_THREAD, (thread_id,))
    if tombstone:
        yield from _bury(thread.resource_id, thread_id, now=now)
    return Erasure(thread_ids=(thread_id,), messages=thread.message_count, remaining=remaining)


def _bury(resource_id: str, thread_id: str, *, now: datetime) -> Flow[None]:
    """Leave the erased thread's tombstone in its resource's metadata (the row made first)."""
    at = dt_to_text(now)
    yield Op(sql.INSERT_RESOURCE, (resource_id, at))
    rows = yield Op(sql.SELECT_RESOURCE, (resource_id,), lock=True)
    metadata = with_tombstone(loads(rows[0][0]), thread_id, erased_at=at)
    yield Op(sql.UPDATE_RESOURCE, (dumps(metadata), at, resource_id))


def delete_resource(
    resource_id: str, *, pgvector: bool, jobs: bool = False
) -> Flow[Erasure | None]:
    """Erase the resource: its threads and everything of them, its log and its metadata (None
    when nothing of it is stored); ``jobs``: its threads' queued and finished jobs too."""
    threads = yield from list_threads(resource_id)
    key = record_key("resource", thread_id=None, resource_id=resource_id)
    stored = yield Op(sql.SELECT_RESOURCE, (resource_id,), lock=True)
    head = yield Op(sql.SELECT_HEAD, (key,), lock=True)
    if not threads and not stored and not head:
        return None
    yield Op(sql.DELETE_MESSAGES_OF_RESOURCE, (resource_id,))
    if jobs:
        yield Op(sql.DELETE_JOBS_OF_RESOURCE, (resource_id,))
    for thread in threads:
        yield from clear(
            record_key("thread", thread_id=thread.id, resource_id=None), pgvector=pgvector
        )
    yield from clear(key, pgvector=pgvector)
    yield Op(sql.DELETE_RECORDS_OF_RESOURCE, (resource_id,))
    if pgvector:
        yield Op(sql.DELETE_VECTORS_OF_RESOURCE, (resource_id,))
    yield Op(sql.DELETE_EMBEDDINGS_OF_RESOURCE, (resource_id,))
    yield Op(sql.DELETE_GROUPS_OF_RESOURCE, (resource_id,))
    yield Op(sql.DELETE_CYCLES_OF_RESOURCE, (resource_id,))
    yield Op(sql.DELETE_THREADS_OF_RESOURCE, (resource_id,))
    yield Op(sql.DELETE_RESOURCE, (resource_id,))
    return Erasure(
        thread_ids=tuple(t.id for t in threads), messages=sum(t.message_count for t in threads)
    )
