"""Table-driven tests of every threshold decision (no I/O)."""

from __future__ import annotations

import pytest

from obsmem.options import resolve_options
from obsmem.planner import (
    activation_count,
    buffer_due,
    buffer_interval,
    message_threshold,
    plan_observation,
    plan_reflection,
    reflection_slice,
)

DEFAULTS = resolve_options(True)
assert DEFAULTS is not None
SYNC = resolve_options({"observation": {"bufferTokens": False}})
assert SYNC is not None
SHARED = resolve_options({"shareTokenBudget": True, "observation": {"bufferTokens": False}})
assert SHARED is not None


def test_defaults_give_the_seed_numbers() -> None:
    obs, ref = DEFAULTS.observation, DEFAULTS.reflection
    assert (obs.message_tokens, obs.buffer_tokens, obs.retention_floor, obs.block_after) == (
        30_000,
        6_000,
        6_000,
        36_000,
    )
    assert (ref.observation_tokens, ref.buffer_start_tokens, ref.block_after) == (
        40_000,
        20_000,
        48_000,
    )


@pytest.mark.parametrize(
    ("pending", "expected"),
    [(0, 6000), (23_399, 6000), (23_400, 3000), (29_999, 3000), (40_000, 3000)],
)
def test_buffer_interval_halves_at_the_ramp_point(pending: int, expected: int) -> None:
    # ramp point = 30_000 - 1.1 * 6_000 = 23_400
    assert buffer_interval(pending, 30_000, 6_000) == expected


@pytest.mark.parametrize(
    ("unbuffered", "pending", "due"),
    [
        (5_999, 5_999, False),
        (6_000, 6_000, True),
        (2_999, 25_000, False),  # near the threshold the interval is 3,000
        (3_000, 25_000, True),
        (4_000, 12_000, False),
    ],
)
def test_buffer_due(unbuffered: int, pending: int, due: bool) -> None:
    assert (
        buffer_due(
            unbuffered_tokens=unbuffered,
            pending_tokens=pending,
            threshold=30_000,
            buffer_tokens=6_000,
        )
        is due
    )


@pytest.mark.parametrize(
    ("chunks", "pending", "floor", "force", "expected"),
    [
        # The reference's worked example: floor 6000, target 25000, over = 30k, overshoot
        # 5000 <= 5700 and 1000 left >= 1000: all five chunks.
        ([6000] * 5, 31_000, 6000, False, 5),
        # Exactly at the threshold: target 24000 is met by four chunks, 6000 stay raw.
        ([6000] * 5, 30_000, 6000, False, 4),
        # The over boundary would leave 500 < 1000: fall back to the under boundary.
        ([20_000, 10_500], 31_000, 6000, False, 1),
        # Every chunk is below target: the under boundary is all of them.
        ([3000, 3000], 30_000, 6000, False, 2),
        # Nothing but an over boundary that leaves too little: take it anyway.
        ([29_500], 30_000, 6000, False, 1),
        # Forced (past block_after): the over boundary as long as 1000 stay.
        ([6000] * 6, 40_000, 6000, True, 6),
        # Forced but the over boundary would leave 0: the under boundary.
        ([6000] * 6, 36_000, 6000, True, 5),
        # No chunks, nothing to do.
        ([], 31_000, 6000, False, 0),
        # A small retention floor lowers the minimum remainder to the floor itself.
        ([9_800], 10_000, 500, False, 1),
    ],
)
def test_activation_count(
    chunks: list[int], pending: int, floor: int, force: bool, expected: int
) -> None:
    got = activation_count(chunks, pending_tokens=pending, retention_floor=floor, force_max=force)
    assert got == expected


def test_share_token_budget_lends_unused_log_space() -> None:
    assert message_threshold(SHARED, 0) == 70_000
    assert message_threshold(SHARED, 30_000) == 40_000
    assert message_threshold(SHARED, 45_000) == 30_000  # never below message_tokens
    assert message_threshold(DEFAULTS, 0) == 30_000


@pytest.mark.parametrize(
    ("pending", "chunks", "in_flight", "activate", "sync", "start"),
    [
        (5_000, [], False, 0, False, False),
        (6_000, [], False, 0, False, True),
        (12_000, [6_000], False, 0, False, True),
        (25_000, [6_000] * 3, False, 0, False, True),  # 7,000 unbuffered >= 3,000
        (31_000, [6_000] * 5, False, 5, False, False),  # the worked example
        (30_500, [6_000] * 4, False, 4, False, True),  # 6,500 unbuffered stay, buffering goes on
        (33_000, [], True, 0, False, False),  # below block_after: wait for the background
        (33_000, [], False, 0, False, True),  # past the threshold: buffer the rest now
        (37_000, [], False, 0, True, False),  # past block_after with nothing buffered
        (37_000, [6_000], True, 1, False, False),  # activation brings it under block_after
        (45_000, [6_000], True, 1, True, False),  # still past block_after: observe the rest
    ],
)
def test_plan_observation_with_buffering(
    pending: int, chunks: list[int], in_flight: bool, activate: int, sync: bool, start: bool
) -> None:
    plan = plan_observation(
        DEFAULTS,
        pending_tokens=pending,
        chunk_message_tokens=chunks,
        observation_tokens=0,
        buffering_in_flight=in_flight,
    )
    assert (plan.activate, plan.observe_sync, plan.start_buffering) == (activate, sync, start)
    assert plan.threshold == 30_000
    if activate:
        assert plan.trigger == "threshold"


