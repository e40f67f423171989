"""Synchronous observation: past ``block_after``, at the threshold with buffering off, or on
demand."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..answers import ParsedOutput, match_thread_blocks
from ..errors import ModelError, ObserverOutputError
from ..events import Trigger
from ..extractors import ExtractionResult
from ..messages import Message
from ..observer import shown_thread_id
from ..planner import (
    Batch,
    activatable_chunks,
    backoff_after,
    before_waiting_chunks,
    may_retry,
    sync_batches,
)
from ..records import MessageRange, ObservationGroup, OMRecord
from ..snapshot import Snapshot
from ..stores import CommitObservation, ResourcePatch, ThreadPatch
from ..window import windows_of
from .buffering import Activation, activate_chunks
from .common import Deps, join_log, new_cycle_id, window_estimator
from .extraction import ExtractionPlan, extract, observation_plan, value_patches
from .lifecycle import (
    Cycle,
    Failure,
    Outcome,
    emit_thread_failure,
    run_cycle,
    synchronous_outcome,
)
from .observer_run import ObserverRun, run_observer
from .retrieval import group_for, label, retrieval_on
from .writes import Write, commit, reload

__all__ = ["SyncObservation", "catch_up", "observe_sync"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncObservation:
    """How a synchronous observation ended: the snapshot after it, and the error that stopped
    it (None when it observed all it should)."""

    snapshot: Snapshot
    error: str | None = None
    thread_errors: Mapping[str, str] = field(default_factory=dict[str, str])
    """Resource scope: threads the Observer still left out when asked alone. Each backs off
    on its own (``Deps.thread_backoff``) while the other threads are observed."""
    advanced: tuple[str, ...] = ()
    """Resource scope: threads whose messages were observed (a failure of their own is over)."""
    store: bool = False
    """The error is the store's (:attr:`Failure.store`), not the Observer's."""


async def observe_sync(
    deps: Deps,
    snapshot: Snapshot,
    *,
    keep_tokens: int,
    step_from: Mapping[str, int] | None = None,
    trigger: Trigger,
    deadline: float | None = None,
    batch_budget: float | None = None,
) -> SyncObservation:
    """Observe unobserved messages now, oldest first, until about ``keep_tokens`` stay raw.

    Buffered chunks are activated first (those that cover only messages before ``step_from``).
    Each step observes what the planner's :func:`~obsmem.planner.sync_batches` takes; the loop
    ends at the deadline. ``step_from`` gives, per thread, the current step's first seq (from it
    on the messages stay raw); a chunk that reaches them stays buffered, and the observation stops
    where it starts. On failure the turn goes on with raw history and a
    ``data-om-observation-failed`` event (invariant 7). With ``batch_budget`` each Observer
    call gets that long and there is no overall deadline (a background catch-up).
    """
    deadline = deadline if deadline is not None else time.monotonic() + deps.sync_timeout
    step_from = step_from or {}
    thread_errors: dict[str, str] = {}
    advanced: list[str] = []

    def ended(error: str | None = None, *, store: bool = False) -> SyncObservation:
        return SyncObservation(
            snapshot=snapshot,
            error=error,
            thread_errors=thread_errors,
            advanced=tuple(advanced),
            store=store,
        )

    while True:
        ready = activatable_chunks(snapshot.record.chunks, step_from)
        if ready:
            activated = await activate_chunks(
                deps, snapshot, count=ready, why=Activation(trigger="threshold")
            )
            snapshot = activated or await reload(deps, snapshot.subject)
            continue
        now = deps.steady()
        windows = windows_of(snapshot, window_estimator(deps, snapshot), deps.cached)
        batches = sync_batches(
            [w for w in windows if may_retry(deps.thread_backoff.get(w.thread_id), now)],
            keep_tokens=keep_tokens,
            step_from=before_waiting_chunks(snapshot.record.chunks, step_from),
            cap=deps.options.observation.message_tokens,
        )
        if not batches:
            return ended()
        remaining = batch_budget or deadline - time.monotonic()
        if remaining <= 0:
            return ended("out of time (sync_timeout)")
        outcome = await observe_batches(deps, snapshot, batches, trigger=trigger, budget=remaining)
        if isinstance(outcome, Failure):
            if deps.options.scope == "resource" and outcome.unusable_answer:
                # Nothing usable for these threads' messages: they back off alone, and the
                # resource's other threads go on (the log itself is fine).
                _back_off_stuck(deps, [b.thread_id for b in batches], thread_errors, now=now)
                continue
            return ended(outcome.error, store=outcome.store)
        before = snapshot.record.cursor
        snapshot = outcome.snapshot or await reload(deps, snapshot.subject)
        stuck = [
            b.thread_id
            for b in batches
            if outcome.committed
            and snapshot.record.cursor.get(b.thread_id, 0) == before.get(b.thread_id, 0)
        ]
        for batch in batches:
            if batch.thread_id not in stuck and outcome.committed:
                deps.thread_backoff.pop(batch.thread_id, None)
                thread_errors.pop(batch.thread_id, None)
                advanced.append(batch.thread_id)
        if stuck and deps.options.scope == "thread":
            return ended(f"no observations for thread(s) {', '.join(stuck)}")
        _back_off_stuck(deps, stuck, thread_errors, now=now)


MAX_THREAD_BACKOFFS = 10_000
"""Most threads one engine keeps a back-off of their own for (the oldest go first)."""


def _back_off_stuck(
    deps: Deps, stuck: Sequence[str], thread_errors: dict[str, str], *, now: float
) -> None:
    """Resource scope: a thread the Observer left out even when asked alone backs off on its
    own (its error in ``thread_errors``); the loop goes on with the others. At most
    ``MAX_THREAD_BACKOFFS`` threads keep one."""
    for thread_id in stuck:
        error = (
            f"the Observer's answers had no observations for thread {thread_id!r}, also "
            "when it was asked alone; its messages stay unobserved"
        )
        thread_errors[thread_id] = error
        deps.thread_backoff[thread_id] = backoff_after(
            deps.thread_backoff.get(thread_id), now=now, error=error, spread=random.random()
        )
    while len(deps.thread_backoff) > MAX_THREAD_BACKOFFS:
        deps.thread_backoff.pop(next(iter(deps.thread_backoff)))


async def catch_up(
    deps: Deps, snapshot: Snapshot, *, step_from: Mapping[str, int]
) -> SyncObservation:
    """Observe, in the background, the backlog that was unobserved when a turn found more than it
    should wait for: oldest first, one Observer call of at most ``message_tokens`` at a time,
    each within ``background_timeout``, until about the retention floor stays raw. ``step_from``
    gives, per thread, the first seq the catch-up leaves alone (the current step of the turn that
    started it, and everything after: later turns' own steps are never observed from under
    them)."""
    return await observe_sync(
        deps,
        snapshot,
        keep_tokens=deps.options.observation.retention_floor or 0,
        step_from=step_from,
        trigger="catch-up",
        batch_budget=deps.background_timeout,
    )


async def observe_batches(
    deps: Deps,
    snapshot: Snapshot,
    batches: Sequence[Batch],
    *,
    trigger: Trigger,
    budget: float,
) -> Outcome | Failure:
    """One synchronous observation cycle over ``batches`` (one per thread)."""
    subject = snapshot.subject
    cycle = Cycle(
        cycle_id=new_cycle_id("obs"),
        background=False,
        operation="observation",
        trigger=trigger,
        subject=subject,
        record_id=snapshot.record.id,
        tokens=sum(b.tokens for b in batches),
        thread_ids=tuple(b.thread_id for b in batches),
        ranges=tuple(_range_of(b) for b in batches),
    )
    return await run_cycle(deps, cycle, lambda: _observe(deps, snapshot, batches, cycle, budget))


async def _observe(
    deps: Deps, snapshot: Snapshot, batches: Sequence[Batch], cycle: Cycle, budget: float
) -> Outcome:
    """The work of a synchronous observation cycle: observe, extract, commit the log."""
    subject = snapshot.subject
    head = snapshot.record
    deadline = time.monotonic() + budget
    plan = observation_plan(deps, snapshot, subject.thread_id)
    async with asyncio.timeout(budget):
        text, per_thread, main_run = await _observe_texts(
            deps, snapshot, batches, plan=plan, cycle_id=cycle.cycle_id, budget=budget
        )
    found = _found(deps, cycle, batches, per_thread)
    expected = {b.thread_id: head.cursor.get(b.thread_id, 0) for b in found}
    cursor = {b.thread_id: b.messages[-1].seq or 0 for b in found}
    groups: list[ObservationGroup] = []
    if retrieval_on(deps):
        text, groups = _with_groups(deps, snapshot, cycle.cycle_id, batches, per_thread, text)
    main, threads, resource = await _extract_all(
        deps, snapshot, plan, per_thread, main_run, cycle_id=cycle.cycle_id, deadline=deadline
    )
    last_at = max(b.messages[-1].created_at for b in found)
    observed = sum(b.tokens for b in found)

    def decide(current: OMRecord) -> Write | None:
        if any(current.cursor.get(t, 0) != s for t, s in expected.items()):
            return None  # another worker observed these messages first
        new_log = join_log(current.observations, text, at=last_at)
        return Write(
            change=CommitObservation(
                observations=new_log,
                observation_tokens=deps.estimator.count_text(new_log),
                cursor=tuple(cursor.items()),
                expected_cursor=tuple(expected.items()),
                observed_tokens=observed,
            ),
            groups=groups,
            threads=threads,
            resource=resource,
        )

    committed = await commit(
        deps,
        subject,
        head,
        decide,
        seen=snapshot,
        cycle_id=cycle.cycle_id,
        ranges=tuple(_range_of(b) for b in found),
    )
    return await synchronous_outcome(
        deps, cycle, committed, groups, observations=text, extracted=main
    )


def _found(
    deps: Deps, cycle: Cycle, batches: Sequence[Batch], per_thread: Mapping[str, ParsedOutput]
) -> list[Batch]:
    """The batches whose thread the answer covered. A thread it missed gets a failure event
    (visible, and not advanced: the next cycle observes it again); missing them all fails."""
    missing = [b for b in batches if b.thread_id not in per_thread]
    if len(missing) == len(batches):
        raise ObserverOutputError(
            "the Observer's answer had no observations for any of the threads it was shown "
            f"({', '.join(b.thread_id for b in batches)}); they stay unobserved"
        )
    for batch in missing:  # visible, and not advanced: the next cycle observes them again
        emit_thread_failure(
            deps,
            cycle,
            batch.thread_id,
            tokens=batch.tokens,
            error=f"the Observer's answer had no block for thread {batch.thread_id!r}; its "
            "messages stay unobserved and are observed again in the next cycle",
        )
    return [b for b in batches if b.thread_id in per_thread]


async def _extract_all(
    deps: Deps,
    snapshot: Snapshot,
    plan: ExtractionPlan,
    per_thread: Mapping[str, ParsedOutput],
    main_run: ObserverRun | None,
    *,
    cycle_id: str,
    deadline: float,
) -> tuple[ExtractionResult, list[ThreadPatch], ResourcePatch | None]:
    """Run the extractors over each observed thread's answer: the values of the cycle's own
    thread, and the metadata patches of every thread (and of the resource)."""
    subject = snapshot.subject
    main = ExtractionResult()
    threads: list[ThreadPatch] = []
    resource: ResourcePatch | None = None
    for thread_id, parsed in per_thread.items():
        # The cycle's own thread runs every extractor; other threads of a resource-scope
        # batch get their built-in hints.
        is_main = thread_id == subject.thread_id
        t_plan = plan if is_main else plan.builtins_only()
        result = await extract(
            deps,
            t_plan,
            parsed=parsed,
            exchange=main_run.exchange if is_main and main_run is not None else None,
            thread_id=thread_id,
            resource_id=subject.resource_id,
            operation_type="observation",
            cycle_id=cycle_id,
            deadline=deadline,
        )
        thread_patch, resource_patch = value_patches(deps, snapshot, thread_id, t_plan, result)
        threads.append(thread_patch)
        resource = resource_patch or resource
        if is_main:
            main = result
    return main, threads, resource


def _range_of(batch: Batch) -> MessageRange:
    return MessageRange(
        thread_id=batch.thread_id,
        first_seq=batch.messages[0].seq or 0,
        last_seq=batch.messages[-1].seq or 0,
    )


async def _observe_texts(
    deps: Deps,
    snapshot: Snapshot,
    batches: Sequence[Batch],
    *,
    plan: ExtractionPlan,
    cycle_id: str,
    budget: float,
) -> tuple[str, dict[str, ParsedOutput], ObserverRun | None]:
    """Run the Observer over the batches: one call in thread scope; in resource scope, threads
    are grouped up to ``max_tokens_per_batch`` and the groups observed in parallel, and each
    answer's thread blocks are matched to the threads shown (:func:`match_thread_blocks`).
    Returns the log text, the answer per thread it covers (a thread whose block was not found
    is absent: it is not advanced), and the call that saw the subject's thread (its
    extractors' follow-ups look at it); only that call is asked for the extractors' inline
    sections."""
    if deps.options.scope == "thread":
        [batch] = batches
        run = await run_observer(
            deps,
            snapshot,
            thread_id=batch.thread_id,
            messages=batch.messages,
            previous=snapshot.record.observations,
            cycle_id=cycle_id,
            operation="observation",
            budget=budget,
            sections=plan.inline_sections,
            prior_values=plan.prompt_values,
        )
        if run is None:
            return "", {}, None
        return run.parsed.observations, {batch.thread_id: run.parsed}, run
    return await _GroupObserver(
        deps=deps, snapshot=snapshot, plan=plan, cycle_id=cycle_id, budget=budget
    ).observe_all(_grouped(deps, batches))


_Group = list[tuple[str, Sequence[Message]]]
"""Threads observed in one Observer call: (thread id, its messages) each."""


def _grouped(deps: Deps, batches: Sequence[Batch]) -> list[_Group]:
    """The batches in groups of at most ``max_tokens_per_batch`` (a larger batch alone)."""
    groups: list[_Group] = [[]]
    size = 0
    for batch in batches:
        if groups[-1] and size + batch.tokens > deps.options.observation.max_tokens_per_batch:
            groups.append([])
            size = 0
        groups[-1].append((batch.thread_id, batch.messages))
        size += batch.tokens
    return groups


@dataclass(frozen=True, slots=True, kw_only=True)
class _GroupObserver:
    """Resource scope: the Observer over groups of threads, in parallel, for one cycle."""

    deps: Deps
    snapshot: Snapshot
    plan: ExtractionPlan
    cycle_id: str
    budget: float

    async def observe(self, group: _Group, is_main: bool) -> ObserverRun | None:
        plan = self.plan
        return await run_observer(
            self.deps,
            self.snapshot,
            thread_id=group[0][0],
            threads=group,
            previous=self.snapshot.record.observations,
            cycle_id=self.cycle_id,
            operation="observation",
            budget=self.budget,
            sections=plan.inline_sections if is_main else (),
            prior_values=plan.prompt_values if is_main else None,
        )

    async def asked_alone(self, group: _Group, is_main: bool) -> ObserverRun | None:
        try:
            return await self.observe(group, is_main)
        except ModelError:  # this thread alone stays unobserved; the others go on
            return None

    async def observe_all(
        self, groups: list[_Group]
    ) -> tuple[str, dict[str, ParsedOutput], ObserverRun | None]:
        """Observe every group at once; then each thread a several-thread answer missed, alone.
        Returns what :func:`_observe_texts` does."""
        main_thread = self.snapshot.subject.thread_id
        mains = [any(t == main_thread for t, _ in group) for group in groups]
        results = await asyncio.gather(
            *[self.observe(group, is_main) for group, is_main in zip(groups, mains, strict=True)],
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        for error in failed:
            if not isinstance(error, ModelError):
                raise error  # a bug or a cancellation, not the model's answer
        if failed and len(failed) == len(results):
            raise failed[0]  # every call failed: the log's failure
        sections: list[str] = []
        per_thread: dict[str, ParsedOutput] = {}
        main_run: ObserverRun | None = None
        # A thread missing from a several-thread answer (a model that writes no thread tags, or
        # skips one) is asked again alone, in this cycle: a one-thread call needs no tags. A
        # call that failed fails its own threads only: a group's threads are asked alone, a
        # thread asked alone already stays unobserved (and backs off alone); the others go on.
        retries: list[tuple[_Group, bool]] = []
        for group, run, is_main in zip(groups, results, mains, strict=True):
            if isinstance(run, BaseException):
                if len(group) > 1:
                    retries += [([(t, m)], is_main and t == main_thread) for t, m in group]
                continue
            if run is None:
                continue
            if is_main:
                main_run = run
            found = _read_group(group, run, is_main, sections, per_thread)
            if len(group) > 1:
                retries += [
                    ([(t, m)], is_main and t == main_thread) for t, m in group if t not in found
                ]
        if retries:
            alone = await asyncio.gather(
                *[self.asked_alone(group, is_main) for group, is_main in retries]
            )
            for (group, is_main), run in zip(retries, alone, strict=True):
                if run is not None:
                    main_run = run if is_main else main_run
                    _read_group(group, run, is_main, sections, per_thread)
        return "\n".join(sections), per_thread, main_run


def _read_group(
    group: Sequence[tuple[str, Sequence[Message]]],
    run: ObserverRun,
    is_main: bool,
    sections: list[str],
    per_thread: dict[str, ParsedOutput],
) -> set[str]:
    """Give one answer's thread blocks to the threads of its group (a one-thread answer
    written without its block is that thread's); the thread ids it covered."""
    parsed = run.parsed
    shown = {shown_thread_id(t): t for t, _ in group}  # the ids as the Observer saw them
    matched = {shown[s]: p for s, p in match_thread_blocks(list(shown), parsed.threads).items()}
    if not matched and len(group) == 1 and not parsed.threads:
        matched = {group[0][0]: parsed}  # one thread, written without its block: it is that one
    for t, part in matched.items():
        if part.observations.strip():
            block = f'<thread id="{shown_thread_id(t)}">\n{part.observations.strip()}\n</thread>'
            sections.append(block)
        per_thread[t] = _with_thread_sections(part, parsed) if is_main else part
    return set(matched)


