"""The storage conformance suite on every built-in store, and what only they offer.

The suite itself ships in :mod:`obsmem.testing.store_conformance` (a third-party store runs
it the same way); ``TestEveryStore`` runs it once per store kind (the ``store`` fixture in
tests/conftest.py). The tests below are of the built-in stores' extras: ``append_messages``,
PostgreSQL's driver and pgvector.
"""

from __future__ import annotations

import pytest

from obsmem.errors import StoreError
from obsmem.messages import Message
from obsmem.records import ObservationGroup
from obsmem.stores import Store
from obsmem.testing.store_conformance import StoreConformance
from obsmem.testing.store_conformance.kit import (
    T0,
    add_chunk,
    numbered_chunk,
    numbered_message,
    thread_with_messages,
)


class TestEveryStore(StoreConformance):
    """The packaged suite, with every capability, on InMemoryStore, SQLiteStore and
    PostgresStore."""


async def test_append_assigns_seq_and_is_idempotent(store: Store) -> None:
    await store.create_thread("t1", "r1")
    first = await store.append_messages(
        "t1", [numbered_message(1), numbered_message(2, "assistant")]
    )
    assert [(m.id, m.seq, m.thread_id, m.resource_id) for m in first] == [
        ("m1", 1, "t1", "r1"),
        ("m2", 2, "t1", "r1"),
    ]
    again = await store.append_messages(
        "t1", [numbered_message(2, "assistant"), numbered_message(3)]
    )
    assert [(m.id, m.seq) for m in again] == [("m2", 2), ("m3", 3)]
    stored = await store.list_messages("t1")
    assert [m.seq for m in stored] == [1, 2, 3]
    thread = await store.get_thread("t1")
    assert thread is not None
    assert thread.message_count == 3


async def test_append_rejects_foreign_ids_and_threads(store: Store) -> None:
    await store.create_thread("t1", "r1")
    await store.create_thread("t2", "r1")
    await store.append_messages("t1", [numbered_message(1)])
    with pytest.raises(StoreError, match="another thread"):
        await store.append_messages("t2", [numbered_message(1)])
    with pytest.raises(StoreError, match="names thread"):
        await store.append_messages("t2", [Message.user("x", thread_id="t1")])
    with pytest.raises(StoreError, match="no thread"):
        await store.append_messages("missing", [numbered_message(5)])
    # a failed append stores nothing
    assert await store.list_messages("t2") == []


# -- records: creation and compare-and-set ----------------------------------------------------


# -- buffering and activation -----------------------------------------------------------------


# -- synchronous observation ------------------------------------------------------------------


# -- reflection and generations ---------------------------------------------------------------


# -- resource scope and observation groups ----------------------------------------------------


def test_postgres_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from obsmem.errors import MissingExtraError
    from obsmem.stores import PostgresStore

    real_import = builtins.__import__

    def no_psycopg(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("psycopg"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    with pytest.raises(MissingExtraError, match=r'pip install "obsmem\[postgres\]"'):
        PostgresStore("postgresql://localhost/obsmem")


async def test_postgres_ranks_in_sql_with_pgvector_when_the_server_has_it(
    postgres_dsn: str,
) -> None:
    import psycopg

    from obsmem.records import GroupEmbedding
    from obsmem.stores import PostgresStore

    with psycopg.connect(postgres_dsn) as conn:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    if available is None:
        pytest.skip("this PostgreSQL has no pgvector (client-side scoring is used instead)")
    store = PostgresStore(postgres_dsn)
    try:
        key, record = await thread_with_messages(store, 2)
        assert store.uses_pgvector
        groups = [
            ObservationGroup(
                id=f"g{i}",
                key=key,
                resource_id="r1",
                thread_id="t1",
                cycle_id=f"c{i}",
                start_id="m1",
                end_id="m2",
                observations=f"group {i}",
                created_at=T0,
            )
            for i in range(3)
        ]
        await add_chunk(store, record, numbered_chunk(1, "t1", 1, 2), groups=groups)
        await store.put_embeddings(
            [
                GroupEmbedding(
                    group_id=g.id,
                    key=key,
                    resource_id="r1",
                    thread_id="t1",
                    observed_at=T0,
                    model="m",
                    vector=v,
                )
                for g, v in zip(groups, [(1.0, 0.0), (0.6, 0.8), (0.0, 1.0)], strict=True)
            ]
        )
        hits = await store.search_embeddings("r1", [0.0, 1.0], model="m", limit=2)
        assert [(g.id, round(s, 2)) for g, s in hits] == [("g2", 1.0), ("g1", 0.8)]
        await store.clear(key)
        assert await store.search_embeddings("r1", [0.0, 1.0], model="m") == []
    finally:
        await store.aclose()
