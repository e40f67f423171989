"""Events as LISTEN/NOTIFY carries them from workers to serving processes: rebuilt as they were,
and within PostgreSQL's payload cap (long fields left out, and said so)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from obsmem.events import BufferingEndEvent
from obsmem.queue.relay import MAX_PAYLOAD, event_from_dict, payload

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _event(observations: str) -> BufferingEndEvent:
    return BufferingEndEvent(
        cycle_id="c1",
        operation_type="observation",
        completed_at=AT,
        duration_ms=12.5,
        tokens_buffered=300,
        buffered_tokens=40,
        record_id="om-1",
        thread_id="t1",
        thread_ids=("t1",),
        observations=observations,
    )


def test_an_event_comes_back_as_it_was() -> None:
    event = _event("* 🔴 (09:00) User said: hello")
    text = payload(event)
    assert text is not None
    assert event_from_dict(json.loads(text)) == event


def test_a_long_event_goes_without_its_long_fields() -> None:
    text = payload(_event("* line\n" * 5_000))
    assert text is not None
    assert len(text.encode()) <= MAX_PAYLOAD
    data = json.loads(text)
    assert data["truncated"] is True
    rebuilt = event_from_dict(data)
    assert isinstance(rebuilt, BufferingEndEvent)
    assert rebuilt.observations is None
    assert rebuilt.tokens_buffered == 300


def test_an_unknown_event_type_is_skipped() -> None:
    assert event_from_dict({"type": "data-om-from-the-future"}) is None
