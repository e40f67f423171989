"""Background buffering of observations and the activation of buffered chunks."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal

from ..errors import ConflictError, StoreError
from ..events import (
    ActivationEvent,
    BufferingEndEvent,
    BufferingFailedEvent,
    BufferingStartEvent,
    HookContext,
    notify,
)
from ..extractors import ExtractionResult
from ..planner import ActivationTrigger, buffer_interval, message_threshold
from ..records import BufferedChunk, MessageRange, ObservationGroup, OMRecord
from ..window import load_window, take_prefix
from .common import (
    COMMIT_ATTEMPTS,
    Deps,
    apply_hints,
    describe_error,
    hook_done,
    hook_failed,
    join_log,
    ms_since,
    new_cycle_id,
    previous_for_observer,
    run_observer,
)
from .extraction import extract, observation_plan, store_values
from .retrieval import group_for, index_groups, label, retrieval_on

# -- activation --------------------------------------------------------------------------------


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
        plan = await observation_plan(deps, thread_id)
        run = await run_observer(
            deps,
            thread_id=thread_id,
            messages=msgs,
            previous=previous_for_observer(head),
            cycle_id=cycle_id,
            operation="buffering",
            budget=deps.background_timeout,
            plan=plan,
        )
        parsed = None if run is None else run.parsed
        extracted = (
            ExtractionResult()
            if run is None
            else await extract(
                deps,
                plan,
                parsed=run.parsed,
                exchange=run.exchange,
                thread_id=thread_id,
                resource_id=resource_id,
                operation_type="observation",
                cycle_id=cycle_id,
                deadline=time.monotonic() + deps.background_timeout,
            )
        )
        text = "" if parsed is None else parsed.observations
        groups = []
        if retrieval_on(deps) and text.strip():
            group = group_for(
                deps,
                key,
                cycle_id=cycle_id,
                resource_id=resource_id,
                thread_id=thread_id,
                messages=msgs,
                observations=text,
            )
            groups = [group]
            text = label(text, group)
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
            current_task=extracted.values.get("current-task"),
            suggested_response=extracted.values.get("suggested-response"),
            thread_title=extracted.values.get("thread-title"),
            extracted_values=extracted.public_values,
            extraction_failures=extracted.failures,
        )
        record = await _commit_chunk(deps, key, chunk, groups)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a background failure never escapes (invariant 7)
        deps.bus.emit(
            BufferingFailedEvent(
                cycle_id=cycle_id,
                operation_type="observation",
                failed_at=deps.now(),
                duration_ms=ms_since(started),
                tokens_attempted=tokens,
                error=describe_error(exc),
                record_id=head.id,
                thread_id=thread_id,
            )
        )
        await notify(deps.hooks.on_observation_end, hook_failed(ctx, exc))
        return "failed"
    if record is None:
        return "skipped"  # someone else covered these messages first
    await index_groups(deps, groups)
    # The title, working memory and extracted values are stored now; the continuation hints
    # wait in the chunk until it activates.
    await store_values(deps, thread_id, plan, extracted, cycle_id=cycle_id, hints=False)
    deps.bus.emit(
        BufferingEndEvent(
            cycle_id=cycle_id,
            operation_type="observation",
            completed_at=deps.now(),
            duration_ms=ms_since(started),
            tokens_buffered=tokens,
            buffered_tokens=sum(c.token_count for c in record.chunks),
            record_id=record.id,
            thread_id=thread_id,
            observations=chunk.observations,
            extracted_values=chunk.extracted_values,
            extraction_failures=chunk.extraction_failures,
        )
    )
    await notify(deps.hooks.on_observation_end, hook_done(ctx, chunk.observations))
    return "added"


async def _commit_chunk(
    deps: Deps, key: str, chunk: BufferedChunk, groups: Sequence[ObservationGroup] = ()
) -> OMRecord | None:
    first = chunk.ranges[0]
    for _ in range(COMMIT_ATTEMPTS):
        head = await deps.store.get_record(key)
        if head is None or head.covered_through(first.thread_id) + 1 != first.first_seq:
            return None  # covered meanwhile (activation, a sync observation, another worker)
        try:
            return await deps.store.add_chunk(head.id, head.version, chunk, groups=groups)
        except ConflictError:
            continue
    return None
