"""Memory from sync code: one loop of its own, background work carrying on between calls,
``close()`` and ``with``."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pydantic_ai.models.test import TestModel

from obsmem import Agent, Memory
from obsmem.messages import Message
from obsmem.stores import SQLiteStore
from obsmem.testing import scripted_observer, scripted_reflector


def _memory(path: Path) -> Memory:
    return Memory(
        SQLiteStore(path),
        observational_memory={
            "observation": {
                "model": scripted_observer(),
                "messageTokens": 200,
                "bufferTokens": 0.25,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )


def test_a_sync_script_keeps_background_buffering_between_calls(tmp_path: Path) -> None:
    """``generate_sync`` turns run on the memory's loop: buffering started by one turn finishes
    while the script carries on, its observations activate at the threshold, and leaving the
    ``with`` block waits for the rest and stops the loop thread."""
    before = set(threading.enumerate())
    events: list[str] = []
    with _memory(tmp_path / "m.db") as memory:
        memory.subscribe(lambda event: events.append(event.type))
        model = TestModel(custom_output_text="ok")
        agent = Agent(id="a", instructions="Be brief.", model=model, memory=memory)
        for i in range(8):
            reply = agent.generate_sync(
                f"Note {i}: " + "the garden needs water " * 8,
                memory={"resource": "r", "thread": "t"},
            )
            assert reply.text == "ok"
        log = memory.run_sync(memory.om.observations("t", "r"))  # type: ignore[union-attr]
    assert "data-om-buffering-end" in events
    assert "data-om-activation" in events
    assert "garden" in log
    assert set(threading.enumerate()) <= before  # the loop thread is gone

    with _memory(tmp_path / "m.db") as again:  # everything was stored before the close
        messages = again.run_sync(again.messages("t"))
    assert len(messages) == 16


async def test_the_sync_api_inside_a_running_loop_names_the_async_one(tmp_path: Path) -> None:
    memory = _memory(tmp_path / "m.db")
    with pytest.raises(RuntimeError, match=r"await memory.aclose\(\)"):
        memory.close()
    await memory.aclose()


async def test_closing_a_memory_on_its_own_loop_from_async_code(tmp_path: Path) -> None:
    """Work sent to the memory's own loop (``on_own_loop``, as a framework's short-lived loop
    does) keeps its background work there: ``memory.close()`` from async code is refused
    without breaking anything, and ``await memory.aclose()`` finishes the buffering still in
    flight on that loop and stops the thread."""
    import asyncio

    gate = asyncio.Event()
    memory = Memory(
        SQLiteStore(tmp_path / "m.db"),
        observational_memory={
            "observation": {
                "model": scripted_observer(gate=gate),
                "messageTokens": 200,
                "bufferTokens": 0.25,
            },
            "reflection": {"model": scripted_reflector()},
        },
    )
    events: list[str] = []
    memory.subscribe(lambda event: events.append(event.type))
    ref = {"resource": "r", "thread": "t"}
    for i in range(3):
        note = Message.user(f"Note {i}: " + "water the garden " * 10)
        await memory.on_own_loop(memory.context(ref, [note], actor_model=None))
        await memory.on_own_loop(memory.save(ref, [Message.assistant("Ok.")], actor_model=None))
    assert "data-om-buffering-start" in events
    assert "data-om-buffering-end" not in events  # held at the gate: in flight

    with pytest.raises(RuntimeError, match=r"await memory.aclose\(\)"):
        memory.close()

    async def open_gate() -> None:
        gate.set()

    await memory.on_own_loop(open_gate())
    await memory.aclose()
    assert "data-om-buffering-end" in events  # finished on its loop, not lost
    assert not memory._sync.running  # pyright: ignore[reportPrivateUsage]  # thread stopped


def test_a_sync_call_that_times_out_does_not_carry_on(tmp_path: Path) -> None:
    """A ``run_sync`` that gives up (timeout, Ctrl-C) cancels its work."""
    import asyncio

    release = asyncio.Event()
    finished: list[bool] = []

    async def waits() -> None:
        await release.wait()
        finished.append(True)

    async def let_go() -> None:
        release.set()
        for _ in range(3):
            await asyncio.sleep(0)  # let anything still waiting on it run

    with _memory(tmp_path / "m.db") as memory:
        with pytest.raises(TimeoutError):
            memory.run_sync(waits(), timeout=0.05)
        memory.run_sync(let_go())
    assert finished == []
