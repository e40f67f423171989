"""Property tests of the engine: SPEC §4 invariants over generated conversations and faults.

Each example drives an engine (or two engines on one SQLite file) through a random conversation
(5-40 turns, messages of 20-1,500 tokens, tool-call pairs, images) with small thresholds, so
observation, buffering, activation and reflection happen often, while the scripted Observer and
Reflector fail at random calls (errors, 503s, hangs, empty, degenerate or untagged answers).
After every step the store is checked for:

1. no message lost: every message given to prepare/record is stored once, in order;
2. none both raw and observed, none neither: the raw context is exactly the stored messages after
   the cursor, and the log mentions observed messages once and raw ones never;
3. the cursor never moves backwards (also across generations);
4. no chunk stranded: chunks continue right after the cursor, retired generations are not heads;
5. memory never emptied by a failure: a log never becomes empty, a failed reflection leaves it;
6. tool calls and results never split between observed and raw.

Hypothesis keeps no example database here (``database=None``); a failure prints the blob to
reproduce it with ``@reproduce_failure``. ``OBSMEM_PROPERTY_EXAMPLES`` sets the number of examples
per property (25 by default: about 30-50 s for the file on 2 cores).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from obsmem.engine import ObservationalMemory, PreparedContext
from obsmem.errors import StoreError
from obsmem.messages import Message
from obsmem.stores import InMemoryStore, SQLiteStore, Store
from obsmem.testing import Fault, scripted_observer, scripted_reflector
from obsmem.testing.store_conformance.kit import observe, open_record

from .helpers import engine
from .property_helpers import (
    Actor,
    InvariantChecker,
    MessageFactory,
    ReflectionWatch,
    TurnPlan,
    fault_fn,
    fault_scripts,
    run,
    turn_plan,
    turn_plans,
)

THREAD, RESOURCE, KEY = "t1", "u1", "thread:t1"
TIMEOUT = 0.2  # hanging model calls end this fast

Round = tuple[TurnPlan, TurnPlan, bool, bool]
"""Engine A's turn, engine B's turn, whether A's starts first, whether both settle after."""

