"""Reads that span a thread's two logs, for people and tools (the inspector, ``obsmem inspect``).

A thread's memory cycles are in the ledger of its own log (thread scope) and in its resource's
log (resource scope, the rows that worked on it); :func:`thread_cycles` reads both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..records import CycleRecord, Thread, record_key
from .base import Store

__all__ = ["CycleQuery", "thread_cycle", "thread_cycles"]

CYCLE_LOOKUP = 2_000
""":func:`thread_cycle` looks among this many of the thread's newest cycles (the default
retention keeps 1,000 per log, and a thread in resource scope reads two logs)."""


@dataclass(frozen=True, slots=True)
class CycleQuery:
    """The cycle table's filters (query parameters ``kind`` and ``outcome``, repeatable)."""

    kinds: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    limit: int = 200
    before: datetime | None = None


async def thread_cycles(
    store: Store, thread: Thread, query: CycleQuery | None = None
) -> list[CycleRecord]:
    """The thread's cycles, newest first: those of its own log and those of its resource's log
    that worked on it."""
    q = query or CycleQuery()
    args: dict[str, Any] = {
        "kinds": q.kinds,
        "outcomes": q.outcomes,
        "limit": q.limit,
        "before": q.before,
    }
    own = await store.list_cycles(
        record_key("thread", thread_id=thread.id, resource_id=thread.resource_id), **args
    )
    shared = await store.list_cycles(
        record_key("resource", thread_id=None, resource_id=thread.resource_id),
        thread_id=thread.id,
        **args,
    )
    rows = sorted([*own, *shared], key=lambda c: (c.started_at, c.cycle_id), reverse=True)
    return rows[: q.limit]


async def thread_cycle(store: Store, thread: Thread, cycle_id: str) -> CycleRecord | None:
    """One of the thread's cycles by id (None: not in its ledger), for a page or a command that
    shows its detail (``Store.cycle_detail``) beside it."""
    rows = await thread_cycles(store, thread, CycleQuery(limit=CYCLE_LOOKUP))
    return next((c for c in rows if c.cycle_id == cycle_id), None)
