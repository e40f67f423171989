"""Third-party-style stores for the tests of the store contract: ``CoreOnlyStore`` offers only
:class:`~obsmem.stores.CoreStore` (each method handed to an InMemoryStore it keeps), and
``VersionBlindStore`` is one that breaks a rule: its commit ignores ``expected_version``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from obsmem.messages import Message
from obsmem.records import OMRecord, Thread
from obsmem.snapshot import Snapshot
from obsmem.stores import Commit, CommitResult, InMemoryStore, LoadRequest


class CoreOnlyStore:
    """The core methods and nothing else: no search, ledger, delete, export or import."""

    def __init__(self) -> None:
        self._inner = InMemoryStore()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def load(self, request: LoadRequest) -> Snapshot:
        return await self._inner.load(request)

    async def commit(self, change: Commit) -> CommitResult:
        return await self._inner.commit(change)

    async def get_record(self, key: str) -> OMRecord | None:
        return await self._inner.get_record(key)

    async def history(
        self, key: str, *, limit: int | None = None, offset: int = 0
    ) -> list[OMRecord]:
        return await self._inner.history(key, limit=limit, offset=offset)

    async def clear(self, key: str) -> None:
        await self._inner.clear(key)

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self._inner.get_thread(thread_id)

    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        return await self._inner.create_thread(
            thread_id, resource_id, title=title, metadata=metadata
        )

    async def list_threads(self, resource_id: str) -> list[Thread]:
        return await self._inner.list_threads(resource_id)

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        return await self._inner.update_thread(thread_id, title=title, metadata=metadata)

    async def get_resource(self, resource_id: str) -> dict[str, Any]:
        return await self._inner.get_resource(resource_id)

    async def update_resource(
        self, resource_id: str, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self._inner.update_resource(resource_id, metadata)

    async def list_messages(
        self,
        thread_id: str,
        *,
        after_seq: int = 0,
        through_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Message]:
        return await self._inner.list_messages(
            thread_id,
            after_seq=after_seq,
            through_seq=through_seq,
            limit=limit,
            newest_first=newest_first,
        )

    async def get_messages(self, ids: Sequence[str], *, resource_id: str) -> list[Message]:
        return await self._inner.get_messages(ids, resource_id=resource_id)


class VersionBlindStore(CoreOnlyStore):
    """Breaks the compare-and-set: every commit is applied to the head as it is now, whatever
    version the caller read."""

    async def commit(self, change: Commit) -> CommitResult:
        head = await self.get_record(change.key)
        if head is not None:
            change = replace(change, record_id=head.id, expected_version=head.version)
        return await super().commit(change)
