"""One lifecycle for every cycle: start event and hook, the work, then end or failure.

Background cycles (buffering an observation chunk or a reflection) report with the
``data-om-buffering-*`` events; foreground cycles (a synchronous observation or reflection) with
``data-om-observation-*``; both carry ``operation_type``. Observation cycles call the
``on_observation_*`` hooks, reflection cycles the ``on_reflection_*`` ones. A cycle's failure
never escapes: it becomes the failed event, the end hook with its error, and a
:class:`Failure` for the engine's back-off.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ObserverOutputError, StoreError
from ..events import (
    BufferingEndEvent,
    BufferingFailedEvent,
    BufferingStartEvent,
    HookContext,
    ObservationEndEvent,
    ObservationFailedEvent,
    ObservationStartEvent,
    OperationType,
    Trigger,
    notify,
)
from ..extractors import ExtractionResult
from ..records import MessageRange, ObservationGroup
from ..snapshot import Snapshot, Subject
from ..stores import CommitResult
from .common import Deps, describe_error, ms_since, report_titles
from .ledger import model_name
from .retrieval import index_groups

__all__ = ["Cycle", "Failure", "Outcome", "run_cycle", "synchronous_outcome"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Cycle:
    """What a cycle is about, for its events and hooks."""

    cycle_id: str
    background: bool
    """Buffering (reported as ``data-om-buffering-*``) rather than synchronous work."""
    operation: OperationType
    trigger: Trigger
    subject: Subject
    record_id: str
    tokens: int
    """Tokens going in: messages to observe, or log to reflect."""
    thread_ids: tuple[str, ...] = ()
    ranges: tuple[MessageRange, ...] = ()
    """The messages the cycle is about (for its ledger row when it fails)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a finished cycle did."""

    committed: bool
    """False when the work became redundant before its commit (another worker did it)."""
    record_id: str | None = None
    observations: str = ""
    output_tokens: int = 0
    buffered_tokens: int = 0
    """Background cycles: observation tokens now waiting to activate."""
    extracted: ExtractionResult = field(default_factory=ExtractionResult)
    snapshot: Snapshot | None = None
    """The snapshot after the commit."""

    @classmethod
    def after(
        cls,
        result: CommitResult | None,
        *,
        observations: str,
        output_tokens: int,
        extracted: ExtractionResult,
        buffered_tokens: int = 0,
    ) -> Outcome:
        """What a cycle did, from its commit (None when its work was dropped)."""
        return cls(
            committed=result is not None,
            record_id=result.record.id if result is not None else None,
            observations=observations,
            output_tokens=output_tokens,
            buffered_tokens=buffered_tokens,
            extracted=extracted,
            snapshot=result.snapshot if result is not None else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    error: str
    unusable_answer: bool = False
    """The model answered, but nothing in it could be used (empty, cut off, looping): a
    problem of the messages it was shown as much as of the model (in resource scope, of those
    threads), unlike a call that failed."""
    store: bool = False
    """The store failed (a :class:`~obsmem.errors.StoreError`: an outage, a vanished file),
    not the model: nothing for the role to back off from."""


async def synchronous_outcome(
    deps: Deps,
    cycle: Cycle,
    result: CommitResult | None,
    groups: Sequence[ObservationGroup],
    *,
    observations: str,
    extracted: ExtractionResult,
) -> Outcome:
    """What a synchronous cycle did, from its commit (None when its work was dropped). The log
    changed now, so a commit's groups are indexed for search and its new titles reported."""
    if result is not None:
        await index_groups(deps, groups)
        report_titles(deps, result.threads, cycle_id=cycle.cycle_id)
    return Outcome.after(
        result,
        observations=observations,
        output_tokens=deps.estimator.count_text(observations),
        extracted=extracted,
    )


async def run_cycle(
    deps: Deps, cycle: Cycle, work: Callable[[], Awaitable[Outcome]]
) -> Outcome | Failure:
    """Run ``work`` as ``cycle``, reported and recorded in the cycle ledger: its commit carries
    its row; a failure's row waits for the write that stores the failure state."""
    started = time.monotonic()
    _open_ledger(deps, cycle)
    try:
        return await _run(deps, cycle, work, started)
    finally:
        deps.ledger.close(cycle.cycle_id)


def _open_ledger(deps: Deps, cycle: Cycle) -> None:
    reflection = cycle.operation == "reflection"
    if cycle.background:
        kind, operation = "buffering", f"buffered-{cycle.operation}"
    elif reflection:
        kind, operation = "reflection", "reflection"
    else:
        kind = "observation"
        operation = "catch-up" if cycle.trigger == "catch-up" else "observation"
    deps.ledger.start(
        cycle.cycle_id,
        subject=cycle.subject,
        kind=kind,
        operation=operation,
        now=deps.now(),
        # A reflection works on the whole log: every thread it covers.
        thread_ids=cycle.subject.threads if reflection else cycle.thread_ids,
        model=model_name(deps.memory_model("reflector" if reflection else "observer")),
    )


