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

The class keeps the public operations; what they do lives beside it: a turn's steps in
:mod:`obsmem.turn`, background tasks in :mod:`obsmem.background`, back-off and failure state
in :mod:`obsmem.outcomes`, the choice of memory models in :mod:`obsmem.memory_models`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from . import cycles, planner, sent, views
from .background import Background
from .clocks import ReplyTimes, steady_clock_for
from .cycles import Deps, Failure, Outcome
from .embeddings import Embedder, resolve_embedder
from .errors import ConfigError, ConflictError, MemoryUnavailableError, check_id
from .events import EventBus, Hooks, Listener, StatusEvent, Trigger
from .failures import FailureState, MemoryStatus
from .llm import CallListener, ModelCaller
from .memory_models import MemoryModels
from .messages import Message, utcnow
from .meta_keys import (
    META_CURRENT_TASK,
    META_EXTRACTED,
    META_HELD_CALLS,
    META_LAST_MODEL,
    META_RETRACTED,
    META_RETRACTED_THROUGH,
    META_SUGGESTED_RESPONSE,
)
from .models import ModelSpec
from .models.environment import AutoModel
from .options import ObservationalMemoryOptions, ResolvedOptions, resolve_options
from .outcomes import Outcomes
from .queue.jobs import QueueSide
from .recall import DEFAULT_BUDGET, RecallBoundary, recall, search_groups, searchable
from .records import OMRecord, ThreadCopy, record_key
from .snapshot import Snapshot, Subject
from .stores import CoreStore, LoadRequest, ThreadPatch
from .tokens import HeuristicEstimator, TokenEstimator
from .turn import Turns, step_start
from .window import shown_tail
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
    incarnation: str = ""
    """The incarnation of the thread the input was stored in."""