def test_plan_observation_below_block_after_never_blocks() -> None:
    for pending in range(0, 36_000, 500):
        plan = plan_observation(
            DEFAULTS,
            pending_tokens=pending,
            chunk_message_tokens=[],
            observation_tokens=0,
            buffering_in_flight=True,
        )
        assert not plan.observe_sync, pending


@pytest.mark.parametrize(
    ("idle", "provider", "trigger"),
    [(True, False, "ttl"), (False, True, "provider_change"), (True, True, "provider_change")],
)
def test_early_activation_when_the_cache_is_lost(idle: bool, provider: bool, trigger: str) -> None:
    plan = plan_observation(
        DEFAULTS,
        pending_tokens=10_000,
        chunk_message_tokens=[6_000],
        observation_tokens=0,
        buffering_in_flight=False,
        idle_expired=idle,
        provider_changed=provider,
    )
    assert plan.activate == 1
    assert plan.trigger == trigger


def test_no_early_activation_without_a_reason() -> None:
    plan = plan_observation(
        DEFAULTS,
        pending_tokens=10_000,
        chunk_message_tokens=[6_000],
        observation_tokens=0,
        buffering_in_flight=True,
    )
    assert plan.activate == 0
    assert plan.trigger is None


@pytest.mark.parametrize(("pending", "sync"), [(29_999, False), (30_000, True)])
def test_plan_observation_without_buffering(pending: int, sync: bool) -> None:
    plan = plan_observation(
        SYNC,
        pending_tokens=pending,
        chunk_message_tokens=[],
        observation_tokens=0,
        buffering_in_flight=False,
    )
    assert plan.observe_sync is sync
    assert not plan.start_buffering


@pytest.mark.parametrize(
    ("tokens", "buffered", "in_flight", "expected"),
    [
        (19_999, False, False, ("none",)),
        (20_000, False, False, ("start",)),
        (20_000, False, True, ("none",)),
        (30_000, True, False, ("none",)),
        (40_000, True, False, ("activate",)),
        (40_000, False, False, ("start",)),
        (40_000, False, True, ("none",)),
        (48_000, False, True, ("sync",)),
    ],
)
def test_plan_reflection_with_buffering(
    tokens: int, buffered: bool, in_flight: bool, expected: tuple[str]
) -> None:
    plan = plan_reflection(
        DEFAULTS,
        observation_tokens=tokens,
        has_buffered_reflection=buffered,
        reflection_in_flight=in_flight,
    )
    got = (
        "activate"
        if plan.activate_buffered
        else "sync"
        if plan.reflect_sync
        else "start"
        if plan.start_buffering
        else "none"
    )
    assert (got,) == expected


@pytest.mark.parametrize(("tokens", "sync"), [(39_999, False), (40_000, True)])
def test_plan_reflection_without_buffering(tokens: int, sync: bool) -> None:
    plan = plan_reflection(
        SYNC, observation_tokens=tokens, has_buffered_reflection=False, reflection_in_flight=False
    )
    assert plan.reflect_sync is sync


@pytest.mark.parametrize(
    ("reflection", "tail", "activate"),
    [
        (8_000, 8_000, True),  # 16,000 >= 0.75 * 20,000 = 15,000 and tail >= reflection
        (8_000, 6_000, False),  # the tail is smaller than the reflection
        (5_000, 9_000, False),  # 14,000 < 15,000: not worth a cache miss
    ],
)
def test_idle_reflection_activation_guards(reflection: int, tail: int, activate: bool) -> None:
    plan = plan_reflection(
        DEFAULTS,
        observation_tokens=30_000,
        has_buffered_reflection=True,
        buffered_reflection_tokens=reflection,
        unreflected_tail_tokens=tail,
        reflection_in_flight=False,
        idle_expired=True,
    )
    assert plan.activate_buffered is activate
    if activate:
        assert plan.trigger == "ttl"


def test_reflection_slice_covers_the_oldest_half_of_the_threshold() -> None:
    # 100 lines of 400 tokens; 40,000 * 0.5 = 20,000 tokens = 50 lines; target 75% = 15,000.
    assert reflection_slice(100, 40_000, threshold=40_000, buffer_activation=0.5) == (50, 15_000)
    assert reflection_slice(10, 1_000, threshold=40_000, buffer_activation=0.5) == (10, 750)
    assert reflection_slice(0, 0, threshold=40_000, buffer_activation=0.5) == (0, 0)
