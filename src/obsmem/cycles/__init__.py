"""The memory cycles: buffering, activation, synchronous observation, reflection and revision.

Each cycle starts from the snapshot it was handed, does its (possibly slow) model work without
holding anything, then commits one change through the store against the head it read. The store
checks the real invariants inside the transaction (chunks contiguous, observation starting where
the cursor still is, cursor monotonic); a cycle that lost a race gets the current head with the
conflict and either retries the cheap commit or drops its now-redundant result. Every cycle
reports through one lifecycle (:mod:`obsmem.cycles.lifecycle`). Nothing is held in process
memory as the source of truth.
"""

from .buffering import Activation, activate_chunks, buffer_chunk
from .common import Deps, KnownHeads, estimator_for, join_log
from .ledger import Ledger
from .lifecycle import Cycle, Failure, Outcome, run_cycle
from .observation import SyncObservation, catch_up, observe_sync
from .observer_run import attachment_filter
from .reflection import activate_reflection, buffer_reflection, reflect_now
from .revision import Revision, revise
from .writes import expecting, flush_ledger, load

__all__ = [
    "Activation",
    "Cycle",
    "Deps",
    "Failure",
    "KnownHeads",
    "Ledger",
    "Outcome",
    "Revision",
    "SyncObservation",
    "activate_chunks",
    "activate_reflection",
    "attachment_filter",
    "buffer_chunk",
    "buffer_reflection",
    "catch_up",
    "estimator_for",
    "expecting",
    "flush_ledger",
    "join_log",
    "load",
    "observe_sync",
    "reflect_now",
    "revise",
    "run_cycle",
]