class ObservationalMemory:
    """The observational-memory engine for one store and one configuration.

    The engine owns the store it is given: :meth:`aclose` finishes background work and closes
    it (as :meth:`obsmem.Memory.aclose` does).
    """

    def __init__(
        self,
        store: CoreStore,
        options: ResolvedOptions | ObservationalMemoryOptions | Mapping[str, Any] | bool = True,
        *,
        estimator: TokenEstimator | None = None,
        hooks: Hooks | None = None,
        tz: tzinfo = UTC,
        clock: Callable[[], datetime] = utcnow,
        steady_clock: Callable[[], float] | None = None,
        sync_timeout: float = 60.0,
        background_timeout: float = 300.0,
        working_memory: WorkingMemory | None = None,
        embedder: Embedder | str | None = None,
        caller: ModelCaller | None = None,
    ) -> None:
        """``clock`` is the wall clock: the times stored and shown. ``steady_clock`` times every
        wait (back-off, idle time) in seconds that never go back; by default the system's
        monotonic clock, or, with a ``clock`` of your own (a replay), one read off it that
        ignores its steps back (:mod:`obsmem.clocks`)."""
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
            steady=(steady := steady_clock or steady_clock_for(clock)),
            replies=ReplyTimes(clock, steady, remember=MAX_REMEMBERED_LOGS),
            heads=cycles.KnownHeads(remember=MAX_REMEMBERED_LOGS),
            sync_timeout=sync_timeout,
            background_timeout=background_timeout,
            config=options.snapshot(),
            working_memory=managed,
            # Resource scope keeps the log's failure state in the resource's metadata.
            reads_resource=options.scope == "resource"
            or (working_memory is not None and working_memory.scope == "resource"),
            embedder=(
                resolve_embedder(embedder or options.retrieval.embedder or "local")
                if options.retrieval is not None and options.retrieval.vector
                else None
            ),
            ledger=cycles.Ledger(keep=options.cycle_retention, keep_detail=options.cycle_detail),
        )
        self._stop_ledger = self.caller.add_listener(self._deps.ledger.on_call)
        self._outcomes = Outcomes(self._deps, remember=MAX_REMEMBERED_LOGS)
        self.queue = QueueSide(store, options, self.bus) if options.background == "queue" else None
        """``background="queue"``: turns queue their log's background work for workers."""
        self._background = Background(
            self._deps,
            self._outcomes,
            catch_up_concurrency=CATCH_UP_CONCURRENCY,
            queued=self.queue is not None,
        )
        self._turns = Turns(self._deps, self._background, self._outcomes)
        self._sent = sent.PendingSent()  # each turn's measure, stamped on its reply
        self._tasks = self._background.tasks
        """The background tasks by name (``obs:<key>``, ``catch-up:<key>``, ``refl:<key>``)."""
        self._logs = self._outcomes.logs
        """What this engine remembers per log (back-off, failure state, suppression)."""
        self._models = MemoryModels(self._deps, self._outcomes)

    @property
    def model_choice(self) -> AutoModel | None:
        """What ``"auto"`` resolved to (None while unresolved, or when models were given)."""
        return self._models.choice

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
            search_groups(searchable(self.store), self._deps.embedder, boundary)
            if self._deps.embedder is not None
            else None
        )
        return await recall(self.store, boundary, search, DEFAULT_BUDGET, **request)

    # -- the turn --------------------------------------------------------------------------------

    async def prepare(
        self,
        thread_id: str,
        resource_id: str | None,
        new_messages: Sequence[Message] = (),
        *,
        actor_model: ModelSpec | None = None,
        recall: bool = False,
        step_from: int | None = None,
        keep_raw_from: int | None = None,
        expect: ThreadCopy | None = None,
    ) -> PreparedContext:
        """Store ``new_messages``, do what memory work is due, and return the actor's context.
        ``recall``: the actor has the ``recall`` tool, so the context tells it how to use it.
        ``step_from``: the current step's first seq, when the thread's messages from it on were
        stored before (a front door that stores each step as it happens): like
        ``new_messages`` they stay raw this time, neither observed nor activated.
        ``keep_raw_from`` is its former name, accepted for one release. ``expect``: the
        caller's copy of the thread; when the thread is not that, nothing is stored and a
        ConflictError is raised (``LoadRequest.expect``)."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        self._settle_models(actor_model)
        if self._models.credentials is not None and self.options.failure_policy == "raise":
            raise MemoryUnavailableError(self._models.message())
        loaded = await self._load_turn(
            LoadRequest(
                subject=subject,
                append=await self._turns.counted(new_messages, actor_model),
                last_reply=self._idle_timed,
                expect=expect,
            )
        )
        stored = list(loaded.stored)
        step_from = step_start(stored, step_from or keep_raw_from)
        signals = self._turns.signals(loaded, actor_model)
        windows = self._turns.windows(loaded, actor_model)
        snapshot, status = await self._turns.observation_step(
            loaded, windows, signals, step_from=step_from
        )
        snapshot = await self._turns.reflection_step(snapshot, signals)
        if self.options.failure_policy == "raise":
            self._outcomes.raise_if_failing(snapshot)
        main = windows[0] if snapshot is loaded else None  # a plain turn: counted already
        context = self._turns.context(
            snapshot,
            working_memory=self.working_memory,
            recall=recall,
            step_from=step_from,
            window=main,
        )
        measured = self._sent.measure(context, status, self.estimator, self._deps.cached)
        self._sent.put(thread_id, measured)
        return PreparedContext(
            messages=context,
            status=status,
            record=snapshot.record,
            stored_input=stored,
            incarnation=loaded.main.thread.incarnation,
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
        self._settle_models(actor_model)
        label = views.model_label(actor_model) if actor_model is not None else None
        patches = (  # the actor's model, when the thread as last loaded names another
            [ThreadPatch(thread_id=thread_id, set=(((META_LAST_MODEL,), label),))]
            if label is not None and label != self._deps.cached.last_model(thread_id)
            else []
        )
        request = LoadRequest(
            subject=subject,
            append=sent.stamped(
                await self._turns.counted(response_messages, actor_model),
                self._sent.take(thread_id),
            ),
            patches=patches,
        )
        try:
            snapshot = await self._load_turn(cycles.expecting(self._deps, request))
        except ConflictError as exc:  # the thread was deleted since this turn began
            log.info("obsmem: %s (the reply is not stored)", exc)
            return []
        if self._idle_timed:  # idle time since this reply, on the steady clock
            replies = [m for m in snapshot.stored if m.role == "assistant"]
            if replies:
                self._deps.replies.stored(thread_id, replies[-1].created_at)
        key = subject.key
        decision = planner.plan_after_reply(
            self.options,
            self._turns.windows(snapshot, actor_model)[0],
            observation_tokens=snapshot.record.observation_tokens,
            buffering_in_flight=self._running(f"obs:{key}"),
            observer_backoff=self._outcomes.state(key).observer,
            now=self._deps.steady(),
        )
        if decision is not None:
            self._background.spawn(
                f"obs:{key}", self._background.buffer_loop(snapshot, idle=decision == "idle")
            )
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
            thread_id=thread_id, set=tuple(((META_HELD_CALLS, c), held) for c in call_ids)
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
        await self._call_off(f"obs:{subject.key}")  # it may have read the message already
        patch = ThreadPatch(thread_id=thread_id, set=(((META_RETRACTED, last.id), True),))
        await cycles.load(self._deps, LoadRequest(subject=subject, patches=[patch]))
        return last

    async def observe(self, thread_id: str, resource_id: str | None = None) -> bool:
        """Observe every unobserved message now (activating buffered chunks first). False when
        a failure stopped it (the failed event says why)."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        self._settle_models(None)
        self._deps.thread_backoff.clear()  # asked for now: threads backing off are tried too
        result = await cycles.observe_sync(
            self._deps, await self._load(subject), keep_tokens=0, trigger="manual"
        )
        await self._outcomes.observer(result.snapshot, result.error, store=result.store)
        await self._outcomes.threads(result)
        return result.error is None and not result.thread_errors

    async def compact(
        self,
        thread_id: str,
        resource_id: str | None = None,
        *,
        step_from: int | None = None,
        keep_tokens: int | None = None,
        trigger: Trigger = "manual",
        keep_raw_from: int | None = None,
    ) -> bool:
        """Shrink the thread's context now, as far as memory can: activate buffered chunks and
        observe synchronously until the retention floor (or ``keep_tokens``, when smaller) stays
        raw. ``step_from``: the current step's first seq; from it on the messages stay raw
        (a retried request must still carry them), as ``prepare`` keeps them
        (``keep_raw_from`` is its former name, accepted for one release). True when the
        context shrank (the cursor moved); False when there was nothing to observe or a failure
        stopped it (the failed event says why)."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        self._settle_models(None)
        snapshot = await self._load(subject)
        before = snapshot.record.cursor
        floor = self.options.observation.retention_floor or 0
        result = await cycles.observe_sync(
            self._deps,
            snapshot,
            keep_tokens=min(floor, keep_tokens) if keep_tokens is not None else floor,
            step_from={thread_id: start} if (start := step_from or keep_raw_from) else None,
            trigger=trigger,
        )
        await self._outcomes.observer(result.snapshot, result.error, store=result.store)
        after = result.snapshot.record.cursor
        return any(after.get(t, 0) > before.get(t, 0) for t in after)

    async def reflect(
        self, thread_id: str, resource_id: str | None = None, *, guidance: str | None = None
    ) -> OMRecord | None:
        """Reflect the log now, starting at compression level 0; the new head, or None."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        self._settle_models(None)
        outcome = await cycles.reflect_now(
            self._deps,
            await self._load(subject),
            trigger="manual",
            start_level=0,
            guidance=guidance,
        )
        if isinstance(outcome, Outcome) and outcome.snapshot is not None:
            return outcome.snapshot.record
        if isinstance(outcome, Failure):
            await cycles.flush_ledger(self._deps, subject)  # no failure state to ride on
        return None

    async def revise(
        self, thread_id: str, resource_id: str | None, revision: cycles.Revision, *, by: str | None
    ) -> OMRecord | None:
        """Correct the log by hand as a new generation (:mod:`obsmem.cycles.revision`): this
        process's buffering in flight is called off first (it was shown the old log)."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        await self._call_off(f"obs:{subject.key}", f"catch-up:{subject.key}")
        return await cycles.revise(self._deps, await self._load(subject), revision, by=by)

    async def status(self, thread_id: str, resource_id: str | None = None) -> StatusEvent:
        snapshot = await self._load(self.subject(thread_id, resource_id))
        windows = self._turns.windows(snapshot)
        threshold = planner.message_threshold(self.options, snapshot.record.observation_tokens)
        return self._turns.status(snapshot, windows, threshold)

    async def health(self, thread_id: str, resource_id: str | None = None) -> MemoryStatus:
        """Whether memory works for this conversation: the models (and how ``"auto"`` chose
        them), missing credentials, the stored failure state of the log (and of its threads in
        resource scope), and how many messages the actor's context leaves out now."""
        self._settle_models(None)
        snapshot = await self._load(self.subject(thread_id, resource_id))
        windows = self._turns.windows(snapshot)
        record = snapshot.record
        return MemoryStatus(
            thread_id=thread_id,
            resource_id=snapshot.subject.resource_id,
            enabled=True,
            observer_model=self._outcomes.model_label("observer"),
            reflector_model=self._outcomes.model_label("reflector"),
            model_choice=(f"{self.model_choice.why}" if self.model_choice is not None else None),
            credentials=self._models.credentials,
            failures=tuple(self.failures(snapshot)),
            left_out=views.left_out_count(snapshot, self.options, windows[0]),
            unobserved_tokens=sum(w.total for w in windows),
            message_threshold=planner.message_threshold(self.options, record.observation_tokens),
            observation_tokens=record.observation_tokens,
            observation_threshold=self.options.reflection.observation_tokens,
            generation=record.generation,
            buffered_chunks=len(record.chunks),
            queue=await self.queue.state(snapshot.subject.key) if self.queue is not None else None,
        )

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
        await self._call_off(f"obs:{key}", f"catch-up:{key}", f"refl:{key}")
        self._outcomes.forget(key)
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
                ((META_RETRACTED_THROUGH,), thread.message_count),
                ((META_CURRENT_TASK,), None),
                ((META_SUGGESTED_RESPONSE,), None),
                ((META_EXTRACTED,), None),
            ),
        )
        await cycles.load(self._deps, LoadRequest(subject=subject, patches=[patch]))

    def forget_erased(self, thread_ids: Sequence[str], *, resource_id: str | None) -> None:
        """After an owner's delete: nothing this process read of those threads (or of the
        resource's log) is used again."""
        self._deps.cached.forget(thread_ids)
        keys = [record_key("thread", thread_id=t, resource_id=None) for t in thread_ids]
        if resource_id is not None:
            keys.append(record_key("resource", thread_id=None, resource_id=resource_id))
        for key in keys:
            self._outcomes.forget(key)

    # -- lifecycle -------------------------------------------------------------------------------

    async def settle(self) -> None:
        """Wait until no background work is left (tests use this instead of sleeping). Only the
        wait can be cancelled: the work goes on (``aclose(cancel=True)`` abandons it). In queue
        mode: until no job this process queued waits or runs, while a worker is alive (with
        none, it returns at once, with a WARNING when jobs wait)."""
        await self._finish_tasks()
        if self.queue is not None:
            await self.queue.settle()

    async def _finish_tasks(self) -> None:
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

    @property
    def background_work(self) -> tuple[str, ...]:
        """The background work running now, by name (``obs:<key>`` buffering,
        ``catch-up:<key>``, ``refl:<key>``): what ``aclose(cancel=True)`` would abandon."""
        return tuple(name for name, task in self._tasks.items() if not task.done())

    async def aclose(self, *, cancel: bool = False) -> None:
        """Finish background work (or, with ``cancel=True``, abandon it), then close the store.
        In queue mode it does not wait for the jobs this process queued: they are in the
        database, for the workers (``settle()`` first waits for them). The engine is unusable
        afterwards; closing twice is harmless."""
        if not cancel:  # this process's tasks; queued jobs are durable and stay for workers
            await self._finish_tasks()
        self._background.closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.queue is not None:
            await self.queue.aclose()
        self._stop_ledger()
        await self.store.aclose()

    # -- models ----------------------------------------------------------------------------------

    def _settle_models(self, actor_model: ModelSpec | None) -> None:
        """Resolve ``"auto"`` and check the memory models' credentials
        (:meth:`obsmem.memory_models.MemoryModels.settle`); the options follow."""
        self._models.settle(actor_model)
        self.options = self._deps.options

    # -- state -----------------------------------------------------------------------------------

    def failures(self, snapshot: Snapshot) -> list[FailureState]:
        """The log's failure states in ``snapshot`` (and, in resource scope, its threads')."""
        return self._outcomes.failures(snapshot)

    @property
    def _idle_timed(self) -> bool:
        """Some setting activates after the thread was idle: turns need its last reply."""
        obs, ref = self.options.observation, self.options.reflection
        return obs.activate_after_idle is not None or ref.activate_after_idle is not None

    async def _call_off(self, *names: str) -> None:
        """Cancel the background tasks ``names`` and wait for each to end (a cycle cancelled
        mid-commit may still land)."""
        tasks = [task for name in names if (task := self._tasks.get(name)) is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _running(self, name: str) -> bool:
        return self._background.running(name)

    # -- queue mode: a worker's side -----------------------------------------------------------

    async def run_job(self, args: Mapping[str, Any]) -> tuple[str, ...]:
        """Run one queued job (``background="queue"``): the background work its log needs now,
        as the planner decides from the store (:func:`obsmem.queue.work.run_job`)."""
        from .queue.work import run_job

        self._check_open()
        return await run_job(self._deps, self._turns, self._background, self._outcomes, args)

    def retry_delay(self, key: str) -> float | None:
        """Seconds until a role backing off for the log ``key`` may be called again."""
        from .queue.work import retry_delay

        return retry_delay(self._outcomes, key, self._deps.steady())

    def use_wall_clock(self, clock: Callable[[], datetime]) -> None:
        """Time what is stored from ``clock`` from now on (a worker: the database's clock)."""
        self._deps.clock = clock

    async def _load_turn(self, request: LoadRequest) -> Snapshot:
        """A turn's load; in queue mode it also queues the log's background work."""
        if self.queue is not None:
            return await self.queue.load(self._deps, request)
        return await cycles.load(self._deps, request)

    async def _load(self, subject: Subject) -> Snapshot:
        return await cycles.load(self._deps, LoadRequest(subject=subject))

    def _check_open(self) -> None:
        if self._background.closed:
            raise RuntimeError("this ObservationalMemory was closed")


async def newest_shown(store: CoreStore, thread_id: str) -> Message | None:
    """The thread's newest message not taken back."""
    async with aclosing(shown_tail(store, thread_id, page=50)) as tail:
        async for message in tail:
            return message
    return None
