"""Shared pieces of the memory cycles: dependencies, the commit loop, the Observer call."""

from __future__ import annotations

import fnmatch
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, tzinfo
from typing import Any

from ..answers import ParsedOutput
from ..context import with_temporal_markers
from ..embeddings import Embedder
from ..errors import ConflictError, ModelError, ObsmemError, StoreError
from ..events import EventBus, Hooks, ThreadUpdateEvent, call_hook
from ..extractors import Exchange
from ..llm import ModelCaller
from ..messages import Message, display_text
from ..meta_keys import (
    META_CURRENT_TASK,
    META_LAST_MODEL,
    META_SUGGESTED_RESPONSE,
    META_TITLE_GENERATION,
)
from ..models import model_input_capabilities
from ..observations import boundary_line
from ..observer import ObserverInput, observe_exchange
from ..options import ResolvedOptions
from ..planner import Backoff
from ..records import CycleRecord, MessageRange, ObservationGroup, OMRecord
from ..snapshot import Snapshot, Subject, ThreadState
from ..stores import (
    Change,
    Commit,
    CommitResult,
    LoadRequest,
    ResourcePatch,
    StartGeneration,
    Store,
    ThreadChange,
    ThreadPatch,
)
from ..tokens import TokenEstimator
from ..tokens.estimator import for_actor
from ..window import CachedMessages, ThreadWindow, windows_of
from ..working_memory import WorkingMemory, strip_tool_traffic
from .ledger import Ledger

log = logging.getLogger("obsmem")

COMMIT_ATTEMPTS = 20


@dataclass(slots=True, kw_only=True)
class Deps:
    """What every cycle needs: the store, the options and the outside world."""

    store: Store
    options: ResolvedOptions
    estimator: TokenEstimator
    caller: ModelCaller
    bus: EventBus
    hooks: Hooks
    tz: tzinfo
    clock: Callable[[], datetime]
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

    def now(self) -> datetime:
        return self.clock()


def new_cycle_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:16]}"


def attachment_filter(options: ResolvedOptions) -> Callable[[str], bool]:
    setting = options.observation.observe_attachments
    if setting is True:
        return lambda _: True
    if setting is False:
        return lambda _: False
    if setting == "auto":
        caps = model_input_capabilities(options.observer_model)
        patterns = [p for cap, p in _CAPABILITY_MIME.items() if cap in caps]
    else:
        patterns = list(setting)
    return lambda mime: any(fnmatch.fnmatch(mime.lower(), p) for p in patterns)


_CAPABILITY_MIME = {
    "image": "image/*",
    "pdf": "application/pdf",
    "audio": "audio/*",
    "video": "video/*",
}


def ms_since(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 1)


# -- commits ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Write:
    """What one cycle commits: a change of the head and what comes with it."""

    change: Change
    groups: Sequence[ObservationGroup] = ()
    threads: Sequence[ThreadPatch] = ()
    resource: ResourcePatch | None = None
    ranges: tuple[MessageRange, ...] = ()
    """The messages the cycle covered, for its ledger row (when they depend on the head)."""


async def commit(
    deps: Deps,
    subject: Subject,
    head: OMRecord,
    decide: Callable[[OMRecord], Write | None],
    *,
    cycle_id: str | None = None,
    ranges: Sequence[MessageRange] = (),
) -> CommitResult | None:
    """Commit ``decide(head)`` against the head the cycle read, and read the snapshot after it.

    A lost race carries the current head; the cycle decides again from it (``decide`` returns
    None when its work became redundant, which drops it). None when dropped or when the memory
    was cleared meanwhile. The ledger row of cycle ``cycle_id`` (covering ``ranges``, or the
    write's own) goes with the commit; a dropped cycle's row is written on its own.
    """
    for _ in range(COMMIT_ATTEMPTS):
        write = decide(head)
        if write is None:
            if cycle_id is not None:
                await _record_redundant(deps, subject, cycle_id, ranges)
            return None
        rows = deps.ledger.take(subject.key)
        row = (
            None
            if cycle_id is None
            else deps.ledger.row(
                cycle_id,
                outcome="committed",
                ranges=write.ranges or ranges,
                generation=head.generation
                + (1 if isinstance(write.change, StartGeneration) else 0),
            )
        )
        if row is not None:
            rows.append(row)
        try:
            result = await deps.store.commit(
                Commit(
                    key=subject.key,
                    record_id=head.id,
                    expected_version=head.version,
                    change=write.change,
                    groups=write.groups,
                    threads=write.threads,
                    resource=write.resource,
                    reload=subject,
                    held=deps.cached.messages(subject),
                    resource_metadata=deps.reads_resource,
                    cycles=rows,
                    keep_cycles=deps.ledger.keep,
                )
            )
        except ConflictError as exc:
            _queue_again(deps, rows, row)
            if not isinstance(exc.current, OMRecord):
                return None  # the memory was cleared meanwhile
            head = exc.current
            continue
        except BaseException:
            _queue_again(deps, rows, row)
            raise
        if result.snapshot is not None:
            deps.cached.remember(result.snapshot)
        return result
    raise StoreError(f"memory work on {subject.key} kept losing races; giving up for this step")


def _queue_again(deps: Deps, rows: Sequence[CycleRecord], own: CycleRecord | None) -> None:
    """Rows taken for a write that did not happen wait for the next one (not the cycle's own:
    it is built again)."""
    for waiting in rows:
        if waiting is not own:
            deps.ledger.queue(waiting)


