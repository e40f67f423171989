"""A SQLite file deleted, moved away or replaced under a running process. SQLite itself does not
notice (its open connections go on writing into the file that is no longer at the path, and what
they write is lost), so the store checks the file at its path: every call then fails with a
StoreError naming the file and what happened, and calls work again once the file is back."""

from __future__ import annotations

import logging
import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import pytest

from obsmem import Memory
from obsmem.errors import StoreError
from obsmem.messages import Message, TextPart, utcnow
from obsmem.stores import LoadRequest, SQLiteStore, flows
from obsmem.stores.flows import Call, Flow
from obsmem.testing.store_conformance.kit import subject

T0 = datetime(2025, 12, 4, 14, 30, tzinfo=UTC)

Via = Literal["load", "append_messages"]
"""How a message is stored: a turn's load (the quick transaction on the event loop) or
``append_messages`` (the worker thread)."""


def _msg(i: int) -> Message:
    return Message(
        id=f"m{i}",
        role="user",
        parts=(TextPart(text=f"message {i}"),),
        created_at=T0 + timedelta(minutes=i),
    )


async def _store_messages(
    store: SQLiteStore, numbers: range, via: Via = "load"
) -> tuple[list[str], list[StoreError]]:
    """Store each message in its own call: the ids acknowledged, and the errors raised."""
    acknowledged: list[str] = []
    errors: list[StoreError] = []
    for i in numbers:
        try:
            if via == "load":
                snapshot = await store.load(LoadRequest(subject=subject(), append=[_msg(i)]))
                stored = list(snapshot.stored)
            else:
                stored = await store.append_messages("t1", [_msg(i)])
        except StoreError as exc:
            errors.append(exc)
        else:
            acknowledged += [m.id for m in stored]
    return acknowledged, errors


async def _ids_at(path: Path) -> list[str]:
    """The message ids of thread t1 in the file at ``path``, as a restarted process finds them."""
    store = SQLiteStore(path)
    try:
        return [m.id for m in await store.list_messages("t1")]
    finally:
        await store.aclose()


