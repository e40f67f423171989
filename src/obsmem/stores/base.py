"""The Store protocol: storage as a few whole operations, each one transaction.

Memory work needs two: :meth:`Store.load` reads everything a turn or a cycle decides from (the
head record, the covered threads with their unobserved messages, the resource's metadata), after
storing the turn's messages; :meth:`Store.commit` applies one change of the head record, checked
against the version the caller read, together with the groups and metadata the cycle produced.
The rest serves people and tools: threads, messages, history, recall.

:class:`CoreStore` is what obsmem runs on; search, the cycle ledger, an owner's delete and
export/import are capabilities a store may add (:class:`SearchableStore`, :class:`LedgerStore`,
:class:`ErasableStore`, :class:`TransferStore`), found with ``isinstance``. Each extends the
core, so a store narrowed to one is still whole. A feature that needs one a store lacks is a
StoreError naming the methods to implement (:func:`require`), never an AttributeError.
:class:`Store` is all of them: what the built-in stores implement.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..errors import StoreError
from ..messages import Message
from ..records import CycleRecord, GroupEmbedding, ModelExchange, ObservationGroup, OMRecord, Thread
from ..snapshot import Snapshot
from .changes import Commit, CommitResult, ImportConflicts, ImportWrite, LoadRequest
from .erasure import Erasure

__all__ = [
    "CoreStore",
    "ErasableStore",
    "LedgerStore",
    "SearchableStore",
    "Store",
    "TransferStore",
    "missing_methods",
    "require",
]

C = TypeVar("C")


@runtime_checkable
class CoreStore(Protocol):
    """What the engine needs for turns and cycles, and Memory for its threads: the smallest
    store obsmem runs on. The optional capabilities below add search, the cycle ledger, an
    owner's delete, and export/import; the conformance suite
    (:mod:`obsmem.testing.store_conformance`) checks each one a store offers."""

    async def aclose(self) -> None:
        """Release connections. The store is unusable afterwards; closing twice is harmless."""
        ...

    # -- memory work ---------------------------------------------------------------------------

    async def load(self, request: LoadRequest) -> Snapshot:
        """In one transaction: create the thread (and the key's head record) when missing,
        append ``request.append``, apply ``request.patches``, and read the snapshot. A thread
        that exists under another resource is a StoreError."""
        ...

    async def commit(self, change: Commit) -> CommitResult:
        """In one transaction: apply ``change.change`` to the head if it is still at
        ``change.expected_version`` (ConflictError with the current head otherwise), store the
        groups, merge the thread and resource patches, and read ``change.reload`` if asked."""
        ...

    async def get_record(self, key: str) -> OMRecord | None:
        """The head record of ``key`` (with its buffered chunks), or None."""
        ...

    async def history(
        self, key: str, *, limit: int | None = None, offset: int = 0
    ) -> list[OMRecord]:
        """Every generation of ``key``, newest first."""
        ...

    async def clear(self, key: str) -> None:
        """Delete every generation, chunk, observation group, embedding and cycle ledger row of
        ``key`` (messages stay)."""
        ...

    # -- threads, resources and messages ---------------------------------------------------------

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

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Set the title (when given) and merge ``metadata``'s top-level keys into the stored
        metadata, atomically."""
        ...

    async def get_resource(self, resource_id: str) -> dict[str, Any]:
        """The resource's metadata ({} when nothing was stored for it)."""
        ...

    async def update_resource(
        self, resource_id: str, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Merge ``metadata``'s top-level keys into the resource's metadata, atomically;
        returns the result."""
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


@runtime_checkable
class SearchableStore(CoreStore, Protocol):
    """Recall by meaning (``retrieval.vector``): the groups ``commit`` wrote, their
    embeddings, and a nearest-neighbour search within one resource."""

    async def list_observation_groups(
        self, resource_id: str, *, thread_id: str | None = None
    ) -> list[ObservationGroup]:
        """Groups of the resource (optionally of one thread), oldest first."""
        ...

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


@runtime_checkable
class LedgerStore(CoreStore, Protocol):
    """The cycle ledger: the rows ``load`` and ``commit`` carry in ``cycles``, kept and read
    back (``memory.cycles``, ``obsmem inspect --cycles``, the UI's timeline)."""

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
        """The cycle ledger of ``key``, newest first: at most ``limit`` rows that started before
        ``before`` (the next page: the last row's ``started_at``), of ``thread_id`` when given,
        of these kinds and outcomes when given. An unknown kind or outcome is a StoreError."""
        ...

    async def cycle_detail(self, cycle_id: str) -> list[ModelExchange]:
        """What the cycle's model calls were shown and answered, in call order; empty when the
        cycle is unknown, called no model, or its detail was not kept (``cycle_detail``)."""
        ...


@runtime_checkable
class ErasableStore(CoreStore, Protocol):
    """An owner's delete (``memory.delete_thread``, ``memory.delete_resource``): see
    :mod:`obsmem.stores.erasure`. Work begun before the delete must commit nothing: ``load``
    and ``commit`` check the incarnations they were given."""

    async def delete_thread(self, thread_id: str) -> Erasure | None:
        """In one transaction, erase the thread: its messages, its log (thread scope) or its
        blocks, cursor and buffered work in every generation of the resource's log (resource
        scope), its observation groups, embeddings and cycle ledger rows, and the thread row
        with its metadata. None when there is no such thread."""
        ...

    async def delete_resource(self, resource_id: str) -> Erasure | None:
        """In one transaction, erase the resource: every thread of it as ``delete_thread`` does,
        its log, and its metadata (working memory, failure state). None when nothing of it is
        stored."""
        ...


@runtime_checkable
class TransferStore(LedgerStore, SearchableStore, Protocol):
    """Moving memory between stores (:mod:`obsmem.transfer`): every resource, every
    generation, group, embedding and ledger row read out, and written back as given."""

    async def list_resources(self) -> list[str]:
        """Every resource id that owns a thread, sorted."""
        ...

    async def list_embeddings(self, key: str) -> list[GroupEmbedding]:
        """The embeddings of ``key``'s observation groups (every model's)."""
        ...

    async def find_import_conflicts(
        self,
        *,
        threads: Sequence[str],
        keys: Sequence[str],
        resources: Sequence[str],
        messages: Iterable[str],
    ) -> ImportConflicts:
        """Which of these are stored already: threads, log keys with a head, resources with
        metadata, message ids (with the thread holding each)."""
        ...

    async def write_import(self, write: ImportWrite) -> int:
        """In one transaction: erase ``write.replace_threads`` and clear ``write.replace_keys``,
        then insert every item ``write.items()`` yields, as given (ids, seqs, generations); an
        item whose id is stored fails the whole write, which then writes nothing. Returns how
        many items were written."""
        ...


@runtime_checkable
class Store(ErasableStore, TransferStore, Protocol):
    """Every capability: what the built-in stores implement (and ``append_messages``, which
    tools and tests use to store messages without a turn)."""

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        """Store messages at the end of the thread, giving each the next ``seq``.

        A message whose id is already stored in this thread is not stored again (the stored one is
        returned); an id stored in another thread is a StoreError. Returns the stored messages in
        input order.
        """
        ...


def missing_methods(store: object, capability: type) -> list[str]:
    """The methods of ``capability`` (a protocol above) that ``store`` lacks, sorted."""
    wanted = {
        name
        for cls in capability.__mro__
        if cls not in (Protocol, object) and not cls.__name__.startswith("Generic")
        for name, value in vars(cls).items()
        if callable(value) and not name.startswith("_")
    }
    return sorted(name for name in wanted if not callable(getattr(store, name, None)))


def require(store: object, capability: type[C], use: str) -> C:
    """``store`` as ``capability``, or a StoreError saying that ``use`` needs it and which
    methods to implement."""
    if isinstance(store, capability):
        return store
    missing = ", ".join(missing_methods(store, capability))
    raise StoreError(
        f"{use} needs a store with {capability.__name__}, and {type(store).__name__} has no "
        f"{missing}: implement them (docs/writing-a-store.md) or use a built-in store "
        "(SQLiteStore, PostgresStore, InMemoryStore)"
    )
