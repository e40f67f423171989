"""``obsmem export`` and ``obsmem import`` on real SQLite files: the file's mode, --dry-run, and
an OpenAI chat transcript that becomes a thread whose memory builds on its first turn."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from obsmem import Memory, Message
from obsmem.cli import main
from obsmem.messages import ToolCallPart, ToolResultPart
from obsmem.stores import SQLiteStore
from obsmem.testing import scripted_observer

from .helpers import filled


def _db_bytes(path: Path) -> bytes:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    conn.close()
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


@pytest.fixture
def source_db(tmp_path: Path) -> Path:
    path = tmp_path / "source.db"

    async def fill() -> None:
        await (await filled(SQLiteStore(path))).aclose()

    asyncio.run(fill())
    return path


def test_export_file_is_private_and_never_overwritten(
    source_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "alice.jsonl"
    old = os.umask(0)  # a umask that would let anyone read: the file is 0600 all the same
    try:
        assert main(["export", "--resource", "alice", "-o", str(out), "--db", str(source_db)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    header = json.loads(out.read_text().splitlines()[0])
    assert header["format"] == "obsmem-export"
    assert header["version"] == 1
    assert header["scope"] == {"resource": "alice"}
    written = out.read_bytes()
    assert main(["export", "--all", "-o", str(out), "--db", str(source_db)]) == 2
    assert "exists; give another -o path" in capsys.readouterr().err
    assert out.read_bytes() == written
    stdout = io.StringIO()
    assert main(["export", "--thread", "t1", "--db", str(source_db)], out=stdout) == 0
    types = [json.loads(line)["type"] for line in stdout.getvalue().splitlines()]
    assert types[:2] == ["header", "thread"]
    assert types.count("thread") == 1
    missing = tmp_path / "missing.jsonl"
    assert main(["export", "--thread", "nope", "-o", str(missing), "--db", str(source_db)]) == 2
    assert "no thread 'nope' to export" in capsys.readouterr().err
    assert not missing.exists()  # a failed export leaves no file cut short


def test_dry_run_writes_nothing(
    source_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = tmp_path / "all.jsonl"
    assert main(["export", "--all", "-o", str(export), "--db", str(source_db)]) == 0
    target = tmp_path / "target.db"

    async def other_user() -> None:
        memory = Memory(SQLiteStore(target))
        await memory.context(
            {"resource": "bob", "thread": "b1"}, [Message.user("hi")], actor_model=None
        )
        await memory.aclose()

    asyncio.run(other_user())
    before = _db_bytes(target)
    out = io.StringIO()
    assert main(["import", str(export), "--dry-run", "--db", str(target)], out=out) == 0
    assert "Would import" in out.getvalue()
    assert "14 message" in out.getvalue()
    assert "Nothing was written (--dry-run)." in out.getvalue()
    assert _db_bytes(target) == before
    # a conflict is found by a dry run too, and still nothing is written
    assert main(["import", str(export), "--dry-run", "--db", str(source_db)]) == 1
    assert "--on-conflict" in capsys.readouterr().err
    assert main(["import", str(export), "--db", str(target)], out=io.StringIO()) == 0
    assert _db_bytes(target) != before


TRANSCRIPT = [
    {"role": "system", "content": "You are a travel agent."},
    {"role": "user", "content": "Book me a flight to Lisbon on the 3rd. " * 20},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search_flights", "arguments": '{"to": "LIS"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "TP 1234 at 09:40"},
    {"role": "assistant", "content": "TP 1234 leaves at 09:40. Shall I book it? " * 10},
    {"role": "user", "content": "Yes, an aisle seat please. " * 20},
]


@pytest.mark.parametrize("form", ["json", "jsonl"])
def test_a_transcript_becomes_a_thread_whose_memory_builds_on_its_first_turn(
    tmp_path: Path, form: str
) -> None:
    path = tmp_path / f"chat.{form}"
    if form == "json":
        path.write_text(json.dumps(TRANSCRIPT))
    else:
        path.write_text("\n".join(json.dumps(m) for m in TRANSCRIPT))
    db = tmp_path / "obsmem.db"
    args = ["import", str(path), "--thread", "trip", "--resource", "ana", "--db", str(db)]
    assert main(args, out=io.StringIO()) == 0

    async def first_turn() -> None:
        memory = Memory(
            SQLiteStore(db),
            observational_memory={
                "scope": "thread",
                "observation": {
                    "model": scripted_observer(words=8),
                    "messageTokens": 300,
                    "bufferTokens": False,
                },
            },
        )
        stored = await memory.messages("trip")
        assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant", "user"]
        assert [m.seq for m in stored] == [1, 2, 3, 4, 5]
        assert isinstance(stored[1].parts[0], ToolCallPart)
        result = stored[2].parts[0]
        assert isinstance(result, ToolResultPart)
        assert result.tool_name == "search_flights"
        assert await memory.store.get_record("thread:trip") is None  # no log until a turn
        ref = {"resource": "ana", "thread": "trip"}
        await memory.context(ref, [Message.user("Which seat did I ask for?")], actor_model=None)
        await memory.settle()
        head = await memory.store.get_record("thread:trip")
        assert head is not None
        assert "Lisbon" in head.observations
        assert head.cursor["trip"] >= 2
        await memory.aclose()

    asyncio.run(first_turn())


def test_a_transcript_needs_its_thread_and_bad_lines_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text('{"role": "user", "content": "hi"}\n{"role": "user", "content": \n')
    db = str(tmp_path / "obsmem.db")
    assert main(["import", str(path), "--db", db]) == 2
    assert "--thread ID --resource ID" in capsys.readouterr().err
    assert main(["import", str(path), "--thread", "x", "--resource", "r", "--db", db]) == 1
    assert "line 2: not JSON" in capsys.readouterr().err
    assert main(["import", str(path), "--resource-map", "oops", "--db", db]) == 2
