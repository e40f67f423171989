"""Threads read from Mastra (:func:`obsmem.transfer.mastra.read_mastra`) as ``obsmem-export``
records, so they are imported as any export is: validated whole, then written all or nothing
(``Memory.import_``, ``obsmem import --from mastra``).

Each thread becomes a thread record and its messages (seqs 1, 2, ... in Mastra's order); the
resource's working memory a resource record. Where Mastra kept an observation log, it becomes
the head of the thread's log (thread scope) or of the resource's (resource scope, one log with
every thread's cursor), with the cursor at the last message Mastra had observed; Mastra's
generation count is kept as the generation number.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime

from ..messages import utcnow
from ..meta_keys import META_WORKING_MEMORY
from ..records import record_key
from ..tokens import estimate_text_tokens
from .format import DataRecord, Header, LogRow, MessageRow, ResourceRow, ThreadRow
from .mastra import MastraThread

__all__ = ["mastra_records"]


@dataclass(slots=True)
class _SharedLog:
    """A resource-scope log, waiting for the cursors of all of its threads."""

    text: str
    generation: int
    cursor: dict[str, int] = field(default_factory=dict[str, int])


def _log(key: str, text: str, cursor: dict[str, int], generation: int, *, at: datetime) -> LogRow:
    return LogRow(
        id=uuid.uuid4().hex,
        key=key,
        scope="resource" if key.startswith("resource:") else "thread",
        thread_id=None if key.startswith("resource:") else key.removeprefix("thread:"),
        resource_id=key.removeprefix("resource:") if key.startswith("resource:") else None,
        generation=generation,
        head=True,
        origin="reflection" if generation else "initial",
        version=1,
        observations=text,
        observation_tokens=estimate_text_tokens(text),
        cursor={t: seq for t, seq in cursor.items() if seq > 0},
        total_tokens_observed=0,
        superseded_by=None,
        created_at=at,
        updated_at=at,
    )


def _thread(thread: MastraThread) -> Iterator[DataRecord]:
    metadata = dict(thread.metadata)
    if thread.working_memory is not None:
        metadata[META_WORKING_MEMORY] = thread.working_memory
    yield ThreadRow(
        id=thread.id,
        resource_id=thread.resource_id,
        title=thread.title,
        metadata=metadata,
        message_count=len(thread.messages),
        created_at=thread.created_at,
        updated_at=thread.updated_at,
    )
    for seq, message in enumerate(thread.messages, start=1):
        yield MessageRow.of(
            replace(message, seq=seq, thread_id=thread.id, resource_id=thread.resource_id)
        )


def _observed_seq(thread: MastraThread) -> int:
    """The seq of the last message Mastra's log covers (0: none)."""
    ids = [m.id for m in thread.messages]
    through = thread.observed_through
    return ids.index(through) + 1 if through in ids else 0


def mastra_records(
    threads: Iterable[MastraThread], *, source: str = "mastra"
) -> Iterator[Header | DataRecord]:
    """The ``obsmem-export`` records of ``threads``: header, then each thread with its
    messages (and its resource's working memory the first time the resource comes), each
    thread-scope log after its thread, and the resource-scope logs last."""
    now = utcnow()
    yield Header.now({"from": "mastra", "source": source})
    resources: set[str] = set()
    shared: dict[str, _SharedLog] = {}
    for thread in threads:
        if thread.resource_id not in resources:
            resources.add(thread.resource_id)
            if thread.resource_working_memory is not None:
                yield ResourceRow(
                    id=thread.resource_id,
                    metadata={META_WORKING_MEMORY: thread.resource_working_memory},
                )
        yield from _thread(thread)
        if thread.observations is None:
            continue
        seq = _observed_seq(thread)
        if thread.scope == "resource":
            log = shared.setdefault(
                thread.resource_id, _SharedLog(thread.observations, thread.generation)
            )
            log.cursor[thread.id] = seq
            continue
        key = record_key("thread", thread_id=thread.id, resource_id=None)
        yield _log(key, thread.observations, {thread.id: seq}, thread.generation, at=now)
    for resource_id, log in shared.items():
        key = record_key("resource", thread_id=None, resource_id=resource_id)
        yield _log(key, log.text, log.cursor, log.generation, at=now)
