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
    Activation,
    Deps,
    Failure,
    Outcome,
)
from .embeddings import Embedder, resolve_embedder
from .errors import ConfigError, MemoryUnavailableError, ObsmemError, check_id
from .events import EventBus, Hooks, Listener, StatusEvent, Trigger
from .failures import (
    FailureState,
    MemoryStatus,
    Role,
    cause_of,
    failures_in,
    next_failure,
)
from .llm import CallListener, ModelCaller
from .messages import Message, check_json, utcnow
from .meta_keys import (
    META_CURRENT_TASK,
    META_EXTRACTED,
    META_FAILURE,
    META_HELD_CALLS,
    META_LAST_MODEL,
    META_RETRACTED,
    META_RETRACTED_THROUGH,
    META_SUGGESTED_RESPONSE,
)
from .models import ModelSpec
from .models.environment import AutoModel, credentials_problem, resolve_auto
from .models.specs import AUTO
from .options import ObservationalMemoryOptions, ResolvedOptions, resolve_options
from .planner import Backoff
from .recall import RecallBoundary, recall, search_groups
from .records import OMRecord
from .snapshot import Snapshot, Subject
from .stores import LoadRequest, ResourcePatch, Store, ThreadPatch
from .tokens import HeuristicEstimator, TokenEstimator
from .window import (
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
    observer_failure: FailureState | None = None
    """The failure state this engine last stored for the role (newer than a stale snapshot's)."""
    reflector_failure: FailureState | None = None

    @property
    def empty(self) -> bool:
        return (
            self.observer is None
            and self.reflector is None
            and self.suppressed_reflection_at is None
            and self.observer_failure is None
            and self.reflector_failure is None
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
            # Resource scope keeps the log's failure state in the resource's metadata.
            reads_resource=options.scope == "resource"
            or (working_memory is not None and working_memory.scope == "resource"),
            embedder=(
                resolve_embedder(embedder or options.retrieval.embedder or "local")
                if options.retrieval is not None and options.retrieval.vector
                else None
            ),
            ledger=cycles.Ledger(keep=options.cycle_retention),
        )
        self._stop_ledger = self.caller.add_listener(self._deps.ledger.on_call)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._logs: OrderedDict[str, _LogState] = OrderedDict()
        self._catch_up_slots = asyncio.Semaphore(CATCH_UP_CONCURRENCY)
        self._closed = False
        self._warned: OrderedDict[tuple[str, str], str] = OrderedDict()
        """(log key or "*", role) -> the cause last logged, so each cause is logged once."""
        self.model_choice: AutoModel | None = None
        """What ``"auto"`` resolved to (None while unresolved, or when models were given)."""
        self._auto_roles = {
            role
            for role, model in (
                ("observation", options.observation.model),
                ("reflection", options.reflection.model),
            )
            if model == AUTO
        }
        self._models_final = not self._auto_roles
        self._credentials: str | None = None
        self._credentials_checked = False

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
        step_from: int | None = None,
        keep_raw_from: int | None = None,
    ) -> PreparedContext:
        """Store ``new_messages``, do what memory work is due, and return the actor's context.
        ``recall``: the actor has the ``recall`` tool, so the context tells it how to use it.
        ``step_from``: the current step's first seq, when the thread's messages from it on were
        stored before (a front door that stores each step as it happens): like
        ``new_messages`` they stay raw this time, neither observed nor activated.
        ``keep_raw_from`` is its former name, accepted for one release."""
        self._check_open()
        subject = self.subject(thread_id, resource_id)
        self._settle_models(actor_model)
        if self._credentials is not None and self.options.failure_policy == "raise":
            raise MemoryUnavailableError(self._credentials_message())
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
        step = [s for s in (step_from or keep_raw_from, first) if s]
        step_from = min(step) if step else None
        steps = {thread_id: step_from} if step_from else {}
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
            step_tokens=windows[0].tokens_from(step_from),
            idle_expired=signals.observation_idle,
            provider_changed=signals.provider_changed,
            observer_backoff=state.observer,
            now=self._deps.now(),
            activatable=planner.activatable_chunks(record.chunks, steps),
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
                step_from=steps,
                trigger="turn-sync",
            )
            snapshot = result.snapshot
            await self._observer_outcome(snapshot, result.error)
            await self._thread_outcomes(result)
        if plan.start_buffering:
            self._spawn(f"obs:{subject.key}", self._buffer_loop(snapshot))
        if plan.catch_up:
            newest = snapshot.main.unobserved[-1].seq if snapshot.main.unobserved else None
            after = steps or {thread_id: (newest or 0) + 1}  # the catch-up leaves these alone
            self._spawn(f"catch-up:{subject.key}", self._catch_up(snapshot, after))
        snapshot = await self._reflection_step(snapshot, signals)
        if self.options.failure_policy == "raise":
            self._raise_if_failing(snapshot)
        main = windows[0] if snapshot is loaded else None  # a plain turn: counted already
        return PreparedContext(
            messages=self._context(snapshot, recall=recall, step_from=step_from, window=main),
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
        self._settle_models(actor_model)
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
        task = self._tasks.get(f"obs:{subject.key}")
        if task is not None and not task.done():  # it may have read the message already
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
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
        await self._observer_outcome(result.snapshot, result.error)
        await self._thread_outcomes(result)
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
        await self._observer_outcome(result.snapshot, result.error)
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

    async def status(self, thread_id: str, resource_id: str | None = None) -> StatusEvent:
        snapshot = await self._load(self.subject(thread_id, resource_id))
        windows = self._windows(snapshot)
        threshold = planner.message_threshold(self.options, snapshot.record.observation_tokens)
        return self._status(snapshot, windows, threshold)

    async def health(self, thread_id: str, resource_id: str | None = None) -> MemoryStatus:
        """Whether memory works for this conversation: the models (and how ``"auto"`` chose
        them), missing credentials, the stored failure state of the log (and of its threads in
        resource scope), and how many messages the actor's context leaves out now."""
        self._settle_models(None)
        snapshot = await self._load(self.subject(thread_id, resource_id))
        windows = self._windows(snapshot)
        record = snapshot.record
        return MemoryStatus(
            thread_id=thread_id,
            resource_id=snapshot.subject.resource_id,
            enabled=True,
            observer_model=self._model_label("observer"),
            reflector_model=self._model_label("reflector"),
            model_choice=(f"{self.model_choice.why}" if self.model_choice is not None else None),
            credentials=self._credentials,
            failures=tuple(self.failures(snapshot)),
            left_out=views.left_out_count(snapshot, self.options, windows[0]),
            unobserved_tokens=sum(w.total for w in windows),
            message_threshold=planner.message_threshold(self.options, record.observation_tokens),
            observation_tokens=record.observation_tokens,
            observation_threshold=self.options.reflection.observation_tokens,
            generation=record.generation,
            buffered_chunks=len(record.chunks),
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
                ((META_RETRACTED_THROUGH,), thread.message_count),
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
        self._stop_ledger()
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
            after = outcome.snapshot if isinstance(outcome, Outcome) else None
            await self._observer_outcome(
                after or snapshot, outcome.error if isinstance(outcome, Failure) else None
            )
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

    async def _catch_up(self, snapshot: Snapshot, step_from: dict[str, int]) -> None:
        """A background catch-up (see :func:`obsmem.cycles.catch_up`), at most
        ``CATCH_UP_CONCURRENCY`` at a time per engine so a fleet of old threads waking up at once
        does not flood the Observer."""
        async with self._catch_up_slots:
            snapshot = await self._load(snapshot.subject)
            result = await cycles.catch_up(self._deps, snapshot, step_from=step_from)
        await self._observer_outcome(result.snapshot, result.error)
        await self._thread_outcomes(result)

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
            after: int | None = None
            if isinstance(outcome, Outcome) and outcome.snapshot is not None:
                snapshot = outcome.snapshot
                after = snapshot.record.observation_tokens
            await self._reflector_outcome(
                snapshot, outcome.error if isinstance(outcome, Failure) else None
            )
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
            after = outcome.snapshot if isinstance(outcome, Outcome) else None
            await self._reflector_outcome(after or snapshot, error)

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

    async def _observer_outcome(self, snapshot: Snapshot, error: str | None) -> None:
        await self._outcome("observer", snapshot, error)

    async def _reflector_outcome(self, snapshot: Snapshot, error: str | None) -> None:
        await self._outcome("reflector", snapshot, error)

    async def _outcome(self, role: Role, snapshot: Snapshot, error: str | None) -> None:
        """After a cycle of ``role``: the back-off, and the failure state stored with the log
        (with a WARNING once per cause, and once when it heals)."""
        key = snapshot.subject.key
        state = self._state(key)
        previous: Backoff | None = getattr(state, role)
        remembered: FailureState | None = getattr(state, f"{role}_failure")
        stored = self._stored_failures(snapshot).get(role)
        if error is None:
            if previous is None and remembered is None and stored is None:
                return
            self._update(key, **{role: None, f"{role}_failure": None})
            if self._warned.pop((key, role), None) is not None or stored is not None:
                log.warning(
                    "obsmem: memory for %s works again: the %s answered (%s)",
                    key,
                    role.capitalize(),
                    self._model_label(role),
                )
            if stored is not None:
                await self._write_failure(snapshot.subject, role, None)
            return
        backoff = self._backoff(previous, error)
        newest = max(
            (s for s in (stored, remembered) if s is not None),
            key=lambda s: s.last_at,
            default=None,
        )
        failure = next_failure(
            newest,
            role=role,
            error=error,
            model=self._model_label(role),
            now=self._deps.now(),
            next_retry_at=backoff.retry_at,
            left_out=self._left_out(snapshot),
        )
        self._update(key, **{role: backoff, f"{role}_failure": failure})
        self._warn_once((key, role), error, f"obsmem: memory for {key}: {failure.summary()}")
        await self._write_failure(snapshot.subject, role, failure)

    async def _thread_outcomes(self, result: cycles.SyncObservation) -> None:
        """Resource scope: the failure state of each thread that failed (or healed) alone,
        stored on the thread itself, so the log's other threads carry on."""
        snapshot = result.snapshot
        if snapshot.subject.scope != "resource":
            return
        for thread_id in set(result.advanced):
            where = (f"thread:{thread_id}", "observer")
            if self._warned.pop(where, None) is not None:
                log.warning(
                    "obsmem: thread %s of %s is observed again", thread_id, snapshot.subject.key
                )
            await self._write_thread_failure(snapshot, thread_id, None)
        for thread_id, error in result.thread_errors.items():
            state = snapshot.thread(thread_id)
            stored = failures_in(state.thread.metadata if state else None).get("observer")
            backoff = self._deps.thread_backoff.get(thread_id)
            failure = next_failure(
                stored,
                role="observer",
                error=error,
                model=self._model_label("observer"),
                now=self._deps.now(),
                next_retry_at=backoff.retry_at if backoff else None,
                left_out=0,
                thread_id=thread_id,
            )
            self._warn_once(
                (f"thread:{thread_id}", "observer"),
                error,
                f"obsmem: memory for {snapshot.subject.key}: {failure.summary()}",
            )
            await self._write_thread_failure(snapshot, thread_id, failure)

    async def _write_thread_failure(
        self, snapshot: Snapshot, thread_id: str, failure: FailureState | None
    ) -> None:
        state = snapshot.thread(thread_id)
        if failure is None and (state is None or not failures_in(state.thread.metadata)):
            return
        value = failure.to_json() if failure is not None else None
        patch = ThreadPatch(thread_id=thread_id, set=(((META_FAILURE, "observer"), value),))
        try:
            await cycles.load(self._deps, LoadRequest(subject=snapshot.subject, patches=[patch]))
        except ObsmemError as exc:
            log.warning("obsmem: could not store the failure state of %s: %s", thread_id, exc)

    def _warn_once(self, where: tuple[str, str], error: str, message: str) -> None:
        cause = cause_of(error)
        if self._warned.get(where) == cause:
            return
        self._warned[where] = cause
        self._warned.move_to_end(where)
        while len(self._warned) > MAX_REMEMBERED_LOGS:
            self._warned.popitem(last=False)
        log.warning("%s", message)

    async def _write_failure(
        self, subject: Subject, role: Role, failure: FailureState | None
    ) -> None:
        """Store (or, with None, clear) the log's failure state for ``role``: one small write,
        only when the state changes. A store that cannot take it is logged, never raised."""
        value = failure.to_json() if failure is not None else None
        path = ((META_FAILURE, role), value)
        request = (
            LoadRequest(
                subject=subject,
                resource_patch=ResourcePatch(resource_id=subject.resource_id, set=(path,)),
            )
            if subject.scope == "resource"
            else LoadRequest(
                subject=subject, patches=[ThreadPatch(thread_id=subject.thread_id, set=(path,))]
            )
        )
        try:
            await cycles.load(self._deps, request)
        except ObsmemError as exc:
            log.warning("obsmem: could not store the failure state of %s: %s", subject.key, exc)

    def _stored_failures(self, snapshot: Snapshot) -> dict[Role, FailureState]:
        meta = (
            snapshot.resource_metadata
            if snapshot.subject.scope == "resource"
            else snapshot.thread_metadata
        )
        return failures_in(meta)

    def failures(self, snapshot: Snapshot) -> list[FailureState]:
        """The log's failure states in ``snapshot`` (and, in resource scope, its threads')."""
        found = list(self._stored_failures(snapshot).values())
        if snapshot.subject.scope == "resource":
            for thread in snapshot.threads:
                found += [
                    f
                    for f in failures_in(thread.thread.metadata).values()
                    if f.thread_id is not None
                ]
        return found

    def _left_out(self, snapshot: Snapshot) -> int:
        return views.left_out_count(snapshot, self.options, self._main_window(snapshot))

    def _raise_if_failing(self, snapshot: Snapshot) -> None:
        """``failure_policy="raise"``: a turn whose log is failing raises, naming the cause."""
        state = self._state(snapshot.subject.key)
        known = [
            f for f in (state.observer_failure, state.reflector_failure) if f is not None
        ] or self.failures(snapshot)
        # A role whose back-off has passed was just tried again (maybe in the background):
        # only one still waiting out its back-off fails the turn.
        now = self._deps.now()
        failing = [f for f in known if f.next_retry_at is None or f.next_retry_at > now]
        if failing:
            summary = " ".join(f.summary() for f in failing)
            raise MemoryUnavailableError(
                f"observational memory is failing for {snapshot.subject.key}: {summary} "
                "(the turn's input was stored; failure_policy='warn' lets turns go on)"
            )

    # -- models ----------------------------------------------------------------------------------

    def _settle_models(self, actor_model: ModelSpec | None) -> None:
        """Resolve ``"auto"`` for the Observer and Reflector (once the actor is known, for good)
        and look for missing credentials without a network call: a WARNING (or, with
        ``failure_policy="raise"``, the turn's error) names the key to set."""
        if not self._models_final and (choice := resolve_auto(actor_model)) != self.model_choice:
            obs, ref = self.options.observation, self.options.reflection
            chosen = replace(
                self.options,
                observation=replace(obs, model=choice.model)
                if "observation" in self._auto_roles
                else obs,
                reflection=replace(ref, model=choice.model)
                if "reflection" in self._auto_roles
                else ref,
            )
            self.options = self._deps.options = chosen
            self._deps.config = chosen.snapshot()
            self._credentials_checked = False
            self.model_choice = choice
        if actor_model is not None or (
            self.model_choice is not None and self.model_choice.why == "OBSMEM_MODEL"
        ):
            self._models_final = True
        if self._credentials_checked and self._credentials is None:
            return
        self._credentials_checked = True
        problems = {
            credentials_problem(model)
            for model in (self.options.observer_model, self.options.reflector_model)
        }
        was = self._credentials
        self._credentials = "; ".join(sorted(p for p in problems if p)) or None
        if self._credentials is not None:
            self._warn_once(("*", "credentials"), self._credentials, self._credentials_message())
        elif was is not None:
            self._warned.pop(("*", "credentials"), None)
            log.warning("obsmem: the memory models' credentials are there now")

    def _credentials_message(self) -> str:
        how = (
            f" (model 'auto': {self.model_choice.model}, {self.model_choice.why})"
            if self.model_choice is not None
            else ""
        )
        return (
            f"obsmem: observational memory cannot work{how}: {self._credentials}. Until then "
            "the conversation is kept raw (the oldest messages are left out past block_after). "
            "Fix: set that key, or choose the model with OBSMEM_MODEL or "
            "observational_memory={'model': ...}"
        )

    def _model_label(self, role: Role) -> str:
        model = self.options.observer_model if role == "observer" else self.options.reflector_model
        return views.model_label(model)

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
        step_from: int | None = None,
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
            step_from=step_from,
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
        return windows_of(snapshot, self._estimator(snapshot, actor_model), self._deps.cached)

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
