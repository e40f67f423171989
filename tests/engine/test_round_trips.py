"""How many store round trips memory work costs: a plain turn and a background buffering cycle
take two and at most three on every store (each store call is one transaction: one round
trip). A plain turn is two: the load that stores the input and reads the context, and the
store of the reply."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from obsmem.engine import ObservationalMemory
from obsmem.stores import Store
from obsmem.testing import scripted_observer, scripted_reflector

from .helpers import Conversation, Recorder


class CountingStore:
    """Passes every call to ``inner`` and counts the store methods awaited."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name.startswith("_") or not callable(attr):
            return attr
        method: Callable[..., Any] = attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await method(*args, **kwargs)

        return counted

    def take(self) -> Counter[str]:
        """The calls since the last take."""
        calls, self.calls = self.calls, Counter()
        return calls


def _engine(store: CountingStore, conv: Conversation) -> ObservationalMemory:
    return ObservationalMemory(
        store,  # type: ignore[arg-type]
        {
            "observation": {"model": scripted_observer(), "messageTokens": 3_000},
            "reflection": {"model": scripted_reflector()},
        },
        clock=conv.clock,
    )


async def test_a_plain_turn_takes_two_round_trips_and_a_buffering_cycle_at_most_three(
    store: Store,
) -> None:
    counting = CountingStore(store)
    conv = Conversation()
    om = _engine(counting, conv)
    events = Recorder()
    om.subscribe(events)
    # A plain turn: the input stored, the context assembled, the reply stored, nothing due.
    await om.prepare("t1", "u1", [conv.user(50)])
    await om.record("t1", "u1", [conv.assistant(50)])
    await om.settle()
    turn = counting.take()
    assert sum(turn.values()) == 2, turn
    assert not events.of("data-om-buffering-start")
    # Grow the window until a reply makes buffering due; the turn itself stays within budget.
    while not events.of("data-om-buffering-start"):
        await om.prepare("t1", "u1", [conv.user(150)])
        await om.record("t1", "u1", [conv.assistant(150)])
        turn = counting.take()
        assert sum(turn.values()) == 2, turn
        await om.settle()
        cycle = counting.take()
    # The buffering cycle that ran in the background: its commit, and no more.
    assert events.of("data-om-buffering-end")
    assert 1 <= sum(cycle.values()) <= 3, cycle
    assert cycle["commit"] >= 1
    record = await store.get_record("thread:t1")
    assert record is not None
    assert record.chunks
    await om.aclose()
