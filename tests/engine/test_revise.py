"""Correcting the log by hand: ``Memory.revise`` on every store, with scripted memory models.

A revision is a new generation the actor sees from the next turn, a ``revision`` row in the
cycle ledger (who asked, when), and nothing buffered from the old log brings a removed line back.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from obsmem import Memory
from obsmem.errors import ConfigError
from obsmem.messages import Message
from obsmem.stores import Commit, StartGeneration, Store
from obsmem.testing import scripted_observer, scripted_reflector

from .helpers import Conversation
from .test_round_trips import CountingStore

REF = {"resource": "u1", "thread": "t1"}
FACT = "My favorite color is blue"


def _memory(store: Store, conv: Conversation, **reflection: Any) -> Memory:
    return Memory(
        store,
        observational_memory={
            "observation": {"model": scripted_observer(), "messageTokens": 2_000},
            "reflection": {
                "model": scripted_reflector(),
                "observationTokens": 1_000,
                **reflection,
            },
        },
        clock=conv.clock,
    )


async def _say(memory: Memory, conv: Conversation, text: str) -> None:
    """One turn: the user says ``text``, the assistant answers with some words."""
    conv.user(1)  # moves the clock
    await memory.context(REF, [Message.user(text, created_at=conv.now)], actor_model=None)
    await memory.save(REF, [conv.assistant(40)], actor_model=None)
    await memory.settle()


async def _log(memory: Memory) -> str:
    assert memory.om is not None
    return await memory.om.observations("t1", "u1")


def _line_with(log: str, words: str) -> str:
    [line] = [line for line in log.split("\n") if words in line]
    return line


async def _system_text(memory: Memory, conv: Conversation, text: str) -> str:
    """What the actor is sent before the raw messages at the next turn."""
    conv.user(1)
    context = await memory.context(REF, [Message.user(text, created_at=conv.now)], actor_model=None)
    return "\n".join(m.text for m in context.messages if m.role == "system")


async def test_a_revision_is_seen_at_the_next_turn_and_recorded_as_a_manual_cycle(
    store: Store,
) -> None:
    conv = Conversation()
    memory = _memory(store, conv)
    await _say(memory, conv, FACT)
    await _say(memory, conv, "I live in Lisbon")
    assert await memory.compact(REF, keep_tokens=0)
    wrong = _line_with(await _log(memory), "favorite color")
    assert "favorite color is blue" in await _system_text(memory, conv, "hello")

    at = conv.now
    head = await memory.revise(
        REF, replace={wrong: wrong.replace("blue", "green")}, by="alice@example.com"
    )

    assert head is not None
    assert head.origin == "revision"
    shown = await _system_text(memory, conv, "What is my favorite color?")
    assert "favorite color is green" in shown
    assert "blue" not in shown
    assert "I live in Lisbon" in shown  # the other lines stay
    history = await store.history("thread:t1")
    assert [r.origin for r in history][:2] == ["revision", "initial"]
    assert "blue" in history[1].observations  # the old generation is kept, retired
    [row] = await memory.cycles(REF, kind="revision")
    assert (row.kind, row.operation, row.outcome) == ("revision", "revision", "committed")
    assert (row.by, row.generation, row.model, row.input_tokens) == (
        "alice@example.com",
        head.generation,
        None,
        None,
    )
    assert row.started_at >= at
    assert row.to_json()["by"] == "alice@example.com"


async def test_remove_and_text_write_new_generations_too(store: Store) -> None:
    conv = Conversation()
    memory = _memory(store, conv)
    await _say(memory, conv, FACT)
    await _say(memory, conv, "I live in Lisbon")
    assert await memory.compact(REF, keep_tokens=0)
    first = await memory.revise(REF, remove=[_line_with(await _log(memory), "Lisbon")])
    assert first is not None
    assert "Lisbon" not in first.observations
    assert "Lisbon" not in await _system_text(memory, conv, "Where do I live?")

    second = await memory.revise(REF, text="* 🔴 (10:00) User lives in Porto.", by="support")
    assert second is not None
    assert second.observations == "* 🔴 (10:00) User lives in Porto."
    assert second.generation == first.generation + 1
    rows = await memory.cycles(REF, kind="revision")
    assert [(r.by, r.generation) for r in rows] == [
        ("support", second.generation),
        (None, first.generation),
    ]


async def test_a_line_that_is_missing_or_ambiguous_is_an_error_naming_it(store: Store) -> None:
    conv = Conversation()
    memory = _memory(store, conv)
    same = conv.now
    for _ in range(2):  # the same words at the same minute: two identical lines
        await memory.context(REF, [Message.user("I like tea", created_at=same)], actor_model=None)
    await _say(memory, conv, FACT)
    assert await memory.compact(REF, keep_tokens=0)
    log = await _log(memory)
    tea = [line for line in log.split("\n") if "I like tea" in line]
    assert len(tea) == 2
    assert tea[0] == tea[1]
    generation = (await store.history("thread:t1"))[0].generation

    with pytest.raises(ConfigError, match=re.escape(repr(tea[0])) + ".*2 times.*text=new_log"):
        await memory.revise(REF, remove=[tea[0]])
    missing = "* 🔴 (09:00) User said: My favorite color is red"
    with pytest.raises(ConfigError, match=re.escape(repr(missing)) + ".*no line of the log"):
        await memory.revise(REF, replace={missing: "* 🔴 (09:00) User likes red"})
    with pytest.raises(ConfigError, match="exactly one of replace"):
        await memory.revise(REF, remove=[tea[0]], text="new log")
    with pytest.raises(ConfigError, match="exactly one of replace"):
        await memory.revise(REF)
    with pytest.raises(ConfigError, match="use remove"):
        await memory.revise(REF, replace={_line_with(log, "favorite"): " "})

    with pytest.raises(ConfigError, match=r"'t9'.*no such thread"):
        await memory.revise({"resource": "u1", "thread": "t9"}, remove=[tea[0]])

    assert (await store.history("thread:t1"))[0].generation == generation
    assert await memory.cycles(REF, kind="revision") == []
    assert await store.get_thread("t9") is None


async def test_a_buffered_reflection_made_before_the_revision_does_not_bring_the_line_back(
    store: Store,
) -> None:
    conv = Conversation()
    memory = _memory(store, conv, observationTokens=600)
    await _say(memory, conv, FACT)
    assert await memory.compact(REF, keep_tokens=0)
    head = (await store.history("thread:t1", limit=1))[0]
    for _ in range(30):  # until a background reflection is buffered
        if head.buffered_reflection is not None:
            break
        await _say(memory, conv, conv.user(60).text)
        await memory.compact(REF, keep_tokens=0)
        head = (await store.history("thread:t1", limit=1))[0]
    assert head.buffered_reflection is not None
    assert "favorite color is blue" in head.buffered_reflection.text

    await memory.revise(REF, remove=[_line_with(head.observations, "favorite color")])

    # Turns go on: reflections activate and run, and the removed line never comes back.
    generation = head.generation
    for _ in range(10):
        assert "blue" not in await _system_text(memory, conv, conv.user(60).text)
        await memory.save(REF, [conv.assistant(40)], actor_model=None)
        await memory.settle()
        await memory.compact(REF, keep_tokens=0)
    history = await store.history("thread:t1")
    assert [r.origin for r in history if r.generation > generation + 1], "it reflected again"
    assert all("blue" not in r.observations for r in history if r.generation > generation)


async def test_a_pending_chunk_that_copied_the_line_loses_it_too(store: Store) -> None:
    conv = Conversation()
    memory = _memory(store, conv)
    conv.user(1)
    said_at = conv.now
    await memory.context(REF, [Message.user(FACT, created_at=said_at)], actor_model=None)
    assert await memory.compact(REF, keep_tokens=0)
    line = _line_with(await _log(memory), "favorite color")
    # The same words at the same minute again: the chunk buffered for them holds the same line.
    await memory.context(REF, [Message.user(FACT, created_at=said_at)], actor_model=None)
    await memory.save(REF, [conv.assistant(600)], actor_model=None)
    await memory.settle()
    head = (await store.history("thread:t1", limit=1))[0]
    assert [line in c.observations for c in head.chunks] == [True]

    revised = await memory.revise(REF, remove=[line], by="alice")

    assert revised is not None
    [chunk] = revised.chunks
    assert (chunk.id, chunk.ranges) == (head.chunks[0].id, head.chunks[0].ranges)
    assert "blue" not in chunk.observations
    assert chunk.token_count < head.chunks[0].token_count
    assert await memory.compact(REF, keep_tokens=0)  # the chunk activates
    after = (await store.history("thread:t1", limit=1))[0]
    assert not after.chunks
    assert after.cursor["t1"] == 3
    assert "blue" not in after.observations
    assert "blue" not in await _system_text(memory, conv, "What is my favorite color?")


class _Racing(CountingStore):
    """Runs ``meanwhile`` once, right before the first revision's commit reaches the store:
    another worker changes the head after the revision read it."""

    def __init__(self, inner: Store, meanwhile: Callable[[], Awaitable[object]]) -> None:
        super().__init__(inner)
        self.meanwhile: Callable[[], Awaitable[object]] | None = meanwhile

    async def commit(self, commit: Commit) -> Any:
        change = commit.change
        if isinstance(change, StartGeneration) and change.origin == "revision" and self.meanwhile:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return await self.inner.commit(commit)


async def test_a_revision_that_loses_a_race_decides_again_from_the_new_head(
    store: Store,
) -> None:
    conv = Conversation()
    other = _memory(store, conv)  # another worker on the same store
    await _say(other, conv, FACT)
    assert await other.compact(REF, keep_tokens=0)
    await _say(other, conv, "I live in Lisbon")  # not observed yet
    line = _line_with(await _log(other), "favorite color")
    assert "Lisbon" not in await _log(other)
    racing = _Racing(store, lambda: other.compact(REF, keep_tokens=0))
    memory = _memory(racing, conv)  # type: ignore[arg-type]

    head = await memory.revise(REF, replace={line: line.replace("blue", "green")}, by="alice")

    assert racing.meanwhile is None
    assert head is not None
    assert "favorite color is green" in head.observations
    assert "blue" not in head.observations
    assert "I live in Lisbon" in head.observations  # the other worker's observation is kept
    assert [r.by for r in await memory.cycles(REF, kind="revision")] == ["alice"]


async def test_in_resource_scope_a_revision_corrects_the_log_every_thread_shares(
    store: Store,
) -> None:
    conv = Conversation()
    memory = Memory(
        store,
        observational_memory={
            "scope": "resource",
            "observation": {"model": scripted_observer(), "messageTokens": 2_000},
            "reflection": {"model": scripted_reflector()},
        },
        clock=conv.clock,
    )
    other = {"resource": "u1", "thread": "t2"}
    await _say(memory, conv, FACT)
    assert await memory.compact(REF, keep_tokens=0)
    await memory.context(
        other, [Message.user("Hello again", created_at=conv.now)], actor_model=None
    )
    line = _line_with(await _log(memory), "favorite color")

    head = await memory.revise(other, remove=[line], by="ana")

    assert head is not None
    assert head.key == "resource:u1"
    for ref in (REF, other):
        conv.user(1)
        context = await memory.context(
            ref, [Message.user("Hi", created_at=conv.now)], actor_model=None
        )
        assert "favorite color" not in "\n".join(m.text for m in context.messages)
        [row] = await memory.cycles(ref, kind="revision")
        assert (row.by, row.key, set(row.thread_ids)) == ("ana", "resource:u1", {"t1", "t2"})
