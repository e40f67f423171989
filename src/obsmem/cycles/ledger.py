"""The cycle ledger, from the engine's side: what each running cycle has cost so far, and the
:class:`~obsmem.records.CycleRecord` it leaves.

A cycle is opened when it starts (:meth:`Ledger.start`); the engine's model caller tells the
ledger about every answered call (:meth:`Ledger.on_call`), counted for the cycle whose id the
call carries, and, unless ``detail`` is off, keeps what the call was shown and answered (the
cycle detail). When the cycle commits, :meth:`Ledger.row` builds its record and the commit stores
it (``Commit.cycles``). A failed cycle's row waits (:meth:`Ledger.queue`) for the next write
for its key, which is the small write that stores the failure state; :meth:`Ledger.take`
hands waiting rows to that write. Rows are never written on their own except for a redundant
cycle, whose commit was dropped (no write to ride on).

No I/O here; nothing is the source of truth (the store is).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..llm import LLMRequest, LLMResult
from ..messages import FilePart, ImagePart
from ..models import ModelSpec, model_id_of, provider_of
from ..records import CycleKind, CycleOutcome, CycleRecord, MessageRange, ModelExchange
from ..snapshot import Subject

__all__ = ["Ledger", "exchange", "model_name"]

MAX_WAITING = 100
"""Most rows per key waiting for a write (the oldest go first)."""
MAX_OPEN = 10_000
"""Most cycles tracked at once (a cycle that never closed is forgotten, oldest first)."""


@dataclass(slots=True, kw_only=True)
class _Open:
    subject: Subject
    thread_ids: tuple[str, ...]
    kind: CycleKind
    operation: str
    started_at: datetime
    started: float
    model: str | None
    by: str | None = None
    answered_model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    calls: int = 0
    exchanges: list[ModelExchange] = field(default_factory=list[ModelExchange])


class Ledger:
    """The rows of this engine's cycles, built as they run; ``keep`` rows kept per key (0: the
    ledger is off and nothing is recorded), the detail of the newest ``keep_detail`` of them
    (0: no detail is collected)."""

    def __init__(self, keep: int = 1000, keep_detail: int = 0) -> None:
        self.keep = keep
        self.keep_detail = min(keep_detail, keep)
        self._open: dict[str, _Open] = {}
        self._waiting: dict[str, list[CycleRecord]] = {}
        self._last_start: datetime | None = None

    @property
    def on(self) -> bool:
        return self.keep > 0

    def start(
        self,
        cycle_id: str,
        *,
        subject: Subject,
        kind: CycleKind,
        operation: str,
        now: datetime,
        thread_ids: Sequence[str] = (),
        model: str | None = None,
        by: str | None = None,
    ) -> None:
        """Open a cycle: from now on its model calls are counted. ``by``: who asked for a manual
        cycle."""
        if not self.on:
            return
        # Start times are strictly increasing within an engine, so "newest first" is the order
        # cycles started in even under a clock that does not move.
        if self._last_start is not None and now <= self._last_start:
            now = self._last_start + timedelta(microseconds=1)
        self._last_start = now
        threads = tuple(dict.fromkeys((subject.thread_id, *thread_ids)))
        self._open[cycle_id] = _Open(
            subject=subject,
            thread_ids=threads,
            kind=kind,
            operation=operation,
            started_at=now,
            started=time.monotonic(),
            model=model,
            by=by,
        )
        while len(self._open) > MAX_OPEN:
            self._open.pop(next(iter(self._open)))

    def on_call(self, request: LLMRequest, result: LLMResult) -> None:
        """A model call answered (a ``ModelCaller`` listener): count it for its cycle."""
        entry = self._open.get(request.cycle_id)
        if entry is None:
            return
        entry.calls += 1
        entry.input_tokens += result.input_tokens
        entry.output_tokens += result.output_tokens
        entry.cost_usd = (
            None
            if entry.cost_usd is None or result.cost_usd is None
            else entry.cost_usd + result.cost_usd
        )
        if entry.answered_model is None and request.role in ("observer", "reflector"):
            entry.answered_model = result.model_name
        if self.keep_detail > 0:
            entry.exchanges.append(exchange(request, result))

    def row(
        self,
        cycle_id: str,
        *,
        outcome: CycleOutcome,
        error: str | None = None,
        ranges: Sequence[MessageRange] = (),
        generation: int | None = None,
    ) -> CycleRecord | None:
        """The record of an open cycle as it stands now (None when it is not open)."""
        entry = self._open.get(cycle_id)
        if entry is None:
            return None
        answered = entry.calls > 0
        return CycleRecord(
            cycle_id=cycle_id,
            key=entry.subject.key,
            resource_id=entry.subject.resource_id,
            thread_ids=entry.thread_ids,
            kind=entry.kind,
            outcome=outcome,
            error=error,
            started_at=entry.started_at,
            duration_ms=round((time.monotonic() - entry.started) * 1000, 1),
            model=entry.answered_model or entry.model,
            input_tokens=entry.input_tokens if answered else None,
            output_tokens=entry.output_tokens if answered else None,
            cost_usd=entry.cost_usd if answered else None,
            ranges=tuple(ranges),
            generation=generation,
            operation=entry.operation,
            by=entry.by,
            detail=tuple(entry.exchanges),
        )

    def close(self, cycle_id: str) -> None:
        self._open.pop(cycle_id, None)

    def queue(self, row: CycleRecord) -> None:
        """Keep ``row`` for the next write of its key."""
        waiting = self._waiting.setdefault(row.key, [])
        waiting.append(row)
        del waiting[:-MAX_WAITING]

    def take(self, key: str) -> list[CycleRecord]:
        """The rows waiting for ``key``, handed to a write (give them back with :meth:`queue` if it
        fails)."""
        return self._waiting.pop(key, [])


def exchange(request: LLMRequest, result: LLMResult) -> ModelExchange:
    """A call as the model saw it: text kept as sent, an attachment as a placeholder naming it
    (the detail is for reading, and the attachment is stored with its message)."""
    pieces = (item if isinstance(item, str) else _placeholder(item) for item in request.user)
    shown = "\n".join(pieces)
    return ModelExchange(
        role=request.role,
        model=result.model_name,
        system=request.system,
        shown=shown,
        answer=result.text,
    )


def _placeholder(item: ImagePart | FilePart) -> str:
    kind = "image" if isinstance(item, ImagePart) else "file"
    name = item.filename or item.media_type
    return f"[{kind}: {name}]"


def model_name(model: ModelSpec) -> str:
    """``provider/model`` for a spec (the name alone when the provider cannot be told)."""
    provider = provider_of(model)
    name = model_id_of(model)
    return f"{provider}/{name}" if provider else name
