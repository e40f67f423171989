"""Synchronous observation: past ``block_after``, at the threshold with buffering off, or
on demand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from datetime import datetime

from ..errors import ConflictError, StoreError
from ..events import (
    HookContext,
    ObservationEndEvent,
    ObservationFailedEvent,
    ObservationStartEvent,
    Trigger,
    notify,
)
from ..extractors import ExtractionResult
from ..messages import Message
from ..observations import ParsedOutput
from ..records import ObservationGroup, OMRecord
from ..window import ThreadWindow, load_window, take_prefix
from .buffering import activate_chunks
from .common import (
    COMMIT_ATTEMPTS,
    Deps,
    ObserverRun,
    describe_error,
    hook_done,
    hook_failed,
    join_log,
    ms_since,
    new_cycle_id,
    run_observer,
)
from .extraction import (
    ExtractionPlan,
    extract,
    observation_plan,
    store_values,
    with_thread_sections,
)
from .retrieval import group_for, index_groups, label, retrieval_on

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
    deadline = time.monotonic() + budget
    try:
        plan = await observation_plan(deps, thread_id)
        async with asyncio.timeout(budget):
            text, per_thread, main_run = await _observe_texts(
                deps, head, batch, thread_id=thread_id, plan=plan, cycle_id=cycle_id, budget=budget
            )
        last_at = max(msgs[-1].created_at for _, msgs, _ in batch)
        groups: list[ObservationGroup] = []
        if retrieval_on(deps):
            text, groups = _with_groups(deps, key, cycle_id, resource_id, batch, per_thread, text)
        record = await _commit_observation(
            deps,
            key,
            text,
            at=last_at,
            cursor=cursor,
            expected=expected,
            observed_tokens=tokens,
            groups=groups,
        )
        if record is not None:
            await index_groups(deps, groups)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        deps.bus.emit(
            ObservationFailedEvent(
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
        return False
    main = ExtractionResult()
    for t, parsed in per_thread.items():
        # The cycle's own thread runs every extractor; other threads of a resource-scope batch
        # get their built-in hints.
        is_main = t == thread_id
        t_plan = plan if is_main else plan.builtins_only()
        result = await extract(
            deps,
            t_plan,
            parsed=parsed,
            exchange=main_run.exchange if is_main and main_run is not None else None,
            thread_id=t,
            resource_id=resource_id,
            operation_type="observation",
            cycle_id=cycle_id,
            deadline=deadline,
        )
        await store_values(deps, t, t_plan, result, cycle_id=cycle_id)
        if is_main:
            main = result
    deps.bus.emit(
        ObservationEndEvent(
            cycle_id=cycle_id,
            operation_type="observation",
            completed_at=deps.now(),
            duration_ms=ms_since(started),
            tokens_observed=tokens,
            observation_tokens=deps.estimator.count_text(text),
            record_id=record.id if record else head.id,
            thread_id=thread_id,
            observations=text,
            current_task=main.values.get("current-task"),
            suggested_response=main.values.get("suggested-response"),
            extracted_values=main.public_values,
            extraction_failures=main.failures,
        )
    )
    await notify(deps.hooks.on_observation_end, hook_done(ctx, text))
    return record is not None


async def _observe_texts(
    deps: Deps,
    head: OMRecord,
    batch: list[tuple[str, list[Message], int]],
    *,
    thread_id: str,
    plan: ExtractionPlan,
    cycle_id: str,
    budget: float,
) -> tuple[str, dict[str, ParsedOutput], ObserverRun | None]:
    """Run the Observer over a batch: one call in thread scope; in resource scope, threads are
    grouped up to ``max_tokens_per_batch`` and the groups observed in parallel. Also returns
    the call that saw ``thread_id`` (its extractors' follow-ups look at it); only that call is
    asked for the extractors' inline sections."""
    if deps.options.scope == "thread":
        [(t, msgs, _)] = batch
        run = await run_observer(
            deps,
            thread_id=t,
            messages=msgs,
            previous=head.observations,
            cycle_id=cycle_id,
            operation="observation",
            budget=budget,
            plan=plan,
        )
        if run is None:
            return "", {}, None
        return run.parsed.observations, {t: run.parsed}, run
    groups: list[list[tuple[str, list[Message]]]] = [[]]
    size = 0
    for t, msgs, tokens in batch:
        if groups[-1] and size + tokens > deps.options.observation.max_tokens_per_batch:
            groups.append([])
            size = 0
        groups[-1].append((t, msgs))
        size += tokens
    mains = [any(t == thread_id for t, _ in group) for group in groups]
    results = await asyncio.gather(
        *[
            run_observer(
                deps,
                thread_id=group[0][0],
                threads=group,
                previous=head.observations,
                cycle_id=cycle_id,
                operation="observation",
                budget=budget,
                plan=plan if is_main else plan.builtins_only(),
            )
            for group, is_main in zip(groups, mains, strict=True)
        ]
    )
    sections: list[str] = []
    per_thread: dict[str, ParsedOutput] = {}
    main_run: ObserverRun | None = None
    for group, run, is_main in zip(groups, results, mains, strict=True):
        if run is None:
            continue
        if is_main:
            main_run = run
        parsed = run.parsed
        for t, _ in group:
            part = parsed.threads.get(t)
            if part is None and len(group) == 1:
                part = parsed
            if part is not None and part.observations.strip():
                sections.append(f'<thread id="{t}">\n{part.observations.strip()}\n</thread>')
                per_thread[t] = with_thread_sections(part, parsed) if is_main else part
    return "\n".join(sections), per_thread, main_run


def _with_groups(
    deps: Deps,
    key: str,
    cycle_id: str,
    resource_id: str | None,
    batch: list[tuple[str, list[Message], int]],
    per_thread: Mapping[str, ParsedOutput],
    text: str,
) -> tuple[str, list[ObservationGroup]]:
    """One observation group per observed thread, and the log text with their recall ranges."""
    groups: list[ObservationGroup] = []
    for t, msgs, _ in batch:
        parsed = per_thread.get(t)
        if parsed is None or not parsed.observations.strip():
            continue
        group = group_for(
            deps,
            key,
            cycle_id=cycle_id,
            resource_id=resource_id,
            thread_id=t,
            messages=msgs,
            observations=parsed.observations,
        )
        groups.append(group)
        if deps.options.scope == "thread":
            text = label(text, group)
        else:
            opening = f'<thread id="{t}">\n'
            text = text.replace(
                opening, f"{opening}[recall range {group.start_id}:{group.end_id}]\n", 1
            )
    return text, groups


async def _commit_observation(
    deps: Deps,
    key: str,
    text: str,
    *,
    at: datetime,
    cursor: Mapping[str, int],
    expected: Mapping[str, int],
    observed_tokens: int,
    groups: Sequence[ObservationGroup] = (),
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
                groups=groups,
            )
        except ConflictError:
            continue
    raise StoreError(f"observation of {key} kept losing races")
