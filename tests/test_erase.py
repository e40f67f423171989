"""Erase through Memory and ``obsmem delete``: after a delete, no store call, recall or search
returns anything of what was erased."""

from __future__ import annotations

import asyncio
import io
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from obsmem import Memory, Message
from obsmem.cli import main
from obsmem.errors import StoreError
from obsmem.stores import SQLiteStore, Store
from obsmem.stores.erasure import MAX_ERASED_THREADS, tombstone_key, with_tombstone
from obsmem.testing import scripted_observer

SECRET = "zanzibarquokka"
ALICE = {"resource": "alice", "thread": "t1"}
OTHER = {"resource": "alice", "thread": "t2"}


def _options(scope: str = "resource") -> dict[str, Any]:
    return {
        "scope": scope,
        "retrieval": {"vector": True},
        "observation": {
            "model": scripted_observer(words=8),
            "messageTokens": 200,
            "bufferTokens": False,
        },
        "reflection": {"observationTokens": 50_000},
    }


async def _talk(memory: Memory, ref: dict[str, str], word: str, turns: int = 4) -> None:
    for i in range(turns):
        text = f"{word} {SECRET if word == SECRET else word} note {i}. " * 12
        await memory.context(ref, [Message.user(text, id=f"{ref['thread']}-{i}")], actor_model=None)
    await memory.settle()


async def _everything(store: Store, memory: Memory, ref: dict[str, str]) -> str:
    """Every text a store call or the recall tool (bound to ``ref``) gives back."""
    parts: list[str] = []
    for resource in await store.list_resources():
        for thread in await store.list_threads(resource):
            parts.append(repr(thread))
            parts += [repr(m) for m in await store.list_messages(thread.id)]
        parts += [repr(g) for g in await store.list_observation_groups(resource)]
        parts.append(repr(await store.get_resource(resource)))
    for key in ("resource:alice", "thread:t1", "thread:t2"):
        parts += [repr(r) for r in await store.history(key)]
        parts += [repr(c) for c in await store.list_cycles(key)]
    recall = memory.recall_function(ref)
    parts.append(await recall(mode="threads"))
    parts.append(await recall(mode="search", query=f"{SECRET} note"))
    parts.append(await recall(mode="messages", cursor="t1-0"))
    return "\n".join(parts)


async def test_delete_thread_in_resource_scope_leaves_no_trace(store: Store) -> None:
    memory = Memory(store, observational_memory=_options())
    await _talk(memory, ALICE, SECRET)
    await _talk(memory, OTHER, "harbor")
    before = await _everything(store, memory, OTHER)
    assert SECRET in before
    erased = await memory.delete_thread(ALICE)
    assert erased.thread_ids == ("t1",)
    after = await _everything(store, memory, OTHER)
    assert SECRET not in after
    assert "harbor" in after  # the other thread and its memory stay
    await memory.aclose()


async def test_delete_resource_leaves_no_trace(store: Store) -> None:
    memory = Memory(store, observational_memory=_options("thread"), working_memory=True)
    await _talk(memory, ALICE, SECRET)
    await _talk(memory, OTHER, "harbor")
    await memory.update_working_memory(OTHER, f"# User\nlikes {SECRET}s")
    assert f"likes {SECRET}s" in await memory.get_working_memory(OTHER)
    erased = await memory.delete_resource("alice")
    assert sorted(erased.thread_ids) == ["t1", "t2"]
    everything = await _everything(store, memory, ALICE)
    assert SECRET not in everything
    assert "harbor" not in everything
    assert await store.list_resources() == []
    assert SECRET not in await memory.get_working_memory(OTHER)
    await memory.aclose()


async def test_unknown_or_foreign_thread_is_an_error_naming_the_fix() -> None:
    memory = Memory(SQLiteStore(":memory:"))
    await memory.context(ALICE, [Message.user("hi")], actor_model=None)
    with pytest.raises(StoreError, match=r"no thread 'nope' to delete: check the id"):
        await memory.delete_thread({"resource": "alice", "thread": "nope"})
    with pytest.raises(StoreError, match="belongs to another resource"):
        await memory.delete_thread({"resource": "mallory", "thread": "t1"})
    with pytest.raises(StoreError, match="no resource 'bob' to delete"):
        await memory.delete_resource("bob")
    assert len(await memory.messages("t1")) == 1
    await memory.aclose()


