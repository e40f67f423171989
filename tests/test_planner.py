"""Table-driven tests of every threshold decision (no I/O)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from obsmem.messages import Message, TextPart, ToolCallPart, ToolResultPart
from obsmem.options import resolve_options
from obsmem.planner import (
    BACKOFF_LONGEST_SECONDS,
    Backoff,
    Batch,
    activatable_chunks,
    activation_count,
    backoff_after,
    before_waiting_chunks,
    buffer_due,
    buffer_interval,
    buffering_due,
    chunk_slice,
    may_retry,
    message_threshold,
    plan_after_reply,
    plan_observation,
    plan_reflection,
    raw_cut,
    reflection_slice,
    retry_time_passed,
    suppression_after,
    sync_batches,
)
from obsmem.records import BufferedChunk, MessageRange
from obsmem.window import ThreadWindow

DEFAULTS = resolve_options(True)
assert DEFAULTS is not None
SYNC = resolve_options({"observation": {"bufferTokens": False}})
assert SYNC is not None
SHARED = resolve_options({"shareTokenBudget": True, "observation": {"bufferTokens": False}})
assert SHARED is not None
IDLE = resolve_options({"observation": {"bufferOnIdle": True}})
assert IDLE is not None


def test_importing_the_planner_loads_only_the_resolved_options() -> None:
    """The planner decides from resolved numbers: no pydantic, no model tables, no extractors."""
    code = "import sys\nimport obsmem.planner\nprint('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    assert "obsmem.planner" in loaded
    assert "obsmem.options.resolved" in loaded
    for heavy in ("pydantic", "pydantic_core", "pydantic_ai"):
        assert heavy not in loaded
    for module in ("obsmem.models", "obsmem.models.providers", "obsmem.extractors"):
        assert module not in loaded
    assert not loaded & {"obsmem.options.inputs", "obsmem.options.resolve", "obsmem.llm"}


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
        # A worked example: floor 6000, target 25000, over = 30k, overshoot
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


# -- back-off after failures ----------------------------------------------------------------------

T0 = 1_000.0
"""A reading of the monotonic clock back-offs are timed on (seconds)."""


@pytest.mark.parametrize(
    ("failures", "spread", "seconds"),
    [
        (1, 0.5, 5.0),  # the middle of the jitter band: the base wait
        (2, 0.5, 10.0),  # doubles with every failure in a row
        (3, 0.5, 20.0),
        (1, 0.0, 3.75),  # the band is ±25%
        (1, 0.999999, 6.25),
        (8, 0.5, 600.0),  # capped at ten minutes, however many failed
        (60, 0.5, 600.0),
    ],
)
def test_backoff_waits_double_up_to_a_cap(failures: int, spread: float, seconds: float) -> None:
    backoff = None
    for _ in range(failures):
        backoff = backoff_after(backoff, now=T0, error="boom", spread=spread)
    assert backoff is not None
    assert backoff.failures == failures
    assert backoff.retry_at - T0 == pytest.approx(seconds, abs=1e-3)
    assert not may_retry(backoff, T0)
    assert may_retry(backoff, backoff.retry_at)
    assert may_retry(None, T0)


WALL = datetime(2025, 12, 4, 14, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ahead", "passed"),
    [
        (None, True),
        (-1.0, True),
        (0.0, True),
        (5.0, False),
        (BACKOFF_LONGEST_SECONDS, False),  # the longest back-off there is
        # Further ahead than any back-off: written by a clock that ran ahead, or read by one
        # that stepped back (2 hours here); waiting for it would stall memory for as long.
        (BACKOFF_LONGEST_SECONDS + 1, True),
        (2 * 3600.0, True),
    ],
)
def test_a_stored_retry_time_further_ahead_than_any_back_off_has_passed(
    ahead: float | None, passed: bool
) -> None:
    retry_at = WALL + timedelta(seconds=ahead) if ahead is not None else None
    assert retry_time_passed(retry_at, WALL) is passed


def _backed_off(seconds_ago: float) -> tuple[Backoff, float]:
    """A first failure, and the time ``seconds_ago`` seconds after it."""
    backoff = backoff_after(None, now=T0, error="Observer down", spread=0.5)
    return backoff, T0 + seconds_ago


@pytest.mark.parametrize(
    ("pending", "chunks", "after", "activate", "sync", "start"),
    [
        # Inside the back-off: no Observer call, whatever the window; activation goes on.
        (12_000, [], 1, 0, False, False),
        (31_000, [6_000] * 5, 1, 5, False, False),
        (45_000, [], 1, 0, False, False),  # past block_after: the turn goes on raw
        (45_000, [6_000], 1, 1, False, False),
        # Once the back-off has passed, buffering resumes whatever the window size ...
        (6_000, [], 6, 0, False, True),
        (12_000, [], 6, 0, False, True),
        (33_000, [], 6, 0, False, True),
        # ... and past block_after the synchronous observation runs again.
        (45_000, [], 6, 0, True, False),
    ],
)
def test_an_observer_backoff_holds_model_calls_until_it_passes(
    pending: int, chunks: list[int], after: float, activate: int, sync: bool, start: bool
) -> None:
    backoff, now = _backed_off(after)
    plan = plan_observation(
        DEFAULTS,
        pending_tokens=pending,
        chunk_message_tokens=chunks,
        observation_tokens=0,
        buffering_in_flight=False,
        observer_backoff=backoff,
        now=now,
    )
    assert (plan.activate, plan.observe_sync, plan.start_buffering) == (activate, sync, start)


@pytest.mark.parametrize(("after", "sync"), [(1, False), (6, True)])
def test_an_observer_backoff_holds_synchronous_observation_without_buffering(
    after: float, sync: bool
) -> None:
    backoff, now = _backed_off(after)
    plan = plan_observation(
        SYNC,
        pending_tokens=40_000,
        chunk_message_tokens=[],
        observation_tokens=0,
        buffering_in_flight=False,
        observer_backoff=backoff,
        now=now,
    )
    assert plan.observe_sync is sync


@pytest.mark.parametrize(
    ("tokens", "buffered", "after", "suppressed", "expected"),
    [
        (20_000, False, 1, None, "none"),  # backing off: no background reflection
        (20_000, False, 6, None, "start"),
        (48_000, False, 1, None, "none"),  # backing off: no synchronous reflection either
        (48_000, False, 6, None, "sync"),
        (48_000, False, 6, 48_000, "none"),  # the last attempt at this size did not help
        (48_500, False, 6, 48_000, "sync"),  # the log grew: worth another try
        (40_000, True, 1, None, "activate"),  # swapping a finished one in needs no model
    ],
)
def test_reflection_backoff_and_suppression(
    tokens: int, buffered: bool, after: float, suppressed: int | None, expected: str
) -> None:
    backoff, now = _backed_off(after)
    plan = plan_reflection(
        DEFAULTS,
        observation_tokens=tokens,
        has_buffered_reflection=buffered,
        reflection_in_flight=False,
        reflector_backoff=backoff,
        now=now,
        suppressed_at=suppressed,
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
    assert got == expected


def test_suppression_without_buffering() -> None:
    plan = plan_reflection(
        SYNC,
        observation_tokens=45_000,
        has_buffered_reflection=False,
        reflection_in_flight=False,
        suppressed_at=45_000,
    )
    assert not plan.reflect_sync


@pytest.mark.parametrize(
    ("after", "expected"),
    [(None, 45_000), (41_000, 45_000), (40_000, 45_000), (30_000, None)],
)
def test_suppression_after_a_synchronous_reflection(
    after: int | None, expected: int | None
) -> None:
    assert suppression_after(45_000, after, threshold=40_000) == expected


# -- what a cycle covers --------------------------------------------------------------------------


def _window(
    tokens: list[int],
    *,
    covered: int = 0,
    thread: str = "t",
    first_seq: int = 1,
    open_call_at: int | None = None,
    result_at: int | None = None,
    deferred: bool = False,
) -> ThreadWindow:
    """A window of messages with these token counts (seq from ``first_seq``); optionally a tool
    call at index ``open_call_at`` answered at index ``result_at``."""
    messages: list[Message] = []
    for i, _ in enumerate(tokens):
        parts: tuple[Any, ...] = (TextPart(text=f"m{i}"),)
        if i == open_call_at:
            marks = {"obsmem": {"deferred": True}} if deferred else {}
            parts = (ToolCallPart(tool_call_id="c1", tool_name="search", metadata=marks),)
        if i == result_at:
            parts = (ToolResultPart(tool_call_id="c1", tool_name="search", content="hit"),)
        messages.append(
            Message(role="assistant", parts=parts, id=f"{thread}{i}", seq=first_seq + i)
        )
    return ThreadWindow(
        thread_id=thread, messages=tuple(messages), tokens=tuple(tokens), covered_through=covered
    )


def _seqs(batch: Batch | None) -> list[int]:
    return [] if batch is None else [m.seq or 0 for m in batch.messages]


@pytest.mark.parametrize(
    ("tokens", "covered", "idle", "seqs"),
    [
        ([1_000] * 10, 0, False, [1, 2, 3, 4, 5, 6]),  # one interval: 6,000 tokens
        ([1_000] * 10, 3, False, [4, 5, 6, 7, 8, 9]),  # after what chunks already cover
        ([2_500] * 3, 0, False, [1, 2, 3]),  # reaches the interval at the cut after 7,500
        ([1_000] * 2, 0, False, []),  # less than half an interval: not worth a chunk
        ([1_000] * 3, 0, False, [1, 2, 3]),  # half an interval is enough
        ([1_000] * 2, 0, True, [1, 2]),  # an idle flush takes whatever is left
        ([1_000] * 10, 10, True, []),  # nothing unbuffered
        ([40_000], 0, False, [1]),  # one message larger than the cap is still taken
        ([1_000] * 40, 0, True, list(range(1, 31))),  # never more than message_tokens
        # Near the threshold (pending >= 23,400) the interval halves to 3,000.
        ([1_000] * 24, 20, False, [21, 22, 23]),
    ],
)
def test_chunk_slice(tokens: list[int], covered: int, idle: bool, seqs: list[int]) -> None:
    window = _window(tokens, covered=covered)
    batch = chunk_slice(DEFAULTS, window, observation_tokens=0, idle=idle)
    assert _seqs(batch) == seqs
    if batch is not None:
        assert batch.tokens == sum(tokens[s - 1] for s in seqs)


def test_chunk_slice_never_splits_a_tool_call_from_its_result() -> None:
    # The interval would end right after the call (seq 6): the chunk runs on to its result.
    window = _window([1_000] * 10, open_call_at=5, result_at=7)
    assert _seqs(chunk_slice(DEFAULTS, window, observation_tokens=0)) == list(range(1, 9))
    # A call of the latest step still waits for its result: the chunk stops before it.
    pending = _window([1_000] * 8, open_call_at=7)
    assert _seqs(chunk_slice(DEFAULTS, pending, observation_tokens=0, idle=True)) == list(
        range(1, 8)
    )
    # An older call that never got its result was interrupted: it binds nothing.
    interrupted = _window([1_000] * 8, open_call_at=0)
    assert _seqs(chunk_slice(DEFAULTS, interrupted, observation_tokens=0, idle=True)) == list(
        range(1, 9)
    )


def test_chunk_slice_without_buffering() -> None:
    assert chunk_slice(SYNC, _window([1_000] * 10), observation_tokens=0) is None


@pytest.mark.parametrize(
    ("tokens", "covered", "due"),
    [
        ([1_000] * 5, 0, False),  # 5,000 unbuffered < 6,000
        ([1_000] * 6, 0, True),
        ([1_000] * 12, 6, True),
        ([1_000] * 12, 11, False),
        ([1_000] * 31, 30, True),  # past the threshold: anything unbuffered
        ([1_000] * 31, 31, False),
    ],
)
def test_buffering_due(tokens: list[int], covered: int, due: bool) -> None:
    window = _window(tokens, covered=covered)
    assert buffering_due(DEFAULTS, window, observation_tokens=0) is due


@pytest.mark.parametrize(
    ("options", "tokens", "covered", "in_flight", "after", "expected"),
    [
        ("defaults", [1_000] * 6, 0, False, None, "due"),
        ("defaults", [1_000] * 5, 0, False, None, None),
        ("defaults", [1_000] * 6, 0, True, None, None),  # a cycle already runs here
        ("defaults", [1_000] * 6, 0, False, 1, None),  # backing off
        ("defaults", [1_000] * 6, 0, False, 6, "due"),  # the back-off has passed
        ("idle", [100], 0, False, None, "idle"),  # buffer_on_idle flushes at once
        ("idle", [100], 1, False, None, None),  # nothing left to flush
        ("sync", [1_000] * 40, 0, False, None, None),  # buffering off
    ],
)
def test_plan_after_reply(
    options: str,
    tokens: list[int],
    covered: int,
    in_flight: bool,
    after: float | None,
    expected: str | None,
) -> None:
    resolved = {"defaults": DEFAULTS, "idle": IDLE, "sync": SYNC}[options]
    backoff, now = _backed_off(after) if after is not None else (None, T0)
    got = plan_after_reply(
        resolved,
        _window(tokens, covered=covered),
        observation_tokens=0,
        buffering_in_flight=in_flight,
        observer_backoff=backoff,
        now=now,
    )
    assert got == expected


@pytest.mark.parametrize(
    ("windows", "keep", "step_from", "cap", "expected"),
    [
        # Observe the oldest until about 6,000 stay raw.
        ({"a": [1_000] * 10}, 6_000, {}, 30_000, {"a": [1, 2, 3, 4]}),
        ({"a": [1_000] * 10}, 0, {}, 30_000, {"a": list(range(1, 11))}),
        ({"a": [1_000] * 5}, 6_000, {}, 30_000, {}),  # under the floor: nothing
        # Each call takes at most the cap (message_tokens), even when more is in excess.
        ({"a": [1_000] * 10}, 0, {}, 4_000, {"a": [1, 2, 3, 4]}),
        # One message larger than the cap is still taken (invariant 8).
        ({"a": [9_000, 1_000]}, 0, {}, 4_000, {"a": [1]}),
        # The turn's own input stays raw.
        ({"a": [1_000] * 10}, 0, {"a": 8}, 30_000, {"a": [1, 2, 3, 4, 5, 6, 7]}),
        # Resource scope: the largest window first, until the excess is gone.
        ({"a": [1_000] * 3, "b": [1_000] * 8}, 5_000, {}, 30_000, {"b": [1, 2, 3, 4, 5, 6]}),
        (
            {"a": [1_000] * 6, "b": [1_000] * 8},
            0,
            {},
            30_000,
            {"b": list(range(1, 9)), "a": list(range(1, 7))},
        ),
    ],
)
def test_sync_batches(
    windows: dict[str, list[int]],
    keep: int,
    step_from: dict[str, int],
    cap: int,
    expected: dict[str, list[int]],
) -> None:
    batches = sync_batches(
        [_window(t, thread=name) for name, t in windows.items()],
        keep_tokens=keep,
        step_from=step_from,
        cap=cap,
    )
    assert {b.thread_id: _seqs(b) for b in batches} == expected
    assert list({b.thread_id: 0 for b in batches}) == list(expected)  # largest window first


def test_sync_batches_keep_tool_pairs_together() -> None:
    window = _window([1_000] * 6, open_call_at=2, result_at=4)
    [batch] = sync_batches([window], keep_tokens=3_500, step_from={}, cap=30_000)
    assert _seqs(batch) == [1, 2, 3, 4, 5]  # not cut after 3 or 4: the call waits for its result
    pending = _window([1_000] * 6, open_call_at=5)
    [batch] = sync_batches([pending], keep_tokens=0, step_from={}, cap=30_000)
    assert _seqs(batch) == [1, 2, 3, 4, 5]  # the latest step's call waits for its result
    deferred = _window([1_000] * 6, open_call_at=1, deferred=True)
    [batch] = sync_batches([deferred], keep_tokens=0, step_from={}, cap=30_000)
    assert _seqs(batch) == [1]  # an approval pending across turns is held back too


def _chunk(*ranges: tuple[str, int, int]) -> BufferedChunk:
    return BufferedChunk(
        id="c",
        cycle_id="c",
        observations="* x",
        token_count=1,
        message_tokens=100,
        ranges=tuple(MessageRange(thread_id=t, first_seq=a, last_seq=b) for t, a, b in ranges),
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    ("step_from", "ready", "stop"),
    [
        ({}, 3, {}),  # no current step: every chunk may activate
        ({"t": 100}, 3, {"t": 100}),  # the step starts after every chunk
        ({"t": 9}, 2, {"t": 7}),  # the third chunk reaches the step: it waits, and so does 7-8
        ({"t": 7}, 2, {"t": 7}),
        ({"t": 6}, 1, {"t": 4}),  # a chunk that ends at the step's first message waits
        ({"t": 1}, 0, {"t": 1}),
        ({"other": 2}, 3, {"other": 2}),  # another thread's step stops nothing here
    ],
)
def test_chunks_that_reach_the_current_step_wait(
    step_from: dict[str, int], ready: int, stop: dict[str, int]
) -> None:
    chunks = [_chunk(("t", 1, 3)), _chunk(("t", 4, 6)), _chunk(("t", 7, 9))]
    assert activatable_chunks(chunks, step_from) == ready
    assert before_waiting_chunks(chunks, step_from) == stop


def test_activation_never_takes_a_chunk_of_the_current_step() -> None:
    """Past block_after with three chunks of which some may go: no other activates; when none
    may, the plan goes synchronous without activating (and observes what comes before)."""
    for activatable in (0, 1, 3):
        plan = plan_observation(
            DEFAULTS,
            pending_tokens=40_000,
            chunk_message_tokens=[10_000, 10_000, 10_000],
            observation_tokens=0,
            buffering_in_flight=False,
            activatable=activatable,
        )
        assert plan.activate <= activatable
        assert plan.observe_sync == (activatable == 0)


def _raw_window(*specs: tuple[str, int]) -> ThreadWindow:
    """Messages from ``(kind, tokens)``: "m" text, "c<id>" a call, "r<id>" its result."""
    messages: list[Message] = []
    for seq, (kind, _) in enumerate(specs, start=1):
        if kind.startswith("c"):
            part: Any = ToolCallPart(tool_name="f", tool_call_id=kind[1:])
            role = "assistant"
        elif kind.startswith("r"):
            part = ToolResultPart(tool_name="f", tool_call_id=kind[1:], content="x")
            role = "tool"
        else:
            part, role = TextPart(text="x"), "user"
        messages.append(Message(role=role, parts=(part,), seq=seq))
    return ThreadWindow(
        thread_id="t",
        messages=tuple(messages),
        tokens=tuple(t for _, t in specs),
        covered_through=0,
    )


@pytest.mark.parametrize(
    ("specs", "limit", "step_from", "cut"),
    [
        ([("m", 100), ("m", 100)], 500, None, 0),  # fits: nothing left out
        ([("m", 300), ("m", 300), ("m", 100)], 350, None, 2),  # the fewest that make it fit
        ([("m", 300), ("m", 300), ("m", 100)], 700, None, 0),
        ([("m", 100), ("c1", 300), ("r1", 300), ("m", 100)], 450, None, 3),  # never split a pair
        ([("m", 300), ("m", 300), ("m", 300)], 100, 2, 1),  # never into the current step
        ([("m", 300), ("m", 300)], 100, 1, 0),
    ],
)
def test_raw_cut_leaves_out_the_oldest_at_safe_points(
    specs: list[tuple[str, int]], limit: int, step_from: int | None, cut: int
) -> None:
    assert raw_cut(_raw_window(*specs), limit=limit, step_from=step_from) == cut


@pytest.mark.parametrize(
    ("options", "pending", "chunks", "in_flight", "sync", "catch_up"),
    [
        (DEFAULTS, 66_000, [], False, True, False),  # one Observer call past block_after: wait
        (DEFAULTS, 66_001, [], False, False, True),  # more: catch up in the background
        (DEFAULTS, 80_000, [6_000] * 2, False, False, True),
        (DEFAULTS, 80_000, [], True, False, True),  # beside a buffering cycle too
        (SYNC, 60_000, [], False, True, False),
        (SYNC, 60_001, [], False, False, True),
    ],
)
def test_a_backlog_past_one_observer_call_is_caught_up_in_the_background(
    options: Any,
    pending: int,
    chunks: list[int],
    in_flight: bool,
    sync: bool,
    catch_up: bool,
) -> None:
    plan = plan_observation(
        options,
        pending_tokens=pending,
        chunk_message_tokens=chunks,
        observation_tokens=0,
        buffering_in_flight=in_flight,
    )
    assert (plan.observe_sync, plan.catch_up) == (sync, catch_up)
    if chunks and catch_up:
        assert plan.activate == len(chunks), "activation needs no model: it happens now"


def test_while_a_catch_up_runs_no_turn_observes_or_buffers() -> None:
    for options in (DEFAULTS, SYNC):
        for pending in range(0, 200_000, 5_000):
            plan = plan_observation(
                options,
                pending_tokens=pending,
                chunk_message_tokens=[],
                observation_tokens=0,
                buffering_in_flight=True,
                catching_up=True,
            )
            assert (plan.observe_sync, plan.start_buffering, plan.catch_up) == (False,) * 3, pending