def _copy(source: Path, target: Path) -> None:
    """A consistent copy of a live database, as a backup tool makes one."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "obsmem" and r.levelno == logging.WARNING
    ]


def _every_call_failed(
    acknowledged: list[str], errors: list[StoreError], path: Path, what: str
) -> None:
    """None of the 20 calls was acknowledged; each error names the file, what happened to it,
    and that a restart opens the file now at the path."""
    assert acknowledged == []
    assert len(errors) == 20
    for error in errors:
        message = str(error)
        assert str(path) in message
        assert what in message
        assert "restart" in message


def _one_warning(caplog: pytest.LogCaptureFixture, path: Path, what: str) -> None:
    [warning] = _warnings(caplog)
    assert str(path) in warning
    assert what in warning


@pytest.mark.parametrize("via", ["load", "append_messages"])
async def test_writes_after_the_file_is_deleted_fail_naming_it(
    tmp_path: Path, via: Via, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="obsmem")
    path = tmp_path / "obsmem.db"
    store = SQLiteStore(path)
    before, errors = await _store_messages(store, range(1, 6))
    assert (before, errors) == (["m1", "m2", "m3", "m4", "m5"], [])

    path.unlink()
    acknowledged, errors = await _store_messages(store, range(6, 26), via)

    _every_call_failed(acknowledged, errors, path, "deleted")
    # Reads fail too: they would show what is no longer in any file.
    with pytest.raises(StoreError, match="deleted"):
        await store.list_messages("t1")
    _one_warning(caplog, path, "deleted")
    await store.aclose()
    # Nothing acknowledged is missing from the file a restarted process opens.
    assert not set(acknowledged) - set(await _ids_at(path))


@pytest.mark.parametrize("via", ["load", "append_messages"])
async def test_writes_after_the_file_is_replaced_fail_naming_it(
    tmp_path: Path, via: Via, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="obsmem")
    path = tmp_path / "obsmem.db"
    backup = tmp_path / "backup.db"
    store = SQLiteStore(path)
    await _store_messages(store, range(1, 4))
    _copy(path, backup)
    await _store_messages(store, range(4, 6))

    os.replace(backup, path)  # a restore while the process runs
    acknowledged, errors = await _store_messages(store, range(6, 26), via)

    _every_call_failed(acknowledged, errors, path, "replaced by another file")
    _one_warning(caplog, path, "replaced")
    await store.aclose()
    # The restored file is what a restarted process finds (the -wal file left at the path,
    # written for the file replaced, is not read as part of it), and nothing acknowledged is
    # missing.
    found = await _ids_at(path)
    assert found == ["m1", "m2", "m3"]
    assert not set(acknowledged) - set(found)
    store = SQLiteStore(path)
    assert await _store_messages(store, range(6, 8)) == (["m6", "m7"], [])
    await store.aclose()


async def test_a_restore_under_a_running_process_is_intact_once_it_stops(
    tmp_path: Path,
) -> None:
    """The -wal file at the path holds pages of the file replaced (written since its last
    checkpoint): read with the restored file, they make it a malformed database. The process
    stopping (or its first call after the restore) empties them into the file they belong to."""
    path = tmp_path / "obsmem.db"
    backup = tmp_path / "backup.db"
    store = SQLiteStore(path)
    await _store_messages(store, range(1, 40))
    _copy(path, backup)
    await _store_messages(store, range(40, 80))
    other = sqlite3.connect(path)  # a checkpoint: the WAL then holds only the later pages
    other.execute("PRAGMA wal_checkpoint(PASSIVE)")
    other.close()
    await _store_messages(store, range(80, 120))

    os.replace(backup, path)
    await store.aclose()

    restored = sqlite3.connect(path)
    try:
        assert restored.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert restored.execute("SELECT count(*) FROM messages").fetchall() == [(39,)]
    finally:
        restored.close()


@pytest.mark.parametrize("via", ["load", "append_messages"])
async def test_calls_work_again_once_the_file_is_moved_back(
    tmp_path: Path, via: Via, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="obsmem")
    path = tmp_path / "obsmem.db"
    away = tmp_path / "elsewhere.db"
    store = SQLiteStore(path)
    await _store_messages(store, range(1, 6))

    os.replace(path, away)
    acknowledged, errors = await _store_messages(store, range(6, 26), via)
    assert acknowledged == []
    assert len(errors) == 20
    assert all(str(path) in str(e) and "put it back" in str(e) for e in errors)

    os.replace(away, path)
    acknowledged, errors = await _store_messages(store, range(6, 26), via)
    assert errors == []
    assert acknowledged == [f"m{i}" for i in range(6, 26)]
    [lost, healed] = _warnings(caplog)
    assert str(path) in lost
    assert "deleted" in lost
    assert str(path) in healed
    assert "back" in healed
    await store.aclose()
    assert await _ids_at(path) == [f"m{i}" for i in range(1, 26)]


@pytest.mark.parametrize("quick", [True, False])
async def test_a_write_into_a_file_that_went_meanwhile_is_not_acknowledged(
    tmp_path: Path, quick: bool
) -> None:
    """The file goes between the check before a call and its commit: the call that wrote into
    it raises, and its change is in that file (found once the file is back)."""
    path = tmp_path / "obsmem.db"
    away = tmp_path / "elsewhere.db"
    store = SQLiteStore(path)
    await _store_messages(store, range(1, 3))

    def append_and_move(_: bool) -> Flow[list[Message]]:
        stored = yield from flows.append_messages("t1", [_msg(3)], now=utcnow())
        os.replace(path, away)  # before the transaction commits
        return stored

    with pytest.raises(StoreError, match="change went into the file this process opened") as e:
        await store._driver.run(Call(append_and_move, write=True, quick=quick))  # pyright: ignore[reportPrivateUsage]
    assert str(path) in str(e.value)
    os.replace(away, path)
    assert [m.id for m in await store.list_messages("t1")] == ["m1", "m2", "m3"]
    await store.aclose()


async def test_a_read_only_store_reads_the_file_now_at_its_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The inspector's store changes nothing, so it follows the path: a restored file is read
    from then on, and a deleted one is an error until a file is there again."""
    caplog.set_level(logging.WARNING, logger="obsmem")
    path = tmp_path / "obsmem.db"
    backup = tmp_path / "backup.db"
    writer = SQLiteStore(path)
    await _store_messages(writer, range(1, 4))
    _copy(path, backup)
    await _store_messages(writer, range(4, 6))
    await writer.aclose()
    reader = SQLiteStore(path, read_only=True)
    assert len(await reader.list_messages("t1")) == 5

    os.replace(backup, path)
    assert [m.id for m in await reader.list_messages("t1")] == ["m1", "m2", "m3"]
    os.replace(path, backup)
    with pytest.raises(StoreError, match="deleted") as caught:
        await reader.list_messages("t1")
    assert str(path) in str(caught.value)
    os.replace(backup, path)
    assert [m.id for m in await reader.list_messages("t1")] == ["m1", "m2", "m3"]
    await reader.aclose()
    [replaced, deleted, back] = _warnings(caplog)
    assert "replaced by another file; reading the file now at that path" in replaced
    assert "deleted" in deleted
    assert "back at its path" in back


async def test_a_relative_path_stays_the_file_opened_after_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SQLiteStore("obsmem.db")
    await _store_messages(store, range(1, 3))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert await _store_messages(store, range(3, 5)) == (["m3", "m4"], [])
    assert not (elsewhere / "obsmem.db").exists()
    await store.aclose()


async def test_memory_save_raises_the_store_error(tmp_path: Path) -> None:
    path = tmp_path / "obsmem.db"
    memory = Memory(SQLiteStore(path))
    ref = {"thread": "t1", "resource": "r1"}
    await memory.save(ref, [_msg(1)], actor_model=None)
    path.unlink()
    with pytest.raises(StoreError, match="deleted") as caught:
        await memory.save(ref, [_msg(2)], actor_model=None)
    assert str(path) in str(caught.value)
    await memory.aclose()
