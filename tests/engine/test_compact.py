"""Compaction on demand (``ObservationalMemory.compact``, ``Memory.compact``): buffered chunks
activate and the rest is observed down to the retention floor, the current step kept raw."""

from __future__ import annotations

from obsmem.engine import ObservationalMemory
from obsmem.memory import Memory
from obsmem.stores import InMemoryStore, Store
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector

from .helpers import Conversation, Recorder, assert_no_gap_no_double, engine, raw_messages


def options(**observation: object) -> dict[str, object]:
    """Default thresholds (30,000 tokens): nothing is due at the sizes these tests use."""
    return {
        "observation": {"model": scripted_observer(), **observation},
        "reflection": {"model": scripted_reflector()},
    }


async def _talk(om: ObservationalMemory, conv: Conversation, turns: int, tokens: int) -> None:
    for _ in range(turns):
        await om.prepare("t1", "u1", [conv.user(tokens)])
        await om.record("t1", "u1", [conv.assistant(tokens)])


async def test_compact_observes_down_to_the_retention_floor(store: Store) -> None:
    om = engine(store, options(bufferTokens=False))  # no floor: everything is observed
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    await _talk(om, conv, 5, 300)
    assert await om.observations("t1", "u1") == ""
    assert await om.compact("t1", "u1") is True
    starts = events.of("data-om-observation-start")
    assert starts
    assert {e.trigger for e in starts} == {"manual"}
    assert "User said:" in await om.observations("t1", "u1")
    status = await om.status("t1", "u1")
    assert status.message_tokens == 0
    await assert_no_gap_no_double(store, "thread:t1", ["t1"])
    # Nothing left to observe: it cannot shrink the context any more.
    assert await om.compact("t1", "u1") is False
    await om.aclose()


async def test_the_floor_and_keep_tokens_stay_raw() -> None:
    om = engine(InMemoryStore(), options())  # buffering on: retention floor 6,000
    conv = Conversation()
    await _talk(om, conv, 10, 1_000)  # about 20,000 tokens, below the 30,000 threshold
    await om.settle()
    before = (await om.status("t1", "u1")).message_tokens
    assert await om.compact("t1", "u1") is True
    floor = om.options.observation.retention_floor
    assert floor is not None
    after = (await om.status("t1", "u1")).message_tokens
    assert after < before
    assert after <= floor + 1_500  # cut where no message is split
    assert await om.compact("t1", "u1", keep_tokens=2_000) is True
    assert (await om.status("t1", "u1")).message_tokens <= 2_000 + 1_500
    await om.aclose()


async def test_compaction_activates_buffered_chunks_first() -> None:
    calls = ModelCalls()
    om = engine(
        InMemoryStore(),
        options(model=scripted_observer(calls=calls), messageTokens=6_000, bufferTokens=1_000),
    )
    events = Recorder()
    om.subscribe(events)
    conv = Conversation()
    await _talk(om, conv, 6, 400)
    await om.settle()
    record = await om.store.get_record("thread:t1")
    assert record is not None
    assert record.chunks  # buffered in the background
    assert await om.compact("t1", "u1") is True
    assert events.of("data-om-activation")
    record = await om.store.get_record("thread:t1")
    assert record is not None
    assert not record.chunks
    await assert_no_gap_no_double(om.store, "thread:t1", ["t1"])
    await om.aclose()


async def test_the_current_step_stays_raw() -> None:
    om = engine(InMemoryStore(), options(bufferTokens=False))
    conv = Conversation()
    await _talk(om, conv, 4, 300)
    prepared = await om.prepare("t1", "u1", [conv.user(300)])
    [step] = prepared.stored_input
    assert await om.compact("t1", "u1", step_from=step.seq, trigger="overflow") is True
    again = await om.prepare("t1", "u1", [], step_from=step.seq)
    assert [m.id for m in raw_messages(again.messages)] == [step.id]
    # Only the step is left raw: nothing more to take.
    assert await om.compact("t1", "u1", keep_raw_from=step.seq) is False  # its former name
    await om.aclose()


async def test_memory_compact() -> None:
    mem = Memory(InMemoryStore(), observational_memory=options(bufferTokens=False))
    conv = Conversation()
    ref = {"resource": "u1", "thread": "t1"}
    for _ in range(3):
        await mem.context(ref, [conv.user(300)], actor_model=None)
        await mem.save(ref, [conv.assistant(300)], actor_model=None)
    assert await mem.compact(ref) is True
    assert await mem.compact(ref) is False
    await mem.aclose()
    off = Memory(InMemoryStore())
    await off.context(ref, [conv.user(300)], actor_model=None)
    assert await off.compact(ref) is False  # without observational memory nothing compacts
    await off.aclose()
