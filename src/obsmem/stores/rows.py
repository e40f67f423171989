"""Row mapping shared by the SQL stores (one column order, one JSON form)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ..messages import Message, part_from_dict, part_to_dict
from ..records import CycleRecord, GroupEmbedding, ModelExchange, ObservationGroup, OMRecord, Thread
from ..redaction import redact
from ..vectors import decode, encode
from .codec import (
    Column,
    Shape,
    chunks_from_json,
    chunks_to_json,
    dt_from_text,
    dumps,
    group_ranges_from_json,
    loads,
    optional,
    plain,
    ranges_to_json,
    reflection_from_json,
    reflection_to_json,
    time_column,
)

__all__ = [
    "CYCLES",
    "EMBEDDINGS",
    "GROUPS",
    "MESSAGES",
    "RECORDS",
    "THREADS",
    "RecordCache",
    "detail_from_text",
    "filter_embedding_rows",
    "record_update_values",
    "thread_match",
]

Row = tuple[Any, ...]


def _json(field: str) -> Column:
    """A mapping field, stored as its JSON object."""
    return Column(field, lambda value: dumps(dict(value)), loads)


_LEGACY_ROLES = {"developer": "system"}
"""Roles older versions stored without checking, read as the role they mean."""

THREADS = Shape(
    Thread,
    plain("id resource_id title"),
    _json("metadata"),
    Column("message_count"),
    time_column("created_at"),
    time_column("updated_at"),
    Column("incarnation"),
)
MESSAGES = Shape(
    Message,
    plain("id thread_id resource_id seq"),
    Column("role", read=lambda role: _LEGACY_ROLES.get(role, role)),
    Column(
        "parts",
        lambda parts: dumps([part_to_dict(p) for p in parts]),
        lambda text: tuple(part_from_dict(p) for p in loads(text)),
    ),
    Column("metadata", dumps, loads),
    time_column("created_at"),
)
RECORDS = Shape(
    OMRecord,
    plain("id key scope thread_id resource_id generation origin version observations"),
    Column("observation_tokens", int),  # an estimator may count in whole floats (12.0)
    _json("cursor"),
    Column("chunks", chunks_to_json, chunks_from_json),
    Column("buffered_reflection", reflection_to_json, reflection_from_json),
    Column("total_tokens_observed", int),
    Column("superseded_by"),
    time_column("created_at"),
    time_column("updated_at"),
)
GROUPS = Shape(
    ObservationGroup,
    plain("id key resource_id thread_id cycle_id start_id end_id observations"),
    Column(
        "ranges",
        lambda ranges: dumps(ranges_to_json(ranges)),
        lambda text: group_ranges_from_json(loads(text)),
    ),
    time_column("created_at"),
    _json("metadata"),
)
CYCLES = Shape(
    CycleRecord,
    plain("cycle_id key resource_id"),
    Column("thread_ids", lambda ids: dumps(list(ids)), lambda text: tuple(loads(text))),
    Column("thread_ids", lambda ids: "".join(thread_match(t) for t in ids), None),
    plain("kind outcome"),
    Column("error", read=optional(redact)),  # a row stored before redaction
    time_column("started_at"),
    Column("duration_ms", float, float),
    Column("model"),
    Column("input_tokens", optional(int), optional(int)),  # usage may be whole floats
    Column("output_tokens", optional(int), optional(int)),
    Column("cost_usd", read=optional(float)),
    Column(
        "ranges",
        lambda ranges: dumps(ranges_to_json(ranges)),
        lambda text: group_ranges_from_json(loads(text)),
    ),
    Column("generation", read=optional(int)),
    plain("operation by"),
    Column("detail", lambda detail: dumps([e.to_json() for e in detail]) if detail else None, None),
)
EMBEDDINGS = Shape(
    GroupEmbedding,
    plain("group_id key resource_id thread_id"),
    time_column("observed_at"),
    Column("model"),
    Column("vector", len, None),
    Column("vector", encode, lambda blob: tuple(decode(blob))),
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
        record = RECORDS.parse(row)
        with self._lock:
            self._records[key] = record
            while len(self._records) > self._size:
                self._records.popitem(last=False)
        return record


def record_update_values(r: OMRecord) -> Row:
    """The values of the UPDATE statement: every mutable column (generation through
    superseded_by, then updated_at), then the id; taken from the INSERT row so the two orders
    cannot drift."""
    row = RECORDS.row(r)
    return (*row[5:15], row[16], row[0])


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


def detail_from_text(text: str | None) -> list[ModelExchange]:
    """A cycle's stored detail (none: never kept, or dropped by its retention)."""
    return [ModelExchange.from_json(e) for e in loads(text) or []]
