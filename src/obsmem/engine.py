"""ObservationalMemory: the orchestrator.

Every turn and every background cycle works the same way: **load one snapshot, ask the planner,
carry out its steps**. :meth:`ObservationalMemory.prepare` stores the new input and reads the
snapshot in one store round trip, asks the planner what is due (activation, a synchronous
observation past ``block_after``, buffering, reflection), carries it out, and assembles the
context from the latest snapshot. :meth:`record` stores the reply in one round trip and starts
background buffering when the planner says so. Each cycle commits one change and reads the
snapshot after it in the same round trip, so a step never reads twice.

Background work runs in asyncio tasks owned by the engine; :meth:`settle` waits for them and
:meth:`aclose` ends them. The only in-process state is which cycles run here and, per log, the
back-off after failures (bounded; never the source of truth).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import OrderedDict
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo
from typing import Any

from . import cycles, planner, views
from .cycles import (
    META_CURRENT_TASK,
    META_EXTRACTED,
    META_LAST_MODEL,
    META_SUGGESTED_RESPONSE,
    Activation,
    Deps,
    Failure,
    Outcome,
)
from .embeddings import Embedder, resolve_embedder
from .errors import ConfigError, check_id
from .events import EventBus, Hooks, Listener, StatusEvent
from .llm import CallListener, ModelCaller
from .messages import Message, check_json, utcnow
from .models import ModelSpec
from .options import ObservationalMemoryOptions, ResolvedOptions, resolve_options
from .planner import Backoff
from .recall import RecallBoundary, recall, search_groups
from .records import OMRecord
from .snapshot import Snapshot, Subject
from .stores import LoadRequest, Store, ThreadPatch
from .tokens import HeuristicEstimator, TokenEstimator
from .window import (
    HELD_CALLS_KEY,
    RETRACTED_KEY,
    RETRACTED_THROUGH_KEY,
    ThreadWindow,
    is_retracted,
    windows_of,
)
from .working_memory import WorkingMemory

__all__ = ["ObservationalMemory", "PreparedContext"]

log = logging.getLogger("obsmem")

MAX_REMEMBERED_LOGS = 10_000
"""Most logs whose back-off state one engine keeps (the least recently used go first)."""

CATCH_UP_CONCURRENCY = 2
"""Most background catch-ups one engine runs at once; the others wait their turn."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedContext:
    """What to send the actor: memory system messages, the reminder, then raw messages."""

    messages: list[Message]
    status: StatusEvent
    record: OMRecord
    stored_input: list[Message]


@dataclass(frozen=True, slots=True, kw_only=True)
class _LogState:
    """What this engine remembers about one log between steps: failures and suppression."""

    observer: Backoff | None = None
    reflector: Backoff | None = None
    suppressed_reflection_at: int | None = None

    @property
    def empty(self) -> bool:
        return (
            self.observer is None
            and self.reflector is None
            and self.suppressed_reflection_at is None
        )


