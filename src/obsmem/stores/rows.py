"""Row mapping shared by the SQL stores (one column order, one JSON form)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from ..messages import Message, Role, part_from_dict, part_to_dict
from ..records import GroupEmbedding, OMRecord, Thread
from ..vectors import encode
from .codec import (
    chunks_from_json,
    chunks_to_json,
    dt_from_text,
    dt_to_text,
    dumps,
    loads,
    reflection_from_json,
    reflection_to_json,
)

__all__ = [
    "RecordCache",
    "embedding_row",
    "filter_embedding_rows",
    "message_from_row",
    "message_to_row",
    "record_from_row",
    "record_to_row",
    "record_update_values",
    "thread_from_row",
    "thread_to_row",
]

Row = tuple[Any, ...]


def thread_to_row(t: Thread) -> Row:
    """Column values in the order of ``schema.THREAD_COLUMNS``."""
    return (
        t.id,
        t.resource_id,
        t.title,
        dumps(dict(t.metadata)),
        t.message_count,
        dt_to_text(t.created_at),
        dt_to_text(t.updated_at),
    )


def thread_from_row(row: Row) -> Thread:
    return Thread(
        id=row[0],
        resource_id=row[1],
        title=row[2],
        metadata=loads(row[3]),
        message_count=row[4],
        created_at=dt_from_text(row[5]),
        updated_at=dt_from_text(row[6]),
    )


def message_to_row(msg: Message) -> Row:
    return (
        msg.id,
        msg.thread_id,
        msg.resource_id,
        msg.seq,
        msg.role,
        dumps([part_to_dict(p) for p in msg.parts]),
        dumps(msg.metadata),
        dt_to_text(msg.created_at),
    )


_LEGACY_ROLES = {"developer": "system"}
"""Roles older versions stored without checking, read as the role they mean."""


def message_from_row(row: Row) -> Message:
    return Message(
        id=row[0],
        thread_id=row[1],
        resource_id=row[2],
        seq=row[3],
        role=cast(Role, _LEGACY_ROLES.get(row[4], row[4])),
        parts=tuple(part_from_dict(p) for p in loads(row[5])),
        metadata=loads(row[6]),
        created_at=dt_from_text(row[7]),
    )


def record_to_row(r: OMRecord) -> Row:
    """Column values in the order of ``schema.RECORD_COLUMNS``."""
    return (
        r.id,
        r.key,
        r.scope,
        r.thread_id,
        r.resource_id,
        r.generation,
        r.origin,
        r.version,
        r.observations,
        r.observation_tokens,
        dumps(dict(r.cursor)),
        chunks_to_json(r.chunks),
        reflection_to_json(r.buffered_reflection),
        r.total_tokens_observed,
        r.superseded_by,
        dt_to_text(r.created_at),
        dt_to_text(r.updated_at),
    )


def record_from_row(row: Row) -> OMRecord:
    return OMRecord(
        id=row[0],
        key=row[1],
        scope=row[2],
        thread_id=row[3],
        resource_id=row[4],
        generation=row[5],
        origin=row[6],
        version=row[7],
        observations=row[8],
        observation_tokens=row[9],
        cursor=loads(row[10]),
        chunks=chunks_from_json(row[11]),
        buffered_reflection=reflection_from_json(row[12]),
        total_tokens_observed=row[13],
        superseded_by=row[14],
        created_at=dt_from_text(row[15]),
        updated_at=dt_from_text(row[16]),
    )


class RecordCache:
    """Records already parsed, by ``(id, version, superseded_by, updated_at)``: a row with those
    values always holds the same record (every change of a head bumps its version; retiring it
    sets ``superseded_by``), and parsing a head with its chunks costs more than reading it.
    Bounded; safe to share between threads."""

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._records: OrderedDict[tuple[Any, ...], OMRecord] = OrderedDict()
        self._lock = threading.Lock()

    def parse(self, row: Row) -> OMRecord:
        key = (row[0], row[7], row[14], row[16])
        with self._lock:
            found = self._records.get(key)
            if found is not None:
                self._records.move_to_end(key)
                return found
        record = record_from_row(row)
        with self._lock:
            self._records[key] = record
            while len(self._records) > self._size:
                self._records.popitem(last=False)
        return record


def record_update_values(r: OMRecord) -> Row:
    """The values of the UPDATE statement: every mutable column (generation through
    superseded_by, then updated_at), then the id; taken from the INSERT row so the two orders
    cannot drift."""
    row = record_to_row(r)
    return (*row[5:15], row[16], row[0])


def embedding_row(e: GroupEmbedding) -> Row:
    return (
        e.group_id,
        e.key,
        e.resource_id,
        e.thread_id,
        dt_to_text(e.observed_at),
        e.model,
        len(e.vector),
        encode(e.vector),
    )


def filter_embedding_rows(
    rows: Iterable[Row],
    *,
    thread_id: str | None,
    after: datetime | None,
    before: datetime | None,
) -> list[tuple[str, bytes]]:
    """(group id, vector bytes) of the rows (group_id, thread_id, observed_at, vector) that pass
    the thread and time filters."""
    out: list[tuple[str, bytes]] = []
    for group_id, thread, observed_at, blob in rows:
        at = dt_from_text(observed_at)
        if thread_id is not None and thread != thread_id:
            continue
        if (after is not None and at < after) or (before is not None and at > before):
            continue
        out.append((group_id, bytes(blob)))
    return out
