"""Stores: where threads, messages and memory state live.

``InMemoryStore`` defines the semantics; ``SQLiteStore`` is the embedded default;
``PostgresStore`` serves several workers. Every store
passes the same conformance suite (tests/conformance).
"""

from .base import Store
from .memory import InMemoryStore
from .postgres import PostgresStore
from .sqlite import SQLiteStore

__all__ = ["InMemoryStore", "PostgresStore", "SQLiteStore", "Store"]
