"""The memory cycles: buffering, activation, synchronous observation and reflection.

Each cycle reads the head record, does its (possibly slow) model work without holding anything,
then commits through one store transition against the head it re-reads at commit time. The store
checks the real invariants inside the transaction (chunks contiguous, observation starting where
the cursor still is, cursor monotonic), so a cycle that lost a race gets a ConflictError and
either retries the cheap commit or drops its now-redundant result. Nothing is held in process
memory as the source of truth.
"""

from .buffering import activate_chunks, buffer_once
from .common import (
    META_CURRENT_TASK,
    META_EXTRACTED,
    META_LAST_MODEL,
    META_SUGGESTED_RESPONSE,
    Deps,
    apply_hints,
    attachment_filter,
    join_log,
)
from .observation import observe_sync
from .reflection import activate_reflection, buffer_reflection, reflect_now

__all__ = [
    "META_CURRENT_TASK",
    "META_EXTRACTED",
    "META_LAST_MODEL",
    "META_SUGGESTED_RESPONSE",
    "Deps",
    "activate_chunks",
    "activate_reflection",
    "apply_hints",
    "attachment_filter",
    "buffer_once",
    "buffer_reflection",
    "join_log",
    "observe_sync",
    "reflect_now",
]
