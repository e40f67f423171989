"""Every decision of memory work, as pure functions of (numbers, options, time).

Nothing here awaits, reads a clock or touches a store: the engine loads one snapshot, hands the
planner the numbers (and the time it read), and carries out what the planner says. Which chunks
activate, when a synchronous observation runs and what it takes, when buffering starts and how
much a chunk covers, when a reflection starts, activates or runs, how long to wait after a
failure, and when a reflection is not worth retrying: all of it is here, and tests drive it with
tables (tests/test_planner.py), including a worked example of activation at the defaults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from .backoff import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_LONGEST_SECONDS,
    BACKOFF_MAX_SECONDS,
    Backoff,
    backoff_after,
    may_retry,
    retry_time_passed,
)
from .messages import Message
from .options.resolved import ResolvedOptions
from .records import BufferedChunk
from .window import ThreadWindow, take_prefix

__all__ = [
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_LONGEST_SECONDS",
    "BACKOFF_MAX_SECONDS",
    "ActivationTrigger",
    "Backoff",
    "Batch",
    "ObservationPlan",
    "ReflectionPlan",
    "ReplyPlan",
    "activatable_chunks",
    "activation_count",
    "backoff_after",
    "before_waiting_chunks",
    "buffer_due",
    "buffer_interval",
    "buffering_due",
    "chunk_slice",
    "may_retry",
    "message_threshold",
    "plan_after_reply",
    "plan_observation",
    "plan_reflection",
    "raw_cut",
    "reflection_slice",
    "retry_time_passed",
    "suppression_after",
    "sync_batches",
]

ActivationTrigger: TypeAlias = Literal["threshold", "ttl", "provider_change"]

MIN_REMAINING_TOKENS = 1_000
"""Activation leaves at least this much raw history (or the retention floor, if smaller)."""
OVERSHOOT_SHARE = 0.95
"""Activation may remove up to 95% of the retention floor more than its target."""
RAMP_FACTOR = 1.1
"""Buffering intervals halve once pending tokens pass ``threshold - 1.1 * buffer_tokens``."""


def message_threshold(options: ResolvedOptions, observation_tokens: int) -> int:
    """Unobserved-message tokens at which observation is due.

    With ``share_token_budget`` the messages may borrow what the log does not use:
    ``max(message_tokens + observation_tokens_threshold - log_tokens, message_tokens)``.
    """
    base = options.observation.message_tokens
    if not options.share_token_budget:
        return base
    total = base + options.reflection.observation_tokens
    return max(total - observation_tokens, base)


def buffer_interval(pending_tokens: int, threshold: int, buffer_tokens: int) -> int:
    """The background buffering interval: ``buffer_tokens``, halved near the threshold."""
    ramp = threshold - RAMP_FACTOR * buffer_tokens
    if pending_tokens >= ramp:
        return max(1, buffer_tokens // 2)
    return buffer_tokens


def buffer_due(
    *, unbuffered_tokens: int, pending_tokens: int, threshold: int, buffer_tokens: int
) -> bool:
    """Whether the messages not yet covered by a chunk make a new chunk worth starting.

    A chunk starts once an interval's worth of messages (``buffer_tokens``, halved near the
    threshold) is not yet buffered; never for less than half of ``buffer_tokens``.
    """
    interval = buffer_interval(pending_tokens, threshold, buffer_tokens)
    return unbuffered_tokens >= max(interval, buffer_tokens // 2)


def activation_count(
    chunk_message_tokens: Sequence[int],
    *,
    pending_tokens: int,
    retention_floor: int,
    force_max: bool,
) -> int:
    """How many leading chunks to activate (activation removes about ``target`` tokens).

    ``target`` is what must leave the context to get down to the retention floor. Walking the
    chunks' cumulative message tokens, the *over* boundary is the smallest sum ≥ target and the
    *under* boundary the largest sum < target. Choose, in order: the over boundary when forced (and
    at least ``min(1000, floor)`` stays raw); the over boundary when it overshoots by at most 95%
    of the floor (and enough stays); the under boundary when enough stays; else the over boundary;
    else a single chunk.
    """
    if not chunk_message_tokens:
        return 0
    target = max(0, pending_tokens - retention_floor)
    max_overshoot = OVERSHOOT_SHARE * retention_floor
    min_remaining = min(MIN_REMAINING_TOKENS, retention_floor)
    over: tuple[int, int] | None = None  # (count, cumulative tokens)
    under: tuple[int, int] | None = None
    total = 0
    for i, tokens in enumerate(chunk_message_tokens, start=1):
        total += tokens
        if total >= target:
            over = (i, total)
            break
        under = (i, total)

    def leaves_enough(boundary: tuple[int, int]) -> bool:
        return pending_tokens - boundary[1] >= min_remaining

    if over is not None and force_max and leaves_enough(over):
        return over[0]
    if over is not None and over[1] - target <= max_overshoot and leaves_enough(over):
        return over[0]
    if under is not None and leaves_enough(under):
        return under[0]
    if over is not None:
        return over[0]
    return 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservationPlan:
    """What the engine should do with the message window at this step."""

    threshold: int
    activate: int = 0
    """How many leading buffered chunks to activate."""
    trigger: ActivationTrigger | None = None
    observe_sync: bool = False
    """Observe synchronously (after activating) because the window is still too large."""
    start_buffering: bool = False
    """Start (or keep) a background buffering cycle for the unbuffered messages."""
    catch_up: bool = False
    """Start a background catch-up: more is unobserved than one turn should wait for (a large
    thread that existed before memory was on, or a long Observer outage)."""


def plan_observation(
    options: ResolvedOptions,
    *,
    pending_tokens: int,
    chunk_message_tokens: Sequence[int],
    observation_tokens: int,
    buffering_in_flight: bool,
    idle_expired: bool = False,
    provider_changed: bool = False,
    observer_backoff: Backoff | None = None,
    now: float | None = None,
    activatable: int | None = None,
    catching_up: bool = False,
    step_tokens: int = 0,
) -> ObservationPlan:
    """Decide activation, synchronous observation and buffering for one step.

    ``pending_tokens`` counts every unobserved message (buffered or not); ``chunk_message_tokens``
    the messages each buffered chunk covers, in order; ``activatable`` how many of the leading
    chunks may activate now (:func:`activatable_chunks`; all when None): a chunk that covers the
    current step's messages waits, so the model always sees the step it is answering.

    - With buffering off: observe synchronously once pending reaches the threshold.
    - With buffering on: at the threshold (or when the prompt cache was lost anyway: idle TTL,
      provider change) activate chunks; past ``block_after`` activate the maximum, and if what
      stays is still past ``block_after`` observe the rest synchronously. Between the threshold
      and ``block_after`` nothing blocks: the unbuffered rest is buffered in the background.
    - After an Observer failure (``observer_backoff``), nothing calls the Observer until the
      back-off has passed at ``now``; activation needs no model and still happens.
    - A turn waits for at most about one Observer call (``message_tokens``) past the point
      where it must observe. A larger backlog is a *catch-up*: it runs in the background
      (``catch_up``) while the turn goes on with its raw messages capped (:func:`raw_cut`).
      The current step (``step_tokens`` of the pending) is never observed now, so it does not
      count towards a backlog. While a catch-up runs (``catching_up``) no turn observes or
      buffers.
    """
    obs = options.observation
    threshold = message_threshold(options, observation_tokens)
    observer_ready = may_retry(observer_backoff, now) and not catching_up
    if not options.async_buffering or obs.buffer_tokens is None:
        return _plan_without_buffering(
            options, threshold, pending_tokens, step_tokens, observer_ready=observer_ready
        )
    block_after = obs.block_after if obs.block_after is not None else threshold
    ready = chunk_message_tokens if activatable is None else chunk_message_tokens[:activatable]
    trigger, count = _activation(
        ready,
        has_chunks=bool(chunk_message_tokens),
        pending_tokens=pending_tokens,
        threshold=threshold,
        block_after=block_after,
        retention_floor=obs.retention_floor or 0,
        provider_changed=provider_changed,
        idle_expired=idle_expired,
    )
    remaining = pending_tokens - sum(chunk_message_tokens[:count])
    if remaining >= block_after and observer_ready:
        if remaining - step_tokens > block_after + obs.message_tokens:
            # A catch-up (even beside a buffering cycle: whichever commits second finds its
            # work redundant). Activation needs no model and still happens now.
            return ObservationPlan(
                threshold=threshold, activate=count, trigger=trigger, catch_up=True
            )
        return ObservationPlan(
            threshold=threshold,
            activate=len(ready),  # going synchronous: take every chunk that may go first
            trigger=trigger or "threshold",
            observe_sync=True,
        )
    unbuffered = max(0, remaining - sum(chunk_message_tokens[count:]))
    start = (
        observer_ready
        and not buffering_in_flight
        and _buffering_starts(
            unbuffered, remaining=remaining, threshold=threshold, buffer_tokens=obs.buffer_tokens
        )
    )
    return ObservationPlan(
        threshold=threshold, activate=count, trigger=trigger, start_buffering=start
    )


def _plan_without_buffering(
    options: ResolvedOptions,
    threshold: int,
    pending_tokens: int,
    step_tokens: int,
    *,
    observer_ready: bool,
) -> ObservationPlan:
    """With buffering off: observe synchronously once pending reaches the threshold, or catch
    up in the background when more than one Observer call is past it."""
    due = observer_ready and pending_tokens >= threshold
    backlog = due and pending_tokens - step_tokens > threshold + options.observation.message_tokens
    return ObservationPlan(threshold=threshold, observe_sync=due and not backlog, catch_up=backlog)


def _activation(
    ready: Sequence[int],
    *,
    has_chunks: bool,
    pending_tokens: int,
    threshold: int,
    block_after: int,
    retention_floor: int,
    provider_changed: bool,
    idle_expired: bool,
) -> tuple[ActivationTrigger | None, int]:
    """Why buffered chunks activate at this step (None: they wait), and how many of the
    ``ready`` ones: at the threshold, or when the prompt cache was lost anyway (a provider
    change, the idle TTL); past ``block_after`` as many as may go."""
    trigger: ActivationTrigger | None = None
    if has_chunks:
        if pending_tokens >= threshold:
            trigger = "threshold"
        elif provider_changed:
            trigger = "provider_change"
        elif idle_expired:
            trigger = "ttl"
    if trigger is None:
        return None, 0
    count = activation_count(
        ready,
        pending_tokens=pending_tokens,
        retention_floor=retention_floor,
        force_max=pending_tokens >= block_after,
    )
    return trigger, count


def _buffering_starts(
    unbuffered: int, *, remaining: int, threshold: int, buffer_tokens: int
) -> bool:
    """Whether the unbuffered rest is worth a background buffering cycle: past the threshold
    (after activation) any of it is, below it once an interval's worth is due."""
    return (remaining >= threshold and unbuffered > 0) or buffer_due(
        unbuffered_tokens=unbuffered,
        pending_tokens=remaining,
        threshold=threshold,
        buffer_tokens=buffer_tokens,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReflectionPlan:
    threshold: int
    activate_buffered: bool = False
    reflect_sync: bool = False
    start_buffering: bool = False
    trigger: ActivationTrigger | None = None


def plan_reflection(
    options: ResolvedOptions,
    *,
    observation_tokens: int,
    has_buffered_reflection: bool,
    buffered_reflection_tokens: int = 0,
    unreflected_tail_tokens: int = 0,
    reflection_in_flight: bool,
    idle_expired: bool = False,
    provider_changed: bool = False,
    reflector_backoff: Backoff | None = None,
    now: float | None = None,
    suppressed_at: int | None = None,
) -> ReflectionPlan:
    """Decide the log's fate at this step: start, activate or run a reflection, or nothing.

    - Buffering off: reflect synchronously at the threshold.
    - Buffering on: start a background reflection at ``buffer_start_tokens``; at the threshold
      activate a finished one; past ``block_after`` with none ready, reflect synchronously.
    - Idle TTL or provider change may activate a finished reflection early, but only when the
      swap is worth it: the unreflected tail is at least as large as the reflection, and both
      together reach 75% of the span between the start point and the threshold.
    - After a Reflector failure (``reflector_backoff``), nothing calls the Reflector until the
      back-off has passed at ``now``. A synchronous reflection that left the log at
      ``suppressed_at`` tokens is not tried again until the log changes size.
    """
    ref = options.reflection
    threshold = ref.observation_tokens
    reflector_ready = may_retry(reflector_backoff, now)
    worth_sync = reflector_ready and observation_tokens != suppressed_at
    if not options.async_buffering or ref.buffer_start_tokens is None:
        return ReflectionPlan(
            threshold=threshold, reflect_sync=worth_sync and observation_tokens >= threshold
        )
    block_after = ref.block_after if ref.block_after is not None else threshold
    if observation_tokens >= threshold:
        if has_buffered_reflection:
            return ReflectionPlan(threshold=threshold, activate_buffered=True, trigger="threshold")
        if observation_tokens >= block_after:
            return ReflectionPlan(threshold=threshold, reflect_sync=worth_sync, trigger="threshold")
        return ReflectionPlan(
            threshold=threshold, start_buffering=reflector_ready and not reflection_in_flight
        )
    if has_buffered_reflection and (idle_expired or provider_changed):
        span = threshold - ref.buffer_start_tokens
        worth_it = (
            unreflected_tail_tokens >= buffered_reflection_tokens
            and buffered_reflection_tokens + unreflected_tail_tokens >= 0.75 * span
        )
        if worth_it:
            return ReflectionPlan(
                threshold=threshold,
                activate_buffered=True,
                trigger="provider_change" if provider_changed else "ttl",
            )
        return ReflectionPlan(threshold=threshold)
    start = (
        reflector_ready
        and observation_tokens >= ref.buffer_start_tokens
        and not has_buffered_reflection
        and not reflection_in_flight
    )
    return ReflectionPlan(threshold=threshold, start_buffering=start)


def reflection_slice(
    line_count: int, observation_tokens: int, *, threshold: int, buffer_activation: float
) -> tuple[int, int]:
    """The leading lines a background reflection covers and its compression target.

    About ``threshold * buffer_activation`` tokens' worth of the oldest lines (by the average
    tokens per line); the target is 75% of that slice's estimated size.
    """
    if line_count <= 0 or observation_tokens <= 0:
        return 0, 0
    per_line = observation_tokens / line_count
    lines = min(math.floor(threshold * buffer_activation / per_line), line_count)
    lines = max(lines, 1)
    slice_tokens = lines * per_line
    return lines, round(0.75 * slice_tokens)


def suppression_after(
    before_tokens: int, after_tokens: int | None, *, threshold: int
) -> int | None:
    """What to remember after a synchronous reflection of a log of ``before_tokens``: that size
    when the reflection failed (``after_tokens`` None) or left the log at or over the threshold
    (retrying at the same size would not help), else nothing."""
    if after_tokens is None or after_tokens >= threshold:
        return before_tokens
    return None


# -- what a cycle covers -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """Leading unobserved (or unbuffered) messages of one thread for one Observer call."""

    thread_id: str
    messages: tuple[Message, ...]
    tokens: int


def chunk_slice(
    options: ResolvedOptions, window: ThreadWindow, *, observation_tokens: int, idle: bool = False
) -> Batch | None:
    """The messages a new buffered chunk covers: the unbuffered messages up to about one
    buffering interval (halved near the threshold), never more than ``message_tokens``, cut
    only where no tool call is split from its result. An idle flush takes them all. None when
    there is not at least half an interval to buffer (or nothing at all, for an idle flush)."""
    buffer_tokens = options.observation.buffer_tokens
    if buffer_tokens is None:
        return None
    messages, counts = window.unbuffered_pairs()
    if not messages:
        return None
    threshold = message_threshold(options, observation_tokens)
    interval = buffer_interval(window.total, threshold, buffer_tokens)
    take = take_prefix(
        messages,
        counts,
        at_least=sum(counts) if idle else interval,
        at_most=options.observation.message_tokens,
        binding=window.binding,
    )
    tokens = sum(counts[:take])
    if take == 0 or (not idle and tokens < buffer_tokens // 2):
        return None
    return Batch(thread_id=window.thread_id, messages=tuple(messages[:take]), tokens=tokens)


def buffering_due(
    options: ResolvedOptions, window: ThreadWindow, *, observation_tokens: int
) -> bool:
    """Whether the unbuffered messages make another chunk worth starting: an interval's worth,
    or anything at all once the window is past the threshold."""
    buffer_tokens = options.observation.buffer_tokens
    if buffer_tokens is None or window.unbuffered_tokens == 0:
        return False
    threshold = message_threshold(options, observation_tokens)
    return window.total >= threshold or buffer_due(
        unbuffered_tokens=window.unbuffered_tokens,
        pending_tokens=window.total,
        threshold=threshold,
        buffer_tokens=buffer_tokens,
    )


ReplyPlan: TypeAlias = Literal["idle", "due"] | None
"""After a reply: flush everything unbuffered (``"idle"``), buffer one interval (``"due"``), or
nothing."""


def plan_after_reply(
    options: ResolvedOptions,
    window: ThreadWindow,
    *,
    observation_tokens: int,
    buffering_in_flight: bool,
    observer_backoff: Backoff | None = None,
    now: float | None = None,
) -> ReplyPlan:
    """Whether storing a reply starts background buffering (``buffer_on_idle`` flushes what is
    unbuffered at once; otherwise an interval's worth must be waiting)."""
    if not options.async_buffering or options.observation.buffer_tokens is None:
        return None
    if buffering_in_flight or not may_retry(observer_backoff, now):
        return None
    if options.observation.buffer_on_idle and window.unbuffered_tokens > 0:
        return "idle"
    if buffering_due(options, window, observation_tokens=observation_tokens):
        return "due"
    return None


def activatable_chunks(chunks: Sequence[BufferedChunk], step_from: Mapping[str, int]) -> int:
    """How many leading chunks cover only messages before ``step_from`` (per thread, the current
    step's first seq: from it on the messages stay raw). Chunks activate in order, so the first
    chunk that reaches the current step stops the count."""
    count = 0
    for chunk in chunks:
        if any(r.last_seq >= step_from.get(r.thread_id, math.inf) for r in chunk.ranges):
            break
        count += 1
    return count


def before_waiting_chunks(
    chunks: Sequence[BufferedChunk], step_from: Mapping[str, int]
) -> dict[str, int]:
    """``step_from`` moved back to the first message of the chunks that wait (they reach the
    current step, so they cannot activate now): a synchronous observation must not split a
    chunk, so it stops where they start."""
    stop = dict(step_from)
    for chunk in chunks[activatable_chunks(chunks, step_from) :]:
        for r in chunk.ranges:
            stop[r.thread_id] = min(stop.get(r.thread_id, r.first_seq), r.first_seq)
    return stop


def sync_batches(
    windows: Sequence[ThreadWindow],
    *,
    keep_tokens: int,
    step_from: Mapping[str, int],
    cap: int,
) -> list[Batch]:
    """What one step of a synchronous observation takes: per thread (largest window first), the
    oldest messages, so that about ``keep_tokens`` stay raw. Each thread's batch takes at most
    ``cap`` tokens (unless one message alone is larger) and is cut only where no tool call is
    split from its result. ``step_from`` gives, per thread, the first seq that must stay raw (the
    current step's first seq). Empty when nothing needs observing or nothing can be cut."""
    excess = sum(w.total for w in windows) - keep_tokens
    batches: list[Batch] = []
    for w in sorted(windows, key=lambda w: w.total, reverse=True):
        if excess <= 0:
            break
        limit = step_from.get(w.thread_id)
        pairs = [
            (m, t)
            for m, t in zip(w.messages, w.tokens, strict=True)
            if limit is None or (m.seq or 0) < limit
        ]
        messages = [m for m, _ in pairs]
        counts = [t for _, t in pairs]
        take = take_prefix(
            messages, counts, at_least=min(excess, cap), at_most=cap, binding=w.binding
        )
        if take:
            tokens = sum(counts[:take])
            batches.append(
                Batch(thread_id=w.thread_id, messages=tuple(messages[:take]), tokens=tokens)
            )
            excess -= tokens
    return batches


def raw_cut(window: ThreadWindow, *, limit: int, step_from: int | None = None) -> int:
    """How many of the oldest unobserved messages to leave out of the actor's context so the
    rest fits in ``limit`` tokens (while observation catches up, or the Observer is away): the
    fewest that do it, cut only where no tool call is split from its result, never into the
    current step (messages from seq ``step_from`` on). 0 when everything fits."""
    if window.total <= limit:
        return 0
    before = [
        (m, t)
        for m, t in zip(window.messages, window.tokens, strict=True)
        if step_from is None or (m.seq or 0) < step_from
    ]
    return take_prefix(
        [m for m, _ in before],
        [t for _, t in before],
        at_least=window.total - limit,
        at_most=None,
        binding=window.binding,
    )
