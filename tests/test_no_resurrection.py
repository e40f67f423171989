"""No resurrection: work in flight when its thread or resource is deleted commits nothing and
recreates nothing (an Observer call held on an event, buffered work, the turn's reply), whether
the delete comes from this Memory or from another one on the same database."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem import Memory, Message
from obsmem.stores import InMemoryStore, PostgresStore, SQLiteStore, Store
from obsmem.stores.erasure import tombstone_key
from obsmem.testing import scripted_observer

SECRET = "zanzibarquokka"
REF = {"resource": "alice", "thread": "t1"}
Answer = Callable[[list[pa.ModelMessage], AgentInfo], Awaitable[pa.ModelResponse]]


def _held_observer(started: asyncio.Event, release: asyncio.Event) -> FunctionModel:
    """The scripted Observer, each call held until ``release`` (``started`` says it began)."""
    inner = cast(Answer, scripted_observer(words=8).function)

    async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        started.set()
        await release.wait()
        return await inner(messages, info)

    return FunctionModel(answer, model_name="scripted-observer")


def _options(model: FunctionModel, *, scope: str, buffered: bool) -> dict[str, Any]:
    return {
        "scope": scope,
        "retrieval": True,
        "observation": {
            "model": model,
            "messageTokens": 300,
            "bufferTokens": 0.2 if buffered else False,
        },
        "reflection": {"observationTokens": 50_000},
    }


def _other(store: Store) -> Store:
    """Another store on the same database (another worker); the same object in memory."""
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path)
    if isinstance(store, PostgresStore):
        return PostgresStore(store.dsn)
    assert isinstance(store, InMemoryStore)
    return store


def _said(i: int) -> Message:
    return Message.user(f"{SECRET} note {i}. " * 20, id=f"m{i}")


async def _nothing_left(store: Store, what: str) -> None:
    """Nothing of the erased thread or resource; of an erased thread, only its tombstone in
    the resource's metadata (its id and when)."""
    assert await store.get_thread("t1") is None
    assert await store.list_messages("t1") == []
    assert await store.list_resources() == []
    for key in ("thread:t1", "resource:alice"):
        assert await store.get_record(key) is None
        assert await store.list_cycles(key) == []
    assert await store.list_observation_groups("alice") == []
    left = await store.get_resource("alice")
    assert left == (
        {"om:erased": {tombstone_key("t1"): left["om:erased"][tombstone_key("t1")]}}
        if what == "thread"
        else {}
    )


async def _delete(store: Store, memory: Memory, where: str, what: str) -> None:
    """Delete from this Memory (``here``), another Memory on the same database
    (``elsewhere``), or another OS process running ``obsmem delete`` (``process``)."""
    if where == "process":
        await _delete_in_another_process(store, what)
        return
    deleting = memory if where == "here" else Memory(_other(store))
    if what == "thread":
        await deleting.delete_thread(REF)
    else:
        await deleting.delete_resource("alice")
    if deleting is not memory and not isinstance(store, InMemoryStore):
        await deleting.aclose()


async def _delete_in_another_process(store: Store, what: str) -> None:
    if isinstance(store, InMemoryStore):
        pytest.skip("an in-memory store lives in one process")
    db = store.path if isinstance(store, SQLiteStore) else cast(PostgresStore, store).dsn
    target = ["--thread", "t1"] if what == "thread" else ["--resource", "alice"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "obsmem",
        "delete",
        *target,
        "--yes",
        "--db",
        db,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert out.decode().startswith("Erased ")


@pytest.mark.parametrize("where", ["here", "elsewhere", "process"])
@pytest.mark.parametrize("what", ["thread", "resource"])
async def test_a_delete_during_an_observer_call_leaves_nothing(
    store: Store, where: str, what: str
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    memory = Memory(
        store,
        observational_memory=_options(
            _held_observer(started, release), scope="thread", buffered=False
        ),
    )
    for i in range(3):
        await memory.save(REF, [_said(i)], actor_model=None)
    turn = asyncio.create_task(memory.context(REF, [_said(9)], actor_model=None))
    await started.wait()  # the synchronous observation is in flight
    await _delete(store, memory, where, what)
    release.set()
    await turn
    assert await memory.save(REF, [Message.assistant("Noted.")], actor_model=None) == []
    await memory.settle()
    await _nothing_left(store, what)
    # A turn that begins after the delete starts a fresh thread.
    await memory.context(REF, [Message.user("hello again", id="fresh")], actor_model=None)
    assert [m.id for m in await store.list_messages("t1")] == ["fresh"]
    await memory.aclose()


@pytest.mark.parametrize("where", ["here", "elsewhere", "process"])
async def test_buffered_work_in_flight_activates_nothing_after_a_delete(
    store: Store, where: str
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    memory = Memory(
        store,
        observational_memory=_options(
            _held_observer(started, release), scope="thread", buffered=True
        ),
    )
    await memory.context(REF, [_said(0)], actor_model=None)
    await memory.save(REF, [Message.assistant(f"{SECRET} " * 80)], actor_model=None)
    await started.wait()  # background buffering is in flight
    await _delete(store, memory, where, "resource")
    # A turn after the delete starts the thread afresh, before the buffered work ends.
    await memory.context(REF, [Message.user("hello again", id="fresh")], actor_model=None)
    release.set()
    await memory.settle()
    assert [m.id for m in await store.list_messages("t1")] == ["fresh"]
    head = await store.get_record("thread:t1")
    assert head is not None
    assert (head.observations, head.chunks, head.cursor) == ("", (), {})
    assert await store.list_observation_groups("alice") == []
    await memory.aclose()


async def test_a_reply_whose_turn_began_before_the_delete_recreates_nothing(
    store: Store,
) -> None:
    memory = Memory(
        store, observational_memory=_options(scripted_observer(), scope="thread", buffered=False)
    )
    await memory.context(REF, [Message.user("hi", id="hi")], actor_model=None)
    await _delete(store, memory, "elsewhere", "thread")
    assert await memory.save(REF, [Message.assistant(SECRET)], actor_model=None) == []
    await memory.settle()
    await _nothing_left(store, "thread")
    await memory.aclose()


async def test_messages_read_before_a_delete_elsewhere_are_not_shown_again(
    store: Store,
) -> None:
    """A process that read a thread's messages before another one deleted it and a third
    started it afresh shows its actor the new thread only."""
    if isinstance(store, InMemoryStore):
        pytest.skip("one in-memory store: there is no other process to delete from")
    quiet = _options(scripted_observer(), scope="thread", buffered=False)
    quiet["observation"]["messageTokens"] = 100_000
    here = Memory(store, observational_memory=quiet)
    await here.context(REF, [_said(i) for i in range(3)], actor_model=None)
    elsewhere = Memory(_other(store), observational_memory=quiet)
    await elsewhere.delete_thread(REF)
    fresh = [Message.user(f"fresh {i}", id=f"fresh-{i}") for i in range(4)]
    await elsewhere.context(REF, fresh, actor_model=None)
    await elsewhere.aclose()
    context = await here.context(REF, [Message.user("and now?", id="now")], actor_model=None)
    shown = "\n".join(repr(m) for m in context.messages)
    assert SECRET not in shown
    assert "fresh 3" in shown
    await here.aclose()
