"""SQLStore: the Store protocol over SQL, shared by SQLite and PostgreSQL.

Every method is one flow (:mod:`obsmem.stores.flows`) run by the store's driver in one
transaction: one round trip from the caller's point of view. The driver is the only thing that
differs between the two SQL stores: how it connects, how it runs a transaction and which
placeholder style it speaks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from ..messages import Message, holds_much, utcnow
from ..records import CycleRecord, GroupEmbedding, ModelExchange, ObservationGroup, OMRecord, Thread
from ..snapshot import Snapshot
from . import commit_flow, erase_flow, flows, import_flow, load_flow
from . import transitions as tr
from .changes import (
    Commit,
    CommitResult,
    ImportConflicts,
    ImportWrite,
    LoadRequest,
    ResourcePatch,
    ThreadPatch,
)
from .erasure import Erasure
from .flows import Call, Flow
from .rows import RecordCache

__all__ = ["Driver", "SQLStore"]

T = TypeVar("T")
HEADS_KEPT = 1024


class Driver(Protocol):
    """Connections, transactions and placeholder style for one SQL database."""

    pgvector: bool
    """The database ranks vectors itself (PostgreSQL with the pgvector extension)."""
    jobs: bool
    """The database holds the job queue's tables (PostgreSQL, migration 9)."""

    async def run(self, call: Call[T]) -> T:
        """Run ``call`` in one transaction (see :class:`~obsmem.stores.flows.Call`)."""
        ...

    async def schema_version(self) -> int: ...

    async def aclose(self) -> None: ...