def _db_bytes(path: Path) -> bytes:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    conn.close()
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


async def _filled(path: Path) -> None:
    memory = Memory(SQLiteStore(path), observational_memory=_options())
    await _talk(memory, ALICE, SECRET)
    await _talk(memory, OTHER, "harbor")
    await memory.aclose()


def test_obsmem_delete_asks_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "obsmem.db"
    asyncio.run(_filled(path))
    out = io.StringIO()
    monkeypatch.setattr("sys.stdin", io.StringIO("no\n"))
    assert main(["delete", "--thread", "t1", "--db", str(path)], out=out) == 1
    assert "Erase thread 't1' of resource 'alice'" in out.getvalue()
    assert "Nothing erased." in out.getvalue()
    assert SECRET.encode() in _db_bytes(path)
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))
    assert main(["delete", "--thread", "t1", "--db", str(path)], out=io.StringIO()) == 0
    assert SECRET.encode() not in _db_bytes(path)
    _inspect_shows_nothing_of_t1(path, capsys)
    assert main(["delete", "--thread", "t1", "--yes", "--db", str(path)], out=io.StringIO()) == 2
    assert "no thread 't1'" in capsys.readouterr().err


def _inspect_shows_nothing_of_t1(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``obsmem inspect``: the list, the other thread in detail (its log, as stored and as the
    actor sees it, and its cycles) and the erased thread by id."""
    capsys.readouterr()
    shown: list[str] = []
    for args in (
        [],
        ["--thread", "t2"],
        ["--thread", "t2", "--as-actor"],
        ["--thread", "t2", "--cycles", "--json"],
    ):
        out = io.StringIO()
        assert main(["inspect", "--db", str(path), *args], out=out) == 0, args
        shown.append(out.getvalue())
    assert "harbor" in shown[1]  # the other thread is still shown
    assert main(["inspect", "--db", str(path), "--thread", "t1"], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert "no thread 't1'" in err
    for text in [*shown, err]:
        assert SECRET not in text
    assert "thread t2" in shown[0]
    assert "thread t1" not in shown[0]


def test_obsmem_delete_resource_with_yes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "obsmem.db"
    asyncio.run(_filled(path))
    out = io.StringIO()
    assert main(["delete", "--resource", "alice", "--yes", "--db", str(path)], out=out) == 0
    assert "Erased resource 'alice' (2 threads, 8 messages)." in out.getvalue()
    assert b"harbor" not in _db_bytes(path)
    assert main(["delete", "--resource", "alice", "--yes", "--db", str(path)]) == 2
    assert "no resource 'alice'" in capsys.readouterr().err
    missing = str(tmp_path / "none.db")
    assert main(["delete", "--resource", "alice", "--yes", "--db", missing]) == 2


def test_a_resource_keeps_its_newest_tombstones() -> None:
    """Each erase of a thread leaves its id's hash and time; past ``MAX_ERASED_THREADS`` the oldest
    go, an id erased again is the newest, and the rest of the metadata stays."""
    metadata: dict[str, Any] = {"om:working_memory": "the user's plan"}
    for i in range(MAX_ERASED_THREADS + 2):
        metadata = with_tombstone(
            metadata, f"t{i}", erased_at=f"2026-01-01T00:{i // 60:02}:{i % 60:02}"
        )
    metadata = with_tombstone(metadata, "t2", erased_at="2026-02-01T00:00:00")
    tombs = metadata["om:erased"]
    assert len(tombs) == MAX_ERASED_THREADS
    assert tombstone_key("t0") not in tombs
    assert tombstone_key("t1") not in tombs
    assert tombstone_key("t3") in tombs
    assert list(tombs)[-1] == tombstone_key("t2")
    assert metadata["om:working_memory"] == "the user's plan"
