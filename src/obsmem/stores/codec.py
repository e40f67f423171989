"""JSON forms of the durable records, shared by the SQL stores."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

from ..records import BufferedChunk, BufferedReflection, MessageRange, ObservationGroup

__all__ = [
    "chunk_from_dict",
    "chunk_to_dict",
    "chunks_from_json",
    "chunks_to_json",
    "dt_from_text",
    "dt_to_text",
    "dumps",
    "group_ranges_from_json",
    "loads",
    "ranges_to_json",
    "reflection_from_json",
    "reflection_to_json",
]


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


def _opt_dt(text: str | None) -> datetime | None:
    return None if text is None else dt_from_text(text)


def ranges_to_json(ranges: tuple[MessageRange, ...]) -> list[list[Any]]:
    return [[r.thread_id, r.first_seq, r.last_seq] for r in ranges]


def group_ranges_from_json(raw: list[list[Any]]) -> tuple[MessageRange, ...]:
    return tuple(MessageRange(thread_id=t, first_seq=a, last_seq=b) for t, a, b in raw)


def chunk_to_dict(chunk: BufferedChunk) -> dict[str, Any]:
    return {
        "id": chunk.id,
        "cycle_id": chunk.cycle_id,
        "observations": chunk.observations,
        "token_count": chunk.token_count,
        "message_tokens": chunk.message_tokens,
        "ranges": ranges_to_json(chunk.ranges),
        "message_ids": list(chunk.message_ids),
        "last_message_at": (
            None if chunk.last_message_at is None else dt_to_text(chunk.last_message_at)
        ),
        "created_at": dt_to_text(chunk.created_at),
        "current_task": chunk.current_task,
        "suggested_response": chunk.suggested_response,
        "thread_title": chunk.thread_title,
        "extracted_values": dict(chunk.extracted_values),
        "extraction_failures": [dict(f) for f in chunk.extraction_failures],
    }


def chunk_from_dict(raw: Mapping[str, Any]) -> BufferedChunk:
    return BufferedChunk(
        id=raw["id"],
        cycle_id=raw["cycle_id"],
        observations=raw["observations"],
        token_count=raw["token_count"],
        message_tokens=raw["message_tokens"],
        ranges=group_ranges_from_json(raw["ranges"]),
        message_ids=tuple(raw["message_ids"]),
        last_message_at=_opt_dt(raw["last_message_at"]),
        created_at=dt_from_text(raw["created_at"]),
        current_task=raw["current_task"],
        suggested_response=raw["suggested_response"],
        thread_title=raw["thread_title"],
        extracted_values=raw["extracted_values"],
        extraction_failures=tuple(raw["extraction_failures"]),
    )


def chunks_to_json(chunks: tuple[BufferedChunk, ...]) -> str:
    return dumps([chunk_to_dict(c) for c in chunks])


def chunks_from_json(text: str | None) -> tuple[BufferedChunk, ...]:
    raw = cast(list[Mapping[str, Any]], json.loads(text or "[]"))
    return tuple(chunk_from_dict(c) for c in raw)


def reflection_to_json(reflection: BufferedReflection | None) -> str | None:
    if reflection is None:
        return None
    return dumps(
        {
            "cycle_id": reflection.cycle_id,
            "text": reflection.text,
            "token_count": reflection.token_count,
            "input_tokens": reflection.input_tokens,
            "line_count": reflection.line_count,
            "created_at": dt_to_text(reflection.created_at),
        }
    )


def reflection_from_json(text: str | None) -> BufferedReflection | None:
    if text is None:
        return None
    raw = cast(Mapping[str, Any], json.loads(text))
    return BufferedReflection(
        cycle_id=raw["cycle_id"],
        text=raw["text"],
        token_count=raw["token_count"],
        input_tokens=raw["input_tokens"],
        line_count=raw["line_count"],
        created_at=dt_from_text(raw["created_at"]),
    )


def group_row(group: ObservationGroup) -> tuple[Any, ...]:
    """Column values in the order of the observation_groups table."""
    return (
        group.id,
        group.key,
        group.resource_id,
        group.thread_id,
        group.cycle_id,
        group.start_id,
        group.end_id,
        group.observations,
        dumps(ranges_to_json(group.ranges)),
        dt_to_text(group.created_at),
        dumps(dict(group.metadata)),
    )


def group_from_row(row: tuple[Any, ...]) -> ObservationGroup:
    return ObservationGroup(
        id=row[0],
        key=row[1],
        resource_id=row[2],
        thread_id=row[3],
        cycle_id=row[4],
        start_id=row[5],
        end_id=row[6],
        observations=row[7],
        ranges=group_ranges_from_json(loads(row[8])),
        created_at=dt_from_text(row[9]),
        metadata=loads(row[10]),
    )
