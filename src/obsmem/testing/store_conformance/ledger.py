"""The ledger capability (LedgerStore): rows written with a commit or a load, read newest
first, pruned."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from obsmem.errors import ConflictError, StoreError
from obsmem.records import CycleRecord, MessageRange, ModelExchange
from obsmem.stores import Commit, CommitObservation, LedgerStore, LoadRequest, Store

from .kit import T0, needs, open_record, subject


def _cycle(
    n: int,
    *,
    key: str = "thread:t1",
    kind: str = "observation",
    outcome: str = "committed",
    threads: tuple[str, ...] = ("t1",),
    error: str | None = None,
) -> CycleRecord:
    return CycleRecord(
        cycle_id=f"cycle-{n:04d}",
        key=key,
        resource_id="r1",
        thread_ids=threads,
        kind=kind,  # type: ignore[arg-type]
        outcome=outcome,  # type: ignore[arg-type]
        error=error,
        started_at=T0 + timedelta(seconds=n),
        duration_ms=12.5 + n,
        model="test/observer",
        input_tokens=100 + n,
        output_tokens=10 + n,
        cost_usd=0.001 * n,
        ranges=tuple(MessageRange(thread_id=t, first_seq=n, last_seq=n + 2) for t in threads),
        generation=0 if outcome == "committed" else None,
        operation="observation",
    )


def _shown(n: int) -> CycleRecord:
    """Cycle ``n`` with the detail of one Observer call (text a store must keep exactly)."""
    return replace(
        _cycle(n),
        detail=(
            ModelExchange(
                role="observer",
                model="test/observer",
                system="You are the Observer.",
                shown=f"User: call me Ada \u00e9\u2028 [image: photo.png] ({n})",
                answer=f"* Ada wants to be called Ada ({n})",
            ),
        ),
    )


async def _commit_with(store: Store, cycle: CycleRecord) -> None:
    """A commit of thread ``t1``'s log that stores ``cycle`` with it."""
    record = await open_record(store)
    change = CommitObservation(observations="* one", observation_tokens=2, cursor=(("t1", 0),))
    await store.commit(
        Commit(
            key=record.key,
            record_id=record.id,
            expected_version=record.version,
            change=change,
            cycles=[cycle],
        )
    )


