"""Importing a Mastra memory database written by real Mastra code (see ``mastra_db.py``)."""

from __future__ import annotations

import asyncio
import io
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from obsmem import Memory
from obsmem.cli import main
from obsmem.messages import (
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from obsmem.stores import SQLiteStore
from obsmem.testing import scripted_observer, scripted_reflector
from obsmem.transfer.mastra import MastraImportError, MastraThread, read_mastra

from .mastra_db import mastra_database

TRIP, COOKING = "thread-trip", "thread-cooking"


@pytest.fixture(scope="module")
def mastra(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("mastra") / "mastra.db"
    return path, mastra_database(path)


def _threads(path: Path) -> dict[str, MastraThread]:
    return {t.id: t for t in read_mastra(path)}


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_reader_gives_threads_messages_and_the_log_with_its_cursor(
    mastra: tuple[Path, dict[str, Any]],
) -> None:
    path, written = mastra
    threads = _threads(path)
    assert list(threads) == [TRIP, COOKING]
    trip = threads[TRIP]
    assert (trip.resource_id, trip.title, dict(trip.metadata)) == (
        "user-ada",
        "Lisbon trip",
        {"channel": "web"},
    )
    # Every Mastra message, in order, with its id and timestamp (the tool step is split).
    mastra_ids = [m.metadata.get("mastra", {}).get("id", m.id) for m in trip.messages]
    assert list(dict.fromkeys(mastra_ids)) == [m["id"] for m in written["threads"][TRIP]]
    times = {m["id"]: _when(m["createdAt"]) for m in written["threads"][TRIP]}
    assert all(m.created_at == times[i] for m, i in zip(trip.messages, mastra_ids, strict=True))
    # The tool call and its result, paired by id, in an assistant and a tool message.
    [call] = [p for m in trip.messages for p in m.parts if isinstance(p, ToolCallPart)]
    [result] = [p for m in trip.messages for p in m.parts if isinstance(p, ToolResultPart)]
    assert (call.tool_call_id, call.tool_name, call.args) == (
        "call-weather-1",
        "getWeather",
        {"city": "Lisbon", "month": "May"},
    )
    assert (result.tool_call_id, result.content) == (
        "call-weather-1",
        {"highC": 22, "lowC": 14, "rainDays": 6},
    )
    roles = [m.role for m in trip.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "user"]
    kinds = {type(p) for m in trip.messages for p in m.parts}
    assert {TextPart, ReasoningPart, ImagePart} <= kinds
    [image] = [p for m in trip.messages for p in m.parts if isinstance(p, ImagePart)]
    assert image.media_type == "image/png"
    assert (image.data or b"").startswith(b"\x89PNG")
    # The log and the cursor where Mastra had it.
    assert trip.observations == written["observations"]
    assert trip.last_observed_at == _when(written["lastObservedAt"])
    assert trip.observed_through == written["observedThroughId"]
    assert trip.resource_working_memory == written["workingMemory"]
    cooking = threads[COOKING]
    assert [m.text for m in cooking.messages] == [
        "Give me a quick pasta recipe.",
        "Boil spaghetti, toss with garlic, olive oil and chilli.",
    ]
    assert cooking.observations is None
    assert cooking.observed_through is None


async def _next_turn(db: Path, thread: str) -> list[Message]:
    options = {
        "observation": {"model": scripted_observer()},
        "reflection": {"model": scripted_reflector()},
    }
    async with Memory(SQLiteStore(db), observational_memory=options, working_memory=True) as memory:
        ref = {"resource": "user-ada", "thread": thread}
        return (await memory.context(ref, [Message.user("And shoes?")], actor_model=None)).messages


def _import(source: Path, db: Path, *flags: str) -> str:
    """``obsmem import`` of the Mastra database (told from the file), its report."""
    out = io.StringIO()
    assert main(["import", str(source), "--db", str(db), *flags], out=out) == 0
    return out.getvalue()


def test_imported_log_and_only_the_messages_after_the_cursor_reach_the_next_turn(
    mastra: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, written = mastra
    db = tmp_path / "obsmem.db"
    assert "Imported" in _import(path, db)
    sent = asyncio.run(_next_turn(db, TRIP))
    system = "\n".join(m.text for m in sent if m.role == "system")
    assert "User booked a hotel close to the river." in system
    assert written["workingMemory"] in system
    raw = [m for m in sent if m.role != "system"]
    assert [m.id for m in raw[:-1]] == [written["threads"][TRIP][-1]["id"]]
    assert [m.text for m in raw] == ["Can you remind me what I need to pack?", "And shoes?"]
    # The thread Mastra never observed comes whole.
    other = [m.text for m in asyncio.run(_next_turn(db, COOKING)) if m.role != "system"]
    assert other[:2] == [
        "Give me a quick pasta recipe.",
        "Boil spaghetti, toss with garlic, olive oil and chilli.",
    ]


def test_a_database_without_observational_memory_imports_messages_only(tmp_path: Path) -> None:
    source = tmp_path / "plain.db"
    written = mastra_database(source, observational_memory=False)
    threads = _threads(source)
    assert all(t.observations is None and t.observed_through is None for t in threads.values())
    db = tmp_path / "obsmem.db"
    _import(source, db)
    sent = asyncio.run(_next_turn(db, TRIP))
    assert "<observations>" not in "\n".join(m.text for m in sent if m.role == "system")
    raw_ids = [m.metadata.get("mastra", {}).get("id", m.id) for m in sent if m.role != "system"]
    assert list(dict.fromkeys(raw_ids))[:-1] == [m["id"] for m in written["threads"][TRIP]]


def _refusal(path: Path) -> str:
    with pytest.raises(MastraImportError) as caught:
        list(read_mastra(path))
    return str(caught.value)


def test_unknown_files_are_refused_naming_the_fix(tmp_path: Path) -> None:
    assert "does not exist; give the database file" in _refusal(tmp_path / "missing.db")
    garbage = tmp_path / "notes.db"
    garbage.write_bytes(b"these are my notes, not a database" * 100)
    assert "is not a SQLite database" in _refusal(garbage)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE notes (x)").connection.close()
    assert "no mastra_threads or mastra_messages table" in _refusal(other)


def test_a_damaged_message_is_refused_naming_it(
    mastra: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, written = mastra
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(path.read_bytes())
    with sqlite3.connect(damaged) as db:
        db.execute("UPDATE mastra_messages SET content = '{broken' WHERE thread_id = ?", (COOKING,))
    message = _refusal(damaged)
    assert written["threads"][COOKING][0]["id"] in message
    assert "content that is not JSON; the database is damaged" in message


def test_obsmem_import_from_mastra_is_all_or_nothing_and_dry_run_writes_nothing(
    mastra: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = mastra
    db = tmp_path / "obsmem.db"
    report = _import(path, db, "--dry-run")
    assert "Would import" in report
    assert "Nothing was written" in report
    assert asyncio.run(_thread_ids(db)) == []
    # The second thread's message is damaged: nothing of the first is written either.
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(path.read_bytes())
    with sqlite3.connect(damaged) as conn:
        conn.execute(
            "UPDATE mastra_messages SET content = '{broken' WHERE thread_id = ?", (COOKING,)
        )
    code = main(["import", "--from", "mastra", str(damaged), "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 1
    assert "the database is damaged" in err
    assert len(err.strip().splitlines()) == 1
    assert asyncio.run(_thread_ids(db)) == []
    # Imported once; a second import of the same database is refused, naming the fix.
    _import(path, db)
    assert sorted(asyncio.run(_thread_ids(db))) == sorted([TRIP, COOKING])
    assert main(["import", str(path), "--db", str(db)]) == 1
    assert "--on-conflict" in capsys.readouterr().err


async def _thread_ids(db: Path) -> list[str]:
    store = SQLiteStore(db)
    try:
        return [t.id for r in await store.list_resources() for t in await store.list_threads(r)]
    finally:
        await store.aclose()