class ObservationalMemory:
    """The observational-memory engine for one store and one configuration.

    The engine owns the store it is given: :meth:`aclose` finishes background work and closes
    it (as :meth:`obsmem.Memory.aclose` does).
    """

    def __init__(
        self,
        store: Store,
        options: ResolvedOptions | ObservationalMemoryOptions | Mapping[str, Any] | bool = True,
        *,
        estimator: TokenEstimator | None = None,
        hooks: Hooks | None = None,
        tz: tzinfo = UTC,
        clock: Callable[[], datetime] = utcnow,
        sync_timeout: float = 60.0,
        background_timeout: float = 300.0,
        working_memory: WorkingMemory | None = None,
        embedder: Embedder | str | None = None,
        caller: ModelCaller | None = None,
    ) -> None:
        resolved = resolve_options(options)
        if resolved is None:
            raise ConfigError(
                "observational_memory", options, "the engine needs memory turned on (not False)"
            )
        self.store = store
        self.options = options = resolved
        self.bus = EventBus()
        self.caller = caller if caller is not None else ModelCaller()
        """Sends every Observer, Reflector and extractor call; listeners see each one."""
        self.working_memory = working_memory
        """Shown to the actor every turn; kept by the Observer when
        ``observation.manage_working_memory`` is on, by the agent's tool otherwise."""
        managed = working_memory if options.observation.manage_working_memory else None
        self._deps = Deps(
            store=store,
            options=options,
            estimator=estimator or HeuristicEstimator(),
            caller=self.caller,
            bus=self.bus,
            hooks=hooks or Hooks(),
            tz=tz,
            clock=clock,
            sync_timeout=sync_timeout,
            background_timeout=background_timeout,
            config=options.snapshot(),
            working_memory=managed,
            reads_resource=working_memory is not None and working_memory.scope == "resource",
            embedder=(
                resolve_embedder(embedder or options.retrieval.embedder or "local")
                if options.retrieval is not None and options.retrieval.vector
                else None
            ),
        )
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._logs: OrderedDict[str, _LogState] = OrderedDict()
        self._catch_up_slots = asyncio.Semaphore(CATCH_UP_CONCURRENCY)
        self._closed = False

    @property
    def estimator(self) -> TokenEstimator:
        return self._deps.estimator

    # -- identity --------------------------------------------------------------------------------

    def subject(self, thread_id: str, resource_id: str | None) -> Subject:
        """What work on this thread is about (in thread scope the resource defaults to the
        thread id; resource scope needs it). Ids are checked here, before anything is written."""
        check_id("thread_id", thread_id)
        if resource_id is not None:
            check_id("resource_id", resource_id)
        elif self.options.scope == "resource":
            raise ConfigError(
                "resource_id",
                None,
                "resource scope shares memory across a resource's threads: give the resource id "
                "(the user or account the thread belongs to)",
            )
        return Subject(
            scope=self.options.scope,
            thread_id=thread_id,
            resource_id=resource_id if resource_id is not None else thread_id,
        )

    def key(self, thread_id: str, resource_id: str | None) -> str:
        return self.subject(thread_id, resource_id).key

    # -- events ----------------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Receive every ``data-om-*`` event of every thread; returns the unsubscribe function."""
        return self.bus.subscribe(listener)

    def add_call_listener(self, listener: CallListener) -> Callable[[], None]:
        """Be told about every successful memory-model call (request, result with usage and
        cost); returns the function that removes the listener."""
        return self.caller.add_listener(listener)

    # -- retrieval -------------------------------------------------------------------------------

    def recall_boundary(self, thread_id: str, resource_id: str | None) -> RecallBoundary:
        """What a recall tool for this thread may read (the resource, or only the thread)."""
        retrieval = self.options.retrieval
        scope = "thread" if retrieval is not None and retrieval.scope == "thread" else "resource"
        subject = self.subject(thread_id, resource_id)
        return RecallBoundary(resource_id=subject.resource_id, thread_id=thread_id, scope=scope)

    async def recall(self, thread_id: str, resource_id: str | None, /, **request: Any) -> str:
        """Run one recall request (the ``recall`` tool's parameters) for this thread."""
        boundary = self.recall_boundary(thread_id, resource_id)
        search = (
            search_groups(self.store, self._deps.embedder, boundary)
            if self._deps.embedder is not None
            else None
        )
        return await recall(self.store, boundary, search=search, **request)

    # -- the turn --------------------------------------------------------------------------------

    async def prepare(
        self,
        thread_id: str,
        resource_id: str | None,
        new_messages: Sequence[Message] = (),
        *,
        actor_model: ModelSpec | None = None,
        recall: bool = False,
        keep_raw_from: int | None = None,
    ) -> PreparedContext:
        """Store ``new_messages``, do what memory work is due, and return the actor's context.
        ``recall``: the actor has the ``recall`` tool, so the context tells it how to use it.
        ``keep_raw_from``: the thread's messages from this seq on belong to the current step
        although they were stored before (a front door that stores each step as it happens):
        like ``new_messages`` they stay raw this time, neither observed nor activated."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        obs, ref = self.options.observation, self.options.reflection
        snapshot = await cycles.load(
            self._deps,
            LoadRequest(
                subject=subject,
                append=self._counted(new_messages, actor_model),
                last_reply=obs.activate_after_idle is not None
                or ref.activate_after_idle is not None,
            ),
        )
        loaded = snapshot
        stored = list(snapshot.stored)
        # The step being answered: from the last new user message on (a whole history passed
        # in at once is mostly backlog), or all the new messages (a step of tool traffic).
        users = [m for m in stored if m.role == "user"]
        first = (users[-1] if users else stored[0]).seq if stored else None
        step = [s for s in (keep_raw_from, first) if s]
        protect = {thread_id: min(step)} if step else {}
        signals = self._signals(snapshot, actor_model)
        windows = self._windows(snapshot, actor_model)
        record = snapshot.record
        state = self._state(subject.key)
        plan = planner.plan_observation(
            self.options,
            pending_tokens=sum(w.total for w in windows),
            chunk_message_tokens=[c.message_tokens for c in record.chunks],
            observation_tokens=record.observation_tokens,
            buffering_in_flight=self._running(f"obs:{subject.key}")
            or self._running(f"catch-up:{subject.key}"),
            catching_up=self._running(f"catch-up:{subject.key}"),
            step_tokens=windows[0].tokens_from(protect.get(thread_id)),
            idle_expired=signals.observation_idle,
            provider_changed=signals.provider_changed,
            observer_backoff=state.observer,
            now=self._deps.now(),
            activatable=planner.activatable_chunks(record.chunks, protect),
        )
        status = self._status(snapshot, windows, plan.threshold)
        self.bus.emit(status)

        if plan.activate and plan.trigger is not None and not plan.observe_sync:
            why = Activation(
                trigger=plan.trigger,
                previous_model=signals.previous_model,
                current_model=signals.current_model,
                last_activity_at=signals.last_activity_at,
            )
            activated = await cycles.activate_chunks(
                self._deps, snapshot, count=plan.activate, why=why
            )
            snapshot = activated or await self._load(subject)
        if plan.observe_sync:
            result = await cycles.observe_sync(
                self._deps,
                snapshot,
                keep_tokens=obs.retention_floor or 0,
                protect=protect,
                trigger="turn-sync",
            )
            snapshot = result.snapshot
            self._observer_outcome(subject.key, result.error)
        if plan.start_buffering:
            self._spawn(f"obs:{subject.key}", self._buffer_loop(snapshot))
        if plan.catch_up:
            newest = snapshot.main.unobserved[-1].seq if snapshot.main.unobserved else None
            upto = dict(protect) or {thread_id: (newest or 0) + 1}
            self._spawn(f"catch-up:{subject.key}", self._catch_up(snapshot, upto))
        snapshot = await self._reflection_step(snapshot, signals)
        main = windows[0] if snapshot is loaded else None  # a plain turn: counted already
        return PreparedContext(
            messages=self._context(
                snapshot, recall=recall, keep_from=protect.get(thread_id), window=main
            ),
            status=status,
            record=snapshot.record,
            stored_input=stored,
        )

    async def record(
        self,
        thread_id: str,
        resource_id: str | None,
        response_messages: Sequence[Message],
        *,
        actor_model: ModelSpec | None = None,
    ) -> list[Message]:
        """Store the actor's reply (and tool traffic) and start background buffering when due."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        patches = (
            [
                ThreadPatch(
                    thread_id=thread_id, set=(((META_LAST_MODEL,), views.model_label(actor_model)),)
                )
            ]
            if actor_model is not None
            else []
        )
        snapshot = await cycles.load(
            self._deps,
            LoadRequest(
                subject=subject,
                append=self._counted(response_messages, actor_model),
                patches=patches,
            ),
        )
        key = subject.key
        decision = planner.plan_after_reply(
            self.options,
            self._windows(snapshot, actor_model)[0],
            observation_tokens=snapshot.record.observation_tokens,
            buffering_in_flight=self._running(f"obs:{key}"),
            observer_backoff=self._state(key).observer,
            now=self._deps.now(),
        )
        if decision is not None:
            self._spawn(f"obs:{key}", self._buffer_loop(snapshot, idle=decision == "idle"))
        return list(snapshot.stored)

    # -- manual operations -----------------------------------------------------------------------

    async def hold_calls(
        self, thread_id: str, resource_id: str | None, call_ids: Collection[str], *, held: bool
    ) -> None:
        """Hold the tool calls ``call_ids`` of the thread back while they wait (an approval
        given later, maybe after more turns), or stop holding them (``held=False``). A held call
        is never observed as interrupted and stays raw with the messages after it."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        patch = ThreadPatch(
            thread_id=thread_id, set=tuple(((HELD_CALLS_KEY, c), held) for c in call_ids)
        )
        await cycles.load(self._deps, LoadRequest(subject=subject, patches=[patch]))

    async def retract_last(self, thread_id: str, resource_id: str | None) -> Message | None:
        """Take back the thread's newest message that is not taken back yet, and return it
        (None when there is none). Storage keeps it, marked; it leaves the context and is
        never observed from then on: a buffering cycle in flight is called off first (its
        messages are buffered again later). A message observed or buffered before it was
        taken back stays in the log."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        last = await newest_shown(self.store, thread_id)
        if last is None:
            return None
        task = self._tasks.get(f"obs:{subject.key}")
        if task is not None and not task.done():  # it may have read the message already
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        patch = ThreadPatch(thread_id=thread_id, set=(((RETRACTED_KEY, last.id), True),))
        await cycles.load(self._deps, LoadRequest(subject=subject, patches=[patch]))
        return last

    async def observe(self, thread_id: str, resource_id: str | None = None) -> bool:
        """Observe every unobserved message now (activating buffered chunks first). False when
        a failure stopped it (the failed event says why)."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        result = await cycles.observe_sync(
            self._deps, await self._load(subject), keep_tokens=0, trigger="manual"
        )
        self._observer_outcome(subject.key, result.error)
        return result.error is None

    async def reflect(
        self, thread_id: str, resource_id: str | None = None, *, guidance: str | None = None
    ) -> OMRecord | None:
        """Reflect the log now, starting at compression level 0; the new head, or None."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        outcome = await cycles.reflect_now(
            self._deps,
            await self._load(subject),
            trigger="manual",
            start_level=0,
            guidance=guidance,
        )
        if isinstance(outcome, Outcome) and outcome.snapshot is not None:
            return outcome.snapshot.record
        return None

    async def status(self, thread_id: str, resource_id: str | None = None) -> StatusEvent:
        snapshot = await self._load(self.subject(thread_id, resource_id))
        windows = self._windows(snapshot)
        threshold = planner.message_threshold(self.options, snapshot.record.observation_tokens)
        return self._status(snapshot, windows, threshold)

    async def observations(self, thread_id: str, resource_id: str | None = None) -> str:
        record = await self.store.get_record(self.key(thread_id, resource_id))
        return "" if record is None else record.observations

    async def history(
        self, thread_id: str, resource_id: str | None = None, *, limit: int | None = None
    ) -> list[OMRecord]:
        return await self.store.history(self.key(thread_id, resource_id), limit=limit)

    async def clear(self, thread_id: str, resource_id: str | None = None) -> None:
        """Forget the memory of this thread (or resource); the messages stay."""
        key = self.key(thread_id, resource_id)
        tasks = [
            task
            for name in (f"obs:{key}", f"catch-up:{key}", f"refl:{key}")
            if (task := self._tasks.get(name)) is not None
        ]
        for task in tasks:
            task.cancel()
        # A cycle cancelled mid-commit may still land: wait for each to end before clearing.
        await asyncio.gather(*tasks, return_exceptions=True)
        self._logs.pop(key, None)
        await self.store.clear(key)

    async def forget_thread(self, thread_id: str, resource_id: str | None) -> None:
        """Forget a thread: its observation log, buffered work and hints are deleted, and
        every message stored so far is taken back (storage keeps them, marked). The thread
        goes on empty. Thread scope only: in resource scope the log is shared."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        if subject.scope == "resource":
            raise ConfigError(
                "scope",
                "resource",
                "a resource's log is shared by its threads; forget it all with "
                "memory.om.clear(thread, resource), or start a new thread instead",
            )
        await self.clear(thread_id, resource_id)
        thread = await self.store.get_thread(thread_id)
        if thread is None:
            return
        patch = ThreadPatch(
            thread_id=thread_id,
            set=(
                ((RETRACTED_THROUGH_KEY,), thread.message_count),
                ((META_CURRENT_TASK,), None),
                ((META_SUGGESTED_RESPONSE,), None),
                ((META_EXTRACTED,), None),
            ),
        )
        await cycles.load(self._deps, LoadRequest(subject=subject, patches=[patch]))

    # -- lifecycle -------------------------------------------------------------------------------

    async def settle(self) -> None:
        """Wait until no background work is left (tests use this instead of sleeping)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def aclose(self, *, cancel: bool = False) -> None:
        """Finish background work (or, with ``cancel=True``, abandon it), then close the store.
        The engine is unusable afterwards; closing twice is harmless."""
        if not cancel:
            await self.settle()
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.store.aclose()

    # -- background work -------------------------------------------------------------------------

    def _running(self, name: str) -> bool:
        task = self._tasks.get(name)
        return task is not None and not task.done()

    def _spawn(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        if self._running(name) or self._closed:
            work.close()
            return
        task = asyncio.get_running_loop().create_task(work, name=f"obsmem {name}")
        self._tasks[name] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._tasks.get(name) is t:
                del self._tasks[name]
            if not t.cancelled() and t.exception() is not None:
                log.error("obsmem background task %s failed", name, exc_info=t.exception())

        task.add_done_callback(done)

    async def _buffer_loop(self, snapshot: Snapshot, *, idle: bool = False) -> None:
        """Buffer chunks while the planner says another is due, starting from ``snapshot``."""
        key = snapshot.subject.key
        while not self._closed:
            batch = planner.chunk_slice(
                self.options,
                self._main_window(snapshot),
                observation_tokens=snapshot.record.observation_tokens,
                idle=idle,
            )
            if batch is None:
                return
            outcome = await cycles.buffer_chunk(self._deps, snapshot, batch)
            self._observer_outcome(key, outcome.error if isinstance(outcome, Failure) else None)
            if isinstance(outcome, Failure) or outcome.snapshot is None:
                return
            snapshot = outcome.snapshot
            idle = False
            if not planner.buffering_due(
                self.options,
                self._main_window(snapshot),
                observation_tokens=snapshot.record.observation_tokens,
            ):
                return

    async def _catch_up(self, snapshot: Snapshot, upto: dict[str, int]) -> None:
        """A background catch-up (see :func:`obsmem.cycles.catch_up`), at most
        ``CATCH_UP_CONCURRENCY`` at a time per engine so a fleet of old threads waking up at once
        does not flood the Observer."""
        async with self._catch_up_slots:
            snapshot = await self._load(snapshot.subject)
            result = await cycles.catch_up(self._deps, snapshot, upto=upto)
        self._observer_outcome(snapshot.subject.key, result.error)

    async def _reflection_step(self, snapshot: Snapshot, signals: views.CacheSignals) -> Snapshot:
        """Activate, run or start a reflection when the planner says so; the snapshot after."""
        record = snapshot.record
        key = snapshot.subject.key
        br = record.buffered_reflection
        tail_tokens = 0
        if br is not None:
            tail = "\n".join(record.observations.split("\n")[br.line_count :])
            tail_tokens = self._deps.estimator.count_text(tail)
        state = self._state(key)
        plan = planner.plan_reflection(
            self.options,
            observation_tokens=record.observation_tokens,
            has_buffered_reflection=br is not None,
            buffered_reflection_tokens=br.token_count if br else 0,
            unreflected_tail_tokens=tail_tokens,
            reflection_in_flight=self._running(f"refl:{key}"),
            idle_expired=signals.reflection_idle,
            provider_changed=signals.reflection_provider_changed,
            reflector_backoff=state.reflector,
            now=self._deps.now(),
            suppressed_at=state.suppressed_reflection_at,
        )
        if plan.activate_buffered and plan.trigger is not None:
            activated = await cycles.activate_reflection(self._deps, snapshot, trigger=plan.trigger)
            snapshot = activated or await self._load(snapshot.subject)
        elif plan.reflect_sync:
            outcome = await cycles.reflect_now(self._deps, snapshot, trigger="turn-sync")
            self._reflector_outcome(key, outcome.error if isinstance(outcome, Failure) else None)
            after: int | None = None
            if isinstance(outcome, Outcome) and outcome.snapshot is not None:
                snapshot = outcome.snapshot
                after = snapshot.record.observation_tokens
            self._update(
                key,
                suppressed_reflection_at=planner.suppression_after(
                    record.observation_tokens, after, threshold=plan.threshold
                ),
            )
        if plan.start_buffering:
            self._spawn(f"refl:{key}", self._reflection_task(snapshot))
        return snapshot

    async def _reflection_task(self, snapshot: Snapshot) -> None:
        outcome = await cycles.buffer_reflection(self._deps, snapshot)
        if outcome is not None:
            error = outcome.error if isinstance(outcome, Failure) else None
            self._reflector_outcome(snapshot.subject.key, error)

    # -- back-off --------------------------------------------------------------------------------

    def _state(self, key: str) -> _LogState:
        return self._logs.get(key) or _LogState()

    def _update(self, key: str, **changes: Any) -> None:
        state = replace(self._state(key), **changes)
        if state.empty:
            self._logs.pop(key, None)
            return
        self._logs[key] = state
        self._logs.move_to_end(key)
        while len(self._logs) > MAX_REMEMBERED_LOGS:
            self._logs.popitem(last=False)

    def _observer_outcome(self, key: str, error: str | None) -> None:
        previous = self._state(key).observer
        if error is None:
            if previous is not None:
                self._update(key, observer=None)
            return
        self._update(key, observer=self._backoff(previous, error))

    def _reflector_outcome(self, key: str, error: str | None) -> None:
        previous = self._state(key).reflector
        if error is None:
            if previous is not None:
                self._update(key, reflector=None)
            return
        self._update(key, reflector=self._backoff(previous, error))

    def _backoff(self, previous: Backoff | None, error: str) -> Backoff:
        return planner.backoff_after(
            previous, now=self._deps.now(), error=error, spread=random.random()
        )

    # -- context and status ----------------------------------------------------------------------

    def _context(
        self,
        snapshot: Snapshot,
        *,
        recall: bool,
        keep_from: int | None = None,
        window: ThreadWindow | None = None,
    ) -> list[Message]:
        main = window or self._windows(snapshot)[0]
        return views.actor_context(
            snapshot,
            self.options,
            now=self._deps.now(),
            tz=self._deps.tz,
            working_memory=self.working_memory,
            recall=recall,
            window=main,
            keep_from=keep_from,
        )

    def _status(
        self, snapshot: Snapshot, windows: Sequence[ThreadWindow], threshold: int
    ) -> StatusEvent:
        key = snapshot.subject.key
        return views.status_event(
            snapshot,
            windows,
            self.options,
            threshold=threshold,
            buffering=self._running(f"obs:{key}"),
            reflecting=self._running(f"refl:{key}"),
        )

    def _signals(self, snapshot: Snapshot, actor_model: ModelSpec | None) -> views.CacheSignals:
        return views.cache_signals(snapshot, self.options, actor_model, now=self._deps.now())

    # -- misc ------------------------------------------------------------------------------------

    async def _load(self, subject: Subject) -> Snapshot:
        return await cycles.load(self._deps, LoadRequest(subject=subject))

    def _main_window(self, snapshot: Snapshot) -> ThreadWindow:
        return self._windows(replace(snapshot, threads=snapshot.threads[:1]))[0]

    def _windows(
        self, snapshot: Snapshot, actor_model: ModelSpec | None = None
    ) -> tuple[ThreadWindow, ...]:
        return windows_of(snapshot, self._estimator(snapshot, actor_model), self._deps.held)

    def _estimator(self, snapshot: Snapshot, actor_model: ModelSpec | None) -> TokenEstimator:
        """The estimator for the thread's window: image and PDF costs by the actor's provider
        (this call's model, else the one the thread last saw; OpenAI's rules when neither is
        known)."""
        if actor_model is not None:
            return self._estimator_of(views.model_label(actor_model))
        label = snapshot.thread_metadata.get(META_LAST_MODEL)
        return self._estimator_of(label if isinstance(label, str) else None)

    def _estimator_of(self, label: str | None) -> TokenEstimator:
        """The estimator for an actor model label (shared with the cycles, reused)."""
        return cycles.estimator_for(self._deps, label)

    def _counted(
        self, messages: Sequence[Any], actor_model: ModelSpec | None = None
    ) -> Sequence[Message]:
        """``messages`` with their token estimates cached in their parts, so every later read
        of the window (from any store, in any process) reuses them instead of re-counting."""
        estimator = self._estimator_of(
            views.model_label(actor_model) if actor_model is not None else None
        )
        if isinstance(messages, str | Message):
            raise ConfigError(
                "messages", type(messages).__name__, "pass a list of Message (Message.user(...))"
            )
        for index, message in enumerate(messages):
            if not isinstance(message, Message):
                raise ConfigError(
                    f"messages[{index}]",
                    type(message).__name__,
                    "must be an obsmem Message (Message.user(...), Message.assistant(...))",
                )
            check_json(message)
            estimator.count_message(message)
        return messages

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this ObservationalMemory was closed")


async def newest_shown(store: Store, thread_id: str) -> Message | None:
    """The thread's newest message not taken back (read newest first, a page at a time)."""
    thread = await store.get_thread(thread_id)
    if thread is None:
        return None
    through: int | None = None
    while True:
        batch = await store.list_messages(
            thread_id, through_seq=through, limit=50, newest_first=True
        )
        last = next((m for m in batch if not is_retracted(m, thread.metadata)), None)
        if last is not None or len(batch) < 50:
            return last
        through = (batch[-1].seq or 1) - 1