async def _run(
    deps: Deps, cycle: Cycle, work: Callable[[], Awaitable[Outcome]], started: float
) -> Outcome | Failure:
    _emit_start(deps, cycle)
    ctx = HookContext(
        thread_id=cycle.subject.thread_id,
        resource_id=cycle.subject.resource_id,
        cycle_id=cycle.cycle_id,
        operation_type=cycle.operation,
        trigger=cycle.trigger,
    )
    start_hook, end_hook = (
        (deps.hooks.on_observation_start, deps.hooks.on_observation_end)
        if cycle.operation == "observation"
        else (deps.hooks.on_reflection_start, deps.hooks.on_reflection_end)
    )
    await notify(start_hook, ctx)
    try:
        outcome = await work()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a cycle's failure never escapes (invariant 7)
        error = describe_error(exc)
        row = deps.ledger.row(cycle.cycle_id, outcome="failed", error=error, ranges=cycle.ranges)
        if row is not None:
            deps.ledger.queue(row)  # stored with the failure state
        _emit_failed(deps, cycle, error, ms_since(started))
        await notify(end_hook, _with(ctx, error=error))
        return Failure(
            error=error,
            unusable_answer=isinstance(exc, ObserverOutputError),
            store=isinstance(exc, StoreError),
        )
    _emit_end(deps, cycle, outcome, ms_since(started))
    await notify(end_hook, _with(ctx, observations=outcome.observations))
    return outcome


def _with(ctx: HookContext, **changes: str) -> HookContext:
    return replace(ctx, **changes)


def _emit_start(deps: Deps, cycle: Cycle) -> None:
    common: dict[str, Any] = {
        "cycle_id": cycle.cycle_id,
        "operation_type": cycle.operation,
        "started_at": deps.now(),
        "record_id": cycle.record_id,
        "thread_id": cycle.subject.thread_id,
        "thread_ids": cycle.thread_ids or (cycle.subject.thread_id,),
        "config": deps.config,
    }
    if cycle.background:
        deps.bus.emit(BufferingStartEvent(tokens_to_buffer=cycle.tokens, **common))
    else:
        deps.bus.emit(
            ObservationStartEvent(tokens_to_observe=cycle.tokens, trigger=cycle.trigger, **common)
        )


def _emit_end(deps: Deps, cycle: Cycle, outcome: Outcome, duration_ms: float) -> None:
    extracted = outcome.extracted
    common: dict[str, Any] = {
        "cycle_id": cycle.cycle_id,
        "operation_type": cycle.operation,
        "completed_at": deps.now(),
        "duration_ms": duration_ms,
        "record_id": outcome.record_id or cycle.record_id,
        "thread_id": cycle.subject.thread_id,
        "thread_ids": cycle.thread_ids or (cycle.subject.thread_id,),
        "observations": outcome.observations,
        "extracted_values": extracted.public_values,
        "extraction_failures": extracted.failures,
    }
    if cycle.background:
        deps.bus.emit(
            BufferingEndEvent(
                tokens_buffered=cycle.tokens, buffered_tokens=outcome.buffered_tokens, **common
            )
        )
    else:
        deps.bus.emit(
            ObservationEndEvent(
                tokens_observed=cycle.tokens,
                observation_tokens=outcome.output_tokens,
                current_task=extracted.values.get("current-task"),
                suggested_response=extracted.values.get("suggested-response"),
                **common,
            )
        )


def emit_thread_failure(
    deps: Deps, cycle: Cycle, thread_id: str, *, tokens: int, error: str
) -> None:
    """A cycle that succeeded for some threads but not for ``thread_id`` (resource scope):
    a failed event naming that thread, so no part of a cycle fails silently."""
    deps.bus.emit(
        ObservationFailedEvent(
            cycle_id=cycle.cycle_id,
            operation_type=cycle.operation,
            failed_at=deps.now(),
            duration_ms=0.0,
            tokens_attempted=tokens,
            error=error,
            record_id=cycle.record_id,
            thread_id=thread_id,
            thread_ids=(thread_id,),
        )
    )


def _emit_failed(deps: Deps, cycle: Cycle, error: str, duration_ms: float) -> None:
    common: dict[str, Any] = {
        "cycle_id": cycle.cycle_id,
        "operation_type": cycle.operation,
        "failed_at": deps.now(),
        "duration_ms": duration_ms,
        "tokens_attempted": cycle.tokens,
        "error": error,
        "record_id": cycle.record_id,
        "thread_id": cycle.subject.thread_id,
        "thread_ids": cycle.thread_ids or (cycle.subject.thread_id,),
    }
    if cycle.background:
        deps.bus.emit(BufferingFailedEvent(**common))
    else:
        deps.bus.emit(ObservationFailedEvent(**common))
