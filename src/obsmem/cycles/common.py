"""Shared pieces of the memory cycles: what they depend on (:class:`Deps`), cycle ids and
timing, what a commit changed (titles), the log, and token counts (windows). A cycle's writes
are :mod:`.writes`; its Observer call is :mod:`.observer_run`."""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, tzinfo
from typing import Any

from ..clocks import ReplyTimes
from ..embeddings import Embedder
from ..errors import ModelError, StoreError
from ..events import EventBus, Hooks, ThreadUpdateEvent
from ..llm import ModelCaller
from ..meta_keys import (
    META_LAST_MODEL,
    META_TITLE_GENERATION,
)
from ..models import ModelSpec
from ..models.environment import LOCAL_PLACEHOLDER
from ..observations import boundary_line
from ..options import ResolvedOptions
from ..planner import Backoff
from ..recall import searchable
from ..records import OMRecord
from ..redaction import redact
from ..snapshot import Snapshot, ThreadState
from ..stores import (
    CoreStore,
    ThreadChange,
)
from ..tokens import TokenEstimator
from ..tokens.estimator import for_actor
from ..window import CachedMessages, ThreadWindow, windows_of
from ..working_memory import WorkingMemory
from .ledger import Ledger

log = logging.getLogger("obsmem")


class KnownHeads:
    """The version of the newest head of each log this engine committed or read afresh (the
    ``remember`` most recent logs), to tell a snapshot that came back older than the engine's
    own work.

    A store may answer a turn's load after a background cycle's commit that it read before (a
    busy PostgreSQL): the cycle has ended by the time the turn looks whether one still runs, so
    background work planned from that snapshot would redo the cycle's work (an Observer call
    paid for, then dropped as redundant). A head's version goes up with every change, across
    generations; only a clear starts it again, which a fresh read records."""

    def __init__(self, *, remember: int) -> None:
        self._remember = remember
        self._versions: OrderedDict[str, int] = OrderedDict()

    def committed(self, record: OMRecord) -> None:
        """A commit of this engine left ``record`` the head (of concurrent commits on one log
        the newest counts, whichever answer came first)."""
        self._note(record.key, max(record.version, self._versions.get(record.key, 0)))

    def read(self, record: OMRecord) -> None:
        """``record`` was read afresh: the head as the store has it now."""
        self._note(record.key, record.version)

    def behind(self, snapshot: Snapshot) -> bool:
        """Whether ``snapshot``'s head is older than one this engine committed or read."""
        known = self._versions.get(snapshot.record.key)
        return known is not None and snapshot.record.version < known

    def _note(self, key: str, version: int) -> None:
        self._versions[key] = version
        self._versions.move_to_end(key)
        while len(self._versions) > self._remember:
            self._versions.popitem(last=False)


@dataclass(slots=True, kw_only=True)
class Deps:
    """What every cycle needs: the store, the options and the outside world."""

    store: CoreStore
    options: ResolvedOptions
    estimator: TokenEstimator
    caller: ModelCaller
    bus: EventBus
    hooks: Hooks
    tz: tzinfo
    clock: Callable[[], datetime]
    """The wall clock: what is stored and shown."""
    sync_timeout: float
    background_timeout: float
    working_memory: WorkingMemory | None = None
    """Set when the Observer keeps working memory (``manage_working_memory``)."""
    config: Mapping[str, Any] = field(default_factory=dict[str, Any])
    embedder: Embedder | None = None
    """Set when retrieval has vector search: every new observation group is embedded."""
    cached: CachedMessages = field(default_factory=CachedMessages)
    """Unobserved messages read before: loads read only what came after them."""
    reads_resource: bool = True
    """Snapshots need the resource's metadata (working memory or failure state in resource
    scope)."""
    actor_estimators: dict[str, TokenEstimator] = field(default_factory=dict[str, TokenEstimator])
    """One estimator per actor model label (``estimator_for``), reused."""
    thread_backoff: dict[str, Backoff] = field(default_factory=dict[str, Backoff])
    """Resource scope: threads the Observer keeps leaving out, each backing off on its own."""
    ledger: Ledger = field(default_factory=Ledger)
    """The cycle ledger's rows of this engine's cycles, written with their commits."""
    steady: Callable[[], float]
    """The monotonic clock every wait is measured on (back-off, idle time): seconds that never
    go back whatever the wall clock does (:mod:`obsmem.clocks`)."""
    replies: ReplyTimes
    """When this engine stored each thread's latest reply, for idle time."""
    heads: KnownHeads
    """The newest head of each log this engine committed or read afresh: background work
    never starts from an older snapshot (:func:`~.writes.current`)."""

    def now(self) -> datetime:
        return self.clock()

    def memory_model(self, role: str) -> ModelSpec:
        """The Observer's (``"observer"``) or Reflector's model as it is called: ``"auto"``'s
        placeholder ``openai/local`` named by the model the server said it serves, once the
        caller has asked (:attr:`ModelCaller.served_in_place_of_placeholder`)."""
        options = self.options
        model = options.reflector_model if role == "reflector" else options.observer_model
        served = getattr(self.caller, "served_in_place_of_placeholder", None)
        return served if model == LOCAL_PLACEHOLDER and isinstance(served, str) else model

    def __post_init__(self) -> None:
        if self.options.retrieval is not None:
            searchable(self.store)  # the store keeps groups: said now, not at the first recall