async def _record_redundant(
    deps: Deps, subject: Subject, cycle_id: str, ranges: Sequence[MessageRange]
) -> None:
    """A cycle whose work another worker did first: its row, in a small write of its own."""
    row = deps.ledger.row(cycle_id, outcome="redundant", ranges=ranges)
    if row is None:
        return
    deps.ledger.queue(row)
    await flush_ledger(deps, subject)


async def flush_ledger(deps: Deps, subject: Subject) -> None:
    """Write the rows waiting for ``subject``'s key now (a small write; a store that cannot take
    it is logged, and the rows wait for the next write)."""
    rows = deps.ledger.take(subject.key)
    if not rows:
        return
    try:
        await load(deps, LoadRequest(subject=subject, cycles=rows))
    except ObsmemError as exc:
        for row in rows:
            deps.ledger.queue(row)
        log.warning("obsmem: could not record cycles of %s: %s", subject.key, exc)


async def load(deps: Deps, request: LoadRequest) -> Snapshot:
    """A snapshot, reading only the messages not cached from before (and caching them after).
    A load that writes anyway carries the ledger rows waiting for its key."""
    rows: list[CycleRecord] = []
    if request.append or request.patches or request.resource_patch or request.cycles:
        rows = deps.ledger.take(request.subject.key)
    request = replace(
        request,
        held=request.held or deps.cached.messages(request.subject),
        resource_metadata=deps.reads_resource,
        cycles=(*request.cycles, *rows),
        keep_cycles=deps.ledger.keep,
    )
    try:
        snapshot = await deps.store.load(request)
    except BaseException:
        for row in rows:
            deps.ledger.queue(row)
        raise
    return deps.cached.remember(snapshot)


async def reload(deps: Deps, subject: Subject) -> Snapshot:
    """A fresh snapshot (when a dropped commit brought none)."""
    return await load(deps, LoadRequest(subject=subject))


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


# -- observer calls ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ObserverRun:
    """An Observer answer (after the transform hooks) and the exchange extractors look at."""

    parsed: ParsedOutput
    exchange: Exchange


async def run_observer(
    deps: Deps,
    snapshot: Snapshot,
    *,
    thread_id: str,
    messages: Sequence[Message] = (),
    threads: Sequence[tuple[str, Sequence[Message]]] = (),
    previous: str,
    cycle_id: str,
    operation: str,
    budget: float,
    sections: Sequence[tuple[str, str]] = (),
    prior_values: Mapping[str, Any] | None = None,
) -> ObserverRun | None:
    """One Observer call with the transform hooks, asking for the extractors' inline
    ``sections``. None means "nothing to observe" (a ``before_observation`` hook returned no
    messages)."""
    obs = deps.options.observation
    if deps.hooks.before_observation is not None and not threads:
        changed = await call_hook(deps.hooks.before_observation, list(messages))
        if changed is not None:
            messages = list(changed)
            if not messages:
                return None
    messages = strip_tool_traffic(messages)
    threads = [(t, strip_tool_traffic(m)) for t, m in threads]
    if deps.options.temporal_markers:
        # The Observer sees the same "N hours later" lines the actor saw.
        messages = with_temporal_markers(messages, deps.tz)
        threads = [(t, with_temporal_markers(m, deps.tz)) for t, m in threads]
    state = snapshot.thread(thread_id)
    meta = state.thread.metadata if state is not None else {}
    exchange = await observe_exchange(
        ObserverInput(
            messages=messages,
            threads=threads,
            previous_observations=previous,
            previous_observer_tokens=obs.previous_observer_tokens,
            prior_current_task=meta.get(META_CURRENT_TASK),
            prior_suggested_response=meta.get(META_SUGGESTED_RESPONSE),
            prior_thread_title=state.thread.title if state is not None else None,
            ask_thread_title=obs.thread_title and wants_title(state, snapshot.record.generation),
            continuation_hints=obs.continuation_hints.any,
            instruction=obs.instruction,
            extra_sections=sections,
            prior_values=prior_values or {},
            tz=deps.tz,
            part_cap=obs.max_part_tokens,
        ),
        caller=deps.caller,
        model=obs.model,
        model_settings=obs.model_settings,
        estimator=deps.estimator,
        timeout=budget,
        attachment_filter=attachment_filter(deps.options),
        cycle_id=cycle_id,
        operation=operation,
    )
    parsed = exchange.parsed
    if deps.hooks.after_observation is not None:
        text = await call_transform(deps.hooks.after_observation, parsed.observations)
        parsed = replace(parsed, observations=text)
    return ObserverRun(
        parsed=parsed,
        exchange=Exchange(
            seen=exchange.seen,
            answer=exchange.result.text,
            model=obs.model,
            model_settings=obs.model_settings,
        ),
    )


async def call_transform(hook: Callable[[str], Any] | None, text: str) -> str:
    """A transform hook's replacement for ``text`` (``text`` itself when it returns no text)."""
    changed = await call_hook(hook, text)
    return (display_text(changed) or "") if isinstance(changed, str) else text


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


def previous_for_observer(record: OMRecord) -> str:
    if not record.chunks:
        return record.observations
    pending = "\n\n".join(c.observations for c in record.chunks)
    return f"{record.observations}\n\n--- BUFFERED (pending activation) ---\n\n{pending}".strip()


def describe_error(exc: BaseException) -> str:
    """A failed cycle's error in one line. A timeout names the last error the call met before
    it ran out of time (``timed out; last error: HTTP 500: ...``), when there was one."""
    if isinstance(exc, TimeoutError):
        from ..models.retry import describe_exception, last_error

        last = last_error(exc)
        return "timed out" if last is None else f"timed out; last error: {describe_exception(last)}"
    if isinstance(exc, ModelError | StoreError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
