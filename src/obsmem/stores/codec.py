"""JSON forms of the durable records, shared by the SQL stores."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar, cast

from ..records import BufferedChunk, BufferedReflection, MessageRange

__all__ = [
    "CHUNKS",
    "REFLECTIONS",
    "Column",
    "Shape",
    "chunk_from_dict",
    "chunk_to_dict",
    "chunks_from_json",
    "chunks_to_json",
    "dt_from_text",
    "dt_to_text",
    "dumps",
    "group_ranges_from_json",
    "loads",
    "optional",
    "plain",
    "ranges_to_json",
    "reflection_from_json",
    "reflection_to_json",
    "time_column",
]

R = TypeVar("R")


_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(value: Any) -> str:
    """Compact JSON; text with lone surrogates (which UTF-8 cannot carry) is written with
    ``\\u`` escapes, so it is stored and read back exactly."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    if _SURROGATE.search(text):
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
    return text


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def dt_to_text(dt: datetime) -> str:
    """UTC ISO 8601 with microseconds, so text order is time order."""
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


def dt_from_text(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Column:
    """One stored field: its name, how its value is written, and how the stored value is read
    back (None: a column kept for queries, not read)."""

    field: str
    write: Callable[[Any], Any] = _same
    read: Callable[[Any], Any] | None = _same


def plain(fields: str) -> tuple[Column, ...]:
    """Fields stored as they are, named in one space-separated string."""
    return tuple(Column(name) for name in fields.split())


def optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``convert``, passing None through."""
    return lambda value: None if value is None else convert(value)


def time_column(field: str, *, nullable: bool = False) -> Column:
    if nullable:
        return Column(field, optional(dt_to_text), optional(dt_from_text))
    return Column(field, dt_to_text, dt_from_text)


class Shape(Generic[R]):
    """How one kind of record is stored, written once: as a row (column values in the table's
    order, ``schema``'s column lists) or as a JSON object (by field name), and read back."""

    def __init__(self, make: Callable[..., R], *columns: Column | tuple[Column, ...]) -> None:
        self._make = make
        self._columns = tuple(
            c for group in columns for c in (group if isinstance(group, tuple) else (group,))
        )
        self._read = tuple(
            (i, c.field, c.read) for i, c in enumerate(self._columns) if c.read is not None
        )

    def row(self, item: R) -> tuple[Any, ...]:
        return tuple(c.write(getattr(item, c.field)) for c in self._columns)

    def parse(self, row: tuple[Any, ...]) -> R:
        return self._make(**{field: read(row[i]) for i, field, read in self._read})

    def to_dict(self, item: R) -> dict[str, Any]:
        return {c.field: c.write(getattr(item, c.field)) for c in self._columns}

    def from_dict(self, raw: Mapping[str, Any]) -> R:
        return self._make(**{field: read(raw[field]) for _, field, read in self._read})


def ranges_to_json(ranges: tuple[MessageRange, ...]) -> list[list[Any]]:
    return [[r.thread_id, r.first_seq, r.last_seq] for r in ranges]


def group_ranges_from_json(raw: list[list[Any]]) -> tuple[MessageRange, ...]:
    return tuple(MessageRange(thread_id=t, first_seq=a, last_seq=b) for t, a, b in raw)


CHUNKS = Shape(
    BufferedChunk,
    plain("id cycle_id observations token_count message_tokens"),
    Column("ranges", ranges_to_json, group_ranges_from_json),
    Column("message_ids", list, tuple),
    time_column("last_message_at", nullable=True),
    time_column("created_at"),
    plain("current_task suggested_response thread_title"),
    Column("extracted_values", dict),
    Column("extraction_failures", lambda failures: [dict(f) for f in failures], tuple),
)
REFLECTIONS = Shape(
    BufferedReflection,
    plain("cycle_id text token_count input_tokens line_count"),
    time_column("created_at"),
)
chunk_to_dict = CHUNKS.to_dict
chunk_from_dict = CHUNKS.from_dict


def chunks_to_json(chunks: tuple[BufferedChunk, ...]) -> str:
    return dumps([chunk_to_dict(c) for c in chunks])


def chunks_from_json(text: str | None) -> tuple[BufferedChunk, ...]:
    raw = cast(list[Mapping[str, Any]], json.loads(text or "[]"))
    return tuple(chunk_from_dict(c) for c in raw)


def reflection_to_json(reflection: BufferedReflection | None) -> str | None:
    return None if reflection is None else dumps(REFLECTIONS.to_dict(reflection))


def reflection_from_json(text: str | None) -> BufferedReflection | None:
    if text is None:
        return None
    return REFLECTIONS.from_dict(cast(Mapping[str, Any], json.loads(text)))
