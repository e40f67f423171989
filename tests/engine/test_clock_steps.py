"""Time that cannot trap memory: the wall clock stepping back or forward (NTP, a suspended
laptop, an operator) neither stalls the Observer nor cuts a wait short. Waits are timed on the
engine's monotonic clock; stored retry times further ahead than any back-off count as passed.

Each test steps the wall clock on its own while the monotonic clock moves as real time does
(``Clocks``), or, for an engine given only a wall clock, leaves the monotonic clock to be read
off it (``obsmem.clocks.SteadyClock``, which ignores steps back)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from obsmem.clocks import SteadyClock
from obsmem.errors import MemoryUnavailableError
from obsmem.failures import next_failure
from obsmem.messages import Message
from obsmem.meta_keys import META_FAILURE
from obsmem.planner import BACKOFF_LONGEST_SECONDS
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector

from .helpers import T0, Recorder, engine, text_of

TWO_HOURS = timedelta(hours=2)


class Clocks:
    """A wall clock the test may step, and a monotonic one that moves only as time passes."""

    def __init__(self) -> None:
        self.wall = T0
        self.elapsed = 0.0

    def now(self) -> datetime:
        return self.wall

    def steady(self) -> float:
        return self.elapsed

    def passes(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.elapsed += seconds

    def steps(self, by: timedelta) -> None:
        """The wall clock jumps; no time passes."""
        self.wall += by


def _observer_failing_once() -> dict[str, object]:
    return {
        "observation": {
            "model": scripted_observer(fault=lambda n: "error" if n == 0 else None),
            "messageTokens": 1_000,
            "bufferTokens": False,
        },
        "reflection": {"model": scripted_reflector()},
    }


@pytest.mark.parametrize("steady", ["monotonic", "read off the wall clock"])
async def test_the_wall_clock_stepping_back_does_not_stall_the_observer(steady: str) -> None:
    """One Observer failure, then the wall clock steps back 2 hours. The back-off (about 5 s)
    still ends after about 5 s: the next turns observe, and nothing is left out. (Timed on the
    wall clock, it lasted the 2 hours: every turn meanwhile left messages out.)"""
    clocks = Clocks()
    om = engine(
        InMemoryStore(),
        _observer_failing_once(),
        clock=clocks.now,
        **({"steady_clock": clocks.steady} if steady == "monotonic" else {}),
    )
    events = Recorder()
    om.subscribe(events)
    rng = random.Random(0)

    async def turn() -> list[Message]:
        clocks.passes(30)
        prepared = await om.prepare(
            "t1", "u1", [Message.user(text_of(300, rng), created_at=clocks.wall)]
        )
        clocks.passes(30)
        await om.record("t1", "u1", [Message.assistant(text_of(100, rng), created_at=clocks.wall)])
        return prepared.messages

    while not events.of("data-om-observation-failed"):
        await turn()
    clocks.steps(-TWO_HOURS)
    shown = [await turn() for _ in range(12)]
    ends = events.of("data-om-observation-end")
    assert ends, "the Observer was never called again after the clock stepped back"
    assert not any(m.id == "obsmem-left-out" for m in shown[-1])
    status = await om.health("t1", "u1")
    assert status.left_out == 0
    assert status.failures == ()
    await om.aclose()


async def test_the_wall_clock_stepping_forward_is_not_idle_time() -> None:
    """The prompt cache is not lost because the wall clock jumped: chunks activate at the
    idle TTL only after that much time has passed."""
    clocks = Clocks()
    om = engine(
        InMemoryStore(),
        {
            "observation": {
                "model": scripted_observer(),
                "messageTokens": 3_000,
                "activateAfterIdle": "5m",
            },
            "reflection": {"model": scripted_reflector(), "observationTokens": 20_000},
        },
        clock=clocks.now,
        steady_clock=clocks.steady,
    )
    events = Recorder()
    om.subscribe(events)
    rng = random.Random(1)

    async def turn() -> None:
        clocks.passes(30)
        await om.prepare("t1", "u1", [Message.user(text_of(300, rng), created_at=clocks.wall)])
        clocks.passes(30)
        await om.record("t1", "u1", [Message.assistant(text_of(300, rng), created_at=clocks.wall)])
        await om.settle()

    for _ in range(2):
        await turn()
    record = await om.store.get_record("thread:t1")
    assert record is not None
    assert record.chunks
    clocks.steps(TWO_HOURS)
    await turn()
    assert not events.of("data-om-activation"), "a clock step was taken for idle time"
    clocks.passes(6 * 60)  # now the cache is really gone
    await turn()
    [activation, *_] = events.of("data-om-activation")
    assert activation.triggered_by == "ttl"
    assert activation.ttl_expired_ms == pytest.approx(6 * 60_000 + 30_000)
    await om.aclose()


@pytest.mark.parametrize(
    ("retry_in", "fails"),
    [
        (timedelta(minutes=1), True),  # within the longest back-off: the turn still fails
        (timedelta(seconds=BACKOFF_LONGEST_SECONDS - 1), True),
        (TWO_HOURS, False),  # further ahead than any back-off: passed
    ],
)
async def test_a_stored_retry_time_further_ahead_than_any_back_off_does_not_fail_turns(
    retry_in: timedelta, fails: bool
) -> None:
    """``failure_policy="raise"`` fails a turn while the log's back-off lasts. A retry time
    another worker stored 2 hours ahead (its clock ran ahead, or this one stepped back) is
    further ahead than any back-off: it counts as passed, and turns go on."""
    store = InMemoryStore()
    await store.create_thread("t1", "u1")
    failure = next_failure(
        None,
        role="observer",
        error="HTTP 503: loading model",
        model="openai/local",
        now=T0,
        next_retry_at=T0 + retry_in,
        left_out=0,
    )
    await store.update_thread("t1", metadata={META_FAILURE: {"observer": failure.to_json()}})
    clocks = Clocks()
    om = engine(
        store,
        {**_observer_failing_once(), "failure_policy": "raise"},
        clock=clocks.now,
        steady_clock=clocks.steady,
    )
    turn = om.prepare("t1", "u1", [Message.user("still there?", created_at=clocks.wall)])
    if fails:
        with pytest.raises(MemoryUnavailableError, match="HTTP 503: loading model"):
            await turn
    else:
        await turn
    await om.aclose()


def test_the_steady_clock_read_off_a_wall_clock_ignores_steps_back() -> None:
    clocks = Clocks()
    steady = SteadyClock(clocks.now)
    assert steady() == 0.0
    clocks.passes(10)
    assert steady() == 10.0
    clocks.steps(-TWO_HOURS)
    assert steady() == 10.0
    clocks.passes(5)
    assert steady() == 15.0
