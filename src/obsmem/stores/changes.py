"""What callers ask of a store: one load, or one commit, each a single transaction.

A turn reads with :class:`LoadRequest` (creating the thread and the head record when missing,
appending the turn's messages and applying thread patches first, all in the same transaction)
and gets a :class:`~obsmem.snapshot.Snapshot`. A cycle writes with :class:`Commit`: one change of
the head record, checked against the version it read, together with the observation groups it
produced and the metadata it extracted, and optionally reads the snapshot after it. Both carry
the cycle ledger's rows (:class:`~obsmem.records.CycleRecord`) written with them, so recording a
cycle costs no round trip of its own.

Metadata changes are :class:`ThreadPatch` / :class:`ResourcePatch` values: paths to set, merged
into the stored metadata inside the store's transaction, so two concurrent cycles never lose
each other's values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from ..messages import Message
from ..records import (
    BufferedChunk,
    BufferedReflection,
    CycleRecord,
    GroupEmbedding,
    ObservationGroup,
    OMRecord,
    Thread,
    ThreadCopy,
)
from ..snapshot import Snapshot, Subject

__all__ = [
    "DEFAULT_KEEP_CYCLES",
    "ActivateChunks",
    "AddChunk",
    "Change",
    "Commit",
    "CommitObservation",
    "CommitResult",
    "ImportConflicts",
    "ImportWrite",
    "Imported",
    "ImportedResource",
    "LoadRequest",
    "MetadataPath",
    "ResourcePatch",
    "SetBufferedReflection",
    "StartGeneration",
    "ThreadChange",
    "ThreadPatch",
]

DEFAULT_KEEP_CYCLES = 1000
"""Cycle ledger rows kept per key unless the request says otherwise (``cycle_retention``)."""
DEFAULT_KEEP_DETAIL = 20
"""Ledger rows per key that keep their detail unless the request says otherwise
(``cycle_detail``)."""

MetadataPath: TypeAlias = tuple[str, ...]
"""Keys from the top of a metadata object down to the value to set."""


def _top_level(metadata: Mapping[str, Any]) -> tuple[tuple[MetadataPath, Any], ...]:
    """Each top-level key of ``metadata`` set to its value (a shallow merge)."""
    return tuple(((key,), value) for key, value in metadata.items())


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadPatch:
    """Changes to one thread, merged into what is stored inside the transaction."""

    thread_id: str
    set: tuple[tuple[MetadataPath, Any], ...] = ()
    """``(path, value)`` pairs: each sets one value in the metadata, creating objects along the
    path and keeping everything beside it."""
    title: str | None = None
    """A new title, set as given."""
    suggested_title: str | None = None
    """A title the Observer suggested: set unless the stored title is pinned, equal, or the
    suggestion is shorter than three characters."""

    @property
    def empty(self) -> bool:
        return not self.set and self.title is None and self.suggested_title is None

    @classmethod
    def merging(
        cls, thread_id: str, metadata: Mapping[str, Any] | None, *, title: str | None = None
    ) -> ThreadPatch:
        """``update_thread``: set the title (when given), merge ``metadata``'s top-level keys."""
        return cls(thread_id=thread_id, title=title, set=_top_level(metadata or {}))


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourcePatch:
    """Changes to one resource's metadata (working memory in resource scope)."""

    resource_id: str
    set: tuple[tuple[MetadataPath, Any], ...] = ()

    @classmethod
    def merging(cls, resource_id: str, metadata: Mapping[str, Any]) -> ResourcePatch:
        """``update_resource``: merge ``metadata``'s top-level keys."""
        return cls(resource_id=resource_id, set=_top_level(metadata))


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadChange:
    """A thread as it was before a patch and after it (to report title changes)."""

    before: Thread
    after: Thread


# -- changes of the head record ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AddChunk:
    """Append a buffered chunk; its ranges must start right after what is already covered."""

    chunk: BufferedChunk


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivateChunks:
    """Move the first ``count`` chunks into the log (``observations`` is the new log)."""

    count: int
    observations: str
    observation_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitObservation:
    """A synchronous observation: the new log and the cursor it reaches. With
    ``expected_cursor`` it applies only if it starts where the cursor still is."""

    observations: str
    observation_tokens: int
    cursor: tuple[tuple[str, int], ...]
    """``(thread id, seq)`` of the last message observed, per thread."""
    expected_cursor: tuple[tuple[str, int], ...] | None = None
    observed_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SetBufferedReflection:
    reflection: BufferedReflection | None


@dataclass(frozen=True, slots=True, kw_only=True)
class StartGeneration:
    """Retire the head and start the next generation with ``observations`` as its log. The
    cursor, the counters and the pending chunks carry over; a buffered reflection does not
    (it was made from the old log)."""

    observations: str
    observation_tokens: int
    origin: Literal["reflection", "revision"] = "reflection"
    chunks: tuple[BufferedChunk, ...] | None = None
    """The pending chunks with their text corrected (a revision): the same chunks, ids and
    ranges, in the same order; None carries them over as they are."""


Change: TypeAlias = (
    AddChunk | ActivateChunks | CommitObservation | SetBufferedReflection | StartGeneration
)