def new_cycle_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:16]}"


def ms_since(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 1)


# -- what a commit changed, the log --------------------------------------------------------------


def report_titles(deps: Deps, changes: Sequence[ThreadChange], *, cycle_id: str) -> None:
    """A ``data-om-thread-update`` for every thread whose title a commit changed."""
    for change in changes:
        new = change.after.title
        if new is not None and new != change.before.title:
            deps.bus.emit(
                ThreadUpdateEvent(
                    cycle_id=cycle_id,
                    thread_id=change.after.id,
                    old_title=change.before.title,
                    new_title=new,
                    timestamp=deps.now(),
                )
            )


def join_log(log: str, addition: str, *, at: datetime) -> str:
    """Append ``addition`` to the log after a message-boundary line (or start the log)."""
    addition = addition.strip()
    if not addition:
        return log
    if not log.strip():
        return addition
    return log.rstrip() + boundary_line(at) + addition


# -- token counts ------------------------------------------------------------------------------


def estimator_for(deps: Deps, label: str | None) -> TokenEstimator:
    """The estimator for an actor model label: image and PDF costs by that model's provider
    (the deps' own estimator when the label is unknown, or the caller chose a model)."""
    if not label:
        return deps.estimator
    estimator = deps.actor_estimators.get(label)
    if estimator is None:
        if len(deps.actor_estimators) >= 64:
            deps.actor_estimators.clear()
        estimator = deps.actor_estimators[label] = for_actor(deps.estimator, label)
    return estimator


def window_estimator(deps: Deps, snapshot: Snapshot) -> TokenEstimator:
    """The estimator for ``snapshot``'s windows: the actor model the thread last saw."""
    label = snapshot.thread_metadata.get(META_LAST_MODEL)
    return estimator_for(deps, label if isinstance(label, str) else None)


def windows(
    deps: Deps, snapshot: Snapshot, actor_label: str | None = None
) -> tuple[ThreadWindow, ...]:
    """The windows of ``snapshot``'s threads, counted by the estimator for the actor model
    ``actor_label`` (a turn's model), else the one the thread last saw (OpenAI's rules when
    neither is known); reading the deps' cached messages."""
    estimator = (
        estimator_for(deps, actor_label)
        if actor_label is not None
        else window_estimator(deps, snapshot)
    )
    return windows_of(snapshot, estimator, deps.cached)


def main_window(deps: Deps, snapshot: Snapshot) -> ThreadWindow:
    """The window of the subject's own thread (the snapshot's first)."""
    return windows(deps, replace(snapshot, threads=snapshot.threads[:1]))[0]


def wants_title(state: ThreadState | None, generation: int) -> bool:
    """Whether an Observer call asks for the thread's title: when it has none, or when the
    Observer's title is from an earlier generation of the log. Never for a pinned title."""
    if state is None:
        return True
    thread = state.thread
    if thread.metadata.get("title_pinned"):
        return False
    return thread.title is None or thread.metadata.get(META_TITLE_GENERATION) != generation


def describe_error(exc: BaseException) -> str:
    """A failed cycle's error in one line, redacted: it goes to the ledger, the events, the
    hooks and the failure state. A timeout names the last error the call met before it ran out
    of time (``timed out; last error: HTTP 500: ...``), when there was one."""
    if isinstance(exc, TimeoutError):
        from ..models.retry import describe_exception, last_error

        last = last_error(exc)
        return "timed out" if last is None else f"timed out; last error: {describe_exception(last)}"
    if isinstance(exc, ModelError | StoreError):
        return redact(str(exc))
    return redact(f"{type(exc).__name__}: {exc}")
