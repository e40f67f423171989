"""The step protocol the door owns (``integrations/door.py``): begin, send, finish, and on
overflow compact once and send again; the exchange that composes them; one rule for where the
current step starts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic_ai.exceptions import ModelHTTPError

from obsmem.errors import ConflictError
from obsmem.integrations.door import Door
from obsmem.memory import Memory, MemoryContext, ThreadRef
from obsmem.messages import Message
from obsmem.records import ThreadCopy
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector

REF = ThreadRef(thread="t1", resource="u1")


def _memory() -> Memory:
    return Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {"model": scripted_observer()},
            "reflection": {"model": scripted_reflector()},
        },
    )


def _overflow() -> ModelHTTPError:
    return ModelHTTPError(
        400,
        "small-model",
        body={
            "message": "This model's maximum context length is 2000 tokens. However, your "
            "messages resulted in 9000 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        },
    )


async def _history(door: Door, turns: int = 8) -> None:
    for turn in range(turns):
        facts = " ".join(f"fact{turn}-{i} about the garden" for i in range(40))
        await door.step([Message.user(facts)])
        await door.reply([Message.assistant("Noted.")])


def _sender(failures: list[Exception]) -> tuple[list[int], Callable[..., object]]:
    """A send that raises ``failures`` in turn, then answers; it records each context's size."""
    sizes: list[int] = []

    async def send(context: MemoryContext) -> str:
        sizes.append(len(context.messages))
        if failures:
            raise failures.pop(0)
        return "Noted."

    return sizes, send


async def test_the_exchange_compacts_once_after_an_overflow_and_sends_again() -> None:
    memory = _memory()
    door = Door(memory, REF)
    try:
        await _history(door)
        sizes, send = _sender([_overflow()])
        sent, answer = await door.exchange(lambda: door.step([Message.user("And now?")]), send)  # type: ignore[arg-type]
        assert answer == "Noted."
        assert len(sizes) == 2
        assert sizes[1] < sizes[0]  # sent again, smaller
        assert len(sent.messages) == sizes[1]
    finally:
        await memory.aclose()


async def test_the_exchange_sends_at_most_twice_and_never_retries_other_errors() -> None:
    memory = _memory()
    door = Door(memory, REF)
    try:
        await _history(door)
        sizes, send = _sender([_overflow(), _overflow()])
        with pytest.raises(ModelHTTPError):
            await door.exchange(lambda: door.step([]), send)  # type: ignore[arg-type]
        assert len(sizes) == 2
        sizes, send = _sender([ValueError("not an overflow")])
        with pytest.raises(ValueError, match="not an overflow"):
            await door.exchange(lambda: door.step([]), send)  # type: ignore[arg-type]
        assert len(sizes) == 1
    finally:
        await memory.aclose()


def test_the_sync_exchange_runs_the_overflow_phase_on_memorys_loop() -> None:
    memory = _memory()
    door = Door(memory, REF)
    try:
        door.run_sync(_history(door))
        sizes: list[int] = []

        def send(context: MemoryContext) -> str:
            sizes.append(len(context.messages))
            if len(sizes) == 1:
                raise _overflow()
            return "Noted."

        _, answer = door.exchange_sync(lambda: door.run_sync(door.step([])), send)
        assert answer == "Noted."
        assert sizes[1] < sizes[0]
    finally:
        memory.close()


async def test_a_step_stored_before_starts_where_the_door_says() -> None:
    """Both inputs given (a step stored before from seq ``step_from``, and new messages stored
    now): the step starts at the earlier, as the engine's rule says, so a compaction keeps all
    of it raw."""
    memory = Memory(InMemoryStore())
    door = Door(memory, REF)
    try:
        await door.step([Message.user("Look the weather up.")])
        await door.reply([Message.assistant("Looking.")])
        started = door.step_from
        assert started is not None
        await door.step([Message.assistant("It is sunny.")], step_from=started)
        assert door.step_from == started
    finally:
        await memory.aclose()


async def test_a_step_with_a_copy_of_the_thread_stores_nothing_when_the_copy_is_stale() -> None:
    """``door.step(new, expect=copy)``: the step's load checks the door's copy of the thread.
    A copy that is the thread stores as any step; once someone else wrote, the same copy is
    refused with a ConflictError and nothing is stored. Holding calls at the same time is a
    write before the check: refused, naming what to do instead."""
    memory = _memory()
    try:
        door = Door(memory, REF)
        first = await door.step([Message.user("hello")])
        copy = ThreadCopy(incarnation=first.incarnation, message_count=1)
        await door.step([Message.user("again")], expect=copy)
        await memory.save(REF, [Message.assistant("someone else's answer")], actor_model=None)
        copy = ThreadCopy(incarnation=first.incarnation, message_count=2)
        with pytest.raises(ConflictError, match="holds 3 messages, not 2"):
            await door.step([Message.user("late")], expect=copy)
        with pytest.raises(ValueError, match=r"memory\.hold_calls first"):
            await door.step([], waiting=["call-1"], expect=copy)
        thread = await memory.thread(REF.thread)
        assert thread is not None
        assert thread.message_count == 3
        assert "om:held_calls" not in thread.metadata
    finally:
        await memory.aclose()
