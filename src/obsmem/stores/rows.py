"""Row mapping shared by the SQL stores (one column order, one JSON form)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from ..messages import Message, Role, part_from_dict, part_to_dict
from ..records import CycleRecord, GroupEmbedding, ModelExchange, OMRecord, Thread
from ..redaction import redact
from ..vectors import encode
from .codec import (
    chunks_from_json,
    chunks_to_json,
    dt_from_text,
    dt_to_text,
    dumps,
    group_ranges_from_json,
    loads,
    ranges_to_json,
    reflection_from_json,
    reflection_to_json,
)

__all__ = [
    "RecordCache",
    "cycle_from_row",
    "cycle_row",
    "detail_from_text",
    "embedding_row",
    "filter_embedding_rows",
    "message_from_row",
    "message_to_row",
    "record_from_row",
    "record_to_row",
    "record_update_values",
    "thread_from_row",
    "thread_match",
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
        t.incarnation,
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
        incarnation=row[7],
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
        int(r.observation_tokens),  # an estimator may count in whole floats (12.0)
        dumps(dict(r.cursor)),
        chunks_to_json(r.chunks),
        reflection_to_json(r.buffered_reflection),
        int(r.total_tokens_observed),
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


def thread_match(thread_id: str) -> str:
    """How a thread id appears in ``om_cycles.threads``: hex between bars (LIKE then matches it
    exactly on both databases, whatever characters the id holds and however LIKE treats case)."""
    return f"|{thread_id.encode().hex()}|"


def cycle_row(c: CycleRecord) -> Row:
    """Column values in the order of ``schema.CYCLE_COLUMNS``, then the detail."""
    return (
        c.cycle_id,
        c.key,
        c.resource_id,
        dumps(list(c.thread_ids)),
        "".join(thread_match(t) for t in c.thread_ids),
        c.kind,
        c.outcome,
        c.error,
        dt_to_text(c.started_at),
        float(c.duration_ms),
        c.model,
        None if c.input_tokens is None else int(c.input_tokens),  # usage may be whole floats
        None if c.output_tokens is None else int(c.output_tokens),
        c.cost_usd,
        dumps(ranges_to_json(c.ranges)),
        c.generation,
        c.operation,
        c.by,
        dumps([e.to_json() for e in c.detail]) if c.detail else None,
    )


def cycle_from_row(row: Row) -> CycleRecord:
    return CycleRecord(
        cycle_id=row[0],
        key=row[1],
        resource_id=row[2],
        thread_ids=tuple(loads(row[3])),
        kind=row[5],
        outcome=row[6],
        error=None if row[7] is None else redact(row[7]),  # a row stored before redaction
        started_at=dt_from_text(row[8]),
        duration_ms=float(row[9]),
        model=row[10],
        input_tokens=None if row[11] is None else int(row[11]),
        output_tokens=None if row[12] is None else int(row[12]),
        cost_usd=None if row[13] is None else float(row[13]),
        ranges=group_ranges_from_json(loads(row[14])),
        generation=None if row[15] is None else int(row[15]),
        operation=row[16],
        by=row[17],
    )


def detail_from_text(text: str | None) -> list[ModelExchange]:
    """A cycle's stored detail (none: never kept, or dropped by its retention)."""
    return [ModelExchange.from_json(e) for e in loads(text) or []]
