"""Export: a store's memory as a stream of format records, and the file it is written to.

:func:`export_records` reads through the Store protocol one piece at a time (a thread's messages
a page at a time), so an export of any size holds one page; :func:`write_export` writes the
lines to a file created with mode 0600 (it is as sensitive as the database) or to a stream.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import IO, Any, Protocol

from ..errors import StoreError
from ..records import Thread, record_key
from ..stores import CoreStore, TransferStore
from ..stores.base import require
from .format import (
    CycleRow,
    DataRecord,
    EmbeddingRow,
    GroupRow,
    Header,
    LogRow,
    MessageRow,
    ResourceRow,
    ThreadRow,
    to_line,
)

__all__ = ["PAGE", "export_records", "open_private", "write_export"]

PAGE = 500
"""Messages (and ledger rows) read from the store at a time."""

Progress = Callable[[int], None]
"""Called with the number of records done so far, every :data:`PROGRESS_EVERY` records."""
PROGRESS_EVERY = 10_000


def _scope(thread: str | None, resource: str | None, all_: bool) -> dict[str, Any]:
    given = [s for s in (thread is not None, resource is not None, all_) if s]
    if len(given) != 1:
        raise ValueError(
            "export one thing: thread=ID, resource=ID or all=True (--thread, --resource or --all)"
        )
    if thread is not None:
        return {"thread": thread}
    if resource is not None:
        return {"resource": resource}
    return {"all": True}


async def export_records(
    store: CoreStore,
    *,
    thread: str | None = None,
    resource: str | None = None,
    all: bool = False,
    ledger: bool = False,
) -> AsyncIterator[Header | DataRecord]:
    """The header, then per resource: its metadata, its threads each followed by its messages,
    then per log key every generation (oldest first), its groups, their embeddings, and its
    ledger rows when ``ledger``. A thread's export carries its thread-scope log only (a
    resource-scope log tells of the resource's other threads: export the resource)."""
    source = require(store, TransferStore, "export")
    yield Header.now(_scope(thread, resource, all), ledger=ledger)
    if thread is not None:
        found = await source.get_thread(thread)
        if found is None:
            raise StoreError(f"no thread {thread!r} to export: check the id (obsmem inspect)")
        async for record in _thread(source, found, ledger=ledger):
            yield record
        return
    resources = [resource] if resource is not None else await source.list_resources()
    for resource_id in resources:
        async for record in _resource(source, resource_id, ledger=ledger):
            yield record


async def _resource(
    store: TransferStore, resource_id: str, *, ledger: bool
) -> AsyncIterator[DataRecord]:
    metadata = await store.get_resource(resource_id)
    threads = await store.list_threads(resource_id)
    if not threads and not metadata:
        key = record_key("resource", thread_id=None, resource_id=resource_id)
        if await store.get_record(key) is None:
            raise StoreError(
                f"nothing of resource {resource_id!r} to export: check the id (obsmem inspect "
                "lists every resource)"
            )
    if metadata:
        yield ResourceRow.of(resource_id, metadata)
    for t in threads:
        yield ThreadRow.of(t)
        async for message in _messages(store, t):
            yield message
    groups = await store.list_observation_groups(resource_id)
    keys = [record_key("resource", thread_id=None, resource_id=resource_id)]
    keys += [record_key("thread", thread_id=t.id, resource_id=None) for t in threads]
    for key in keys:
        async for record in _log(store, key, [g for g in groups if g.key == key], ledger=ledger):
            yield record


async def _thread(
    store: TransferStore, thread: Thread, *, ledger: bool
) -> AsyncIterator[DataRecord]:
    yield ThreadRow.of(thread)
    async for message in _messages(store, thread):
        yield message
    key = record_key("thread", thread_id=thread.id, resource_id=None)
    groups = await store.list_observation_groups(thread.resource_id, thread_id=thread.id)
    async for record in _log(store, key, [g for g in groups if g.key == key], ledger=ledger):
        yield record


async def _messages(store: TransferStore, thread: Thread) -> AsyncIterator[MessageRow]:
    """The thread's messages as its record counts them (a message appended while the export
    runs is left for the next one, so the file's count and its messages agree)."""
    after = 0
    while after < thread.message_count:
        page = await store.list_messages(
            thread.id, after_seq=after, through_seq=thread.message_count, limit=PAGE
        )
        if not page:
            break
        for message in page:
            yield MessageRow.of(message)
        after = page[-1].seq or after + len(page)


async def _log(
    store: TransferStore, key: str, groups: list[Any], *, ledger: bool
) -> AsyncIterator[DataRecord]:
    for generation in reversed(await store.history(key)):
        yield LogRow.of(generation)
    for group in groups:
        yield GroupRow.of(group)
    for embedding in await store.list_embeddings(key):
        yield EmbeddingRow.of(embedding)
    if ledger:
        before = None
        while page := await store.list_cycles(key, limit=PAGE, before=before):
            for cycle in reversed(page):
                yield CycleRow.of(cycle)
            if len(page) < PAGE:
                break
            before = page[-1].started_at


def open_private(path: str) -> IO[str]:
    """A new file at ``path`` that only its owner may read (0600 from its creation on); a file
    already there is an error naming the fix, never overwritten."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise StoreError(
            f"{path} exists; give another -o path or move that file away (an export never "
            "overwrites a file)"
        ) from None
    os.fchmod(fd, 0o600)  # whatever the umask let through
    return os.fdopen(fd, "w", encoding="utf-8", newline="\n")


class Writable(Protocol):
    """Where export lines go: a text file, a stream, anything with ``write``."""

    def write(self, text: str, /) -> object: ...


async def write_export(
    records: AsyncIterator[Header | DataRecord],
    out: Writable,
    *,
    progress: Progress | None = None,
) -> int:
    """Write ``records`` to ``out`` as JSON Lines; returns how many were written."""
    count = 0
    async for record in records:
        out.write(to_line(record))
        out.write("\n")
        count += 1
        if progress is not None and count % PROGRESS_EVERY == 0:
            progress(count)
    return count
