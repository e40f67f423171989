"""The transfer capability (TransferStore): what ``obsmem export`` reads out of the store,
``obsmem import`` writes back as it was, all or nothing."""

from __future__ import annotations

import pytest

from obsmem.errors import StoreError
from obsmem.records import CycleRecord, GroupEmbedding
from obsmem.stores import LoadRequest, ResourcePatch, Store, TransferStore
from obsmem.transfer import ExportRecord, export_records, import_records

from .kit import (
    T0,
    needs,
    new_generation,
    numbered_message,
    observation_group,
    observe,
    open_record,
    subject,
)


async def _fill(store: Store) -> None:
    """Everything an export carries: resource metadata, a thread and its messages, two
    generations of its log, a group with its embedding, and a ledger row."""
    await store.load(
        LoadRequest(
            subject=subject(),
            append=[numbered_message(i, "user" if i % 2 else "assistant") for i in range(1, 5)],
            resource_patch=ResourcePatch(resource_id="r1", set=((("om:note",), "kept"),)),
        )
    )
    record = await open_record(store)
    group = observation_group(record.key, observations="* 🔴 the user likes quokkas", created_at=T0)
    record = await observe(
        store,
        record,
        observations=group.observations,
        observation_tokens=6,
        cursor={"t1": 2},
        groups=[group],
    )
    await new_generation(store, record, observations="* 🔴 quokkas", observation_tokens=3)
    embedding = GroupEmbedding.of(group, (0.6, 0.8), model="m")
    await store.put_embeddings([embedding])
    cycle = CycleRecord(
        cycle_id="cycle-1",
        key=record.key,
        resource_id="r1",
        thread_ids=("t1",),
        kind="observation",
        outcome="committed",
        started_at=T0,
        duration_ms=1.0,
    )
    await store.load(LoadRequest(subject=subject(), cycles=[cycle]))


async def _exported(store: Store) -> list[ExportRecord]:
    """The export of resource ``r1`` with its ledger, after the header (which says when)."""
    records = [r async for r in export_records(store, resource="r1", ledger=True)]
    return records[1:]


class TransferContract:
    """Skipped, naming TransferStore, on a store without it."""

    async def test_an_export_imported_again_is_the_same_export(self, store: Store) -> None:
        needs(store, TransferStore)
        await _fill(store)
        first = await _exported(store)
        kinds = {type(r).__name__ for r in first}
        assert len(first) >= 9, kinds  # resource, thread, 4 messages, 2 generations, group...
        source = [r async for r in export_records(store, resource="r1", ledger=True)]
        with pytest.raises(StoreError, match="'t1'"):
            await import_records(store, source)  # the ids are stored: refused, nothing written
        assert await _exported(store) == first
        report = await import_records(store, source, on_conflict="replace")
        assert report.replaced_threads == ("t1",)
        assert await _exported(store) == first
        assert await store.list_resources() == ["r1"]
        assert [e.group_id for e in await store.list_embeddings("thread:t1")] == ["g1"]
        assert [c.cycle_id for c in await store.list_cycles("thread:t1")] == ["cycle-1"]
