"""Stores: where threads, messages and memory state live.

``InMemoryStore`` defines the semantics; ``SQLiteStore`` is the embedded default. Every store
passes the same conformance suite (tests/conformance).
"""

from .base import Store
from .memory import InMemoryStore
from .sqlite import SQLiteStore

__all__ = ["InMemoryStore", "SQLiteStore", "Store"]