# -- requests ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedJob:
    """A job of the queue (``background="queue"``, PostgreSQL only), inserted in the load's own
    transaction, so the write that asked for the work and the job commit together. At most one
    job per ``lock`` waits (a second one is not inserted); ``args`` are ids and a plan step,
    never message text; the store adds the thread's incarnation as it is in the transaction."""

    queue: str
    task: str
    lock: str
    args: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadRequest:
    """Read a snapshot, after (optionally) storing the turn's messages and thread patches."""

    subject: Subject
    append: Sequence[Message] = ()
    """Stored at the end of ``subject.thread_id`` first (a message id already stored in the
    thread is not stored again)."""
    patches: Sequence[ThreadPatch] = ()
    resource_patch: ResourcePatch | None = None
    """Merged into the subject's resource metadata first (failure state in resource scope)."""
    last_reply: bool = False
    """Also find when the assistant last spoke in the subject's thread."""
    held: Mapping[str, Sequence[Message]] = field(default_factory=dict[str, Sequence[Message]])
    """Per thread, unobserved messages the caller already holds (in seq order, from an earlier
    snapshot): the store reads only what comes after them (see ``snapshot.reusable``)."""
    held_incarnations: Mapping[str, str] = field(default_factory=dict[str, str])
    """Per thread, the incarnation ``held`` was read from: messages held of a thread deleted
    since (and perhaps created again) are not used."""
    resource_metadata: bool = True
    """Read the resource's metadata too (working memory in resource scope needs it)."""
    cycles: Sequence[CycleRecord] = ()
    """Cycle ledger rows to store (a failed cycle with its failure state)."""
    keep_cycles: int = DEFAULT_KEEP_CYCLES
    """After storing ``cycles``, keep about this many newest rows of each of their keys."""
    incarnation: str | None = None
    """Work begun on the subject's thread (a reply, a cycle's small write) names the
    incarnation it read: once that thread was deleted, the load creates and stores nothing and
    raises a ConflictError without a current head. None: a turn that begins (it creates the
    thread when missing)."""
    keep_detail: int = DEFAULT_KEEP_DETAIL
    """... and the detail of about this many of them (the newest; 0 drops every detail)."""
    enqueue: QueuedJob | None = None
    """Queue this job in the same transaction (PostgreSQL with the queue's tables only)."""
    expect: ThreadCopy | None = None
    """The caller's copy of the subject's thread: when the thread, as found in the load's
    transaction before anything is stored, is not that (deleted, created again, other
    messages, other values of the copy's metadata keys), the load creates and stores nothing
    and raises a ConflictError without a current head; the caller reads the thread again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    """One change of the head record with what the cycle produced, in one transaction."""

    key: str
    record_id: str
    expected_version: int
    change: Change
    groups: Sequence[ObservationGroup] = ()
    threads: Sequence[ThreadPatch] = ()
    resource: ResourcePatch | None = None
    reload: Subject | None = None
    """Read this subject's snapshot after the change, in the same transaction."""
    held: Mapping[str, Sequence[Message]] = field(default_factory=dict[str, Sequence[Message]])
    """As for :class:`LoadRequest`, for the reload."""
    resource_metadata: bool = True
    """As for :class:`LoadRequest`, for the reload."""
    cycles: Sequence[CycleRecord] = ()
    """Cycle ledger rows to store with the change (the committing cycle's own)."""
    keep_cycles: int = DEFAULT_KEEP_CYCLES
    """As for :class:`LoadRequest`."""
    incarnations: tuple[tuple[str, str], ...] = ()
    """``(thread id, incarnation)`` of each thread the cycle read: when one of them was deleted
    meanwhile (or created again under its id), the commit changes nothing and raises a
    ConflictError without a current head."""
    keep_detail: int = DEFAULT_KEEP_DETAIL
    """As for :class:`LoadRequest`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitResult:
    record: OMRecord
    """The head after the change (a new generation after ``StartGeneration``)."""
    threads: tuple[ThreadChange, ...] = ()
    snapshot: Snapshot | None = None
    """Set when the commit asked for ``reload``."""


# -- an import (not memory work: everything of an export file, written at once) ----------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedResource:
    """A resource's metadata as an import sets it (replacing what is stored)."""

    id: str
    metadata: Mapping[str, Any]


Imported: TypeAlias = (
    Thread | Message | OMRecord | ObservationGroup | GroupEmbedding | ImportedResource | CycleRecord
)
"""One stored thing an import writes, as it is to be stored (ids, resources and seqs final)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportConflicts:
    """What of an import is stored already."""

    threads: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    """Log keys with a stored head."""
    resources: tuple[str, ...] = ()
    """Resources with stored metadata."""
    messages: tuple[tuple[str, str], ...] = ()
    """(message id, the thread it is stored in)."""

    @property
    def empty(self) -> bool:
        return not (self.threads or self.keys or self.resources or self.messages)


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportWrite:
    """An import, written in one transaction: the threads and keys it replaces are erased
    first, then every item is inserted (threads before their messages, groups before their
    embeddings). ``items`` is called once, inside the transaction, and streams: nothing holds
    the whole import. An item that collides with a stored id fails the whole write."""

    items: Callable[[], Iterator[Imported]]
    replace_threads: tuple[str, ...] = ()
    """Threads erased first (``Store.delete_thread``'s erasure)."""
    replace_keys: tuple[str, ...] = ()
    """Log keys cleared first (``Store.clear``)."""
    records: int = 0
    """How many records ``items`` gives (a store allows a write that large more time)."""
