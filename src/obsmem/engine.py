"""ObservationalMemory: the orchestrator.

Per model step, :meth:`ObservationalMemory.prepare` stores the new input, reads the record and the
unobserved messages, asks the planner what is due, carries it out (activation, a synchronous
observation past ``block_after``, reflection), starts background work, and assembles the context.
:meth:`record` stores the reply and schedules background buffering. All background work runs in
asyncio tasks owned by the engine; :meth:`settle` waits for them and :meth:`aclose` ends them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any, cast

from . import cycles
from .context import ContextInput, build_context
from .cycles import (
    META_CURRENT_TASK,
    META_EXTRACTED,
    META_LAST_MODEL,
    META_SUGGESTED_RESPONSE,
    Deps,
)
from .embeddings import Embedder, resolve_embedder
from .errors import ConfigError
from .events import EventBus, Hooks, Listener, StatusEvent
from .messages import Message, utcnow
from .models import ModelSpec, model_id_of, prompt_cache_ttl_ms, provider_of
from .options import ObservationalMemoryOptions, ResolvedOptions, resolve_options
from .planner import activation_count, buffer_due, plan_observation, plan_reflection
from .recall import RecallBoundary, SearchFn, SearchHit, recall, recall_guidance
from .records import OMRecord, record_key
from .stores import Store
from .tokens import HeuristicEstimator, TokenEstimator
from .window import ThreadWindow, load_window
from .working_memory import WorkingMemory

__all__ = ["ObservationalMemory", "PreparedContext"]

log = logging.getLogger("obsmem")


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedContext:
    """What to send the actor: memory system messages, the reminder, then raw messages."""

    messages: list[Message]
    status: StatusEvent
    record: OMRecord
    stored_input: list[Message]


class ObservationalMemory:
    """The observational-memory engine for one store and one configuration."""

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
    ) -> None:
        resolved = resolve_options(options)
        if resolved is None:
            raise ConfigError(
                "observational_memory", options, "the engine needs memory turned on (not False)"
            )
        self.store = store
        self.options = options = resolved
        self.bus = EventBus()
        self._deps = Deps(
            store=store,
            options=options,
            estimator=estimator or HeuristicEstimator(),
            bus=self.bus,
            hooks=hooks or Hooks(),
            tz=tz,
            clock=clock,
            sync_timeout=sync_timeout,
            background_timeout=background_timeout,
            config=options.snapshot(),
            working_memory=working_memory if options.observation.manage_working_memory else None,
            embedder=(
                resolve_embedder(embedder or options.retrieval.embedder or "local")
                if options.retrieval is not None and options.retrieval.vector
                else None
            ),
        )
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._failed_buffer_at: dict[str, int] = {}
        self._reflection_suppressed_at: dict[str, int] = {}
        self._closed = False

    # -- events ----------------------------------------------------------------------------------

    # -- retrieval -------------------------------------------------------------------------------

    def recall_boundary(self, thread_id: str, resource_id: str | None) -> RecallBoundary:
        """What a recall tool for this thread may read (the resource, or only the thread)."""
        retrieval = self.options.retrieval
        scope = "thread" if retrieval is not None and retrieval.scope == "thread" else "resource"
        return RecallBoundary(
            resource_id=self._resource(thread_id, resource_id), thread_id=thread_id, scope=scope
        )

    async def recall(self, thread_id: str, resource_id: str | None, /, **request: Any) -> str:
        """Run one recall request (the ``recall`` tool's parameters) for this thread."""
        boundary = self.recall_boundary(thread_id, resource_id)
        return await recall(self.store, boundary, search=self._search_for(boundary), **request)

    def _search_for(self, boundary: RecallBoundary) -> SearchFn | None:
        embedder = self._deps.embedder
        if embedder is None:
            return None

        async def search(
            query: str,
            thread_id: str | None,
            after: datetime | None,
            before: datetime | None,
            limit: int,
        ) -> list[SearchHit]:
            [vector] = await embedder.embed([query])
            hits = await self.store.search_embeddings(
                boundary.resource_id,
                vector,
                model=embedder.name,
                thread_id=thread_id,
                after=after,
                before=before,
                limit=limit,
            )
            return [SearchHit(group=g, score=score) for g, score in hits]

        return search

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Receive every ``data-om-*`` event of every thread; returns the unsubscribe function."""
        return self.bus.subscribe(listener)

    async def _append(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        """Store messages with their token estimates cached in their parts, so every later read
        of the window (from any store, in any process) reuses them instead of re-counting."""
        for message in messages:
            self._deps.estimator.count_message(message)
        return await self.store.append_messages(thread_id, messages)

    # -- keys and scope --------------------------------------------------------------------------

    def key(self, thread_id: str, resource_id: str | None) -> str:
        return record_key(self.options.scope, thread_id=thread_id, resource_id=resource_id)

    async def _thread_ids(self, thread_id: str, resource_id: str | None) -> list[str]:
        if self.options.scope == "thread" or resource_id is None:
            return [thread_id]
        return [t.id for t in await self.store.list_threads(resource_id)]

    async def _record(self, thread_id: str, resource_id: str | None) -> OMRecord:
        return await self.store.get_or_create_record(
            self.key(thread_id, resource_id),
            scope=self.options.scope,
            thread_id=thread_id,
            resource_id=resource_id,
        )

    # -- the turn --------------------------------------------------------------------------------

    async def prepare(
        self,
        thread_id: str,
        resource_id: str | None,
        new_messages: Sequence[Message] = (),
        *,
        actor_model: ModelSpec | None = None,
    ) -> PreparedContext:
        """Store ``new_messages``, do what memory work is due, and return the actor's context."""
        self._check_open()
        resource_id = self._resource(thread_id, resource_id)
        await self.store.create_thread(thread_id, resource_id)
        stored = await self._append(thread_id, new_messages) if new_messages else []
        deps = self._deps
        key = self.key(thread_id, resource_id)
        record = await self._record(thread_id, resource_id)
        thread_ids = await self._thread_ids(thread_id, resource_id)
        windows = await load_window(self.store, record, thread_ids, deps.estimator)
        signals = await self._cache_signals(thread_id, actor_model)
        plan = plan_observation(
            self.options,
            pending_tokens=sum(w.total for w in windows),
            chunk_message_tokens=[c.message_tokens for c in record.chunks],
            observation_tokens=record.observation_tokens,
            buffering_in_flight=self._running(f"obs:{key}"),
            idle_expired=signals.observation_idle,
            provider_changed=signals.provider_changed,
        )
        status = self._status(record, windows, thread_id, resource_id, plan.threshold)
        self.bus.emit(status)

        if plan.activate and plan.trigger is not None and not plan.observe_sync:
            count = plan.activate
            await cycles.activate_chunks(
                deps,
                key,
                thread_id,
                choose=lambda _: count,
                trigger=plan.trigger,
                previous_model=signals.previous_model,
                current_model=signals.current_model,
                last_activity_at=signals.last_activity_at,
            )
        if plan.observe_sync:
            protect = {thread_id: stored[0].seq} if stored and stored[0].seq else {}
            keep = self.options.observation.retention_floor or 0
            await cycles.observe_sync(
                deps,
                key,
                thread_id,
                resource_id,
                thread_ids=thread_ids,
                keep_tokens=keep,
                protect=protect,
                trigger="turn-sync",
            )
        if plan.start_buffering and self._may_retry_buffering(key, windows):
            self._spawn(f"obs:{key}", self._buffer_loop(key, thread_id, resource_id))
        await self._maybe_reflect(key, thread_id, resource_id, signals)
        record = await self._record(thread_id, resource_id)
        return PreparedContext(
            messages=await self._context(record, thread_id, thread_ids),
            status=status,
            record=record,
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
        """Store the actor's reply (and tool traffic) and schedule background buffering."""
        self._check_open()
        resource_id = self._resource(thread_id, resource_id)
        await self.store.create_thread(thread_id, resource_id)
        stored = await self._append(thread_id, response_messages)
        if actor_model is not None:
            await self.store.update_thread(
                thread_id, metadata={META_LAST_MODEL: _model_label(actor_model)}
            )
        obs = self.options.observation
        if not self.options.async_buffering or obs.buffer_tokens is None:
            return stored
        key = self.key(thread_id, resource_id)
        if self._running(f"obs:{key}"):
            return stored
        record = await self._record(thread_id, resource_id)
        [window] = await load_window(self.store, record, [thread_id], self._deps.estimator)
        if obs.buffer_on_idle and window.unbuffered:
            self._spawn(f"obs:{key}", self._buffer_loop(key, thread_id, resource_id, idle=True))
        elif self._buffer_due(record, window) and self._may_retry_buffering(key, [window]):
            self._spawn(f"obs:{key}", self._buffer_loop(key, thread_id, resource_id))
        return stored

    # -- manual operations -----------------------------------------------------------------------

    async def observe(self, thread_id: str, resource_id: str | None = None) -> bool:
        """Observe every unobserved message now (activating buffered chunks first)."""
        self._check_open()
        resource_id = self._resource(thread_id, resource_id)
        await self._record(thread_id, resource_id)
        return await cycles.observe_sync(
            self._deps,
            self.key(thread_id, resource_id),
            thread_id,
            resource_id,
            thread_ids=await self._thread_ids(thread_id, resource_id),
            keep_tokens=0,
            trigger="manual",
        )

    async def reflect(
        self, thread_id: str, resource_id: str | None = None, *, guidance: str | None = None
    ) -> OMRecord | None:
        """Reflect the log now, starting at compression level 0; the new head, or None."""
        self._check_open()
        resource_id = self._resource(thread_id, resource_id)
        return await cycles.reflect_now(
            self._deps,
            self.key(thread_id, resource_id),
            thread_id,
            resource_id,
            trigger="manual",
            start_level=0,
            guidance=guidance,
        )

    async def status(self, thread_id: str, resource_id: str | None = None) -> StatusEvent:
        resource_id = self._resource(thread_id, resource_id)
        record = await self._record(thread_id, resource_id)
        thread_ids = await self._thread_ids(thread_id, resource_id)
        windows = await load_window(self.store, record, thread_ids, self._deps.estimator)
        plan = plan_observation(
            self.options,
            pending_tokens=sum(w.total for w in windows),
            chunk_message_tokens=[c.message_tokens for c in record.chunks],
            observation_tokens=record.observation_tokens,
            buffering_in_flight=True,
        )
        return self._status(record, windows, thread_id, resource_id, plan.threshold)

    async def observations(self, thread_id: str, resource_id: str | None = None) -> str:
        resource_id = self._resource(thread_id, resource_id)
        record = await self.store.get_record(self.key(thread_id, resource_id))
        return "" if record is None else record.observations

    async def history(
        self, thread_id: str, resource_id: str | None = None, *, limit: int | None = None
    ) -> list[OMRecord]:
        resource_id = self._resource(thread_id, resource_id)
        return await self.store.history(self.key(thread_id, resource_id), limit=limit)

    async def clear(self, thread_id: str, resource_id: str | None = None) -> None:
        """Forget the memory of this thread (or resource); the messages stay."""
        resource_id = self._resource(thread_id, resource_id)
        key = self.key(thread_id, resource_id)
        for name in (f"obs:{key}", f"refl:{key}"):
            task = self._tasks.get(name)
            if task is not None:
                task.cancel()
        await self.store.clear(key)

    # -- background work -------------------------------------------------------------------------

    async def settle(self) -> None:
        """Wait until no background work is left (tests use this instead of sleeping)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel background work. The store stays open (it belongs to the caller)."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

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

    async def _buffer_loop(
        self, key: str, thread_id: str, resource_id: str | None, *, idle: bool = False
    ) -> None:
        while not self._closed:
            outcome = await cycles.buffer_once(self._deps, key, thread_id, resource_id, idle=idle)
            head = await self.store.get_record(key)
            if head is None:
                return
            [window] = await load_window(self.store, head, [thread_id], self._deps.estimator)
            if outcome == "failed":
                self._failed_buffer_at[key] = window.unbuffered_tokens
                return
            self._failed_buffer_at.pop(key, None)
            idle = False
            if outcome != "added" or not self._buffer_due(head, window):
                return

    def _buffer_due(self, record: OMRecord, window: ThreadWindow) -> bool:
        obs = self.options.observation
        if obs.buffer_tokens is None or not window.unbuffered:
            return False
        plan = plan_observation(
            self.options,
            pending_tokens=window.total,
            chunk_message_tokens=[c.message_tokens for c in record.chunks],
            observation_tokens=record.observation_tokens,
            buffering_in_flight=False,
        )
        return buffer_due(
            unbuffered_tokens=window.unbuffered_tokens,
            pending_tokens=window.total,
            threshold=plan.threshold,
            buffer_tokens=obs.buffer_tokens,
        ) or (window.total >= plan.threshold and window.unbuffered_tokens > 0)

    def _may_retry_buffering(self, key: str, windows: Sequence[ThreadWindow]) -> bool:
        """After a failed buffering cycle, wait for half an interval of new messages."""
        failed_at = self._failed_buffer_at.get(key)
        if failed_at is None:
            return True
        step = (self.options.observation.buffer_tokens or 0) // 2
        return sum(w.unbuffered_tokens for w in windows) >= failed_at + step

    async def _maybe_reflect(
        self, key: str, thread_id: str, resource_id: str | None, signals: _CacheSignals
    ) -> None:
        record = await self.store.get_record(key)
        if record is None:
            return
        br = record.buffered_reflection
        tail_tokens = 0
        if br is not None:
            tail = "\n".join(record.observations.split("\n")[br.line_count :])
            tail_tokens = self._deps.estimator.count_text(tail)
        plan = plan_reflection(
            self.options,
            observation_tokens=record.observation_tokens,
            has_buffered_reflection=br is not None,
            buffered_reflection_tokens=br.token_count if br else 0,
            unreflected_tail_tokens=tail_tokens,
            reflection_in_flight=self._running(f"refl:{key}"),
            idle_expired=signals.reflection_idle,
            provider_changed=signals.provider_changed
            and self.options.reflection.activate_on_provider_change,
        )
        if plan.activate_buffered and plan.trigger is not None:
            await cycles.activate_reflection(self._deps, key, thread_id, trigger=plan.trigger)
        elif plan.reflect_sync:
            if self._reflection_suppressed_at.get(key) == record.observation_tokens:
                return  # the last attempt at this exact size did not help; wait for growth
            head = await cycles.reflect_now(
                self._deps, key, thread_id, resource_id, trigger="turn-sync"
            )
            if head is None or head.observation_tokens >= plan.threshold:
                self._reflection_suppressed_at[key] = record.observation_tokens
            else:
                self._reflection_suppressed_at.pop(key, None)
        if plan.start_buffering:
            self._spawn(f"refl:{key}", self._reflection_task(key, thread_id, resource_id))

    async def _reflection_task(self, key: str, thread_id: str, resource_id: str | None) -> None:
        await cycles.buffer_reflection(self._deps, key, thread_id, resource_id)

    # -- context and status ----------------------------------------------------------------------

    async def _context(
        self, record: OMRecord, thread_id: str, thread_ids: Sequence[str]
    ) -> list[Message]:
        windows = await load_window(self.store, record, thread_ids, self._deps.estimator)
        raw: Sequence[Message] = ()
        others: list[tuple[str, Sequence[Message]]] = []
        for w in windows:
            if w.thread_id == thread_id:
                raw = w.messages
            elif w.messages:
                others.append((w.thread_id, w.messages))
        thread = await self.store.get_thread(thread_id)
        meta = thread.metadata if thread is not None else {}
        hints = self.options.observation.continuation_hints
        retrieval = self.options.retrieval
        return build_context(
            ContextInput(
                observations=record.observations,
                now=self._deps.now(),
                tz=self._deps.tz,
                current_task=meta.get(META_CURRENT_TASK) if hints.current_task else None,
                suggested_response=(
                    meta.get(META_SUGGESTED_RESPONSE) if hints.suggested_response else None
                ),
                extracted=self._extracted_for_context(meta),
                raw_messages=raw,
                other_threads=others,
                retrieval_instructions=recall_guidance(retrieval),
                temporal_markers=self.options.temporal_markers,
            )
        )

    def _extracted_for_context(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        """Stored values of the extractors that share them (``include_previous_extraction``)."""
        stored = meta.get(META_EXTRACTED)
        if not isinstance(stored, Mapping):
            return {}
        values = cast(Mapping[str, Any], stored)
        out: dict[str, Any] = {}
        for extractor in (*self.options.observation.extract, *self.options.reflection.extract):
            slug = extractor.slug
            if extractor.include_previous_extraction and values.get(slug) is not None:
                out[slug] = values[slug]
        return out

    def _status(
        self,
        record: OMRecord,
        windows: Sequence[ThreadWindow],
        thread_id: str,
        resource_id: str | None,
        threshold: int,
    ) -> StatusEvent:
        pending = sum(w.total for w in windows)
        chunk_tokens = [c.message_tokens for c in record.chunks]
        floor = self.options.observation.retention_floor or 0
        projected = sum(
            chunk_tokens[
                : activation_count(
                    chunk_tokens,
                    pending_tokens=max(pending, threshold),
                    retention_floor=floor,
                    force_max=False,
                )
            ]
        )
        br = record.buffered_reflection
        return StatusEvent(
            record_id=record.id,
            thread_id=thread_id,
            resource_id=resource_id,
            generation=record.generation,
            message_tokens=pending,
            message_threshold=threshold,
            observation_tokens=record.observation_tokens,
            observation_threshold=self.options.reflection.observation_tokens,
            buffered_chunks=len(record.chunks),
            buffered_message_tokens=min(sum(chunk_tokens), pending),
            projected_message_removal=projected,
            buffered_observation_tokens=sum(c.token_count for c in record.chunks),
            buffering_status="running" if self._running(f"obs:{record.key}") else "idle",
            buffered_reflection_tokens=br.token_count if br else 0,
            buffered_reflection_input_tokens=br.input_tokens if br else 0,
            reflection_status=(
                "running" if self._running(f"refl:{record.key}") else "complete" if br else "idle"
            ),
        )

    async def _cache_signals(self, thread_id: str, actor_model: ModelSpec | None) -> _CacheSignals:
        """Whether the actor's prompt cache is already lost (idle too long, model changed)."""
        obs, ref = self.options.observation, self.options.reflection
        signals = _CacheSignals()
        if actor_model is not None:
            signals.current_model = _model_label(actor_model)
            thread = await self.store.get_thread(thread_id)
            previous = thread.metadata.get(META_LAST_MODEL) if thread is not None else None
            signals.previous_model = previous
            signals.provider_changed = bool(
                obs.activate_on_provider_change
                and previous is not None
                and previous != signals.current_model
            )
        if obs.activate_after_idle is None and ref.activate_after_idle is None:
            return signals
        recent = await self.store.list_messages(thread_id, limit=50, newest_first=True)
        last = next((m for m in recent if m.role == "assistant"), None)
        if last is None:
            return signals
        signals.last_activity_at = last.created_at
        idle_ms = (self._deps.now() - last.created_at).total_seconds() * 1000
        signals.observation_idle = _expired(obs.activate_after_idle, idle_ms, actor_model)
        signals.reflection_idle = _expired(ref.activate_after_idle, idle_ms, actor_model)
        return signals

    # -- misc ------------------------------------------------------------------------------------

    def _resource(self, thread_id: str, resource_id: str | None) -> str:
        return resource_id if resource_id is not None else thread_id

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this ObservationalMemory was closed")


@dataclass(slots=True)
class _CacheSignals:
    observation_idle: bool = False
    reflection_idle: bool = False
    provider_changed: bool = False
    last_activity_at: datetime | None = None
    previous_model: str | None = None
    current_model: str | None = None


def _expired(setting: int | str | None, idle_ms: float, actor_model: ModelSpec | None) -> bool:
    if setting is None:
        return False
    if setting == "auto":
        if actor_model is None:
            return False
        return idle_ms >= prompt_cache_ttl_ms(actor_model)
    return idle_ms >= float(setting)


def _model_label(model: ModelSpec) -> str:
    provider = provider_of(model)
    name = model_id_of(model)
    return f"{provider}/{name}" if provider else name
