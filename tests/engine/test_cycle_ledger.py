"""The cycle ledger as a user reads it: ``Memory.cycles`` after real (scripted) memory work."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from obsmem import Memory, Message
from obsmem.records import CycleRecord
from obsmem.snapshot import Snapshot
from obsmem.stores import (
    Commit,
    InMemoryStore,
    LoadRequest,
    SetBufferedReflection,
    SQLiteStore,
    Store,
)
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector

from .helpers import Conversation, Recorder
from .test_round_trips import CountingStore

REF = {"resource": "u1", "thread": "t1"}


class _Both(asyncio.Event):
    """Set once ``n`` waiters arrived: each Observer call waits for the others."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    async def wait(self) -> Any:
        self.n -= 1
        if self.n <= 0:
            self.set()
        return await super().wait()


def _options(**observation: Any) -> dict[str, Any]:
    return {
        "observation": {"model": scripted_observer(), "messageTokens": 2_000, **observation},
        "reflection": {"model": scripted_reflector(), "observationTokens": 1_000},
    }


async def _talk(memory: Memory, conv: Conversation, turns: int, tokens: int = 150) -> None:
    for _ in range(turns):
        await memory.context(REF, [conv.user(tokens)], actor_model=None)
        await memory.save(REF, [conv.assistant(tokens)], actor_model=None)
        await memory.settle()


def _seqs(row: CycleRecord) -> list[int]:
    return [s for r in row.ranges for s in range(r.first_seq, r.last_seq + 1)]


async def test_a_replay_shows_each_cycle_with_its_ranges_generation_and_tokens(
    store: Store,
) -> None:
    conv = Conversation()
    memory = Memory(store, observational_memory=_options(), clock=conv.clock)
    events = Recorder()
    assert memory.om is not None
    memory.om.subscribe(events)
    await _talk(memory, conv, 40)
    assert await memory.compact(REF, keep_tokens=0)  # and a synchronous observation
    assert events.of("data-om-activation")
    history = await store.history("thread:t1")
    assert len(history) >= 2, "the replay reflected at least once"

    rows = await memory.cycles(REF, limit=1000)
    assert rows == sorted(rows, key=lambda c: c.started_at, reverse=True)
    failed = [c for c in rows if c.outcome != "committed" or c.error is not None]
    assert not failed, failed
    kinds = {c.kind for c in rows}
    assert {"buffering", "activation", "observation"} <= kinds
    assert kinds <= {"buffering", "activation", "observation", "reflection"}

    # Every background chunk: the messages its event reported, tokens from the Observer.
    buffered = {c.cycle_id: c for c in rows if c.operation == "buffered-observation"}
    ends = events.of("data-om-buffering-end")
    chunk_ends = [e for e in ends if e.operation_type == "observation"]
    assert set(buffered) == {e.cycle_id for e in chunk_ends}
    for row in buffered.values():
        assert row.kind == "buffering"
        assert row.thread_ids == ("t1",)
        assert row.model == "scripted-observer"
        assert row.input_tokens
        assert row.output_tokens
        assert row.duration_ms >= 0
        assert row.generation is not None
        assert len(row.ranges) == 1
    # Chunks cover the conversation without gaps or overlap, in order.
    covered = [
        s for row in sorted(buffered.values(), key=lambda c: c.started_at) for s in _seqs(row)
    ]
    assert covered == list(range(covered[0], covered[0] + len(covered)))

    # Each activation: the ranges of the chunks it moved into the log, as its events said.
    activations = [c for c in rows if c.operation == "chunk-activation"]
    assert activations
    activated = sum(
        e.messages_activated
        for e in events.of("data-om-activation")
        if e.operation_type == "observation"
    )
    assert sum(len(_seqs(c)) for c in activations) == activated
    assert all(c.input_tokens is None and c.model is None for c in activations)

    # The synchronous observation: the cycle its events name, covering what it observed.
    [sync] = [c for c in rows if c.kind == "observation"]
    [start] = [
        e for e in events.of("data-om-observation-start") if e.operation_type == "observation"
    ]
    assert sync.cycle_id == start.cycle_id
    head = await store.get_record("thread:t1")
    assert head is not None
    assert sync.ranges[-1].last_seq == head.cursor["t1"]
    assert sync.generation == head.generation

    # Reflections: the one that started each later generation (synchronous, or a buffered one
    # activated), and the buffered ones with the generation they were made in.
    starting = [c for c in rows if c.kind in ("reflection", "activation") and c.ranges == ()]
    assert sorted(c.generation for c in starting if c.generation is not None) == [
        r.generation for r in reversed(history) if r.generation > 0
    ]
    for row in (c for c in rows if c.operation == "buffered-reflection"):
        assert row.model == "scripted-reflector"
        assert row.input_tokens

    # Filters and pages.
    assert await memory.cycles(REF, kind="activation", limit=1000) == [
        c for c in rows if c.kind == "activation"
    ]
    assert await memory.cycles(REF, outcome="failed") == []
    page = await memory.cycles(REF, limit=3)
    assert page == rows[:3]
    assert await memory.cycles(REF, limit=3, before=page[-1].started_at) == rows[3:6]
    await memory.aclose()


