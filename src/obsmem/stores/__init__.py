"""Stores: where threads, messages and memory state live.

``InMemoryStore`` defines the semantics; ``SQLiteStore`` is the embedded default;
``PostgresStore`` serves several workers. The two SQL stores run the same flows
(:mod:`obsmem.stores.flows`) through a small driver each. Every store passes the same
conformance suite (:mod:`obsmem.testing.store_conformance`); a store of your own needs only
:class:`CoreStore`, and each optional capability it offers is found by ``isinstance``.
"""

from .base import CoreStore, ErasableStore, LedgerStore, SearchableStore, Store, TransferStore
from .changes import (
    ActivateChunks,
    AddChunk,
    Change,
    Commit,
    CommitObservation,
    CommitResult,
    LoadRequest,
    ResourcePatch,
    SetBufferedReflection,
    StartGeneration,
    ThreadChange,
    ThreadPatch,
)
from .erasure import Erasure
from .memory import InMemoryStore
from .postgres import PostgresStore
from .sqlite import SQLiteStore

__all__ = [
    "ActivateChunks",
    "AddChunk",
    "Change",
    "Commit",
    "CommitObservation",
    "CommitResult",
    "CoreStore",
    "ErasableStore",
    "Erasure",
    "InMemoryStore",
    "LedgerStore",
    "LoadRequest",
    "PostgresStore",
    "ResourcePatch",
    "SQLiteStore",
    "SearchableStore",
    "SetBufferedReflection",
    "StartGeneration",
    "Store",
    "ThreadChange",
    "ThreadPatch",
    "TransferStore",
]
