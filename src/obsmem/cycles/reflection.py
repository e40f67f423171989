"""Reflection: synchronous, in the background (buffered), and the activation of a buffered
one.
"""

from __future__ import annotations

import asyncio
import time

from ..errors import ConflictError, ObserverOutputError
from ..events import (
    ActivationEvent,
    BufferingEndEvent,
    BufferingFailedEvent,
    BufferingStartEvent,
    HookContext,
    ObservationEndEvent,
    ObservationFailedEvent,
    ObservationStartEvent,
    OperationType,
    Trigger,
    call_hook,
    notify,
)
from ..extractors import Exchange, ExtractionResult
from ..observations import ParsedOutput
from ..options import compression_start_level
from ..planner import ActivationTrigger, reflection_slice
from ..records import BufferedReflection, ObservationGroup, OMRecord
from ..reflector import reflect, reflector_user_message
from .common import (
    COMMIT_ATTEMPTS,
    Deps,
    describe_error,
    hook_done,
    hook_failed,
    ms_since,
    new_cycle_id,
)
from .extraction import ExtractionPlan, extract, reflection_plan, store_values
from .retrieval import index_groups, label, reflection_group, retrieval_on

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
    result_text, groups = await _reflection_groups(deps, key, thread_id, resource_id, result_text)
    for _ in range(COMMIT_ATTEMPTS):
        current = await deps.store.get_record(key)
        if current is None or not current.observations.startswith(source):
            return None  # the log was replaced meanwhile; this reflection is stale
        tail = current.observations[len(source) :].strip()
        record = await _new_generation(deps, current, result_text, tail, groups)
        if record is not None:
            return record
    return None


async def _new_generation(
    deps: Deps, head: OMRecord, text: str, tail: str, groups: list[ObservationGroup]
) -> OMRecord | None:
    """Commit a reflection (``text``, then the ``tail`` it did not cover) as the next
    generation, with its groups; None when the head changed meanwhile (the caller re-reads)."""
    new_log = f"{text}\n\n{tail}" if tail else text
    try:
        record = await deps.store.start_reflection_generation(
            head.id,
            head.version,
            observations=new_log,
            observation_tokens=deps.estimator.count_text(new_log),
            groups=groups,
        )
    except ConflictError:
        return None
    await index_groups(deps, groups)
    return record


async def _reflection_groups(
    deps: Deps, key: str, thread_id: str, resource_id: str | None, text: str
) -> tuple[str, list[ObservationGroup]]:
    """With retrieval on: a group spanning what the reflection replaced, and the text labelled
    with its range (the Reflector may have dropped the earlier groups' labels)."""
    if not retrieval_on(deps):
        return text, []
    group = await reflection_group(
        deps,
        key,
        cycle_id=new_cycle_id("reflect"),
        resource_id=resource_id,
        thread_id=thread_id,
        observations=text,
    )
    if group is None:
        return text, []
    return label(text, group), [group]


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
        resource_id = head.resource_id
        text, groups = await _reflection_groups(deps, key, thread_id, resource_id, br.text)
        tail = "\n".join(head.observations.split("\n")[br.line_count :]).strip()
        record = await _new_generation(deps, head, text, tail, groups)
        if record is None:
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
    deadline = time.monotonic() + budget
    try:
        plan = await reflection_plan(deps, thread_id)
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
                extra_sections=plan.inline_sections,
                prior_values=plan.prompt_values,
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
                duration_ms=ms_since(started),
                tokens_attempted=tokens_in,
                error=describe_error(exc),
                record_id=head.id,
                thread_id=thread_id,
            )
        )
        await notify(deps.hooks.on_reflection_end, hook_failed(ctx, exc))
        return None, 0
    tokens_out = deps.estimator.count_text(text)
    extracted = await _extract(
        deps,
        plan,
        result.parsed,
        seen=reflector_user_message(
            shown,
            level=result.level,
            guidance=guidance,
            continuation_hints=ref.continuation_hints.any,
            prior_values=plan.prompt_values,
        ),
        answer=f"<observations>\n{text}\n</observations>",
        thread_id=thread_id,
        resource_id=resource_id,
        operation_type=operation_type,
        cycle_id=cycle_id,
        deadline=deadline,
    )
    # A synchronous reflection stores its hints now; a buffered one only its extracted values
    # (stored hints are never blanked either way).
    await store_values(
        deps, thread_id, plan, extracted, cycle_id=cycle_id, hints=not buffered, title=False
    )
    if not buffered:
        deps.bus.emit(
            ObservationEndEvent(
                cycle_id=cycle_id,
                operation_type=operation_type,
                completed_at=deps.now(),
                duration_ms=ms_since(started),
                tokens_observed=tokens_in,
                observation_tokens=tokens_out,
                record_id=head.id,
                thread_id=thread_id,
                observations=text,
                current_task=extracted.values.get("current-task"),
                suggested_response=extracted.values.get("suggested-response"),
                extracted_values=extracted.public_values,
                extraction_failures=extracted.failures,
            )
        )
    else:
        deps.bus.emit(
            BufferingEndEvent(
                cycle_id=cycle_id,
                operation_type=operation_type,
                completed_at=deps.now(),
                duration_ms=ms_since(started),
                tokens_buffered=tokens_in,
                buffered_tokens=tokens_out,
                record_id=head.id,
                thread_id=thread_id,
                observations=text,
                extracted_values=extracted.public_values,
                extraction_failures=extracted.failures,
            )
        )
    await notify(deps.hooks.on_reflection_end, hook_done(ctx, text))
    return text, tokens_out


async def _extract(
    deps: Deps,
    plan: ExtractionPlan,
    parsed: ParsedOutput,
    *,
    seen: str,
    answer: str,
    thread_id: str,
    resource_id: str | None,
    operation_type: OperationType,
    cycle_id: str,
    deadline: float,
) -> ExtractionResult:
    ref = deps.options.reflection
    return await extract(
        deps,
        plan,
        parsed=parsed,
        exchange=Exchange(
            seen=seen, answer=answer, model=ref.model, model_settings=ref.model_settings
        ),
        thread_id=thread_id,
        resource_id=resource_id,
        operation_type=operation_type,
        cycle_id=cycle_id,
        deadline=deadline,
    )
