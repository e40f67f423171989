"""The search capability (SearchableStore): groups written with their change, embeddings
searched within the resource."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from obsmem.errors import ConflictError
from obsmem.records import GroupEmbedding, ObservationGroup
from obsmem.stores import SearchableStore, Store

from .kit import T0, add_chunk, needs, numbered_chunk, observation_group, thread_with_messages


class SearchContract:
    """Skipped, naming SearchableStore, on a store without it."""

    async def test_observation_groups_are_written_with_their_transition(self, store: Store) -> None:
        needs(store, SearchableStore)
        key, record = await thread_with_messages(store, 4)
        group = observation_group(key)
        record = await add_chunk(store, record, numbered_chunk(1, "t1", 1, 2), groups=[group])
        assert await store.list_observation_groups("r1") == [group]
        assert await store.list_observation_groups("r1", thread_id="t1") == [group]
        assert await store.list_observation_groups("r1", thread_id="other") == []
        assert await store.list_observation_groups("r2") == []
        # a failed transition writes no group
        with pytest.raises(ConflictError):
            await add_chunk(
                store,
                replace(record, version=record.version - 1),
                numbered_chunk(2, "t1", 3, 4),
                groups=[replace(group, id="g2")],
            )
        assert [g.id for g in await store.list_observation_groups("r1")] == ["g1"]
        await store.clear(key)
        assert await store.list_observation_groups("r1") == []

    async def test_group_embeddings_are_searched_within_the_resource(self, store: Store) -> None:
        needs(store, SearchableStore)

        key, record = await thread_with_messages(store, 4)
        await store.create_thread("x", "r2")
        groups = [
            ObservationGroup(
                id=f"g{i}",
                key=key if i < 3 else "thread:x",
                resource_id="r1" if i < 3 else "r2",
                thread_id="t1" if i < 3 else "x",
                cycle_id=f"c{i}",
                start_id="m1",
                end_id="m2",
                observations=f"group {i}",
                created_at=T0 + timedelta(days=i),
            )
            for i in range(4)
        ]
        record = await add_chunk(store, record, numbered_chunk(1, "t1", 1, 2), groups=groups)
        vectors = {"g0": (1.0, 0.0), "g1": (0.8, 0.6), "g2": (0.0, 1.0), "g3": (1.0, 0.0)}
        await store.put_embeddings([GroupEmbedding.of(g, vectors[g.id], model="m") for g in groups])
        hits = await store.search_embeddings("r1", [1.0, 0.0], model="m", limit=2)
        assert [(g.id, round(s, 2)) for g, s in hits] == [("g0", 1.0), ("g1", 0.8)]
        assert all(g.resource_id == "r1" for g, _ in hits)  # g3 (r2) is as close but never seen
        later = await store.search_embeddings(
            "r1", [1.0, 0.0], model="m", after=T0 + timedelta(days=1, hours=1)
        )
        assert [g.id for g, _ in later] == ["g2"]
        assert await store.search_embeddings("r1", [1.0, 0.0], model="other") == []
        assert await store.search_embeddings("r1", [1.0, 0.0], model="m", thread_id="x") == []
        await store.clear(key)
        assert await store.search_embeddings("r1", [1.0, 0.0], model="m") == []
        assert [g.id for g, _ in await store.search_embeddings("r2", [1.0, 0.0], model="m")] == [
            "g3"
        ]