def _with_thread_sections(part: ParsedOutput, whole: ParsedOutput) -> ParsedOutput:
    """A thread block's answer with the answer's top-level sections where it has none."""
    from dataclasses import replace

    return replace(
        part,
        sections={**whole.sections, **part.sections},
        extracted_values={**whole.extracted_values, **part.extracted_values},
    )


def _with_groups(
    deps: Deps,
    snapshot: Snapshot,
    cycle_id: str,
    batches: Sequence[Batch],
    per_thread: Mapping[str, ParsedOutput],
    text: str,
) -> tuple[str, list[ObservationGroup]]:
    """One observation group per observed thread, and the log text with their recall ranges."""
    groups: list[ObservationGroup] = []
    for batch in batches:
        parsed = per_thread.get(batch.thread_id)
        if parsed is None or not parsed.observations.strip():
            continue
        group = group_for(
            deps,
            snapshot.subject.key,
            cycle_id=cycle_id,
            resource_id=snapshot.subject.resource_id,
            thread_id=batch.thread_id,
            messages=batch.messages,
            observations=parsed.observations,
        )
        groups.append(group)
        if deps.options.scope == "thread":
            text = label(text, group)
        else:
            opening = f'<thread id="{shown_thread_id(batch.thread_id)}">\n'
            text = text.replace(
                opening, f"{opening}[recall range {group.start_id}:{group.end_id}]\n", 1
            )
    return text, groups