class SQLStore:
    """Threads, messages and memory state in a SQL database reached through ``driver``."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self._records = RecordCache()
        self._heads: OrderedDict[str, OMRecord] = OrderedDict()
        """Per key, the head record in the last snapshot this store read: a load whose head is
        still that one gets only its short columns, and one holding no messages of the thread
        starts reading from its cursor (a stale one costs a read of the range in between)."""

    def _seen(self, snapshot: Snapshot | None) -> None:
        if snapshot is not None:
            key = snapshot.subject.key
            self._heads[key] = snapshot.record
            self._heads.move_to_end(key)
            while len(self._heads) > HEADS_KEPT:
                self._heads.popitem(last=False)

    async def _read(self, make: Callable[[], Flow[T]]) -> T:
        return await self._driver.run(Call(lambda _: make(), write=False))

    async def _write(self, make: Callable[[], Flow[T]], *, records: int = 0) -> T:
        return await self._driver.run(Call(lambda _: make(), write=True, records=records))

    async def schema_version(self) -> int:
        """How many migrations the database has had."""
        return await self._driver.schema_version()

    async def aclose(self) -> None:
        await self._driver.aclose()

    # -- threads -------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self._read(lambda: flows.get_thread(thread_id))

    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        thread = tr.new_thread(thread_id, resource_id, now=utcnow(), title=title, metadata=metadata)
        return await self._write(lambda: flows.create_thread(thread))

    async def list_threads(self, resource_id: str) -> list[Thread]:
        return await self._read(lambda: flows.list_threads(resource_id))

    async def list_resources(self) -> list[str]:
        return await self._read(lambda: flows.list_resources())

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        patch = ThreadPatch.merging(thread_id, metadata, title=title)
        change = await self._write(lambda: flows.patch_thread(patch, now=utcnow()))
        return change.after

    async def get_resource(self, resource_id: str) -> dict[str, Any]:
        return await self._read(lambda: flows.get_resource(resource_id))

    async def update_resource(
        self, resource_id: str, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        patch = ResourcePatch.merging(resource_id, metadata)
        return await self._write(lambda: flows.patch_resource(patch, now=utcnow()))

    # -- messages ------------------------------------------------------------------------------

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        return await self._write(lambda: flows.append_messages(thread_id, messages, now=utcnow()))

    async def list_messages(
        self,
        thread_id: str,
        *,
        after_seq: int = 0,
        through_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Message]:
        return await self._read(
            lambda: flows.list_messages(
                thread_id,
                after_seq=after_seq,
                through_seq=through_seq,
                limit=limit,
                newest_first=newest_first,
            )
        )

    async def get_messages(self, ids: Sequence[str], *, resource_id: str) -> list[Message]:
        return await self._read(lambda: flows.get_messages(ids, resource_id=resource_id))

    # -- memory --------------------------------------------------------------------------------

    async def load(self, request: LoadRequest) -> Snapshot:
        now = utcnow()
        known = self._heads.get(request.subject.key)
        snapshot = await self._driver.run(
            Call(
                lambda write: load_flow.load(
                    request, now=now, write=write, records=self._records, known_head=known
                ),
                write=bool(
                    request.append or request.patches or request.resource_patch or request.cycles
                ),
                quick=not holds_much(request.append),  # writing megabytes is not quick
            )
        )
        self._seen(snapshot)
        return snapshot

    async def commit(self, change: Commit) -> CommitResult:
        result = await self._driver.run(
            Call(
                lambda _: commit_flow.commit(change, now=utcnow(), records=self._records),
                write=True,
                quick=True,
            )
        )
        if result.snapshot is None:
            self._heads.pop(change.key, None)  # the next load reads the head whole
        self._seen(result.snapshot)
        return result

    async def get_record(self, key: str) -> OMRecord | None:
        return await self._read(lambda: flows.get_head(key, records=self._records))

    async def history(
        self, key: str, *, limit: int | None = None, offset: int = 0
    ) -> list[OMRecord]:
        return await self._read(lambda: flows.history(key, limit=limit, offset=offset))

    async def clear(self, key: str) -> None:
        await self._write(lambda: flows.clear(key, pgvector=self._driver.pgvector))

    async def list_cycles(
        self,
        key: str,
        *,
        thread_id: str | None = None,
        kinds: Sequence[str] = (),
        outcomes: Sequence[str] = (),
        limit: int = 100,
        before: datetime | None = None,
    ) -> list[CycleRecord]:
        return await self._read(
            lambda: flows.list_cycles(
                key,
                thread_id=thread_id,
                kinds=tuple(kinds),
                outcomes=tuple(outcomes),
                limit=limit,
                before=before,
            )
        )

    # -- an owner's delete ---------------------------------------------------------------------

    async def delete_thread(self, thread_id: str) -> Erasure | None:
        erased = await self._write(
            lambda: erase_flow.delete_thread(
                thread_id, now=utcnow(), pgvector=self._driver.pgvector, jobs=self._driver.jobs
            )
        )
        self._forget_heads()
        return erased

    async def delete_resource(self, resource_id: str) -> Erasure | None:
        erased = await self._write(
            lambda: erase_flow.delete_resource(
                resource_id, pgvector=self._driver.pgvector, jobs=self._driver.jobs
            )
        )
        self._forget_heads()
        return erased

    async def find_import_conflicts(
        self,
        *,
        threads: Sequence[str],
        keys: Sequence[str],
        resources: Sequence[str],
        messages: Iterable[str],
    ) -> ImportConflicts:
        return await self._read(
            lambda: import_flow.find_conflicts(
                threads=threads, keys=keys, resources=resources, messages=messages
            )
        )

    async def write_import(self, write: ImportWrite) -> int:
        written = await self._write(
            lambda: import_flow.write_import(write, now=utcnow(), pgvector=self._driver.pgvector),
            records=write.records,
        )
        self._forget_heads()
        return written

    async def list_embeddings(self, key: str) -> list[GroupEmbedding]:
        return await self._read(lambda: import_flow.list_embeddings(key))

    def _forget_heads(self) -> None:
        """After a delete, the next load of any key reads its head whole (a head remembered
        from before may hold erased text)."""
        self._heads.clear()
        self._records = RecordCache()

    async def cycle_detail(self, cycle_id: str) -> list[ModelExchange]:
        return await self._read(lambda: flows.cycle_detail(cycle_id))

    # -- observation groups --------------------------------------------------------------------

    async def put_embeddings(self, embeddings: Sequence[GroupEmbedding]) -> None:
        if embeddings:
            await self._write(
                lambda: flows.put_embeddings(embeddings, pgvector=self._driver.pgvector)
            )

    async def search_embeddings(
        self,
        resource_id: str,
        vector: Sequence[float],
        *,
        model: str,
        thread_id: str | None = None,
        after: datetime | None = None,
        before: datetime | None = None,
        limit: int = 10,
    ) -> list[tuple[ObservationGroup, float]]:
        return await self._read(
            lambda: flows.search_embeddings(
                resource_id,
                vector,
                model=model,
                thread_id=thread_id,
                after=after,
                before=before,
                limit=limit,
                pgvector=self._driver.pgvector,
            )
        )

    async def list_observation_groups(
        self, resource_id: str, *, thread_id: str | None = None
    ) -> list[ObservationGroup]:
        return await self._read(
            lambda: flows.list_observation_groups(resource_id, thread_id=thread_id)
        )
