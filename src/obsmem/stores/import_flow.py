"""An import, as flows: what of it is stored already, and the one transaction that writes it.

The write streams: it pulls the import's items (``ImportWrite.items``) inside the transaction and
sends them as ``executemany`` batches of one table at a time, so an import of any size holds one
batch. The inserts are plain (no ``ON CONFLICT``): an id stored since the conflicts were read
fails the statement, and the whole import rolls back with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ..messages import Message
from ..records import CycleRecord, GroupEmbedding, ObservationGroup, OMRecord, Thread
from . import erase_flow
from . import schema as sql
from .changes import (
    DEFAULT_KEEP_CYCLES,
    DEFAULT_KEEP_DETAIL,
    ImportConflicts,
    Imported,
    ImportedResource,
    ImportWrite,
)
from .codec import Shape, dt_to_text, dumps
from .flows import IN_BATCH, Flow, Op, clear, in_batches, marks, put_embeddings, record_cycles
from .rows import EMBEDDINGS, GROUPS, MESSAGES, RECORDS, THREADS

__all__ = ["find_conflicts", "list_embeddings", "write_import"]

T = TypeVar("T")


def _found(statement: str, values: Sequence[str]) -> Flow[list[tuple[Any, ...]]]:
    found: list[tuple[Any, ...]] = []
    for batch in in_batches(list(dict.fromkeys(values))):
        found += yield Op(statement.format(marks=marks(len(batch))), tuple(batch))
    return found


def find_conflicts(
    *,
    threads: Sequence[str],
    keys: Sequence[str],
    resources: Sequence[str],
    messages: Iterable[str],
) -> Flow[ImportConflicts]:
    """Which of these ids are stored: threads, log keys with a head, resources with metadata,
    messages (with the thread each is in)."""
    stored_threads = yield from _found(sql.SELECT_THREAD_IDS, threads)
    stored_keys = yield from _found(sql.SELECT_HEAD_KEYS, keys)
    stored_resources = yield from _found(sql.SELECT_RESOURCES_WITH_METADATA, resources)
    stored_messages = yield from _found(sql.SELECT_MESSAGE_THREADS, list(messages))
    return ImportConflicts(
        threads=tuple(sorted(r[0] for r in stored_threads)),
        keys=tuple(sorted(r[0] for r in stored_keys)),
        resources=tuple(sorted(r[0] for r in stored_resources)),
        messages=tuple(sorted((r[0], r[1]) for r in stored_messages)),
    )


def list_embeddings(key: str) -> Flow[list[GroupEmbedding]]:
    rows = yield Op(sql.SELECT_EMBEDDINGS_OF_KEY, (key,))
    return [EMBEDDINGS.parse(r) for r in rows]


def write_import(write: ImportWrite, *, now: datetime, pgvector: bool) -> Flow[int]:
    """Erase what is replaced, then insert every item; returns how many were written."""
    for thread_id in write.replace_threads:
        yield from erase_flow.delete_thread(thread_id, now=now, pgvector=pgvector, tombstone=False)
    for key in write.replace_keys:
        yield from clear(key, pgvector=pgvector)
    written = 0
    for batch in _batches(write.items()):
        yield from _insert(batch, now=now, pgvector=pgvector)
        written += len(batch)
    return written


def _batches(items: Iterator[Imported]) -> Iterator[list[Imported]]:
    """Runs of items of one kind, at most ``IN_BATCH`` long, in their order."""
    batch: list[Imported] = []
    for item in items:
        if batch and (type(item) is not type(batch[0]) or len(batch) >= IN_BATCH):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


def _of(batch: list[Imported], kind: type[T]) -> list[T]:
    return [item for item in batch if isinstance(item, kind)]


_INSERTS: dict[type, tuple[Shape[Any], str]] = {
    Thread: (THREADS, sql.IMPORT_THREAD),
    Message: (MESSAGES, sql.INSERT_MESSAGE),
    OMRecord: (RECORDS, sql.IMPORT_RECORD),
    ObservationGroup: (GROUPS, sql.INSERT_GROUP),
}
"""The kinds imported as rows as they are, with the statement that inserts them."""


def _insert(batch: list[Imported], *, now: datetime, pgvector: bool) -> Flow[None]:
    """One batch of items of one kind."""
    first = batch[0]
    if type(first) in _INSERTS:
        shape, statement = _INSERTS[type(first)]
        _ = yield Op(statement, [shape.row(item) for item in batch], many=True)
    elif isinstance(first, GroupEmbedding):
        yield from put_embeddings(_of(batch, GroupEmbedding), pgvector=pgvector)
    elif isinstance(first, ImportedResource):
        at = dt_to_text(now)
        for resource in _of(batch, ImportedResource):
            _ = yield Op(sql.INSERT_RESOURCE, (resource.id, at))
            _ = yield Op(sql.UPDATE_RESOURCE, (dumps(dict(resource.metadata)), at, resource.id))
    else:
        cycles = _of(batch, CycleRecord)
        yield from record_cycles(cycles, keep=DEFAULT_KEEP_CYCLES, keep_detail=DEFAULT_KEEP_DETAIL)