class LedgerContract:
    """Skipped, naming LedgerStore, on a store without it."""

    async def test_a_commit_stores_its_cycle_and_a_load_stores_a_failed_one(
        self, store: Store
    ) -> None:
        needs(store, LedgerStore)
        done = _cycle(1)
        await _commit_with(store, done)
        failed = _cycle(2, outcome="failed", error="HTTP 500: down")
        await store.load(LoadRequest(subject=subject(), cycles=[failed]))

        found = await store.list_cycles("thread:t1")
        assert found == [failed, done]  # newest first, every field read back as written
        assert found[0].error == "HTTP 500: down"
        assert found[1].ranges == (MessageRange(thread_id="t1", first_seq=1, last_seq=3),)

    async def test_a_lost_commit_stores_no_cycle(self, store: Store) -> None:
        needs(store, LedgerStore)
        record = await open_record(store)
        change = CommitObservation(observations="* a", observation_tokens=1, cursor=(("t1", 0),))
        await store.commit(
            Commit(
                key=record.key, record_id=record.id, expected_version=record.version, change=change
            )
        )
        with pytest.raises(ConflictError):
            await store.commit(
                Commit(
                    key=record.key,
                    record_id=record.id,
                    expected_version=record.version,  # stale
                    change=change,
                    cycles=[_cycle(1)],
                )
            )
        assert await store.list_cycles("thread:t1") == []

    async def test_filters_and_pages(self, store: Store) -> None:
        needs(store, LedgerStore)
        await open_record(store, scope="resource")
        rows = [
            _cycle(1, key="resource:r1", threads=("t1",)),
            _cycle(2, key="resource:r1", threads=("t2", "t1"), kind="buffering"),
            _cycle(3, key="resource:r1", threads=("t2",), outcome="failed", error="x"),
            _cycle(4, key="resource:r1", threads=("T1",), outcome="redundant"),
            _cycle(5, key="resource:r1", threads=("t_%",), kind="reflection"),
        ]
        await store.load(LoadRequest(subject=subject(scope="resource"), cycles=rows))

        def ids(found: list[CycleRecord]) -> list[str]:
            return [c.cycle_id[-1] for c in found]

        assert ids(await store.list_cycles("resource:r1")) == ["5", "4", "3", "2", "1"]
        # A thread matches exactly: not another case, not a LIKE wildcard.
        assert ids(await store.list_cycles("resource:r1", thread_id="t1")) == ["2", "1"]
        assert ids(await store.list_cycles("resource:r1", thread_id="t_%")) == ["5"]
        assert ids(await store.list_cycles("resource:r1", thread_id="t")) == []
        assert ids(await store.list_cycles("resource:r1", kinds=["buffering", "reflection"])) == [
            "5",
            "2",
        ]
        assert ids(await store.list_cycles("resource:r1", outcomes=["failed", "redundant"])) == [
            "4",
            "3",
        ]
        first = await store.list_cycles("resource:r1", limit=2)
        assert ids(first) == ["5", "4"]
        rest = await store.list_cycles("resource:r1", limit=2, before=first[-1].started_at)
        assert ids(rest) == ["3", "2"]
        assert await store.list_cycles("thread:t1") == []  # another key

    async def test_bad_queries_name_the_fix(self, store: Store) -> None:
        needs(store, LedgerStore)
        with pytest.raises(StoreError, match="unknown cycle kind 'observe'; use one of buffering"):
            await store.list_cycles("thread:t1", kinds=["observe"])
        with pytest.raises(StoreError, match="unknown cycle outcome 'ok'"):
            await store.list_cycles("thread:t1", outcomes=["ok"])
        with pytest.raises(StoreError, match="limit of at least 1"):
            await store.list_cycles("thread:t1", limit=0)

    async def test_retention_keeps_the_newest_per_key(self, store: Store) -> None:
        needs(store, LedgerStore)
        await open_record(store)
        await open_record(store, thread="t2")
        for n in range(1, 8):
            await store.load(
                LoadRequest(
                    subject=subject(),
                    cycles=[_cycle(n), _cycle(100 + n, key="thread:t2")],
                    keep_cycles=3,
                )
            )
        assert [c.cycle_id for c in await store.list_cycles("thread:t1")] == [
            "cycle-0007",
            "cycle-0006",
            "cycle-0005",
        ]
        assert len(await store.list_cycles("thread:t2")) == 3
        # Writing the same cycle twice keeps one row.
        await store.load(LoadRequest(subject=subject(), cycles=[_cycle(7)], keep_cycles=3))
        assert len(await store.list_cycles("thread:t1")) == 3
        # Retention 0 keeps none.
        await store.load(LoadRequest(subject=subject(), cycles=[_cycle(8)], keep_cycles=0))
        assert await store.list_cycles("thread:t1") == []
        assert len(await store.list_cycles("thread:t2")) == 3

    async def test_clear_deletes_the_ledger_of_the_key(self, store: Store) -> None:
        needs(store, LedgerStore)
        await open_record(store)
        await store.load(LoadRequest(subject=subject(), cycles=[_cycle(1)]))
        await store.clear("thread:t1")
        assert await store.list_cycles("thread:t1") == []

    async def test_a_cycle_detail_is_stored_with_its_cycle_and_read_on_its_own(
        self, store: Store
    ) -> None:
        needs(store, LedgerStore)
        done = _shown(1)
        await _commit_with(store, done)
        assert await store.cycle_detail("cycle-0001") == list(done.detail)
        (listed,) = await store.list_cycles("thread:t1")
        assert listed.detail == ()  # the ledger's list does not carry it
        assert await store.cycle_detail("cycle-9999") == []  # unknown

    async def test_cycle_detail_has_its_own_retention(self, store: Store) -> None:
        needs(store, LedgerStore)
        await open_record(store)
        for n in range(1, 6):
            await store.load(
                LoadRequest(subject=subject(), cycles=[_shown(n)], keep_cycles=10, keep_detail=2)
            )
        assert len(await store.list_cycles("thread:t1")) == 5  # the rows stay
        kept = [n for n in range(1, 6) if await store.cycle_detail(f"cycle-{n:04d}")]
        assert kept == [4, 5]
        # Detail off: the next write drops the detail still kept.
        await store.load(
            LoadRequest(subject=subject(), cycles=[_cycle(6)], keep_cycles=10, keep_detail=0)
        )
        assert await store.cycle_detail("cycle-0005") == []
        assert len(await store.list_cycles("thread:t1")) == 6