PROPERTY_SETTINGS = settings(
    # More examples for a deeper search: OBSMEM_PROPERTY_EXAMPLES=500 pytest tests/engine/...
    max_examples=int(os.environ.get("OBSMEM_PROPERTY_EXAMPLES", "25")),
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def om_options(
    *,
    words: int,
    message_tokens: int,
    buffer_tokens: float | bool,
    reflection_tokens: int,
    observer_faults: list[Fault | None],
    reflector_faults: list[Fault | None],
) -> dict[str, Any]:
    return {
        "observation": {
            "model": scripted_observer(words=words, fault=fault_fn(observer_faults)),
            "messageTokens": message_tokens,
            "bufferTokens": buffer_tokens,
        },
        "reflection": {
            "model": scripted_reflector(fault=fault_fn(reflector_faults)),
            "observationTokens": reflection_tokens,
        },
    }


common = {
    "observer_faults": fault_scripts(),
    "reflector_faults": fault_scripts(12),
    "message_tokens": st.integers(800, 3_000),
    "reflection_tokens": st.integers(1_500, 6_000),
    "words": st.sampled_from([12, 40, 80]),  # longer log lines reach reflection sooner
    "seed": st.integers(0, 2**16),
}


def new_engine(
    store: Store, options: dict[str, Any], factory: MessageFactory, checker: InvariantChecker
) -> ObservationalMemory:
    watch = ReflectionWatch(store, KEY)
    checker.watches.append(watch)
    om = engine(
        store,
        options,
        hooks=watch.hooks(),
        clock=factory.clock,
        sync_timeout=TIMEOUT,
        background_timeout=TIMEOUT,
    )
    om.subscribe(checker.on_event)
    return om


async def check_step(checker: InvariantChecker, *, concurrent: bool = False) -> None:
    await checker.check_no_message_lost()
    record = await checker.check_record()
    checker.check_failed_reflections(
        current_log=None if concurrent else record.observations, concurrent=concurrent
    )


async def check_final(om: ObservationalMemory, checker: InvariantChecker) -> None:
    """After all background work: one more step with no input, then every check, exactly.
    A step that started background work (buffering, catch-up) is taken again once it is done:
    that work moves the head on after the step read it."""
    for _ in range(10):
        prepared = await om.prepare(THREAD, RESOURCE, [])
        if not om._tasks:  # pyright: ignore[reportPrivateUsage]
            break
        await om.settle()
    await checker.check_context(prepared, concurrent=False)
    await check_step(checker)
    history = await checker.store.history(KEY)
    await checker.check_log_coverage(exact=len(history) == 1)
    # What the example exercised (``pytest --hypothesis-show-statistics``).
    event(f"generations: {min(len(history), 3)}{'+' if len(history) > 3 else ''}")
    for kind in sorted(
        {
            f"{e.type.removeprefix('data-om-')} ({getattr(e, 'operation_type', '')})"
            for e in checker.events
        }
    ):
        if not kind.startswith("status"):
            event(kind)


async def single_engine_scenario(
    store: Store, plans: list[TurnPlan], options: dict[str, Any], seed: int
) -> None:
    factory = MessageFactory(seed)
    checker = InvariantChecker(store, KEY, THREAD)
    om = new_engine(store, options, factory, checker)
    actor, me = Actor(factory), checker.actor()
    try:
        for plan in plans:
            inputs = actor.inputs(plan)
            checker.sent_messages(me, inputs)
            prepared = await om.prepare(THREAD, RESOURCE, inputs)
            if any(name.startswith("catch-up:") for name in om._tasks):
                # A catch-up observes in the background: the head moves on after the context
                # was made. Checked as such, then let it finish so the rest stays exact.
                await checker.check_context(prepared, concurrent=True)
                await om.settle()
            else:
                await checker.check_context(prepared, concurrent=False)
            await check_step(checker)
            await checker.check_log_coverage(exact=False)
            outputs = actor.outputs(plan)
            checker.sent_messages(me, outputs)
            await om.record(THREAD, RESOURCE, outputs)
            await check_step(checker)
            if plan.after == "settle":
                await om.settle()
            elif plan.after == "observe":
                await om.observe(THREAD, RESOURCE)
            elif plan.after == "reflect":
                await om.reflect(THREAD, RESOURCE)
            await check_step(checker)
        await om.settle()
        await check_final(om, checker)
        await om.settle()
    finally:
        await om.aclose()
        await store.aclose()


@PROPERTY_SETTINGS
@given(
    plans=turn_plans(after=["none", "none", "observe", "reflect"]),
    sqlite=st.booleans(),
    **common,
)
def test_invariants_with_synchronous_observation(
    plans: list[TurnPlan],
    sqlite: bool,
    observer_faults: list[Fault | None],
    reflector_faults: list[Fault | None],
    message_tokens: int,
    reflection_tokens: int,
    words: int,
    seed: int,
) -> None:
    """Buffering off: observation and reflection happen inside prepare (or on request)."""
    options = om_options(
        words=words,
        message_tokens=message_tokens,
        buffer_tokens=False,
        reflection_tokens=reflection_tokens,
        observer_faults=observer_faults,
        reflector_faults=reflector_faults,
    )
    with tempfile.TemporaryDirectory() as tmp:
        store: Store = SQLiteStore(Path(tmp) / "om.db") if sqlite else InMemoryStore()
        run(single_engine_scenario(store, plans, options, seed))


@PROPERTY_SETTINGS
@given(
    plans=turn_plans(after=["none", "none", "settle", "settle", "observe", "reflect"]),
    sqlite=st.booleans(),
    **common,
)
def test_invariants_with_background_buffering(
    plans: list[TurnPlan],
    sqlite: bool,
    observer_faults: list[Fault | None],
    reflector_faults: list[Fault | None],
    message_tokens: int,
    reflection_tokens: int,
    words: int,
    seed: int,
) -> None:
    """Buffering on: chunks and background reflections interleave with the turns."""
    options = om_options(
        words=words,
        message_tokens=message_tokens,
        buffer_tokens=0.2,
        reflection_tokens=reflection_tokens,
        observer_faults=observer_faults,
        reflector_faults=reflector_faults,
    )
    with tempfile.TemporaryDirectory() as tmp:
        store: Store = SQLiteStore(Path(tmp) / "om.db") if sqlite else InMemoryStore()
        run(single_engine_scenario(store, plans, options, seed))


async def two_engine_scenario(
    path: Path,
    rounds: list[Round],
    options: tuple[dict[str, Any], dict[str, Any]],
    seed: int,
) -> None:
    factory = MessageFactory(seed)
    stores = (SQLiteStore(path), SQLiteStore(path))
    checker = InvariantChecker(stores[0], KEY, THREAD)
    oms = [new_engine(s, o, factory, checker) for s, o in zip(stores, options, strict=True)]
    actors = [(Actor(factory), checker.actor()) for _ in oms]
    # Open the file from one store first: two stores creating a new file at once can fail (see
    # test_opening_a_new_sqlite_file_waits_for_a_writer); the engines run concurrently below.
    await stores[0].create_thread(THREAD, RESOURCE)
    await stores[1].create_thread(THREAD, RESOURCE)

    async def turn(i: int, plan: TurnPlan) -> PreparedContext:
        actor, me = actors[i]
        inputs = actor.inputs(plan)
        checker.sent_messages(me, inputs)
        prepared = await oms[i].prepare(THREAD, RESOURCE, inputs)
        outputs = actor.outputs(plan)
        checker.sent_messages(me, outputs)
        await oms[i].record(THREAD, RESOURCE, outputs)
        return prepared

    try:
        for plan_a, plan_b, a_first, settle in rounds:
            order = [(0, plan_a), (1, plan_b)] if a_first else [(1, plan_b), (0, plan_a)]
            for prepared in await asyncio.gather(*(turn(i, p) for i, p in order)):
                await checker.check_context(prepared, concurrent=True)
            if settle:
                await asyncio.gather(*(om.settle() for om in oms))
            await check_step(checker, concurrent=True)
        await asyncio.gather(*(om.settle() for om in oms))
        await check_step(checker, concurrent=True)
        await check_final(oms[random.Random(seed).randrange(2)], checker)
    finally:
        for om in oms:
            await om.aclose()
        for store in stores:
            await store.aclose()


@PROPERTY_SETTINGS
@given(
    rounds=st.lists(
        st.tuples(turn_plan(), turn_plan(), st.booleans(), st.booleans()), min_size=3, max_size=20
    ),
    buffer_tokens=st.sampled_from([0.2, False]),
    faults_b=st.tuples(fault_scripts(), fault_scripts(12)),
    **common,
)
def test_two_engines_on_one_sqlite_file(
    rounds: list[Round],
    buffer_tokens: float | bool,
    faults_b: tuple[list[Fault | None], list[Fault | None]],
    observer_faults: list[Fault | None],
    reflector_faults: list[Fault | None],
    message_tokens: int,
    reflection_tokens: int,
    words: int,
    seed: int,
) -> None:
    """Two engines, each with its own SQLiteStore on one file, drive one thread concurrently:
    nothing is lost, nothing observed twice, nothing left neither raw nor observed."""
    shared = functools.partial(
        om_options,
        words=words,
        message_tokens=message_tokens,
        buffer_tokens=buffer_tokens,
        reflection_tokens=reflection_tokens,
    )
    options = (
        shared(observer_faults=observer_faults, reflector_faults=reflector_faults),
        shared(observer_faults=faults_b[0], reflector_faults=faults_b[1]),
    )
    with tempfile.TemporaryDirectory() as tmp:
        run(two_engine_scenario(Path(tmp) / "om.db", rounds, options, seed))


def test_opening_a_new_sqlite_file_waits_for_a_writer(tmp_path: Path) -> None:
    """Found by the two-engine property: two stores creating one new file at once. Opening waits
    for a writer to finish (busy_timeout) instead of failing with a raw sqlite3 error."""
    path = tmp_path / "om.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE busy (x)")
    release = threading.Timer(0.2, lambda: writer.execute("ROLLBACK"))
    release.start()
    store = SQLiteStore(path, busy_timeout_ms=10_000)
    try:
        thread = run(store.create_thread(THREAD, RESOURCE))
        assert thread.id == THREAD
    finally:
        release.join()
        writer.close()
        run(store.aclose())


