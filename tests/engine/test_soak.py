"""Soak: many turns on 50 threads, two engines on one SQLite file, through outages of the
Observer, the Reflector and the store, with hostile input mixed in. Afterwards every thread has
caught up, every invariant holds, and process memory and the engines' internal maps are flat.

CI runs a small size. The full size: ``OBSMEM_SOAK_ROUNDS=60 pytest tests/engine/test_soak.py``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
import random
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from obsmem.engine import ObservationalMemory, PreparedContext
from obsmem.errors import ObsmemError, StoreError
from obsmem.events import Event
from obsmem.messages import Message, TextPart, ToolCallPart
from obsmem.planner import BACKOFF_LONGEST_SECONDS, may_retry
from obsmem.stores import Commit, CommitResult, LoadRequest, SQLiteStore
from obsmem.testing import Fault, scripted_observer, scripted_reflector

from .helpers import raw_messages
from .property_helpers import Actor, InvariantChecker, MessageFactory, TurnPlan

pytestmark = pytest.mark.slow

THREADS = 50
ROUNDS = int(os.environ.get("OBSMEM_SOAK_ROUNDS", "16"))
MESSAGE_TOKENS, OBSERVATION_TOKENS = 1_000, 400
BLOCK_AFTER = 1_200  # 1.2 x message_tokens
RANDOM_FAULTS: tuple[Fault | None, ...] = (None,) * 16 + ("transient", "empty", "degenerate")


@dataclass
class Outages:
    """Which parts are down now (the schedule flips these between rounds)."""

    observer: bool = False
    reflector: bool = False
    store: bool = False
    noise: bool = True
    store_next: bool = False
    """Take the store down as soon as the next background cycle starts (so the outage hits
    background work mid-cycle, not only turns)."""
    """Random single faults (a 503, an empty or degenerate answer) between the outages."""


class FlakyStore(SQLiteStore):
    """A SQLite store whose reads and writes fail while ``outages.store`` is on, as a database
    that went away would."""

    def __init__(self, path: Path, outages: Outages) -> None:
        super().__init__(path)
        self.outages = outages

    async def load(self, request: LoadRequest) -> Any:
        if self.outages.store:
            raise StoreError("the database is unreachable (injected outage)")
        return await super().load(request)

    async def commit(self, change: Commit) -> CommitResult:
        if self.outages.store:
            raise StoreError("the database is unreachable (injected outage)")
        return await super().commit(change)


def _engine(
    path: Path, outages: Outages, seed: int, clock: Callable[[], datetime]
) -> ObservationalMemory:
    rng = random.Random(seed)

    def observer_fault(n: int) -> Fault | None:
        if outages.observer:
            return "error"
        return rng.choice(RANDOM_FAULTS) if outages.noise else None

    def reflector_fault(n: int) -> Fault | None:
        if outages.reflector:
            return "error"
        return rng.choice(RANDOM_FAULTS) if outages.noise else None

    return ObservationalMemory(
        FlakyStore(path, outages),
        {
            "observation": {
                "model": scripted_observer(words=12, fault=observer_fault),
                "messageTokens": MESSAGE_TOKENS,
            },
            "reflection": {
                "model": scripted_reflector(fault=reflector_fault),
                "observationTokens": OBSERVATION_TOKENS,
            },
        },
        sync_timeout=5.0,
        background_timeout=5.0,
        clock=clock,
    )


def _hostile(rng: random.Random, factory: MessageFactory, resource_id: str) -> Any:
    """A call a careless or hostile caller makes; each must be refused with an ObsmemError
    before anything is written (thread ``ok`` stays empty)."""

    def deep_args() -> list[Message]:
        nested: Any = []
        for _ in range(400):
            nested = [nested]
        call = ToolCallPart(tool_call_id="c-deep", tool_name="lookup", args={"x": nested})
        return [Message(role="assistant", parts=(call,))]

    def user() -> list[Message]:
        return [factory.user(50, image=False)]

    calls: list[tuple[Any, Any]] = [
        ("", user),
        (1234, user),
        ("t" * 5_000, user),
        (None, user),
        ("ok", deep_args),
        ("ok", lambda: ["not a message"]),
        ("ok", lambda: [Message(role="developer", parts=(TextPart(text="x"),))]),  # type: ignore[arg-type]
        ("ok", lambda: [Message(role="user", parts=(TextPart(text="x"),), metadata={"k": {1}})]),
    ]
    thread_id, messages = rng.choice(calls)

    async def call(om: ObservationalMemory) -> None:
        await om.prepare(thread_id, resource_id, messages())

    return call


@dataclass
class ThreadRun:
    thread_id: str
    resource_id: str
    actor: Actor
    checker: InvariantChecker
    actor_index: int
    unsent: list[Message] = field(default_factory=list[Message])
    """Input of a turn the store outage interrupted: sent again next round (ids make it
    idempotent)."""
    unrecorded: list[Message] = field(default_factory=list[Message])
    """A reply the store outage kept from being recorded: recorded before the next turn."""
    last: PreparedContext | None = None
    store_errors: int = 0
    odd: dict[str, str] = field(default_factory=dict[str, str])


async def _turn(om: ObservationalMemory, run: ThreadRun, plan: TurnPlan, outages: Outages) -> None:
    """One turn as a server runs it; a turn the store outage broke is finished next round."""
    try:
        if run.unrecorded:
            await om.record(run.thread_id, run.resource_id, run.unrecorded)
            run.unrecorded = []
        resend = bool(run.unsent)
        inputs = run.unsent or run.actor.inputs(plan)
        if not resend and plan.user_tokens % 5 == 0 and inputs[0].role == "user":
            # Text no encoder likes: a NUL byte and a lone surrogate, stored losslessly.
            odd = replace(inputs[0], parts=(TextPart(text=f"{inputs[0].text} a\x00b \ud800 end"),))
            inputs = [odd, *inputs[1:]]
            run.odd[odd.id] = odd.text
        if not resend:
            run.checker.sent_messages(run.actor_index, inputs)
        run.unsent = inputs
        prepared = await om.prepare(run.thread_id, run.resource_id, inputs)
        run.unsent = []
        run.last = prepared
        outputs = run.actor.outputs(plan)
        run.checker.sent_messages(run.actor_index, outputs)
        run.unrecorded = outputs
        await om.record(run.thread_id, run.resource_id, outputs)
        run.unrecorded = []
    except StoreError:
        run.store_errors += 1
        if not outages.store:
            raise


async def test_soak(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(20261203)
    outages = Outages()
    path = tmp_path / "soak.db"
    factory = MessageFactory(seed=7)  # its clock moves minutes a message: back-offs pass
    engines = [_engine(path, outages, seed, factory.clock) for seed in (1, 2)]
    failures: Counter[str] = Counter()

    def on_event(event: Event) -> None:
        if event.type.endswith("-failed"):
            error = getattr(event, "error", "")
            kind = "store" if "injected outage" in error else getattr(event, "operation_type", "")
            failures[kind] += 1
        elif event.type == "data-om-buffering-start" and outages.store_next:
            outages.store, outages.store_next = True, False

    for om in engines:
        om.subscribe(on_event)
    runs: list[ThreadRun] = []
    for i in range(THREADS):
        key = f"thread:t{i}"
        checker = InvariantChecker(store=engines[0].store, key=key, thread_id=f"t{i}")
        runs.append(ThreadRun(f"t{i}", f"u{i}", Actor(factory), checker, checker.actor()))
    # A few threads existed before memory was on: their first turn brings a long history.
    for run in runs[:5]:
        history = [factory.user(150, image=False) for _ in range(30)]
        await engines[0].prepare(run.thread_id, run.resource_id, history)
        run.checker.sent_messages(run.actor_index, history)

    schedule = {
        "observer": range(math.ceil(ROUNDS * 0.15), math.ceil(ROUNDS * 0.35)),
        "reflector": range(math.ceil(ROUNDS * 0.3), math.ceil(ROUNDS * 0.5)),
        "store": range(math.ceil(ROUNDS * 0.55), math.ceil(ROUNDS * 0.65) + 1),
        "noise": range(math.ceil(ROUNDS * 0.75)),
    }
    hostile = refused = 0
    sizes: list[tuple[int, ...]] = []
    traced: list[int] = []
    tracemalloc.start()
    try:
        for round_ in range(ROUNDS):
            for name, rounds in schedule.items():
                if name == "store":
                    outages.store_next = round_ == rounds.start
                    outages.store = round_ in rounds and round_ != rounds.start
                else:
                    setattr(outages, name, round_ in rounds)
            plans = [
                TurnPlan(
                    user_tokens=rng.randint(40, 300),
                    image=False,
                    reply=rng.choice(["text", "text", "text", "tools", "pending"]),
                    reply_tokens=rng.randint(40, 300),
                    after="none",
                )
                for _ in runs
            ]
            await asyncio.gather(
                *(
                    _turn(rng.choice(engines), r, p, outages)
                    for r, p in zip(runs, plans, strict=True)
                )
            )
            for _ in range(3):
                run = rng.choice(runs)
                call = _hostile(rng, factory, run.resource_id)
                before = None if outages.store else await engines[0].store.list_messages("ok")
                hostile += 1
                with pytest.raises(ObsmemError):
                    await call(rng.choice(engines))
                refused += 1
                if before is not None:
                    assert await engines[0].store.list_messages("ok") == before
            if not outages.store:
                settled = [r for r in runs if not (r.unsent or r.unrecorded)]
                for run in rng.sample(settled, min(5, len(settled))):
                    await run.checker.check_record()
                    await run.checker.check_no_message_lost()
            if round_ in (ROUNDS // 2, ROUNDS - 1):
                await asyncio.gather(*(om.settle() for om in engines))
                gc.collect()
                traced.append(tracemalloc.get_traced_memory()[0])
                sizes.append(tuple(_map_sizes(om) for om in engines))  # type: ignore[arg-type]
    finally:
        tracemalloc.stop()
    assert hostile == refused
    # Every outage was felt (and reported), and yet everything below healed.
    print(failures)
    assert failures["observation"], failures
    assert failures["store"], failures
    assert failures["reflection"], failures
    assert sum(r.store_errors for r in runs) >= THREADS, "the store outage broke turns"
    crashed = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not crashed, crashed[:3]

    # Recovery: no outage left; one more turn each, then everything has caught up.
    for name in ("observer", "reflector", "store", "noise", "store_next"):
        setattr(outages, name, False)
    for _ in range(3):
        await asyncio.gather(
            *(
                _turn(
                    engines[i % 2],
                    r,
                    TurnPlan(
                        user_tokens=60, image=False, reply="text", reply_tokens=60, after="none"
                    ),
                    outages,
                )
                for i, r in enumerate(runs)
            )
        )
        await asyncio.gather(*(om.settle() for om in engines))
    om = engines[0]
    for run in runs:
        status = await om.status(run.thread_id, run.resource_id)
        assert status.message_tokens <= BLOCK_AFTER, (run.thread_id, status.message_tokens)
        assert await om.observations(run.thread_id, run.resource_id), run.thread_id
        assert run.last is not None
        assert not any(m.id == "obsmem-left-out" for m in run.last.messages), run.thread_id
        assert run.checker.sent[run.actor_index][-1] in {
            m.id for m in raw_messages(run.last.messages)
        } | {m.id for m in await om.store.list_messages(run.thread_id)}
        await run.checker.check_record()
        await run.checker.check_log_coverage(exact=False)
        stored = await run.checker.check_no_message_lost()
        texts = {m.id: m.text for m in stored}
        assert all(texts[i] == text for i, text in run.odd.items()), run.thread_id
        assert not run.unsent
        assert len(stored) > ROUNDS
    for engine in engines:
        assert not engine._tasks
        # An engine may still hold the back-off of a failure another engine has since healed,
        # or of a Reflector answer rejected in the last rounds: every back-off ends within its
        # bound (jitter included), so the next turn after it calls the model again.
        now = engine._deps.steady() + BACKOFF_LONGEST_SECONDS
        for state in engine._logs.values():
            assert may_retry(state.observer, now), state
            assert may_retry(state.reflector, now), state

    # Flat: the internal maps stay bounded by the threads, and memory stops growing.
    for mid, end in zip(sizes[0], sizes[1], strict=True):
        assert end[0] == mid[0] == 0, "background tasks left after settle"
        assert all(n <= THREADS for n in mid + end), (mid, end)
    growth = traced[1] - traced[0]
    assert growth < 4_000_000, f"memory grew {growth} bytes over the second half"
    for engine in engines:
        await engine.aclose()


def _map_sizes(om: ObservationalMemory) -> tuple[int, int, int]:
    cached = om._deps.cached
    return (len(om._tasks), len(om._logs), len(cached._messages))
