"""Write threads read from Mastra (:func:`obsmem.transfer.mastra.read_mastra`) into a store.

Kept apart from the reader so the general importer can take its place: it creates each thread,
appends its messages (keeping their ids and timestamps), stores working memory, and commits
Mastra's observation log as the head record with the cursor at the last message Mastra had
observed. A log in resource scope is committed once per resource, with every thread's cursor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..meta_keys import META_WORKING_MEMORY
from ..snapshot import Subject
from ..stores import Commit, CommitObservation, LoadRequest, Store
from ..tokens import HeuristicEstimator
from .mastra import MastraImportError, MastraThread

__all__ = ["MastraImportSummary", "write_mastra_threads"]

_BATCH = 500


@dataclass(slots=True)
class MastraImportSummary:
    """What :func:`write_mastra_threads` stored."""

    threads: int = 0
    messages: int = 0
    logs: int = 0
    """Observation logs committed (one per thread, or one per resource in resource scope)."""
    resources: set[str] = field(default_factory=set[str])


async def _append(store: Store, thread: MastraThread) -> dict[str, int]:
    """Create the thread and append its messages; returns each message's seq by id."""
    existing = await store.get_thread(thread.id)
    if existing is not None and existing.message_count:
        raise MastraImportError(
            f"thread {thread.id} already exists in this obsmem database with "
            f"{existing.message_count} messages; import into a new database, or delete the "
            "thread first"
        )
    metadata = dict(thread.metadata)
    if thread.working_memory is not None:
        metadata[META_WORKING_MEMORY] = thread.working_memory
    await store.create_thread(thread.id, thread.resource_id, title=thread.title, metadata=metadata)
    seqs: dict[str, int] = {}
    messages = list(thread.messages)
    for start in range(0, len(messages), _BATCH):
        stored = await store.append_messages(thread.id, messages[start : start + _BATCH])
        seqs.update((m.id, m.seq or 0) for m in stored)
    return seqs


async def _commit_log(store: Store, subject: Subject, text: str, cursor: dict[str, int]) -> None:
    """Commit ``text`` as the head log of ``subject`` with ``cursor`` (seq per thread)."""
    record = (await store.load(LoadRequest(subject=subject))).record
    await store.commit(
        Commit(
            key=record.key,
            record_id=record.id,
            expected_version=record.version,
            change=CommitObservation(
                observations=text,
                observation_tokens=HeuristicEstimator().count_text(text),
                cursor=tuple((t, seq) for t, seq in cursor.items() if seq > 0),
            ),
        )
    )


async def write_mastra_threads(
    store: Store, threads: Iterable[MastraThread]
) -> MastraImportSummary:
    """Store ``threads`` in ``store``; a thread already holding messages is refused."""
    summary = MastraImportSummary()
    shared: dict[str, tuple[str, dict[str, int]]] = {}  # resource -> (log, cursor per thread)
    for thread in threads:
        seqs = await _append(store, thread)
        summary.threads += 1
        summary.messages += len(thread.messages)
        if thread.resource_id not in summary.resources:
            summary.resources.add(thread.resource_id)
            if thread.resource_working_memory is not None:
                await store.update_resource(
                    thread.resource_id, {META_WORKING_MEMORY: thread.resource_working_memory}
                )
        if thread.observations is None:
            continue
        seq = seqs.get(thread.observed_through, 0) if thread.observed_through else 0
        if thread.scope == "resource":
            shared.setdefault(thread.resource_id, (thread.observations, {}))[1][thread.id] = seq
            continue
        subject = Subject(scope="thread", thread_id=thread.id, resource_id=thread.resource_id)
        await _commit_log(store, subject, thread.observations, {thread.id: seq})
        summary.logs += 1
    for resource_id, (text, cursor) in shared.items():
        first = next(iter(cursor))
        subject = Subject(
            scope="resource", thread_id=first, resource_id=resource_id, thread_ids=tuple(cursor)
        )
        await _commit_log(store, subject, text, cursor)
        summary.logs += 1
    return summary
