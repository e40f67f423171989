"""Memory from sync code: one loop of its own, background work carrying on between calls,
``close()`` and ``with``."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pydantic_ai.models.test import TestModel

from obsmem import Agent, Memory
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
