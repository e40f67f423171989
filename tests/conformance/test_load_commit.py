"""Load and commit details of the built-in stores: subjects name their key, and SQLite never
blocks the event loop on another writer. (The load and commit contract every store passes is
in :mod:`obsmem.testing.store_conformance.load_commit`.)"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from obsmem.snapshot import Subject
from obsmem.stores import LoadRequest, SQLiteStore
from obsmem.testing.store_conformance.kit import load, numbered_message, subject


def test_subjects_name_their_key() -> None:
    assert Subject(scope="thread", thread_id="t", resource_id="r").key == "thread:t"
    resource = Subject(scope="resource", thread_id="t", resource_id="r")
    assert resource.key == "resource:r"
    assert resource.covering(("a", "t")).threads == ("t", "a")


async def test_sqlite_never_blocks_the_event_loop_on_another_writer(tmp_path: Path) -> None:
    """A turn's load runs inline only while nobody else writes: when another process holds the
    write lock, it waits on the worker thread and the event loop goes on."""
    path = tmp_path / "locked.db"
    store = SQLiteStore(path)
    try:
        await load(store)  # opens the store (and its inline connection)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process takes the write lock
        task = asyncio.create_task(
            store.load(LoadRequest(subject=subject(), append=[numbered_message(1)]))
        )
        await asyncio.sleep(0)  # one step: the load found the lock taken and handed itself off
        assert not task.done()
        other.execute("ROLLBACK")
        other.close()
        snap = await task
        assert [m.seq for m in snap.stored] == [1]
    finally:
        await store.aclose()
