"""``obsmem revise``: a thread's log corrected from the command line, on a real SQLite file."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from obsmem import Memory
from obsmem.cli import main
from obsmem.messages import Message
from obsmem.records import CycleRecord, OMRecord
from obsmem.stores import SQLiteStore
from obsmem.testing import scripted_observer, scripted_reflector

REF = {"resource": "u1", "thread": "t1"}


async def _remember(db: Path, *said: str) -> str:
    """A thread whose log observed ``said``; its log."""
    options = {
        "observation": {"model": scripted_observer()},
        "reflection": {"model": scripted_reflector()},
    }
    async with Memory(SQLiteStore(db), observational_memory=options) as memory:
        await memory.context(REF, [Message.user(text) for text in said], actor_model=None)
        assert await memory.compact(REF, keep_tokens=0)
        assert memory.om is not None
        return await memory.om.observations("t1", "u1")


async def _stored(db: Path) -> tuple[OMRecord, list[CycleRecord]]:
    store = SQLiteStore(db)
    try:
        [head, *_] = await store.history("thread:t1")
        return head, await store.list_cycles("thread:t1", kinds=("revision",))
    finally:
        await store.aclose()


def _line(log: str, words: str) -> str:
    [line] = [line for line in log.split("\n") if words in line]
    return line


def test_revise_replaces_and_removes_lines_and_records_who_asked(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    log = asyncio.run(_remember(db, "My favorite color is blue", "I live in Lisbon"))
    blue, lisbon = _line(log, "blue"), _line(log, "Lisbon")
    out = io.StringIO()
    args = ["revise", "--db", str(db), "--thread", "t1"]

    assert (
        main([*args, "--replace", blue, blue.replace("blue", "green"), "--by", "ana"], out=out) == 0
    )
    assert main([*args, "--remove", lisbon], out=out) == 0

    assert out.getvalue().splitlines() == [
        "revised thread:t1: generation 1",
        "revised thread:t1: generation 2",
    ]
    head, rows = asyncio.run(_stored(db))
    assert "favorite color is green" in head.observations
    assert "blue" not in head.observations
    assert "Lisbon" not in head.observations
    assert [(r.by, r.generation) for r in rows] == [("obsmem revise", 2), ("ana", 1)]


def test_revise_refuses_a_missing_line_or_thread_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "m.db"
    asyncio.run(_remember(db, "My favorite color is blue"))
    missing = "* 🔴 (09:00) User said: I like tea"

    assert main(["revise", "--db", str(db), "--thread", "t1", "--remove", missing]) == 2
    assert repr(missing) in capsys.readouterr().err
    assert main(["revise", "--db", str(db), "--thread", "t9", "--remove", missing]) == 2
    assert "no thread 't9'" in capsys.readouterr().err
    head, rows = asyncio.run(_stored(db))
    assert (head.generation, rows) == (0, [])


def test_revise_on_a_mistyped_database_path_makes_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "memroy.db"
    assert main(["revise", "--db", str(typo), "--thread", "t1", "--remove", "x"]) == 2
    assert f"No obsmem database at {typo}" in capsys.readouterr().err
    assert not typo.exists()
