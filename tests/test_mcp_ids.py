"""MCP thread ids are namespaced per resource: a client's ``thread_id`` names a conversation of
its server's resource only, two resources never share a stored id, and conversations stored
under a client's id by earlier versions stay reachable (``obsmem.mcp_server.ids``). The tools
run in-process over a real SQLite file; ``test_mcp.py`` drives the server itself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from obsmem import Memory
from obsmem.mcp_server import BadArguments, MemoryTools
from obsmem.mcp_server.ids import default_thread, namespaced
from obsmem.memory import ThreadRef
from obsmem.messages import Message, TextPart
from obsmem.stores import SQLiteStore

FACT = "My locker code is 4417-B."


def test_ids_in_a_resource_namespace() -> None:
    assert default_thread("alice") == "mcp:alice"  # as earlier versions named it
    assert namespaced("alice", None) == "mcp:alice"
    assert namespaced("alice", "diary") == "mcp:alice:diary"
    assert namespaced("alice", "mcp:alice") == "mcp:alice"  # the ids the tools report
    assert namespaced("alice", "mcp:alice:diary") == "mcp:alice:diary"
    assert namespaced("bob", "mcp:alice") == "mcp:bob:mcp:alice"
    assert namespaced("bob", "mcp:alice:diary") == "mcp:bob:mcp:alice:diary"
    assert default_thread("a:b") == "mcp:a%3Ab"
    assert namespaced("a", "b:c") == "mcp:a:b:c" != namespaced("a:b", "c")


ids = st.text(max_size=12) | st.sampled_from(["mcp:a", "mcp:a:", "a:b", "%3A", "mcp:a%3Ab"])


@given(first=ids, second=ids, thread=ids | st.none(), other=ids | st.none())
def test_two_resources_never_share_a_stored_id(
    first: str, second: str, thread: str | None, other: str | None
) -> None:
    if first != second:
        assert namespaced(first, thread) != namespaced(second, other)


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[Memory]:
    options = {"model": "test", "retrieval": {"scope": "resource"}}
    memory = Memory(SQLiteStore(tmp_path / "memory.db"), observational_memory=options)
    yield memory
    await memory.aclose()


def said(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_a_client_cannot_take_an_id_another_resource_uses(memory: Memory) -> None:
    bob = MemoryTools(memory, resource="bob")
    alice = MemoryTools(memory, resource="alice")
    taken = ["mcp:alice", "diary", "mcp:alice:diary", ""]
    for thread_id in taken:
        await bob.remember(said(f"Bob took {thread_id!r}."), thread_id)
    own = await alice.remember(said(FACT))
    diary = await alice.remember(said(FACT), "diary")
    assert own.data["thread_id"] == "mcp:alice"
    assert diary.data["thread_id"] == "mcp:alice:diary"
    for thread_id in (None, "diary", "mcp:alice:diary"):
        context = await alice.memory_context(thread_id, include_messages=True)
        assert FACT in context.text
        assert "Bob took" not in context.text
    for thread_id in taken:
        shown = await bob.memory_context(thread_id, include_messages=True)
        assert "4417" not in shown.text
        assert shown.data["thread_id"].startswith("mcp:bob")
        recalled = await bob.recall({"thread_id": thread_id})
        assert "4417" not in recalled.text
    assert "4417" not in (await bob.recall({"mode": "threads"})).text


async def test_conversations_stored_under_a_clients_id_stay_reachable(memory: Memory) -> None:
    """Earlier versions stored a client's id as it was, and the default of a resource with a
    ``:`` unescaped: the resource's server still reaches both, another resource's does not."""
    for thread, resource in (("mcp:alice", "alice"), ("diary", "alice"), ("mcp:a:b", "a:b")):
        message = Message(role="user", parts=(TextPart(text=f"{FACT} ({thread})"),))
        await memory.save(ThreadRef(thread=thread, resource=resource), [message], actor_model=None)
    alice = MemoryTools(memory, resource="alice")
    for thread_id, stored, seq in (
        (None, "mcp:alice", 2),  # after the message stored before
        ("mcp:alice", "mcp:alice", 3),
        ("diary", "diary", 2),
    ):
        more = await alice.remember(said(f"One more thing ({seq})."), thread_id)
        assert more.data["thread_id"] == stored
        assert more.data["stored"][0]["seq"] == seq
        assert f"{FACT} ({stored})" in (await alice.recall({"thread_id": thread_id})).text
    colon = await MemoryTools(memory, resource="a:b").memory_context(None, include_messages=True)
    assert colon.data["thread_id"] == "mcp:a:b"
    assert f"{FACT} (mcp:a:b)" in colon.text
    bob = await MemoryTools(memory, resource="bob").remember(said("Mine."), "diary")
    assert bob.data["thread_id"] == "mcp:bob:diary"


async def test_a_thread_id_too_long_for_the_namespace_is_refused(memory: Memory) -> None:
    tools = MemoryTools(memory, resource="alice")
    longest = 512 - len("mcp:alice:")
    await tools.remember(said("fits"), "x" * longest)
    with pytest.raises(BadArguments, match=f"give at most {longest} "):
        await tools.remember(said("too long"), "x" * (longest + 1))


async def test_an_operators_thread_stays_literal(memory: Memory) -> None:
    tools = MemoryTools(memory, resource="alice", thread="work")
    stored = await tools.remember(said(FACT), "work")
    assert stored.data["thread_id"] == "work"
    with pytest.raises(BadArguments, match="serves only the conversation 'work'"):
        await tools.remember(said(FACT), "mcp:alice:work")
