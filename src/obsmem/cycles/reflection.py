"""Reflection: synchronous, in the background (buffered), and the activation of a buffered one.

A reflection commits against the head it read, and only if the log still starts with what it
reflected; what was appended meanwhile is kept after it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..errors import ObserverOutputError
from ..events import ActivationEvent, Trigger
from ..extractors import Exchange, ExtractionResult
from ..observations import with_reflection
from ..options import compression_start_level
from ..planner import ActivationTrigger, reflection_slice
from ..records import BufferedReflection, ObservationGroup, OMRecord
from ..reflector import ReflectorInput, reflect, reflector_user_message
from ..snapshot import Snapshot
from ..stores import ResourcePatch, SetBufferedReflection, StartGeneration, ThreadPatch
from .common import Deps, new_cycle_id
from .extraction import extract, reflection_plan, value_patches
from .lifecycle import Cycle, Failure, Outcome, run_cycle, synchronous_outcome
from .observer_run import call_transform
from .retrieval import index_groups, label, reflection_group, retrieval_on
from .writes import Write, commit, commit_activation

__all__ = ["activate_reflection", "buffer_reflection", "reflect_now"]


def _generation(
    deps: Deps,
    source: str,
    text: str,
    groups: list[ObservationGroup],
    *,
    threads: list[ThreadPatch],
    resource: ResourcePatch | None,
) -> Callable[[OMRecord], Write | None]:
    """Decide a new generation: ``text``, then what was appended after ``source`` meanwhile."""

    def decide(head: OMRecord) -> Write | None:
        if not head.observations.startswith(source):
            return None  # the log was replaced meanwhile; this reflection is stale
        new_log = with_reflection(text, source, head.observations[len(source) :])
        return Write(
            change=StartGeneration(
                observations=new_log, observation_tokens=deps.estimator.count_text(new_log)
            ),
            groups=groups,
            threads=threads,
            resource=resource,
        )

    return decide


def _reflection_cycle(deps: Deps, snapshot: Snapshot, source: str, *, trigger: Trigger) -> Cycle:
    """The cycle reflecting ``source`` (the head's log, or its oldest part): in the background
    (buffered) when the trigger is ``async-buffer``."""
    background = trigger == "async-buffer"
    return Cycle(
        cycle_id=new_cycle_id("reflect-buf" if background else "reflect"),
        background=background,
        operation="reflection",
        trigger=trigger,
        subject=snapshot.subject,
        record_id=snapshot.record.id,
        tokens=deps.estimator.count_text(source),
    )


async def _reflection_groups(
    deps: Deps, snapshot: Snapshot, text: str
) -> tuple[str, list[ObservationGroup]]:
    """With retrieval on: a group spanning what the reflection replaced, and the text labelled
    with its range (the Reflector may have dropped the earlier groups' labels)."""
    if not retrieval_on(deps):
        return text, []
    subject = snapshot.subject
    group = await reflection_group(
        deps,
        subject.key,
        cycle_id=new_cycle_id("reflect"),
        resource_id=subject.resource_id,
        thread_id=subject.thread_id,
        observations=text,
    )
    if group is None:
        return text, []
    return label(text, group), [group]


async def reflect_now(
    deps: Deps,
    snapshot: Snapshot,
    *,
    trigger: Trigger,
    start_level: int | None = None,
    guidance: str | None = None,
    budget: float | None = None,
) -> Outcome | Failure | None:
    """Reflect the whole log and start a new generation. The old log stays on failure. None
    when the log is empty."""
    ref = deps.options.reflection
    head = snapshot.record
    source = head.observations
    if not source.strip():
        return None
    budget = budget if budget is not None else deps.sync_timeout
    cycle = _reflection_cycle(deps, snapshot, source, trigger=trigger)

    async def work() -> Outcome:
        text, extracted, threads, resource = await _run_reflector(
            deps,
            snapshot,
            cycle,
            source=source,
            target=ref.observation_tokens,
            budget=budget,
            start_level=start_level,
            guidance=guidance,
        )
        text, groups = await _reflection_groups(deps, snapshot, text)
        decide = _generation(deps, source, text, groups, threads=threads, resource=resource)
        result = await commit(
            deps, snapshot.subject, head, decide, seen=snapshot, cycle_id=cycle.cycle_id
        )
        return await synchronous_outcome(
            deps, cycle, result, groups, observations=text, extracted=extracted
        )

    return await run_cycle(deps, cycle, work)


async def buffer_reflection(deps: Deps, snapshot: Snapshot) -> Outcome | Failure | None:
    """Reflect the oldest part of the log in the background and store it as buffered. None
    when there is nothing to reflect (or one is already buffered)."""
    ref = deps.options.reflection
    head = snapshot.record
    if head.buffered_reflection is not None or ref.buffer_activation is None:
        return None
    lines = head.observations.split("\n")
    count, target = reflection_slice(
        len(lines),
        head.observation_tokens,
        threshold=ref.observation_tokens,
        buffer_activation=ref.buffer_activation,
    )
    if count == 0:
        return None
    source = "\n".join(lines[:count])
    cycle = _reflection_cycle(deps, snapshot, source, trigger="async-buffer")

    async def work() -> Outcome:
        text, extracted, threads, resource = await _run_reflector(
            deps, snapshot, cycle, source=source, target=target, budget=deps.background_timeout
        )
        tokens = deps.estimator.count_text(text)
        buffered = BufferedReflection(
            cycle_id=cycle.cycle_id,
            text=text,
            token_count=tokens,
            input_tokens=cycle.tokens,
            line_count=count,
            created_at=deps.now(),
        )

        def decide(current: OMRecord) -> Write | None:
            if (
                current.buffered_reflection is not None
                or current.observations.split("\n")[:count] != lines[:count]
            ):
                return None
            return Write(
                change=SetBufferedReflection(reflection=buffered),
                threads=threads,
                resource=resource,
            )

        result = await commit(
            deps, snapshot.subject, head, decide, seen=snapshot, cycle_id=cycle.cycle_id
        )
        return Outcome.after(
            result,
            observations=text,
            output_tokens=tokens,
            extracted=extracted,
            buffered_tokens=tokens,
        )

    return await run_cycle(deps, cycle, work)


async def activate_reflection(
    deps: Deps, snapshot: Snapshot, *, trigger: ActivationTrigger
) -> Snapshot | None:
    """Swap a finished background reflection in: its text, then the lines it did not cover.
    The snapshot after it, or None when there was none to swap in."""
    head = snapshot.record
    br = head.buffered_reflection
    if br is None:
        return None
    text, groups = await _reflection_groups(deps, snapshot, br.text)

    def decide(current: OMRecord) -> Write | None:
        if current.buffered_reflection != br:
            return None
        lines = current.observations.split("\n")
        new_log = with_reflection(
            text, "\n".join(lines[: br.line_count]), "\n".join(lines[br.line_count :])
        )
        return Write(
            change=StartGeneration(
                observations=new_log, observation_tokens=deps.estimator.count_text(new_log)
            ),
            groups=groups,
        )

    result = await commit_activation(
        deps,
        snapshot,
        decide,
        id_prefix="activate-refl",
        operation="reflection-activation",
        thread_ids=snapshot.subject.threads,
    )
    if result is None:
        return None
    await index_groups(deps, groups)
    deps.bus.emit(
        ActivationEvent(
            cycle_id=br.cycle_id,
            operation_type="reflection",
            activated_at=deps.now(),
            chunks_activated=1,
            tokens_activated=br.input_tokens,
            observation_tokens=result.record.observation_tokens,
            messages_activated=0,
            record_id=result.record.id,
            thread_id=snapshot.subject.thread_id,
            generation=result.record.generation,
            triggered_by=trigger,
            observations=br.text,
        )
    )
    return result.snapshot


async def _run_reflector(
    deps: Deps,
    snapshot: Snapshot,
    cycle: Cycle,
    *,
    source: str,
    target: int,
    budget: float,
    start_level: int | None = None,
    guidance: str | None = None,
) -> tuple[str, ExtractionResult, list[ThreadPatch], ResourcePatch | None]:
    """The Reflector's text for ``source`` (after the transform hooks), its extracted values and
    the metadata they write. A synchronous reflection stores its hints now; a buffered one only
    its extracted values (stored hints are never blanked either way). ``start_level``: the
    compression level to start from (None: the one for the Reflector's model)."""
    ref = deps.options.reflection
    level = compression_start_level(ref.model) if start_level is None else start_level
    thread_id = snapshot.subject.thread_id
    deadline = time.monotonic() + budget
    plan = reflection_plan(deps, snapshot, thread_id)
    inp = ReflectorInput(
        observations=await call_transform(deps.hooks.before_reflection, source),
        target_tokens=target,
        start_level=level,
        instruction=ref.instruction,
        guidance=guidance,
        continuation_hints=ref.continuation_hints.any,
        extra_sections=plan.inline_sections,
        prior_values=plan.prompt_values,
    )
    async with asyncio.timeout(budget):
        result = await reflect(
            inp,
            caller=deps.caller,
            model=ref.model,
            model_settings=ref.model_settings,
            estimator=deps.estimator,
            timeout=budget,
            cycle_id=cycle.cycle_id,
        )
    text = await call_transform(deps.hooks.after_reflection, result.parsed.observations)
    if not text.strip():
        raise ObserverOutputError("the reflection came back empty; the old log stays")
    extracted = await extract(
        deps,
        plan,
        parsed=result.parsed,
        exchange=Exchange(
            seen=reflector_user_message(inp, result.level),
            answer=f"<observations>\n{text}\n</observations>",
            model=ref.model,
            model_settings=ref.model_settings,
        ),
        thread_id=thread_id,
        resource_id=snapshot.subject.resource_id,
        operation_type="reflection",
        cycle_id=cycle.cycle_id,
        deadline=deadline,
    )
    thread_patch, resource_patch = value_patches(
        deps, snapshot, thread_id, plan, extracted, hints=not cycle.background, title=False
    )
    return text, extracted, [thread_patch], resource_patch
