"""What the inspector's pages read from a store: a handful of bounded reads per page.

Nothing here writes. The thread list reads the threads (their stored message counts, never
their messages) and, for the rows on the page shown, each head record and unobserved tail
(capped); a thread page reads one page of messages, the head, the groups and a capped
unobserved tail. Every function takes the store and returns plain frozen data for the
templates. It is the ui's one way to read the store: the other modules call these (and write
only through ``Memory``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..failures import FailureState, failures_in
from ..messages import Message
from ..records import CycleRecord, ModelExchange, ObservationGroup, OMRecord, Thread, record_key
from ..sent import sent_of
from ..stores.base import Store
from ..stores.reads import CycleQuery, thread_cycle, thread_cycles
from ..tokens.estimator import HeuristicEstimator
from ..window import is_retracted

if TYPE_CHECKING:
    from ..queue.status import QueueState

__all__ = [
    "LIST_TAIL_CAP",
    "TAIL_CAP",
    "CycleQuery",
    "StateSummary",
    "ThreadListing",
    "ThreadRow",
    "Thresholds",
    "head_of",
    "in_force",
    "list_threads",
    "pages_of",
    "queue_of",
    "queues_of",
    "thread_cycle",
    "thread_cycles",
    "thread_state",
    "unobserved_tail",
]

TAIL_CAP = 2_000
"""At most this many unobserved messages are read to count a thread's unobserved tokens (and
to build the actor's context): a thread memory never saw is not read whole."""
LIST_TAIL_CAP = 200
"""The same for each row of the thread list; past it, the tokens are estimated from the
messages read and the thread's stored message count."""

