"""The memory cycles: buffering, activation, synchronous observation and reflection.

Each cycle reads the head record, does its (possibly slow) model work without holding anything,
then commits through one store transition against the head it re-reads at commit time. The store
checks the real invariants inside the transaction (chunks contiguous, observation starting where
the cursor still is, cursor monotonic), so a cycle that lost a race gets a ConflictError and
either retries the cheap commit or drops its now-redundant result. Nothing is held in process
memory as the source of truth.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any, Literal

from .errors import ConflictError, ModelError, ObserverOutputError, StoreError
from .events import (
    ActivationEvent,
    BufferingEndEvent,
    BufferingFailedEvent,
    BufferingStartEvent,
    EventBus,
    HookContext,
    Hooks,
    ObservationEndEvent,
    ObservationFailedEvent,
    ObservationStartEvent,
    OperationType,
    ThreadUpdateEvent,
    Trigger,
    call_hook,
    notify,
)
from .messages import Message
from .models import model_input_capabilities
from .observations import ParsedOutput, boundary_line
from .observer import ObserverInput, observe
from .options import ResolvedOptions, compression_start_level
from .planner import ActivationTrigger, buffer_interval, message_threshold, reflection_slice
from .records import BufferedChunk, BufferedReflection, MessageRange, OMRecord
from .reflector import reflect
from .stores import Store
from .tokens import TokenEstimator
from .window import ThreadWindow, load_window, take_prefix

__all__ = ["META_CURRENT_TASK", "META_LAST_MODEL", "META_SUGGESTED_RESPONSE", "Deps"]

log = logging.getLogger("obsmem")

META_CURRENT_TASK = "om:current_task"
META_SUGGESTED_RESPONSE = "om:suggested_response"
META_EXTRACTED = "om:extracted"
META_LAST_MODEL = "om:last_actor_model"
COMMIT_ATTEMPTS = 20


@dataclass(slots=True, kw_only=True)
class Deps:
    """What every cycle needs: the store, the options and the outside world."""

    store: Store
    options: ResolvedOptions
    estimator: TokenEstimator
    bus: EventBus
    hooks: Hooks
    tz: tzinfo
    clock: Callable[[], datetime]
    sync_timeout: float
    background_timeout: float
    config: Mapping[str, Any] = field(default_factory=dict[str, Any])

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


def _ms_since(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 1)


# -- thread metadata -------------------------------------------------------------------------


async def apply_hints(
    deps: Deps,
    thread_id: str,
    *,
    current_task: str | None,
    suggested_response: str | None,
    thread_title: str | None,
    cycle_id: str,
) -> None:
    """Store the hints a cycle produced. Missing hints never blank stored ones (invariant 9)."""
    patch: dict[str, Any] = {}
    if current_task:
        patch[META_CURRENT_TASK] = current_task
    if suggested_response:
        patch[META_SUGGESTED_RESPONSE] = suggested_response
    thread = await deps.store.get_thread(thread_id)
    if thread is None:
        return
    new_title: str | None = None
    title = (thread_title or "").strip()
    if (
        deps.options.observation.thread_title
        and len(title) >= 3
        and title != thread.title
        and not thread.metadata.get("title_pinned")
    ):
        new_title = title
    if patch or new_title:
        await deps.store.update_thread(thread_id, title=new_title, metadata=patch)
    if new_title:
        deps.bus.emit(
            ThreadUpdateEvent(
                cycle_id=cycle_id,
                thread_id=thread_id,
                old_title=thread.title,
                new_title=new_title,
                timestamp=deps.now(),
            )
        )


async def prior_hints(deps: Deps, thread_id: str) -> tuple[str | None, str | None, str | None]:
    thread = await deps.store.get_thread(thread_id)
    if thread is None:
        return None, None, None
    meta = thread.metadata
    return meta.get(META_CURRENT_TASK), meta.get(META_SUGGESTED_RESPONSE), thread.title


# -- activation --------------------------------------------------------------------------------


def join_log(log: str, addition: str, *, at: datetime) -> str:
    """Append ``addition`` to the log after a message-boundary line (or start the log)."""
    addition = addition.strip()
    if not addition:
        return log
    if not log.strip():
        return addition
    return log.rstrip() + boundary_line(at) + addition


async def activate_chunks(
    deps: Deps,
    key: str,
    thread_id: str,
    *,
    choose: Callable[[OMRecord], int],
    trigger: ActivationTrigger,
    previous_model: str | None = None,
    current_model: str | None = None,
    last_activity_at: datetime | None = None,
) -> OMRecord | None:
    """Activate ``choose(head)`` leading chunks; retries the commit on a lost race."""
    for _ in range(COMMIT_ATTEMPTS):
        head = await deps.store.get_record(key)
        if head is None or not head.chunks:
            return head
        count = min(choose(head), len(head.chunks))
        if count <= 0:
            return head
        chunks = head.chunks[:count]
        at = chunks[-1].last_message_at or chunks[-1].created_at
        new_log = join_log(head.observations, "\n\n".join(c.observations for c in chunks), at=at)
        try:
            record = await deps.store.activate_chunks(
                head.id,
                head.version,
                count,
                observations=new_log,
                observation_tokens=deps.estimator.count_text(new_log),
            )
        except ConflictError:
            continue
        latest = chunks[-1]
        await apply_hints(
            deps,
            thread_id,
            current_task=latest.current_task,
            suggested_response=latest.suggested_response,
            thread_title=None,  # titles were applied when the chunk was buffered
            cycle_id=latest.cycle_id,
        )
        now = deps.now()
        for chunk in chunks:
            deps.bus.emit(
                ActivationEvent(
                    cycle_id=chunk.cycle_id,
                    operation_type="observation",
                    activated_at=now,
                    chunks_activated=count,
                    tokens_activated=chunk.message_tokens,
                    observation_tokens=record.observation_tokens,
                    messages_activated=sum(r.last_seq - r.first_seq + 1 for r in chunk.ranges),
                    record_id=record.id,
                    thread_id=thread_id,
                    generation=record.generation,
                    triggered_by=trigger,
                    observations=chunk.observations,
                    last_activity_at=last_activity_at,
                    ttl_expired_ms=(
                        (now - last_activity_at).total_seconds() * 1000
                        if trigger == "ttl" and last_activity_at
                        else None
                    ),
                    previous_model=previous_model if trigger == "provider_change" else None,
                    current_model=current_model if trigger == "provider_change" else None,
                )
            )
        return record
    raise StoreError(f"activation of {key} kept losing races; giving up for this step")


# -- observer calls ----------------------------------------------------------------------------


async def _run_observer(
    deps: Deps,
    *,
    thread_id: str,
    messages: Sequence[Message] = (),
    threads: Sequence[tuple[str, Sequence[Message]]] = (),
    previous: str,
    cycle_id: str,
    operation: str,
    budget: float,
) -> ParsedOutput | None:
    """One Observer call with the transform hooks. None means "nothing to observe" (a
    ``before_observation`` hook returned no messages)."""
    obs = deps.options.observation
    if deps.hooks.before_observation is not None and not threads:
        changed = await call_hook(deps.hooks.before_observation, list(messages))
        if changed is not None:
            messages = list(changed)
            if not messages:
                return None
    current_task, suggested, title = await prior_hints(deps, thread_id)
    parsed, _ = await observe(
        ObserverInput(
            messages=messages,
            threads=threads,
            previous_observations=previous,
            previous_observer_tokens=obs.previous_observer_tokens,
            prior_current_task=current_task,
            prior_suggested_response=suggested,
            prior_thread_title=title,
            ask_thread_title=obs.thread_title,
            continuation_hints=obs.continuation_hints.any,
            instruction=obs.instruction,
            tz=deps.tz,
        ),
        model=obs.model,
        model_settings=obs.model_settings,
        estimator=deps.estimator,
        timeout=budget,
        attachment_filter=attachment_filter(deps.options),
        cycle_id=cycle_id,
        operation=operation,
    )
    if deps.hooks.after_observation is not None:
        changed_text = await call_hook(deps.hooks.after_observation, parsed.observations)
        if isinstance(changed_text, str):
            parsed = _with_observations(parsed, changed_text)
    return parsed


def _with_observations(parsed: ParsedOutput, text: str) -> ParsedOutput:
    from dataclasses import replace

    return replace(parsed, observations=text)


def _previous_for_observer(record: OMRecord) -> str:
    if not record.chunks:
        return record.observations
    pending = "\n\n".join(c.observations for c in record.chunks)
    return f"{record.observations}\n\n--- BUFFERED (pending activation) ---\n\n{pending}".strip()


# -- background buffering ------------------------------------------------------------------------


async def buffer_once(
    deps: Deps, key: str, thread_id: str, resource_id: str | None, *, idle: bool = False
) -> Literal["added", "skipped", "failed"]:
    """Observe the messages after the last chunk into a new buffered chunk. Never raises:
    failures become ``data-om-buffering-failed`` and the result ``"failed"``."""
    obs = deps.options.observation
    head = await deps.store.get_record(key)
    if head is None or obs.buffer_tokens is None:
        return "skipped"
    [window] = await load_window(deps.store, head, [thread_id], deps.estimator)
    unbuffered = [
        (m, t)
        for m, t in zip(window.messages, window.tokens, strict=True)
        if (m.seq or 0) > window.covered_through
    ]
    if not unbuffered:
        return "skipped"
    msgs = [m for m, _ in unbuffered]
    counts = [t for _, t in unbuffered]
    # A chunk covers about one buffering interval (halved near the threshold); an idle flush
    # takes everything.
    interval = buffer_interval(
        window.total, message_threshold(deps.options, head.observation_tokens), obs.buffer_tokens
    )
    at_least = sum(counts) if idle else interval
    take = take_prefix(msgs, counts, at_least=at_least, at_most=obs.message_tokens)
    msgs, counts = msgs[:take], counts[:take]
    tokens = sum(counts)
    if not msgs or (not idle and tokens < obs.buffer_tokens // 2):
        return "skipped"
    cycle_id = new_cycle_id("buffer-obs")
    started = time.monotonic()
    deps.bus.emit(
        BufferingStartEvent(
            cycle_id=cycle_id,
            operation_type="observation",
            started_at=deps.now(),
            tokens_to_buffer=tokens,
            record_id=head.id,
            thread_id=thread_id,
            thread_ids=(thread_id,),
            config=deps.config,
        )
    )
    ctx = HookContext(
        thread_id=thread_id,
        resource_id=resource_id,
        cycle_id=cycle_id,
        operation_type="observation",
        trigger="async-buffer",
    )
    await notify(deps.hooks.on_observation_start, ctx)
    try:
        parsed = await _run_observer(
            deps,
            thread_id=thread_id,
            messages=msgs,
            previous=_previous_for_observer(head),
            cycle_id=cycle_id,
            operation="buffering",
            budget=deps.background_timeout,
        )
        text = "" if parsed is None else parsed.observations
        chunk = BufferedChunk(
            id=f"ombuf-{uuid.uuid4().hex}",
            cycle_id=cycle_id,
            observations=text,
            token_count=deps.estimator.count_text(text),
            message_tokens=tokens,
            ranges=(
                MessageRange(
                    thread_id=thread_id, first_seq=msgs[0].seq or 0, last_seq=msgs[-1].seq or 0
                ),
            ),
            message_ids=tuple(m.id for m in msgs),
            last_message_at=msgs[-1].created_at,
            created_at=deps.now(),
            current_task=None if parsed is None else parsed.current_task,
            suggested_response=None if parsed is None else parsed.suggested_response,
            thread_title=None if parsed is None else parsed.thread_title,
        )
        record = await _commit_chunk(deps, key, chunk)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a background failure never escapes (invariant 7)
        deps.bus.emit(
            BufferingFailedEvent(
                cycle_id=cycle_id,
                operation_type="observation",
                failed_at=deps.now(),
                duration_ms=_ms_since(started),
                tokens_attempted=tokens,
                error=_describe(exc),
                record_id=head.id,
                thread_id=thread_id,
            )
        )
        await notify(deps.hooks.on_observation_end, _failed(ctx, exc))
        return "failed"
    if record is None:
        return "skipped"  # someone else covered these messages first
    if parsed is not None:
        await apply_hints(
            deps,
            thread_id,
            current_task=None,
            suggested_response=None,
            thread_title=parsed.thread_title,
            cycle_id=cycle_id,
        )
    deps.bus.emit(
        BufferingEndEvent(
            cycle_id=cycle_id,
            operation_type="observation",
            completed_at=deps.now(),
            duration_ms=_ms_since(started),
            tokens_buffered=tokens,
            buffered_tokens=sum(c.token_count for c in record.chunks),
            record_id=record.id,
            thread_id=thread_id,
            observations=chunk.observations,
        )
    )
    await notify(deps.hooks.on_observation_end, _done(ctx, chunk.observations))
    return "added"


async def _commit_chunk(deps: Deps, key: str, chunk: BufferedChunk) -> OMRecord | None:
    first = chunk.ranges[0]
    for _ in range(COMMIT_ATTEMPTS):
        head = await deps.store.get_record(key)
        if head is None or head.covered_through(first.thread_id) + 1 != first.first_seq:
            return None  # covered meanwhile (activation, a sync observation, another worker)
        try:
            return await deps.store.add_chunk(head.id, head.version, chunk)
        except ConflictError:
            continue
    return None


# -- synchronous observation ---------------------------------------------------------------------


async def observe_sync(
    deps: Deps,
    key: str,
    thread_id: str,
    resource_id: str | None,
    *,
    thread_ids: Sequence[str],
    keep_tokens: int,
    protect: Mapping[str, int] | None = None,
    trigger: Trigger,
    deadline: float | None = None,
) -> bool:
    """Observe unobserved messages now, oldest first, until at most ``keep_tokens`` stay raw.

    Buffered chunks are activated first. Each Observer call takes at most ``message_tokens`` of
    messages; the loop ends at the deadline. ``protect`` gives, per thread, the first seq that
    must stay raw (the current turn's input). Returns False if a failure stopped it; the turn
    then goes on with raw history and a ``data-om-observation-failed`` event (invariant 7).
    """
    obs = deps.options.observation
    deadline = deadline if deadline is not None else time.monotonic() + deps.sync_timeout
    while True:
        head = await activate_chunks(
            deps, key, thread_id, choose=lambda r: len(r.chunks), trigger="threshold"
        )
        if head is None:
            return True
        windows = await load_window(deps.store, head, thread_ids, deps.estimator)
        batch = _select_for_observation(
            windows, keep_tokens=keep_tokens, protect=protect or {}, cap=obs.message_tokens
        )
        if not batch:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        ok = await _observe_batch(
            deps,
            key,
            thread_id,
            resource_id,
            head=head,
            batch=batch,
            trigger=trigger,
            budget=remaining,
        )
        if not ok:
            return False


def _select_for_observation(
    windows: Sequence[ThreadWindow], *, keep_tokens: int, protect: Mapping[str, int], cap: int
) -> list[tuple[str, list[Message], int]]:
    """Per thread, the oldest messages to observe so that about ``keep_tokens`` stay raw."""
    total = sum(w.total for w in windows)
    excess = total - keep_tokens
    if excess <= 0:
        return []
    batch: list[tuple[str, list[Message], int]] = []
    for w in sorted(windows, key=lambda w: w.total, reverse=True):
        if excess <= 0:
            break
        limit = protect.get(w.thread_id)
        pairs = [
            (m, t)
            for m, t in zip(w.messages, w.tokens, strict=True)
            if limit is None or (m.seq or 0) < limit
        ]
        msgs = [m for m, _ in pairs]
        counts = [t for _, t in pairs]
        take = take_prefix(msgs, counts, at_least=min(excess, cap), at_most=cap)
        if take:
            tokens = sum(counts[:take])
            batch.append((w.thread_id, msgs[:take], tokens))
            excess -= tokens
    return batch


async def _observe_batch(
    deps: Deps,
    key: str,
    thread_id: str,
    resource_id: str | None,
    *,
    head: OMRecord,
    batch: list[tuple[str, list[Message], int]],
    trigger: Trigger,
    budget: float,
) -> bool:
    cycle_id = new_cycle_id("obs")
    tokens = sum(t for _, _, t in batch)
    started = time.monotonic()
    deps.bus.emit(
        ObservationStartEvent(
            cycle_id=cycle_id,
            operation_type="observation",
            started_at=deps.now(),
            tokens_to_observe=tokens,
            record_id=head.id,
            thread_id=thread_id,
            thread_ids=tuple(t for t, _, _ in batch),
            config=deps.config,
        )
    )
    ctx = HookContext(
        thread_id=thread_id,
        resource_id=resource_id,
        cycle_id=cycle_id,
        operation_type="observation",
        trigger=trigger,
    )
    await notify(deps.hooks.on_observation_start, ctx)
    expected = {t: head.cursor.get(t, 0) for t, _, _ in batch}
    cursor = {t: msgs[-1].seq or 0 for t, msgs, _ in batch}
    try:
        async with asyncio.timeout(budget):
            text, per_thread = await _observe_texts(
                deps, head, batch, cycle_id=cycle_id, budget=budget
            )
        last_at = max(msgs[-1].created_at for _, msgs, _ in batch)
        record = await _commit_observation(
            deps, key, text, at=last_at, cursor=cursor, expected=expected, observed_tokens=tokens
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        deps.bus.emit(
            ObservationFailedEvent(
                cycle_id=cycle_id,
                operation_type="observation",
                failed_at=deps.now(),
                duration_ms=_ms_since(started),
                tokens_attempted=tokens,
                error=_describe(exc),
                record_id=head.id,
                thread_id=thread_id,
            )
        )
        await notify(deps.hooks.on_observation_end, _failed(ctx, exc))
        return False
    for t, parsed in per_thread.items():
        await apply_hints(
            deps,
            t,
            current_task=parsed.current_task,
            suggested_response=parsed.suggested_response,
            thread_title=parsed.thread_title,
            cycle_id=cycle_id,
        )
    main = per_thread.get(thread_id)
    deps.bus.emit(
        ObservationEndEvent(
            cycle_id=cycle_id,
            operation_type="observation",
            completed_at=deps.now(),
            duration_ms=_ms_since(started),
            tokens_observed=tokens,
            observation_tokens=deps.estimator.count_text(text),
            record_id=record.id if record else head.id,
            thread_id=thread_id,
            observations=text,
            current_task=main.current_task if main else None,
            suggested_response=main.suggested_response if main else None,
        )
    )
    await notify(deps.hooks.on_observation_end, _done(ctx, text))
    return record is not None


async def _observe_texts(
    deps: Deps,
    head: OMRecord,
    batch: list[tuple[str, list[Message], int]],
    *,
    cycle_id: str,
    budget: float,
) -> tuple[str, dict[str, ParsedOutput]]:
    """Run the Observer over a batch: one call in thread scope; in resource scope, threads are
    grouped up to ``max_tokens_per_batch`` and the groups observed in parallel."""
    if deps.options.scope == "thread":
        [(t, msgs, _)] = batch
        parsed = await _run_observer(
            deps,
            thread_id=t,
            messages=msgs,
            previous=head.observations,
            cycle_id=cycle_id,
            operation="observation",
            budget=budget,
        )
        if parsed is None:
            return "", {}
        return parsed.observations, {t: parsed}
    groups: list[list[tuple[str, list[Message]]]] = [[]]
    size = 0
    for t, msgs, tokens in batch:
        if groups[-1] and size + tokens > deps.options.observation.max_tokens_per_batch:
            groups.append([])
            size = 0
        groups[-1].append((t, msgs))
        size += tokens
    results = await asyncio.gather(
        *[
            _run_observer(
                deps,
                thread_id=group[0][0],
                threads=group,
                previous=head.observations,
                cycle_id=cycle_id,
                operation="observation",
                budget=budget,
            )
            for group in groups
        ]
    )
    sections: list[str] = []
    per_thread: dict[str, ParsedOutput] = {}
    for group, parsed in zip(groups, results, strict=True):
        if parsed is None:
            continue
        for t, _ in group:
            part = parsed.threads.get(t)
            if part is None and len(group) == 1:
                part = parsed
            if part is not None and part.observations.strip():
                sections.append(f'<thread id="{t}">\n{part.observations.strip()}\n</thread>')
                per_thread[t] = part
    return "\n".join(sections), per_thread


async def _commit_observation(
    deps: Deps,
    key: str,
    text: str,
    *,
    at: datetime,
    cursor: Mapping[str, int],
    expected: Mapping[str, int],
    observed_tokens: int,
) -> OMRecord | None:
    for _ in range(COMMIT_ATTEMPTS):
        head = await deps.store.get_record(key)
        if head is None or any(head.cursor.get(t, 0) != s for t, s in expected.items()):
            return None  # another worker observed these messages first
        new_log = join_log(head.observations, text, at=at)
        try:
            return await deps.store.commit_observation(
                head.id,
                head.version,
                observations=new_log,
                observation_tokens=deps.estimator.count_text(new_log),
                cursor=cursor,
                expected_cursor=expected,
                observed_tokens=observed_tokens,
            )
        except ConflictError:
            continue
    raise StoreError(f"observation of {key} kept losing races")


# -- reflection ----------------------------------------------------------------------------------


async def reflect_now(
    deps: Deps,
    key: str,
    thread_id: str,
    resource_id: str | None,
    *,
    trigger: Trigger,
    start_level: int | None = None,
    guidance: str | None = None,
    budget: float | None = None,
) -> OMRecord | None:
    """Reflect the whole log and start a new generation. The old log stays on failure."""
    ref = deps.options.reflection
    head = await deps.store.get_record(key)
    if head is None or not head.observations.strip():
        return None
    source = head.observations
    level = compression_start_level(ref.model) if start_level is None else start_level
    result_text, _ = await _run_reflection(
        deps,
        head=head,
        thread_id=thread_id,
        resource_id=resource_id,
        source=source,
        target=ref.observation_tokens,
        level=level,
        guidance=guidance,
        trigger=trigger,
        operation_type="reflection",
        buffered=False,
        budget=budget if budget is not None else deps.sync_timeout,
    )
    if result_text is None:
        return None
    for _ in range(COMMIT_ATTEMPTS):
        current = await deps.store.get_record(key)
        if current is None or not current.observations.startswith(source):
            return None  # the log was replaced meanwhile; this reflection is stale
        tail = current.observations[len(source) :].strip()
        new_log = f"{result_text}\n\n{tail}" if tail else result_text
        try:
            return await deps.store.start_reflection_generation(
                current.id,
                current.version,
                observations=new_log,
                observation_tokens=deps.estimator.count_text(new_log),
            )
        except ConflictError:
            continue
    return None


async def buffer_reflection(deps: Deps, key: str, thread_id: str, resource_id: str | None) -> bool:
    """Reflect the oldest part of the log in the background and store it as buffered."""
    ref = deps.options.reflection
    head = await deps.store.get_record(key)
    if head is None or head.buffered_reflection is not None or ref.buffer_activation is None:
        return False
    lines = head.observations.split("\n")
    count, target = reflection_slice(
        len(lines),
        head.observation_tokens,
        threshold=ref.observation_tokens,
        buffer_activation=ref.buffer_activation,
    )
    if count == 0:
        return False
    source = "\n".join(lines[:count])
    text, tokens = await _run_reflection(
        deps,
        head=head,
        thread_id=thread_id,
        resource_id=resource_id,
        source=source,
        target=target,
        level=compression_start_level(ref.model),
        guidance=None,
        trigger="async-buffer",
        operation_type="reflection",
        buffered=True,
        budget=deps.background_timeout,
    )
    if text is None:
        return False
    buffered = BufferedReflection(
        cycle_id=new_cycle_id("reflect-buf"),
        text=text,
        token_count=tokens,
        input_tokens=deps.estimator.count_text(source),
        line_count=count,
        created_at=deps.now(),
    )
    for _ in range(COMMIT_ATTEMPTS):
        current = await deps.store.get_record(key)
        if (
            current is None
            or current.buffered_reflection is not None
            or current.observations.split("\n")[:count] != lines[:count]
        ):
            return False
        try:
            await deps.store.set_buffered_reflection(current.id, current.version, buffered)
            return True
        except ConflictError:
            continue
    return False


async def activate_reflection(
    deps: Deps, key: str, thread_id: str, *, trigger: ActivationTrigger
) -> OMRecord | None:
    """Swap a finished background reflection in: its text, then the lines it did not cover."""
    for _ in range(COMMIT_ATTEMPTS):
        head = await deps.store.get_record(key)
        if head is None or head.buffered_reflection is None:
            return None
        br = head.buffered_reflection
        tail = "\n".join(head.observations.split("\n")[br.line_count :]).strip()
        new_log = f"{br.text}\n\n{tail}" if tail else br.text
        try:
            record = await deps.store.start_reflection_generation(
                head.id,
                head.version,
                observations=new_log,
                observation_tokens=deps.estimator.count_text(new_log),
            )
        except ConflictError:
            continue
        deps.bus.emit(
            ActivationEvent(
                cycle_id=br.cycle_id,
                operation_type="reflection",
                activated_at=deps.now(),
                chunks_activated=1,
                tokens_activated=br.input_tokens,
                observation_tokens=record.observation_tokens,
                messages_activated=0,
                record_id=record.id,
                thread_id=thread_id,
                generation=record.generation,
                triggered_by=trigger,
                observations=br.text,
            )
        )
        return record
    return None


async def _run_reflection(
    deps: Deps,
    *,
    head: OMRecord,
    thread_id: str,
    resource_id: str | None,
    source: str,
    target: int,
    level: int,
    guidance: str | None,
    trigger: Trigger,
    operation_type: OperationType,
    buffered: bool,
    budget: float,
) -> tuple[str | None, int]:
    ref = deps.options.reflection
    cycle_id = new_cycle_id("reflect-buf" if buffered else "reflect")
    tokens_in = deps.estimator.count_text(source)
    started = time.monotonic()
    if buffered:
        deps.bus.emit(
            BufferingStartEvent(
                cycle_id=cycle_id,
                operation_type=operation_type,
                started_at=deps.now(),
                tokens_to_buffer=tokens_in,
                record_id=head.id,
                thread_id=thread_id,
                config=deps.config,
            )
        )
    else:
        deps.bus.emit(
            ObservationStartEvent(
                cycle_id=cycle_id,
                operation_type=operation_type,
                started_at=deps.now(),
                tokens_to_observe=tokens_in,
                record_id=head.id,
                thread_id=thread_id,
                config=deps.config,
            )
        )
    ctx = HookContext(
        thread_id=thread_id,
        resource_id=resource_id,
        cycle_id=cycle_id,
        operation_type="reflection",
        trigger=trigger,
    )
    await notify(deps.hooks.on_reflection_start, ctx)
    try:
        prepared = await call_hook(deps.hooks.before_reflection, source)
        shown = prepared if isinstance(prepared, str) else source
        async with asyncio.timeout(budget):
            result = await reflect(
                shown,
                model=ref.model,
                model_settings=ref.model_settings,
                estimator=deps.estimator,
                target_tokens=target,
                start_level=level,
                instruction=ref.instruction,
                guidance=guidance,
                continuation_hints=ref.continuation_hints.any,
                timeout=budget,
                cycle_id=cycle_id,
            )
        text = result.parsed.observations
        changed = await call_hook(deps.hooks.after_reflection, text)
        if isinstance(changed, str):
            text = changed
        if not text.strip():
            raise ObserverOutputError("the reflection came back empty; the old log stays")
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        failed_event = BufferingFailedEvent if buffered else ObservationFailedEvent
        deps.bus.emit(
            failed_event(
                cycle_id=cycle_id,
                operation_type=operation_type,
                failed_at=deps.now(),
                duration_ms=_ms_since(started),
                tokens_attempted=tokens_in,
                error=_describe(exc),
                record_id=head.id,
                thread_id=thread_id,
            )
        )
        await notify(deps.hooks.on_reflection_end, _failed(ctx, exc))
        return None, 0
    tokens_out = deps.estimator.count_text(text)
    if not buffered:
        await apply_hints(
            deps,
            thread_id,
            current_task=result.parsed.current_task,
            suggested_response=result.parsed.suggested_response,
            thread_title=None,
            cycle_id=cycle_id,
        )
        deps.bus.emit(
            ObservationEndEvent(
                cycle_id=cycle_id,
                operation_type=operation_type,
                completed_at=deps.now(),
                duration_ms=_ms_since(started),
                tokens_observed=tokens_in,
                observation_tokens=tokens_out,
                record_id=head.id,
                thread_id=thread_id,
                observations=text,
                current_task=result.parsed.current_task,
                suggested_response=result.parsed.suggested_response,
            )
        )
    else:
        deps.bus.emit(
            BufferingEndEvent(
                cycle_id=cycle_id,
                operation_type=operation_type,
                completed_at=deps.now(),
                duration_ms=_ms_since(started),
                tokens_buffered=tokens_in,
                buffered_tokens=tokens_out,
                record_id=head.id,
                thread_id=thread_id,
                observations=text,
            )
        )
    await notify(deps.hooks.on_reflection_end, _done(ctx, text))
    return text, tokens_out


# -- helpers -------------------------------------------------------------------------------------


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ModelError | StoreError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _failed(ctx: HookContext, exc: BaseException) -> HookContext:
    from dataclasses import replace

    return replace(ctx, error=_describe(exc))


def _done(ctx: HookContext, observations: str) -> HookContext:
    from dataclasses import replace

    return replace(ctx, observations=observations)
