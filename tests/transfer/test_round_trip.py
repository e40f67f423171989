"""Export then import across SQLite and PostgreSQL gives the same memory: the same context for
the next turn and the same recall results (search included)."""

from __future__ import annotations

from pathlib import Path

from obsmem import Memory
from obsmem.stores import PostgresStore, SQLiteStore

from .helpers import ALICE, OTHER, export_to, filled, next_turn, options


def _body(path: Path) -> list[str]:
    """The file's records after its header (which says when it was written)."""
    return path.read_text().splitlines()[1:]


async def test_sqlite_to_postgres_to_sqlite_gives_the_same_next_turn(
    tmp_path: Path, postgres_dsn: str
) -> None:
    source = await filled(SQLiteStore(tmp_path / "a.db"))
    first = tmp_path / "first.jsonl"
    await export_to(source, first)

    middle = Memory(
        PostgresStore(postgres_dsn), observational_memory=options(), working_memory=True
    )
    report = await middle.import_(first)
    assert report.counts["message"] == 14
    assert report.counts["embedding"] >= 2
    second = tmp_path / "second.jsonl"
    await export_to(middle, second)
    assert _body(second) == _body(first)  # nothing lost or changed on PostgreSQL

    last = Memory(
        SQLiteStore(tmp_path / "c.db"), observational_memory=options(), working_memory=True
    )
    await last.import_(second)
    for ref in (ALICE, OTHER):
        expected = await next_turn(source, ref)
        assert "zanzibar" in expected["search"]
        assert "likes quokkas" in str(expected["context"])
        assert await next_turn(last, ref) == expected
        assert await next_turn(middle, ref) == expected
    for memory in (source, middle, last):
        await memory.aclose()
