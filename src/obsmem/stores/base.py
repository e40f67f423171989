"""The Store protocol: storage as a small set of whole state transitions.

Every method that changes an observational-memory record names the record it read
(``record_id``) and the version it saw (``expected_version``). The store applies the change in one
transaction only if the record is still the head at that version, and raises
:class:`~obsmem.errors.ConflictError` otherwise. There are no "is busy" flags and no
read-then-write swaps: a worker that loses a race re-reads and decides again.

The rules each transition enforces (cursor monotonic, chunks contiguous, nothing stranded) are
written once, as pure functions, in :mod:`obsmem.stores.transitions`; every store applies them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ..messages import Message
from ..records import (
    BufferedChunk,
    BufferedReflection,
    GroupEmbedding,
    ObservationGroup,
    OMRecord,
    Scope,
    Thread,
)

__all__ = ["Store"]


@runtime_checkable
class Store(Protocol):
    """Where obsmem keeps threads, messages and memory state."""

    # -- lifecycle -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Release connections. The store is unusable afterwards."""
        ...

    # -- threads -------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> Thread | None: ...

    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Get or create. A thread that exists under another resource is a StoreError."""
        ...

    async def list_threads(self, resource_id: str) -> list[Thread]:
        """The resource's threads, oldest first."""
        ...

    async def list_resources(self) -> list[str]:
        """Every resource id that owns a thread, sorted."""
        ...

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Set the title (when given) and shallow-merge ``metadata`` into the thread's metadata,
        atomically."""
        ...

    async def get_resource(self, resource_id: str) -> dict[str, Any]:
        """The resource's metadata ({} when nothing was stored for it)."""
        ...

    async def update_resource(
        self, resource_id: str, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Shallow-merge ``metadata`` into the resource's metadata, atomically; returns it."""
        ...

    # -- messages (append-only) ----------------------------------------------------------------

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        """Store messages at the end of the thread, giving each the next ``seq``.

        A message whose id is already stored in this thread is not stored again (the stored one is
        returned); an id stored in another thread is a StoreError. Returns the stored messages in
        input order.
        """
        ...

    async def list_messages(
        self,
        thread_id: str,
        *,
        after_seq: int = 0,
        through_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Message]:
        """Messages with ``after_seq < seq <= through_seq``, in seq order (or newest first)."""
        ...

    async def get_messages(self, ids: Sequence[str], *, resource_id: str) -> list[Message]:
        """The messages with these ids that belong to ``resource_id``; others are left out."""
        ...

    # -- observational-memory records ----------------------------------------------------------

    async def get_record(self, key: str) -> OMRecord | None:
        """The head record of ``key`` (with its buffered chunks), or None."""
        ...

    async def get_or_create_record(
        self, key: str, *, scope: Scope, thread_id: str | None, resource_id: str | None
    ) -> OMRecord:
        """The head record, creating generation 0 when there is none (safe under races)."""
        ...

    async def add_chunk(
        self,
        record_id: str,
        expected_version: int,
        chunk: BufferedChunk,
        *,
        last_buffered_at_tokens: int | None = None,
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        """Append a buffered chunk. Its ranges must start right after what is already covered."""
        ...

    async def activate_chunks(
        self,
        record_id: str,
        expected_version: int,
        count: int,
        *,
        observations: str,
        observation_tokens: int,
    ) -> OMRecord:
        """Move the first ``count`` chunks into the log: ``observations`` is the new log, the
        cursor moves to the chunks' ends, their message tokens leave the pending count."""
        ...

    async def commit_observation(
        self,
        record_id: str,
        expected_version: int,
        *,
        observations: str,
        observation_tokens: int,
        cursor: Mapping[str, int],
        pending_message_tokens: int | None = None,
        observed_tokens: int = 0,
        expected_cursor: Mapping[str, int] | None = None,
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        """A synchronous observation: the new log and the cursor it reaches (never backwards).
        Chunks made redundant by the new cursor are dropped; a chunk it would split is an error.
        With ``expected_cursor`` the observation only applies if it starts where the record's
        cursor still is (ConflictError otherwise): nothing is observed twice."""
        ...

    async def set_buffered_reflection(
        self, record_id: str, expected_version: int, reflection: BufferedReflection | None
    ) -> OMRecord: ...

    async def start_reflection_generation(
        self,
        record_id: str,
        expected_version: int,
        *,
        observations: str,
        observation_tokens: int,
        groups: Sequence[ObservationGroup] = (),
    ) -> OMRecord:
        """Retire the head and start the next generation with ``observations`` as its log. The
        cursor, the counters and the pending chunks carry over. Returns the new head."""
        ...

    async def update_counters(
        self,
        record_id: str,
        expected_version: int,
        *,
        pending_message_tokens: int | None = None,
        last_buffered_at_tokens: int | None = None,
    ) -> OMRecord: ...

    async def history(
        self, key: str, *, limit: int | None = None, offset: int = 0
    ) -> list[OMRecord]:
        """Every generation of ``key``, newest first."""
        ...

    async def clear(self, key: str) -> None:
        """Delete every generation, chunk, observation group and embedding of ``key`` (messages
        stay)."""
        ...

    # -- observation groups --------------------------------------------------------------------

    async def put_embeddings(self, embeddings: Sequence[GroupEmbedding]) -> None:
        """Store (or replace) observation-group embeddings."""
        ...

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
        """The resource's groups (optionally of one thread, observed between ``after`` and
        ``before``) most similar to ``vector``, best first, with their scores."""
        ...

    async def list_observation_groups(
        self, resource_id: str, *, thread_id: str | None = None
    ) -> list[ObservationGroup]:
        """Groups of the resource (optionally of one thread), oldest first."""
        ...
