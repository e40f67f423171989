"""Background buffering of observations, and the activation of buffered chunks."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..events import ActivationEvent
from ..extractors import ExtractionResult
from ..meta_keys import META_CURRENT_TASK, META_SUGGESTED_RESPONSE
from ..planner import ActivationTrigger, Batch
from ..records import BufferedChunk, MessageRange, ObservationGroup, OMRecord
from ..snapshot import Snapshot
from ..stores import ActivateChunks, AddChunk, ThreadPatch
from .common import Deps, join_log, new_cycle_id, report_titles
from .extraction import ExtractionPlan, extract, observation_plan, value_patches
from .lifecycle import Cycle, Failure, Outcome, run_cycle
from .observer_run import ObserverRun, previous_for_observer, run_observer
from .retrieval import group_for, index_groups, label, retrieval_on
from .writes import Write, commit, commit_activation

__all__ = ["Activation", "activate_chunks", "buffer_chunk"]

# -- activation --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Activation:
    """Why chunks activate, for the activation events."""

    trigger: ActivationTrigger
    previous_model: str | None = None
    current_model: str | None = None
    last_activity_at: datetime | None = None
    idle_ms: float | None = None
    """How long the thread was idle (the monotonic clock's measure, :mod:`obsmem.clocks`)."""


async def activate_chunks(
    deps: Deps, snapshot: Snapshot, *, count: int | None, why: Activation
) -> Snapshot | None:
    """Activate the first ``count`` chunks (all when None) and return the snapshot after it;
    None when there was nothing left to activate."""
    activated: list[BufferedChunk] = []

    def decide(head: OMRecord) -> Write | None:
        n = len(head.chunks) if count is None else min(count, len(head.chunks))
        if n <= 0:
            return None
        chunks = head.chunks[:n]
        activated[:] = chunks
        at = chunks[-1].last_message_at or chunks[-1].created_at
        new_log = join_log(head.observations, "\n\n".join(c.observations for c in chunks), at=at)
        return Write(
            change=ActivateChunks(
                count=n, observations=new_log, observation_tokens=deps.estimator.count_text(new_log)
            ),
            threads=_hint_patches(chunks),
            ranges=tuple(r for c in chunks for r in c.ranges),
        )

    result = await commit_activation(
        deps,
        snapshot,
        decide,
        id_prefix="activate",
        operation="chunk-activation",
        thread_ids=[r.thread_id for c in snapshot.record.chunks for r in c.ranges],
    )
    if result is None or result.snapshot is None:
        return None
    _report(deps, result.record, activated, why, thread_id=snapshot.subject.thread_id)
    return result.snapshot


def _hint_patches(chunks: Sequence[BufferedChunk]) -> list[ThreadPatch]:
    """Per thread, the hints of the newest activated chunk that has them (invariant 9: a chunk
    without hints never blanks stored ones). Titles were stored when each chunk was buffered."""
    hints: dict[str, dict[str, str]] = {}
    for chunk in chunks:
        thread_id = chunk.ranges[0].thread_id
        for key, value in (
            (META_CURRENT_TASK, chunk.current_task),
            (META_SUGGESTED_RESPONSE, chunk.suggested_response),
        ):
            if value:
                hints.setdefault(thread_id, {})[key] = value
    return [
        ThreadPatch(thread_id=t, set=tuple(((k,), v) for k, v in values.items()))
        for t, values in hints.items()
    ]


def _report(
    deps: Deps,
    record: OMRecord,
    chunks: Sequence[BufferedChunk],
    why: Activation,
    *,
    thread_id: str,
) -> None:
    now = deps.now()
    ttl = why.trigger == "ttl"
    changed = why.trigger == "provider_change"
    for chunk in chunks:
        deps.bus.emit(
            ActivationEvent(
                cycle_id=chunk.cycle_id,
                operation_type="observation",
                activated_at=now,
                chunks_activated=len(chunks),
                tokens_activated=chunk.message_tokens,
                observation_tokens=record.observation_tokens,
                messages_activated=sum(r.last_seq - r.first_seq + 1 for r in chunk.ranges),
                record_id=record.id,
                thread_id=thread_id,
                generation=record.generation,
                triggered_by=why.trigger,
                observations=chunk.observations,
                last_activity_at=why.last_activity_at,
                ttl_expired_ms=why.idle_ms if ttl else None,
                previous_model=why.previous_model if changed else None,
                current_model=why.current_model if changed else None,
            )
        )


# -- background buffering ------------------------------------------------------------------------


async def buffer_chunk(deps: Deps, snapshot: Snapshot, batch: Batch) -> Outcome | Failure:
    """Observe ``batch`` (messages right after what is covered) into a new buffered chunk."""
    subject = snapshot.subject
    messages = batch.messages
    covered = MessageRange(
        thread_id=batch.thread_id, first_seq=messages[0].seq or 0, last_seq=messages[-1].seq or 0
    )
    cycle = Cycle(
        cycle_id=new_cycle_id("buffer-obs"),
        background=True,
        operation="observation",
        trigger="async-buffer",
        subject=subject,
        record_id=snapshot.record.id,
        tokens=batch.tokens,
        thread_ids=(batch.thread_id,),
        ranges=(covered,),
    )
    return await run_cycle(deps, cycle, lambda: _buffer(deps, snapshot, batch, cycle, covered))


async def _buffer(
    deps: Deps, snapshot: Snapshot, batch: Batch, cycle: Cycle, covered: MessageRange
) -> Outcome:
    """The work of a buffering cycle: observe, extract, make the chunk and commit it."""
    subject = snapshot.subject
    thread_id = batch.thread_id
    plan = observation_plan(deps, snapshot, thread_id)
    run, extracted = await _observe_batch(deps, snapshot, batch, plan, cycle_id=cycle.cycle_id)
    text = "" if run is None else run.parsed.observations
    groups: list[ObservationGroup] = []
    if retrieval_on(deps) and text.strip():
        group = group_for(
            deps,
            subject.key,
            cycle_id=cycle.cycle_id,
            resource_id=subject.resource_id,
            thread_id=thread_id,
            messages=batch.messages,
            observations=text,
        )
        groups = [group]
        text = label(text, group)
    chunk = _chunk_of(deps, batch, covered, text, extracted, cycle_id=cycle.cycle_id)
    # The title, working memory and extracted values are stored now; the continuation hints
    # wait in the chunk until it activates.
    thread_patch, resource_patch = value_patches(
        deps, snapshot, thread_id, plan, extracted, hints=False
    )
    first = chunk.ranges[0].first_seq

    def decide(head: OMRecord) -> Write | None:
        if head.covered_through(thread_id) + 1 != first:
            return None  # covered meanwhile (activation, a sync observation, another worker)
        return Write(
            change=AddChunk(chunk=chunk),
            groups=groups,
            threads=[thread_patch],
            resource=resource_patch,
        )

    result = await commit(
        deps,
        subject,
        snapshot.record,
        decide,
        seen=snapshot,
        cycle_id=cycle.cycle_id,
        ranges=chunk.ranges,
    )
    if result is not None:
        await index_groups(deps, groups)
        report_titles(deps, result.threads, cycle_id=cycle.cycle_id)
    return Outcome.after(
        result,
        observations=chunk.observations,
        output_tokens=chunk.token_count,
        extracted=extracted,
        buffered_tokens=sum(c.token_count for c in result.record.chunks) if result else 0,
    )


async def _observe_batch(
    deps: Deps, snapshot: Snapshot, batch: Batch, plan: ExtractionPlan, *, cycle_id: str
) -> tuple[ObserverRun | None, ExtractionResult]:
    """The Observer's answer for ``batch`` (None when it had nothing) and the values the
    extractors took from it, each within ``background_timeout``."""
    thread_id = batch.thread_id
    run = await run_observer(
        deps,
        snapshot,
        thread_id=thread_id,
        messages=batch.messages,
        previous=previous_for_observer(snapshot.record),
        cycle_id=cycle_id,
        operation="buffering",
        budget=deps.background_timeout,
        sections=plan.inline_sections,
        prior_values=plan.prompt_values,
    )
    extracted = (
        ExtractionResult()
        if run is None
        else await extract(
            deps,
            plan,
            parsed=run.parsed,
            exchange=run.exchange,
            thread_id=thread_id,
            resource_id=snapshot.subject.resource_id,
            operation_type="observation",
            cycle_id=cycle_id,
            deadline=time.monotonic() + deps.background_timeout,
        )
    )
    return run, extracted


def _chunk_of(
    deps: Deps,
    batch: Batch,
    covered: MessageRange,
    text: str,
    extracted: ExtractionResult,
    *,
    cycle_id: str,
) -> BufferedChunk:
    """The buffered chunk of ``batch``'s observations ``text``, with the values extracted."""
    messages = batch.messages
    return BufferedChunk(
        id=f"ombuf-{uuid.uuid4().hex}",
        cycle_id=cycle_id,
        observations=text,
        token_count=deps.estimator.count_text(text),
        message_tokens=batch.tokens,
        ranges=(covered,),
        message_ids=tuple(m.id for m in messages),
        last_message_at=messages[-1].created_at,
        created_at=deps.now(),
        current_task=extracted.values.get("current-task"),
        suggested_response=extracted.values.get("suggested-response"),
        thread_title=extracted.values.get("thread-title"),
        extracted_values=extracted.public_values,
        extraction_failures=extracted.failures,
    )