async def test_a_failing_observer_leaves_a_failed_row_with_its_error(tmp_path: Path) -> None:
    conv = Conversation()
    store = SQLiteStore(tmp_path / "m.db")
    options = {
        "observation": {
            "model": scripted_observer(fault=lambda n: "error"),
            "messageTokens": 2_000,
            "bufferTokens": False,
        },
        "reflection": {"model": scripted_reflector()},
    }
    memory = Memory(store, observational_memory=options, clock=conv.clock)
    await _talk(memory, conv, 12)
    rows = await memory.cycles(REF)
    failed = [c for c in rows if c.outcome == "failed"]
    assert failed, rows
    row = failed[0]
    assert row.kind == "observation"
    assert row.generation is None
    assert row.ranges
    assert row.ranges[0].thread_id == "t1"
    status = await memory.status(REF)
    [state] = status.failures
    assert row.error == state.error  # the same words the failure state keeps
    assert "scripted model failure" in (row.error or "")
    assert await memory.cycles(REF, outcome="failed") == failed
    await memory.aclose()
    # Another process reads it from the file.
    other = SQLiteStore(tmp_path / "m.db")
    assert (await other.list_cycles("thread:t1", outcomes=["failed"]))[0] == row
    await other.aclose()


async def test_two_engines_racing_leave_one_committed_and_one_redundant_row(
    tmp_path: Path,
) -> None:
    gate = _Both(2)
    conv = Conversation()
    path = tmp_path / "shared.db"
    memories = [
        Memory(
            SQLiteStore(path),
            observational_memory={
                "observation": {
                    "model": scripted_observer(gate=gate),
                    "messageTokens": 2_000,
                    "bufferTokens": False,
                },
                "reflection": {"model": scripted_reflector()},
            },
            clock=conv.clock,
        )
        for _ in range(2)
    ]
    first = memories[0]
    for _ in range(4):
        await first.save(REF, [conv.user(150), conv.assistant(150)], actor_model=None)
    # Both observe the same messages; neither Observer answers until both were asked.
    await asyncio.gather(*(m.compact(REF) for m in memories))
    rows = await first.cycles(REF)
    observed = [c for c in rows if c.kind == "observation"]
    assert sorted(c.outcome for c in observed) == ["committed", "redundant"]
    committed, redundant = sorted(observed, key=lambda c: c.outcome)
    assert redundant.ranges == committed.ranges
    assert redundant.generation is None
    assert committed.generation == 0
    assert redundant.input_tokens  # its Observer call was paid for
    for memory in memories:
        await memory.aclose()


