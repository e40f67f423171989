"""An owner's delete on SQLite: the file's bytes keep no deleted text. (What every store must
do on a delete is in the packaged suite, :mod:`obsmem.testing.store_conformance.erase`.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from obsmem.stores import SQLiteStore
from obsmem.testing.store_conformance.erase import SECRET, remember


def _file_bytes(path: Path) -> bytes:
    """The database file after its WAL is checkpointed into it, with whatever WAL remains."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


async def test_sqlite_file_bytes_hold_no_deleted_text(tmp_path: Path) -> None:
    path = tmp_path / "obsmem.db"
    store = SQLiteStore(path)
    try:
        await remember(store, "t1", "resource")
        await remember(store, "t2", "thread")
        assert SECRET.encode() in _file_bytes(path)
        await store.delete_thread("t1")
        await store.delete_resource("r1")
        assert SECRET.encode() not in _file_bytes(path)
    finally:
        await store.aclose()