def test_a_writer_that_never_finishes_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE busy (x)")
    store = SQLiteStore(path, busy_timeout_ms=100)
    try:
        with pytest.raises(StoreError, match="locked"):
            run(store.create_thread(THREAD, RESOURCE))
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        run(store.aclose())


@pytest.mark.parametrize(
    ("log", "cursor", "stored", "problem"),
    [
        ("* 🔴 (09:00) User said: m1 hi\n* 🟡 (09:01) Assistant said: m2 ok", 1, 2, "is raw and"),
        ("* 🟡 (09:01) Assistant said: m2 ok", 1, 2, "neither raw nor in the log"),
        ("* 🔴 (09:00) User said: m1 hi\n* 🔴 (09:00) User said: m1 hi", 1, 2, "observed twice"),
        ("* 🔴 (09:00) User said: m1 hi", 1, 1, "stored != sent"),
    ],
)
def test_the_checks_catch_broken_states(log: str, cursor: int, stored: int, problem: str) -> None:
    """The checker is real: each broken state (a raw message in the log, an observed message
    missing from it, a message observed twice, a lost message) fails its check."""

    async def scenario() -> None:
        store = InMemoryStore()
        checker = InvariantChecker(store, KEY, THREAD)
        messages = [Message.user("m1 hi"), Message.assistant("m2 ok")]
        checker.sent_messages(checker.actor(), messages)
        await store.create_thread(THREAD, RESOURCE)
        await store.append_messages(THREAD, messages[:stored])
        record = await open_record(store, THREAD, RESOURCE)
        await observe(
            store,
            record,
            observations=log,
            observation_tokens=10,
            cursor={THREAD: cursor},
        )

        async def check() -> None:
            await checker.check_no_message_lost()
            await checker.check_log_coverage(exact=True)

        with pytest.raises(AssertionError, match=problem):
            await check()

    run(scenario())
