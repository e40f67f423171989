"""Every threshold decision, as pure functions of (numbers, options).

Nothing here awaits, reads a clock or touches a store: the engine gathers the numbers, asks the
planner what to do, and carries it out. Tests drive these functions with tables
(tests/test_planner.py), including the worked example of the reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from .options import ResolvedOptions

__all__ = [
    "ActivationTrigger",
    "ObservationPlan",
    "ReflectionPlan",
    "activation_count",
    "buffer_due",
    "buffer_interval",
    "message_threshold",
    "plan_observation",
    "plan_reflection",
    "reflection_slice",
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
    """How many leading chunks to activate (reference §4.5, step 7).

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


def plan_observation(
    options: ResolvedOptions,
    *,
    pending_tokens: int,
    chunk_message_tokens: Sequence[int],
    observation_tokens: int,
    buffering_in_flight: bool,
    idle_expired: bool = False,
    provider_changed: bool = False,
) -> ObservationPlan:
    """Decide activation, synchronous observation and buffering for one step.

    ``pending_tokens`` counts every unobserved message (buffered or not); ``chunk_message_tokens``
    the messages each buffered chunk covers, in order.

    - With buffering off: observe synchronously once pending reaches the threshold.
    - With buffering on: at the threshold (or when the prompt cache was lost anyway: idle TTL,
      provider change) activate chunks; past ``block_after`` activate the maximum, and if what
      stays is still past ``block_after`` observe the rest synchronously. Between the threshold
      and ``block_after`` nothing blocks: the unbuffered rest is buffered in the background.
    """
    obs = options.observation
    threshold = message_threshold(options, observation_tokens)
    if not options.async_buffering or obs.buffer_tokens is None:
        return ObservationPlan(threshold=threshold, observe_sync=pending_tokens >= threshold)

    floor = obs.retention_floor or 0
    block_after = obs.block_after if obs.block_after is not None else threshold
    trigger: ActivationTrigger | None = None
    if chunk_message_tokens:
        if pending_tokens >= threshold:
            trigger = "threshold"
        elif provider_changed:
            trigger = "provider_change"
        elif idle_expired:
            trigger = "ttl"
    count = 0
    if trigger is not None:
        count = activation_count(
            chunk_message_tokens,
            pending_tokens=pending_tokens,
            retention_floor=floor,
            force_max=pending_tokens >= block_after,
        )
    removed = sum(chunk_message_tokens[:count])
    remaining = pending_tokens - removed
    buffered_left = sum(chunk_message_tokens[count:])
    unbuffered = max(0, remaining - buffered_left)
    if remaining >= block_after:
        return ObservationPlan(
            threshold=threshold,
            activate=len(chunk_message_tokens),  # going synchronous: take every chunk first
            trigger=trigger or "threshold",
            observe_sync=True,
        )
    past_threshold = remaining >= threshold
    start = not buffering_in_flight and (
        (past_threshold and unbuffered > 0)
        or buffer_due(
            unbuffered_tokens=unbuffered,
            pending_tokens=remaining,
            threshold=threshold,
            buffer_tokens=obs.buffer_tokens,
        )
    )
    return ObservationPlan(
        threshold=threshold, activate=count, trigger=trigger, start_buffering=start
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
) -> ReflectionPlan:
    """Decide the log's fate at this step (reference §4.9).

    - Buffering off: reflect synchronously at the threshold.
    - Buffering on: start a background reflection at ``buffer_start_tokens``; at the threshold
      activate a finished one; past ``block_after`` with none ready, reflect synchronously.
    - Idle TTL or provider change may activate a finished reflection early, but only when the
      swap is worth it: the unreflected tail is at least as large as the reflection, and both
      together reach 75% of the span between the start point and the threshold.
    """
    ref = options.reflection
    threshold = ref.observation_tokens
    if not options.async_buffering or ref.buffer_start_tokens is None:
        return ReflectionPlan(threshold=threshold, reflect_sync=observation_tokens >= threshold)
    block_after = ref.block_after if ref.block_after is not None else threshold
    if observation_tokens >= threshold:
        if has_buffered_reflection:
            return ReflectionPlan(threshold=threshold, activate_buffered=True, trigger="threshold")
        if observation_tokens >= block_after:
            return ReflectionPlan(threshold=threshold, reflect_sync=True, trigger="threshold")
        return ReflectionPlan(threshold=threshold, start_buffering=not reflection_in_flight)
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
        observation_tokens >= ref.buffer_start_tokens
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
