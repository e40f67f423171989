"""Taking a message back (``Memory.retract_last``, the Agents SDK's ``pop_item``): storage
keeps it, marked; the context and the Observer never see it again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from obsmem import Memory
from obsmem.messages import Message
from obsmem.meta_keys import META_RETRACTED
from obsmem.stores import SQLiteStore
from obsmem.testing import ModelCalls, scripted_observer, scripted_reflector

REF = {"resource": "r", "thread": "t"}


def _texts(messages: list[Message]) -> str:
    return "\n".join(p.text for m in messages for p in m.parts if hasattr(p, "text"))  # type: ignore[attr-defined]


async def test_a_retracted_message_leaves_the_context_and_is_never_observed(
    tmp_path: Path,
) -> None:
    calls = ModelCalls()
    memory = Memory(
        SQLiteStore(tmp_path / "m.db"),
        observational_memory={
            "observation": {
                "model": scripted_observer(calls=calls),
                "messageTokens": 200,
                "bufferTokens": False,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    try:
        await memory.context(REF, [Message.user("My cat is called Miso.")], actor_model=None)
        await memory.save(REF, [Message.assistant("Lovely name.")], actor_model=None)
        typo = Message.user("My dog is called Rex.")  # the user takes this back
        await memory.context(REF, [typo], actor_model=None)
        popped = await memory.retract_last(REF)
        assert popped is not None
        assert popped.id == typo.id

        context = await memory.context(
            REF, [Message.user("What pets do I have? " * 20)], actor_model=None
        )
        assert "Rex" not in _texts(context.messages)
        assert "Miso" in _texts(context.messages) or calls.count  # raw, or observed by now
        await memory.save(REF, [Message.assistant("A cat. " * 30)], actor_model=None)
        assert await memory.om.observe("t", "r")  # type: ignore[union-attr]
        assert calls.count
        assert all("Rex" not in prompt for prompt in calls.prompts)
        assert any("Miso" in prompt for prompt in calls.prompts)

        stored = await memory.messages("t")
        assert typo.id in [m.id for m in stored]  # storage keeps it
        thread = await memory.thread("t")
        assert thread is not None
        assert thread.metadata[META_RETRACTED] == {typo.id: True}
    finally:
        await memory.aclose()


async def test_retracting_walks_back_one_message_at_a_time(tmp_path: Path) -> None:
    for options in (False, {"observation": {"model": scripted_observer()}}):
        memory = Memory(SQLiteStore(tmp_path / f"{bool(options)}.db"), observational_memory=options)
        try:
            assert await memory.retract_last(REF) is None  # no thread yet
            first, second = Message.user("one"), Message.user("two")
            await memory.context(REF, [first, second], actor_model=None)
            taken = [await memory.retract_last(REF) for _ in range(3)]
            assert [m.id if m else None for m in taken] == [second.id, first.id, None]
            context = await memory.context(REF, [Message.user("three")], actor_model=None)
            assert _texts(context.messages).strip().endswith("three")
            assert "one" not in _texts(context.messages).split()
            assert len(await memory.messages("t")) == 3
        finally:
            await memory.aclose()


async def test_forgetting_a_thread_deletes_its_memory_and_hides_its_messages(
    tmp_path: Path,
) -> None:
    memory = Memory(
        SQLiteStore(tmp_path / "m.db"),
        observational_memory={
            "observation": {
                "model": scripted_observer(),
                "messageTokens": 200,
                "bufferTokens": 0.25,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    try:
        for i in range(6):
            await memory.context(
                REF, [Message.user(f"My locker code is 40{i}. " * 10)], actor_model=None
            )
            await memory.save(REF, [Message.assistant("Noted. " * 20)], actor_model=None)
        await memory.om.observe("t", "r")  # type: ignore[union-attr]
        assert "locker" in await memory.om.observations("t", "r")  # type: ignore[union-attr]

        await memory.forget_thread(REF)
        assert await memory.om.observations("t", "r") == ""  # type: ignore[union-attr]
        context = await memory.context(REF, [Message.user("What do you know?")], actor_model=None)
        assert "locker" not in _texts(context.messages)
        assert _texts(context.messages).strip().endswith("What do you know?")
        assert len(await memory.messages("t")) == 13  # storage keeps everything
        await memory.settle()
        assert "locker" not in await memory.om.observations("t", "r")  # type: ignore[union-attr]
    finally:
        await memory.aclose()


async def test_forgetting_is_refused_in_resource_scope(tmp_path: Path) -> None:
    import pytest

    from obsmem.errors import ConfigError

    memory = Memory(
        SQLiteStore(tmp_path / "m.db"),
        observational_memory={"scope": "resource", "observation": {"model": scripted_observer()}},
    )
    try:
        with pytest.raises(ConfigError, match="start a new thread"):
            await memory.forget_thread(REF)
    finally:
        await memory.aclose()


async def test_a_message_taken_back_while_buffering_reads_it_is_not_observed(
    tmp_path: Path,
) -> None:
    """The Agents SDK stores a turn and may pop it right away, while a buffering cycle started
    by the save is already reading it: that cycle is called off, and the message never reaches
    the log; the rest is buffered again later."""
    import asyncio

    gate = asyncio.Event()
    started = asyncio.Event()
    memory = Memory(
        SQLiteStore(tmp_path / "m.db"),
        observational_memory={
            "observation": {
                "model": scripted_observer(gate=gate, words=30),
                "messageTokens": 400,
                "bufferTokens": 0.25,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    memory.subscribe(
        lambda event: started.set() if event.type == "data-om-buffering-start" else None
    )
    try:
        popped = None
        for i in range(6):
            note = Message.user(f"note {i} " + "water the garden " * 8)
            await memory.context(REF, [note], actor_model=None)
            await memory.save(
                REF, [Message.assistant(f"SECRET{i} reply " + "zebra " * 10)], actor_model=None
            )
            om = memory.om
            assert om is not None
            if not om._running(f"obs:{om.key('t', 'r')}"):  # pyright: ignore[reportPrivateUsage]
                continue
            # The save started buffering; once it has read the window it waits at the gate.
            await asyncio.wait_for(started.wait(), 60)
            popped = await memory.retract_last(REF)
            break
        assert popped is not None
        secret = popped.parts[0].text.split()[0]  # type: ignore[union-attr]
        assert secret.startswith("SECRET")
        gate.set()
        await memory.settle()
        await memory.om.observe("t", "r")  # type: ignore[union-attr]
        log = await memory.om.observations("t", "r")  # type: ignore[union-attr]
        assert "garden" in log
        assert secret not in log
    finally:
        gate.set()
        await memory.aclose()


async def test_the_shown_tail_reads_newest_first_past_what_was_taken_back(
    tmp_path: Path,
) -> None:
    """``Memory.shown_tail``: the one pager of the newest messages skips messages taken back
    one by one and stops at a forgotten thread's start, across page boundaries."""
    memory = Memory(SQLiteStore(tmp_path / "m.db"))
    try:
        await memory.save(REF, [Message.user(f"old {n}") for n in range(3)], actor_model=None)
        await memory.forget_thread(REF)
        await memory.save(REF, [Message.user(f"new {n}") for n in range(6)], actor_model=None)
        assert (await memory.retract_last(REF)) is not None  # "new 5"
        tail = [_texts([m]) async for m in memory.shown_tail("t", page=2)]
        assert tail == ["new 4", "new 3", "new 2", "new 1", "new 0"]
        assert [m async for m in memory.shown_tail("nowhere")] == []
    finally:
        await memory.aclose()


async def test_two_concurrent_undos_without_memory_take_back_two_messages(
    tmp_path: Path,
) -> None:
    """Without observational memory each undo is a patch merged inside the store's
    transaction, one undo at a time per thread: neither is lost to the other's stale read."""
    memory = Memory(SQLiteStore(tmp_path / "m.db"))
    try:
        await memory.save(REF, [Message.user(f"m{n}") for n in range(4)], actor_model=None)
        first, second = await asyncio.gather(memory.retract_last(REF), memory.retract_last(REF))
        assert first is not None
        assert second is not None
        assert {_texts([first]), _texts([second])} == {"m3", "m2"}
        thread = await memory.thread("t")
        assert thread is not None
        assert set(thread.metadata[META_RETRACTED]) == {first.id, second.id}
        assert [_texts([m]) async for m in memory.shown_tail("t")] == ["m1", "m0"]
    finally:
        await memory.aclose()
