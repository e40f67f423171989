"""Sync code: ``Runner.run_sync`` over several calls with ``with ObservationalSession(...)``.
The Runner's loop only runs during a call; memory works on its own loop thread, so buffering
a call started goes on between calls, and leaving the ``with`` block closes the memory."""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel

from obsmem.events import Event
from obsmem.integrations.openai_agents import ObservationalSession
from obsmem.messages import Message
from obsmem.testing import scripted_observer

from .helpers import RESOURCE, user_turn
from .test_openai_agents import answer, sqlite_memory

THREAD = "sdk-sync"
WAIT = 60.0
"""Seconds a check waits for memory's loop thread before the test fails (never slept)."""

T = TypeVar("T")


def in_a_script(script: Callable[[], T]) -> T:
    """Run ``script`` as a sync program would: on a thread with no event loop, whose default
    loop (the one ``Runner.run_sync`` creates and keeps) is closed at the end."""

    def main() -> T:
        try:
            return script()
        finally:
            policy = asyncio.get_event_loop_policy()  # pyright: ignore[reportDeprecated]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                loop = policy.get_event_loop()
            loop.close()
            policy.set_event_loop(None)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(main).result()


class Seen:
    """The memory events of the thread, with the thread each was emitted on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []
        self.buffered = threading.Event()

    def __call__(self, event: Event) -> None:
        with self.lock:
            self.events.append((event.type, threading.current_thread().name))
        if event.type == "data-om-buffering-end":
            self.buffered.set()

    def count(self, kind: str) -> int:
        with self.lock:
            return sum(1 for t, _ in self.events if t == kind)

    def threads(self, kind: str) -> set[str]:
        with self.lock:
            return {name for t, name in self.events if t == kind}


async def _open(gate: asyncio.Event) -> None:
    gate.set()


def test_run_sync_buffers_between_calls_and_closes_memory(tmp_path: Path) -> None:
    gate = asyncio.Event()
    memory = sqlite_memory(
        tmp_path, observation={"model": scripted_observer(gate=gate), "bufferTokens": 0.2}
    )
    seen = Seen()

    def script() -> list[str]:
        answers: list[str] = []
        with ObservationalSession(memory, session_id=THREAD, resource=RESOURCE) as session:
            session.subscribe(seen)
            model = ScriptedModel()
            agent = Agent(name="helper", model=model)
            config = RunConfig(
                tracing_disabled=True, call_model_input_filter=session.call_model_input_filter
            )
            for i in range(10):
                model.enqueue([answer(f"Answer {i}: noted.", i)])
                result = Runner.run_sync(agent, user_turn(i), session=session, run_config=config)
                answers.append(str(result.final_output))
                if seen.count("data-om-buffering-start") and not gate.is_set():
                    assert not seen.buffered.is_set(), "the Observer waits for the gate"
                    # No run is going on now: the buffering this call started goes on anyway.
                    memory.run_sync(_open(gate))
                    assert seen.buffered.wait(WAIT), "buffering stopped with the call"
            started = seen.count("data-om-buffering-start")
        assert seen.count("data-om-buffering-end") == started, "closing finished the buffering"
        return answers

    session_ref = {"resource": RESOURCE, "thread": THREAD}
    answers = in_a_script(script)
    assert answers == [f"Answer {i}: noted." for i in range(10)]
    assert gate.is_set(), "buffering started during the calls"
    assert seen.threads("data-om-buffering-end") == {"obsmem-memory"}, "on memory's own loop"
    assert seen.count("data-om-activation") >= 1, "a later call activated what was buffered"
    with pytest.raises(RuntimeError, match="closed"):  # leaving the with block closed it
        memory.run_sync(memory.save(session_ref, [Message.user("late")], actor_model=None))
    memory.close()
