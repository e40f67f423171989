"""The core contract: threads, resources and messages."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from obsmem import messages
from obsmem.errors import StoreError
from obsmem.messages import Message
from obsmem.stores import CoreStore, TransferStore

from .kit import append, numbered_message


class ThreadContract:
    """Threads are created once under one resource; metadata merges; messages round-trip."""

    async def test_threads_are_created_once_and_listed_by_resource(self, store: CoreStore) -> None:
        a = await store.create_thread("a", "r1", title="First", metadata={"x": 1})
        again = await store.create_thread("a", "r1", title="ignored")
        assert again == a
        await store.create_thread("b", "r1")
        await store.create_thread("c", "r2")
        assert [t.id for t in await store.list_threads("r1")] == ["a", "b"]
        assert [t.id for t in await store.list_threads("r2")] == ["c"]
        if isinstance(store, TransferStore):  # listing every resource is for export
            assert await store.list_resources() == ["r1", "r2"]
        assert await store.get_thread("missing") is None

    async def test_a_thread_id_cannot_be_taken_over_by_another_resource(
        self, store: CoreStore
    ) -> None:
        await store.create_thread("a", "r1")
        with pytest.raises(StoreError, match="another resource"):
            await store.create_thread("a", "r2")

    async def test_thread_metadata_merges_shallowly(self, store: CoreStore) -> None:
        await store.create_thread("a", "r1", metadata={"keep": 1, "change": 1})
        t = await store.update_thread("a", title="Title", metadata={"change": 2, "new": {"k": "v"}})
        assert t.title == "Title"
        assert t.metadata == {"keep": 1, "change": 2, "new": {"k": "v"}}
        loaded = await store.get_thread("a")
        assert loaded is not None
        assert loaded.metadata == t.metadata
        assert loaded.title == "Title"
        with pytest.raises(StoreError, match="no thread"):
            await store.update_thread("missing", metadata={})

    async def test_resource_metadata_merges_and_starts_empty(self, store: CoreStore) -> None:
        assert await store.get_resource("r1") == {}
        assert await store.update_resource("r1", {"a": 1, "b": {"x": 1}}) == {"a": 1, "b": {"x": 1}}
        assert await store.update_resource("r1", {"b": 2}) == {"a": 1, "b": 2}
        assert await store.get_resource("r1") == {"a": 1, "b": 2}
        assert await store.get_resource("r2") == {}

    async def test_messages_round_trip_every_part_kind(self, store: CoreStore) -> None:
        await store.create_thread("t1", "r1")
        original = Message(
            id="rich",
            role="assistant",
            created_at=datetime(2025, 12, 4, 14, 30, 5, 123456, tzinfo=UTC),
            metadata={"source": "test", "nested": {"a": [1, 2]}},
            parts=(
                messages.TextPart(text="Here is the board 📋"),
                messages.ReasoningPart(text="thinking...", signature="sig"),
                messages.ToolCallPart(tool_call_id="c1", tool_name="search", args={"q": "venues"}),
                messages.ToolResultPart(
                    tool_call_id="c1",
                    tool_name="search",
                    content={"hits": ["A", "B"]},
                    attachments=(messages.ImagePart(data=b"\x89PNG...", media_type="image/png"),),
                ),
                messages.ImagePart(
                    url="https://example.com/board.png", width=800, height=600, detail="high"
                ),
                messages.FilePart(
                    data=b"%PDF-1.4",
                    media_type="application/pdf",
                    filename="a.pdf",
                    token_estimate=1234,
                ),
            ),
        )
        [stored] = await append(store, "t1", [original])
        [loaded] = await store.list_messages("t1")
        assert loaded == stored
        assert loaded.parts == original.parts
        assert loaded.created_at == original.created_at
        assert loaded.metadata == original.metadata

    async def test_list_messages_windows(self, store: CoreStore) -> None:
        await store.create_thread("t1", "r1")
        await append(store, "t1", [numbered_message(i) for i in range(1, 11)])
        assert [m.seq for m in await store.list_messages("t1", after_seq=3, through_seq=6)] == [
            4,
            5,
            6,
        ]
        assert [m.seq for m in await store.list_messages("t1", after_seq=7)] == [8, 9, 10]
        assert [m.seq for m in await store.list_messages("t1", limit=2, newest_first=True)] == [
            10,
            9,
        ]
        assert await store.list_messages("nope") == []

    async def test_get_messages_never_crosses_resources(self, store: CoreStore) -> None:
        await store.create_thread("t1", "r1")
        await store.create_thread("t2", "r2")
        await append(store, "t1", [numbered_message(1)])
        await append(store, "t2", [Message.user("secret", id="s1")])
        found = await store.get_messages(["m1", "s1", "nope"], resource_id="r1")
        assert [m.id for m in found] == ["m1"]