class _LateLoad(CountingStore):
    """Runs ``meanwhile`` once, between reading the snapshot of the next load that stores
    messages and handing it back: the snapshot comes back older than what happened meanwhile
    (a busy PostgreSQL answering a turn's load after a buffering cycle's commit)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.meanwhile: Callable[[], Awaitable[object]] | None = None

    async def load(self, request: LoadRequest) -> Snapshot:
        snapshot = await self.inner.load(request)
        if request.append and self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return snapshot


@dataclass
class _HeldCycle:
    """A memory whose latest reply started a buffering cycle that waits at ``gate`` (its
    Observer does not answer before), and how many messages are stored."""

    memory: Memory
    late: _LateLoad
    gate: asyncio.Event
    calls: ModelCalls
    conv: Conversation
    stored: int

    async def cycle_ends(self) -> None:
        self.gate.set()
        await self.memory.settle()


async def _buffering_held(store: Store) -> _HeldCycle:
    gate, calls, conv, late = asyncio.Event(), ModelCalls(), Conversation(), _LateLoad(store)
    options = _options(model=scripted_observer(gate=gate, calls=calls))
    memory = Memory(late, observational_memory=options, clock=conv.clock)  # type: ignore[arg-type]
    stored = 0
    while not memory.background_work:  # until a reply starts a buffering cycle
        gate.set()
        await memory.context(REF, [conv.user(150)], actor_model=None)
        await memory.settle()
        gate.clear()
        await memory.save(REF, [conv.assistant(150)], actor_model=None)
        stored += 2
    assert memory.background_work == ("obs:thread:t1",)
    return _HeldCycle(memory, late, gate, calls, conv, stored)


async def test_a_buffering_cycle_ending_during_a_turns_load_is_not_done_again(
    store: Store,
) -> None:
    held = await _buffering_held(store)
    memory, conv = held.memory, held.conv
    # The next turn's load reads the thread before that cycle commits; by the time its
    # snapshot comes back, the cycle has committed its chunk and ended (what a busy PostgreSQL
    # did in CI): the snapshot shows the cycle's messages still unbuffered.
    held.late.meanwhile = held.cycle_ends
    await memory.save(REF, [conv.user(150), conv.assistant(150)], actor_model=None)
    assert held.late.meanwhile is None
    await memory.settle()

    rows = await memory.cycles(REF, limit=100)
    assert [c for c in rows if c.outcome != "committed"] == []
    chunks = [c for c in rows if c.operation == "buffered-observation"]
    assert held.calls.count == len(chunks)  # no Observer call for messages already buffered
    # Every message buffered once, the turn's own too.
    assert sorted(s for c in chunks for s in _seqs(c)) == list(range(1, held.stored + 3))
    await memory.aclose()


async def test_a_thread_deleted_while_a_late_load_comes_back_starts_no_buffering(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    held = await _buffering_held(store)
    memory, conv = held.memory, held.conv
    asked = held.calls.count

    async def cycle_ends_and_thread_goes() -> None:
        await held.cycle_ends()
        await memory.delete_thread(REF)

    held.late.meanwhile = cycle_ends_and_thread_goes
    await memory.save(REF, [conv.user(150), conv.assistant(150)], actor_model=None)
    await memory.settle()
    assert held.calls.count == asked + 1  # the held cycle's call, and none for a gone thread
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    await memory.aclose()


class _HeldReflections(_LateLoad):
    """Also holds each background reflection's commit back until ``release`` is set."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.release = asyncio.Event()

    async def commit(self, commit: Commit) -> Any:
        if isinstance(commit.change, SetBufferedReflection):
            await self.release.wait()
        return await self.inner.commit(commit)


async def test_a_background_reflection_ending_during_a_turns_load_is_not_done_again(
    store: Store,
) -> None:
    calls = ModelCalls()
    conv = Conversation()
    late = _HeldReflections(store)
    options = _options() | {
        "reflection": {"model": scripted_reflector(calls=calls), "observationTokens": 1_000}
    }
    memory = Memory(late, observational_memory=options, clock=conv.clock)  # type: ignore[arg-type]
    while "refl:thread:t1" not in memory.background_work:  # a turn starts a reflection
        await memory.save(REF, [conv.assistant(150)], actor_model=None)
        await memory.settle()
        await memory.context(REF, [conv.user(150)], actor_model=None)
    await memory.save(REF, [conv.assistant(150)], actor_model=None)

    async def reflection_ends() -> None:
        late.release.set()
        await memory.settle()

    # The next turn's load reads the log before the reflection commits, and comes back after
    # it ended: the snapshot shows no reflection buffered, and none running.
    late.meanwhile = reflection_ends
    await memory.context(REF, [conv.user(150)], actor_model=None)
    assert late.meanwhile is None
    await memory.settle()

    rows = await memory.cycles(REF, limit=1000)
    assert [c for c in rows if c.outcome != "committed"] == []
    reflections = [c for c in rows if c.operation == "buffered-reflection"]
    assert calls.count == len(reflections) == 1  # the Reflector was not asked again
    await memory.aclose()


async def test_retention_keeps_the_newest_cycles_per_log(store: Store) -> None:
    async def replay(store: Store, **options: Any) -> list[CycleRecord]:
        conv = Conversation(seed=7)
        memory = Memory(store, observational_memory=_options() | options, clock=conv.clock)
        await _talk(memory, conv, 25)
        rows = await memory.cycles(REF, limit=1000)
        await memory.aclose()
        return rows

    kept = await replay(store, cycle_retention=3)
    everything = await replay(InMemoryStore())
    assert len(everything) > 10

    def seen(rows: list[CycleRecord]) -> list[tuple[Any, ...]]:
        return [(c.operation, c.started_at, c.ranges, c.generation) for c in rows]

    assert seen(kept) == seen(everything[:3])