ESTIMATOR = HeuristicEstimator()


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The thresholds the pages compare against when a thread has no measured turn (the
    command's flags); a measured turn carries those in force (:func:`in_force`)."""

    message_tokens: int = 30_000
    observation_tokens: int = 40_000


def in_force(messages: Sequence[Message], fallback: Thresholds) -> Thresholds:
    """The thresholds stamped on the newest measured turn among ``messages`` (the writer's
    options, :mod:`obsmem.sent`), else ``fallback``."""
    for message in reversed(messages):
        turn = sent_of(message)
        if turn is not None:
            return Thresholds(turn.message_tokens, turn.observation_tokens)
    return fallback


@dataclass(frozen=True, slots=True)
class StateSummary:
    """A thread's memory state: healthy, behind (N unobserved tokens past the threshold) or
    failing (since when, with what error)."""

    kind: Literal["healthy", "behind", "failing"]
    unobserved_tokens: int
    unobserved_messages: int
    capped: bool = False
    """More unobserved messages exist than were read: ``unobserved_tokens`` is an estimate."""
    failures: tuple[FailureState, ...] = ()
    stalled: str = ""
    """The log's queued work has waited too long with no worker alive (``background="queue"``):
    the queue in words, with the fix."""

    @property
    def label(self) -> str:
        """The state in a few words."""
        about = "about " if self.capped else ""
        if self.kind == "failing" and self.failures:
            first = min(self.failures, key=lambda f: f.first_at)
            return f"failing since {first.first_at:%Y-%m-%d %H:%M:%S} UTC"
        if self.kind == "failing":
            return "stalled: queued work waits, no worker alive"
        if self.kind == "behind":
            return f"behind with {about}{self.unobserved_tokens:,} unobserved tokens"
        return "healthy"

    @property
    def errors(self) -> tuple[str, ...]:
        """The stored failures, one line each (error and fix), and a stalled queue."""
        stalled = (self.stalled,) if self.stalled else ()
        return tuple(f.summary() for f in self.failures) + stalled


@dataclass(frozen=True, slots=True)
class ThreadRow:
    """One line of the thread list."""

    thread: Thread
    state: StateSummary


@dataclass(frozen=True, slots=True)
class ThreadListing:
    """One page of the thread list, with every resource and its thread count."""

    resources: tuple[tuple[str, int], ...]
    rows: tuple[ThreadRow, ...]
    total: int
    page: int
    pages: int
    query: str = ""
    resource: str = ""


async def head_of(store: Store, thread: Thread) -> tuple[str, OMRecord | None]:
    """The key and head record of the log covering ``thread``: its own (thread scope) or its
    resource's (resource scope); the thread key and None when memory never ran."""
    own = record_key("thread", thread_id=thread.id, resource_id=thread.resource_id)
    record = await store.get_record(own)
    if record is not None:
        return own, record
    shared = record_key("resource", thread_id=None, resource_id=thread.resource_id)
    record = await store.get_record(shared)
    return (shared, record) if record is not None else (own, None)


async def unobserved_tail(
    store: Store, thread: Thread, record: OMRecord | None, cap: int = TAIL_CAP
) -> tuple[list[Message], bool]:
    """The thread's unobserved messages (the newest ``cap`` at most, taken-back ones left
    out), oldest first, and whether there were more."""
    cursor = record.cursor.get(thread.id, 0) if record is not None else 0
    newest = await store.list_messages(
        thread.id, after_seq=cursor, limit=cap + 1, newest_first=True
    )
    capped = len(newest) > cap
    shown = [m for m in reversed(newest[:cap]) if not is_retracted(m, thread.metadata)]
    return shown, capped


async def thread_state(
    store: Store,
    thread: Thread,
    record: OMRecord | None,
    thresholds: Thresholds,
    resource_metadata: Mapping[str, Any],
    tail: tuple[list[Message], bool] | None = None,
    cap: int = TAIL_CAP,
    queue: QueueState | None = None,
) -> StateSummary:
    """The thread's state from its stored failures, its log's ``queue`` (when it has one) and
    its unobserved tail (read here, at most ``cap`` messages, unless ``tail``, what
    :func:`unobserved_tail` returned, is given)."""
    if tail is None:
        tail = await unobserved_tail(store, thread, record, cap)
    messages, capped = tail
    tokens = sum(ESTIMATOR.count_message(m) for m in messages)
    cursor = record.cursor.get(thread.id, 0) if record is not None else 0
    unobserved = max(len(messages), thread.message_count - cursor)
    if capped and messages:  # scale what was read to every unobserved message
        tokens = round(tokens * unobserved / len(messages))
    failures = tuple(failures_in(thread.metadata).values()) + tuple(
        f for f in failures_in(resource_metadata).values() if f.thread_id in (None, thread.id)
    )
    stalled = queue.line() if queue is not None and queue.stuck else ""
    if failures or stalled:
        kind: Literal["healthy", "behind", "failing"] = "failing"
    elif tokens > in_force(messages, thresholds).message_tokens:
        kind = "behind"
    else:
        kind = "healthy"
    count = unobserved if capped else len(messages)
    return StateSummary(kind, tokens, count, capped, failures, stalled)


def _queue_dsn(store: Store) -> str | None:
    """Where the store's job queue lives (``background="queue"`` on PostgreSQL), else None."""
    dsn = getattr(store, "queue_dsn", None)
    return dsn if isinstance(dsn, str) else None


async def queue_of(store: Store, key: str) -> QueueState | None:
    """The log's jobs in the queue and the workers alive; None for a store without a queue."""
    if (dsn := _queue_dsn(store)) is None:
        return None
    from ..queue.status import queue_state

    return await queue_state(dsn, [key])


async def queues_of(store: Store, keys: Sequence[str]) -> Mapping[str, QueueState]:
    """The queue state of each of the log ``keys`` with a job waiting or running."""
    if (dsn := _queue_dsn(store)) is None or not keys:
        return {}
    from ..queue.status import queue_states

    return await queue_states(dsn, keys)


def pages_of(total: int, per_page: int) -> int:
    """How many pages ``total`` items fill (at least one)."""
    return max(1, -(-total // per_page))


def _matches(thread: Thread, query: str) -> bool:
    needle = query.lower()
    return any(needle in (text or "").lower() for text in (thread.id, thread.title))


async def list_threads(
    store: Store,
    thresholds: Thresholds,
    *,
    query: str = "",
    resource: str = "",
    page: int = 1,
    per_page: int = 50,
) -> ThreadListing:
    """One page of threads (most recently active first), of one resource or all, whose id or
    title contains ``query``; only the rows shown get their state read."""
    counts: list[tuple[str, int]] = []
    found: list[Thread] = []
    for rid in await store.list_resources():
        threads = await store.list_threads(rid)
        counts.append((rid, len(threads)))
        if resource and rid != resource:
            continue
        found.extend(t for t in threads if not query or _matches(t, query))
    found.sort(key=lambda t: (t.updated_at, t.id), reverse=True)
    pages = pages_of(len(found), per_page)
    page = min(max(page, 1), pages)
    shown = found[(page - 1) * per_page : page * per_page]
    resource_meta: dict[str, Mapping[str, Any]] = {}
    heads = [await head_of(store, thread) for thread in shown]
    queues = await queues_of(store, sorted({key for key, _ in heads}))
    rows: list[ThreadRow] = []
    for thread, (key, record) in zip(shown, heads, strict=True):
        if thread.resource_id not in resource_meta:
            resource_meta[thread.resource_id] = await store.get_resource(thread.resource_id)
        meta = resource_meta[thread.resource_id]
        state = await thread_state(
            store, thread, record, thresholds, meta, cap=LIST_TAIL_CAP, queue=queues.get(key)
        )
        rows.append(ThreadRow(thread, state))
    return ThreadListing(tuple(counts), tuple(rows), len(found), page, pages, query, resource)


def groups_of_thread(groups: Sequence[ObservationGroup], thread_id: str) -> list[ObservationGroup]:
    """The groups that cover messages of ``thread_id`` (observations before reflections)."""
    return [g for g in groups if any(r.thread_id == thread_id for r in g.ranges)]


async def thread_named(store: Store, thread_id: str) -> Thread | None:
    """The thread ``thread_id`` names (None when it names none, or is empty)."""
    return await store.get_thread(thread_id) if thread_id else None


async def threads_of(store: Store, resource_id: str) -> list[Thread]:
    """The resource's threads (none for an empty id)."""
    return await store.list_threads(resource_id) if resource_id else []


async def resource_metadata(store: Store, resource_id: str) -> Mapping[str, Any]:
    return await store.get_resource(resource_id)


async def messages_of(
    store: Store, thread: Thread, after_seq: int, through_seq: int | None = None
) -> list[Message]:
    """The thread's messages with ``after_seq < seq <= through_seq``, in order."""
    return await store.list_messages(thread.id, after_seq=after_seq, through_seq=through_seq)


async def thread_groups(store: Store, thread: Thread) -> list[ObservationGroup]:
    """The observation groups covering the thread's messages (see :func:`groups_of_thread`)."""
    groups = await store.list_observation_groups(thread.resource_id, thread_id=None)
    return groups_of_thread(groups, thread.id)


async def generations(
    store: Store, thread: Thread, key: str
) -> tuple[list[OMRecord], list[ObservationGroup]]:
    """Every generation of the log ``key`` and its reflections' groups."""
    groups = await store.list_observation_groups(thread.resource_id, thread_id=None)
    reflections = [g for g in groups if g.key == key and g.metadata.get("kind") == "reflection"]
    return list(await store.history(key)), reflections


async def cycle_calls(store: Store, cycle: CycleRecord) -> list[ModelExchange]:
    """What the cycle's model calls were shown and answered (empty when not kept)."""
    return await store.cycle_detail(cycle.cycle_id)