async def test_retention_zero_records_nothing(tmp_path: Path) -> None:
    conv = Conversation()
    memory = Memory(
        SQLiteStore(tmp_path / "m.db"),
        observational_memory=_options() | {"cycleRetention": 0},
        clock=conv.clock,
    )
    await _talk(memory, conv, 25)
    assert await memory.cycles(REF) == []
    await memory.aclose()


async def test_a_plain_turn_is_still_two_store_calls_and_a_cycle_one_commit(
    store: Store,
) -> None:
    counting = CountingStore(store)
    conv = Conversation()
    memory = Memory(counting, observational_memory=_options(), clock=conv.clock)  # type: ignore[arg-type]
    await memory.context(REF, [conv.user(50)], actor_model=None)
    await memory.save(REF, [conv.assistant(50)], actor_model=None)
    await memory.settle()
    assert sum(counting.take().values()) == 2
    while not await store.list_cycles("thread:t1"):
        await memory.context(REF, [conv.user(150)], actor_model=None)
        await memory.save(REF, [conv.assistant(150)], actor_model=None)
        turn = counting.take()
        assert sum(turn.values()) == 2, turn
        await memory.settle()
        cycle = counting.take()
    # The buffering cycle's row came with its commit: no store call of its own.
    assert cycle == {"commit": 1}, cycle
    await memory.aclose()


async def test_cycle_queries_name_the_fix(tmp_path: Path) -> None:
    memory = Memory(SQLiteStore(tmp_path / "m.db"), observational_memory=_options())
    with pytest.raises(Exception, match="unknown cycle kind 'observe'"):
        await memory.cycles(REF, kind="observe")
    await memory.aclose()


async def test_resource_scope_shows_each_thread_the_cycles_that_worked_on_it(
    store: Store,
) -> None:
    conv = Conversation()
    options = _options(bufferTokens=False) | {"scope": "resource"}
    memory = Memory(store, observational_memory=options, clock=conv.clock)
    refs = [{"resource": "u1", "thread": t} for t in ("ta", "tb")]
    for ref in refs:
        for _ in range(3):
            await memory.save(ref, [conv.user(150), conv.assistant(150)], actor_model=None)
    assert await memory.compact(refs[0], keep_tokens=0)
    [both] = await memory.cycles(refs[0], kind="observation")
    assert set(both.thread_ids) == {"ta", "tb"}  # one cycle observed both threads
    assert both.key == "resource:u1"
    assert {r.thread_id for r in both.ranges} == {"ta", "tb"}
    assert await memory.cycles(refs[1], kind="observation") == [both]
    await memory.save(refs[1], [conv.user(150), conv.assistant(150)], actor_model=None)
    assert await memory.compact(refs[1], keep_tokens=0)
    only_b = await memory.cycles(refs[1], kind="observation")
    assert len(only_b) == 2
    assert only_b[0].thread_ids == ("tb",)
    assert await memory.cycles(refs[0], kind="observation") == [both]
    await memory.aclose()


async def _observe_once(store: Store, **options: Any) -> tuple[Memory, CycleRecord, ModelCalls]:
    """Two messages, then a synchronous observation of them (the Observer's prompts recorded)."""
    calls = ModelCalls()
    conv = Conversation()
    memory = Memory(
        store,
        observational_memory={
            "observation": {"model": scripted_observer(calls=calls), "messageTokens": 2_000},
            "reflection": {"model": scripted_reflector(), "observationTokens": 1_000},
            **options,
        },
        clock=conv.clock,
    )
    await memory.save(
        REF,
        [Message.user("Please call me Ada from now on."), Message.assistant("Noted, Ada.")],
        actor_model=None,
    )
    assert await memory.compact(REF, keep_tokens=0)
    (row,) = await memory.cycles(REF, kind="observation")
    return memory, row, calls


async def test_an_observation_cycle_keeps_what_the_observer_was_shown_and_answered(
    store: Store,
) -> None:
    memory, row, calls = await _observe_once(store)
    (shown,) = await memory.cycle_detail(row.cycle_id)
    assert shown.role == "observer"
    assert shown.shown == calls.prompts[0]  # exactly the user message the Observer got
    assert "Please call me Ada from now on." in shown.shown
    assert shown.system  # its instructions
    head = await store.get_record("thread:t1")
    assert head is not None
    assert "call me Ada" in shown.answer
    assert "call me Ada" in head.observations
    await memory.aclose()


async def test_cycle_detail_off_keeps_the_ledger_row_but_no_detail(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    memory, row, calls = await _observe_once(store, cycleDetail=False)
    assert calls.count == 1  # the cycle ran and was recorded
    assert row.input_tokens
    assert await memory.cycle_detail(row.cycle_id) == []
    await memory.aclose()
