"""Import writes all or nothing, refuses stored ids unless told otherwise, and moves a user's
memory to a new resource id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from obsmem import Memory, Message
from obsmem.errors import StoreError
from obsmem.stores import SQLiteStore, Store
from obsmem.transfer import ImportInputError

from .helpers import ALICE, export_to, filled, options, talk


async def _exported(tmp_path: Path) -> Path:
    source = await filled(SQLiteStore(tmp_path / "source.db"))
    path = tmp_path / "alice.jsonl"
    await export_to(source, path)
    await source.aclose()
    return path


async def _nothing_in(store: Store) -> None:
    assert await store.list_resources() == []
    assert await store.get_thread("t1") is None
    assert await store.history("resource:alice") == []
    assert await store.list_observation_groups("alice") == []
    assert await store.get_resource("alice") == {}


async def test_a_bad_line_halfway_writes_nothing(store: Store, tmp_path: Path) -> None:
    path = await _exported(tmp_path)
    lines = path.read_text().splitlines()
    half = len(lines) // 2
    lines[half] = lines[half][: len(lines[half]) // 2]  # cut short, as a failed copy leaves it
    path.write_text("\n".join(lines) + "\n")
    memory = Memory(store)
    with pytest.raises(ImportInputError, match=rf"line {half + 1}: .*nothing was imported"):
        await memory.import_(path)
    await _nothing_in(store)


async def test_a_write_that_fails_halfway_writes_nothing(store: Store, tmp_path: Path) -> None:
    """The file is valid, but an observation group near its end is stored already: the insert
    fails after the threads and messages went in, and all of it rolls back."""
    path = await _exported(tmp_path)
    lines = path.read_text().splitlines()
    group = next(line for line in lines if json.loads(line)["type"] == "group")
    assert lines.index(group) > len(lines) // 2
    only_group = tmp_path / "group.jsonl"
    only_group.write_text(f"{lines[0]}\n{group}\n")
    memory = Memory(store)
    await memory.import_(only_group)
    with pytest.raises(StoreError):
        await memory.import_(path)
    assert await store.get_thread("t1") is None
    assert await store.list_resources() == []
    assert await store.history("resource:alice") == []


async def test_on_conflict_refuse_skip_replace(tmp_path: Path) -> None:
    path = await _exported(tmp_path)
    memory = Memory(SQLiteStore(tmp_path / "source.db"), observational_memory=options())
    with pytest.raises(StoreError, match=r"threads 't1', 't2'.*--on-conflict skip"):
        await memory.import_(path)

    await talk(memory, ALICE, "later", turns=1)  # t1 goes on after the export
    count = (await memory.thread("t1")).message_count  # type: ignore[union-attr]
    skipped = await memory.import_(path, on_conflict="skip")
    assert skipped.skipped_threads == ("t1", "t2")
    assert "resource:alice" in skipped.skipped_keys
    assert (await memory.thread("t1")).message_count == count  # type: ignore[union-attr]

    replaced = await memory.import_(path, on_conflict="replace")
    assert replaced.replaced_threads == ("t1", "t2")
    again = tmp_path / "again.jsonl"
    await export_to(memory, again)
    assert again.read_text().splitlines()[1:] == path.read_text().splitlines()[1:]
    await memory.aclose()


async def test_resource_map_moves_a_users_memory(tmp_path: Path) -> None:
    path = await _exported(tmp_path)
    memory = Memory(
        SQLiteStore(tmp_path / "new.db"), observational_memory=options(), working_memory=True
    )
    await memory.import_(path, resource_map={"alice": "carol"})
    store = memory.store
    assert await store.list_resources() == ["carol"]
    assert [t.id for t in await store.list_threads("carol")] == ["t1", "t2"]
    assert {m.resource_id for m in await store.list_messages("t1")} == {"carol"}
    assert await store.history("resource:alice") == []
    assert (await store.get_record("resource:carol")) is not None
    groups = await store.list_observation_groups("carol")
    assert groups
    assert {g.key for g in groups} == {"resource:carol"}
    assert {e.resource_id for e in await store.list_embeddings("resource:carol")} == {"carol"}
    carol = {"resource": "carol", "thread": "t2"}
    assert "likes quokkas" in await memory.get_working_memory(carol)
    found = await memory.recall_function(carol)(mode="search", query="zanzibar note")
    assert "zanzibar" in found
    with pytest.raises(ImportInputError, match="--resource-map names \\['nobody'\\]"):
        await memory.import_(path, resource_map={"nobody": "x"}, dry_run=True)
    await memory.aclose()


async def test_records_from_python_are_imported_like_a_file(tmp_path: Path) -> None:
    """A reader of another system hands records over as an async iterator, header first."""
    path = await _exported(tmp_path)

    async def records():  # type: ignore[no-untyped-def]
        for line in path.read_text().splitlines():
            yield json.loads(line)

    memory = Memory(SQLiteStore(tmp_path / "new.db"))
    report = await memory.import_(records())
    assert report.counts["thread"] == 2
    assert len(await memory.messages("t1")) == 7
    with pytest.raises(ImportInputError, match="line 1: the first line must be the"):
        await memory.import_([_thread_record()])
    await memory.aclose()


def _thread_record() -> dict[str, object]:
    return {
        "type": "thread",
        "id": "x",
        "resource_id": "r",
        "message_count": 0,
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
    }


async def test_messages_out_of_order_are_named(tmp_path: Path) -> None:
    path = await _exported(tmp_path)
    lines = path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "message")
    lines[first], lines[first + 1] = lines[first + 1], lines[first]
    path.write_text("\n".join(lines))
    memory = Memory(SQLiteStore(tmp_path / "new.db"))
    with pytest.raises(ImportInputError, match=rf"line {first + 1}: .*has seq 2, expected 1"):
        await memory.import_(path)
    assert await memory.messages("t1") == []
    await memory.context(ALICE, [Message.user("hi")], actor_model=None)  # the store still works
    await memory.aclose()


async def test_the_ledger_travels_with_ledger_true(tmp_path: Path) -> None:
    source = await filled(SQLiteStore(tmp_path / "source.db"))
    cycles = await source.store.list_cycles("resource:alice")
    assert cycles
    path = tmp_path / "ledger.jsonl"
    await export_to(source, path, resource="alice", ledger=True)
    await source.aclose()
    memory = Memory(SQLiteStore(tmp_path / "new.db"))
    await memory.import_(path)
    assert await memory.store.list_cycles("resource:alice") == cycles
    without = tmp_path / "plain.jsonl"
    await export_to(memory, without, resource="alice")
    assert '"type":"cycle"' not in without.read_text()
    await memory.aclose()


async def test_progress_is_reported_on_long_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = await _exported(tmp_path)
    monkeypatch.setattr("obsmem.transfer.importing.PROGRESS_EVERY", 10)
    seen: list[tuple[str, int]] = []
    memory = Memory(SQLiteStore(tmp_path / "new.db"))
    await memory.import_(path, progress=lambda stage, done: seen.append((stage, done)))
    assert ("validated", 10) in seen
    assert ("written", 20) in seen
    await memory.aclose()


async def test_the_failure_state_stays_behind(tmp_path: Path) -> None:
    source = await filled(SQLiteStore(tmp_path / "source.db"))
    failure = {"role": "observer", "error": "rate limited", "count": 3}
    await source.store.update_thread("t1", metadata={"om:failure": failure})
    await source.store.update_resource("alice", {"om:failure": failure})
    path = tmp_path / "alice.jsonl"
    await export_to(source, path)
    await source.aclose()
    text = path.read_text()
    assert "om:failure" not in text
    assert "rate limited" not in text
    assert "likes quokkas" in text  # the rest of the metadata travels


async def test_a_large_import_gets_time_in_proportion_to_its_size(tmp_path: Path) -> None:
    """The import is one transaction: PostgreSQL allows it ``call_timeout`` plus a millisecond
    per record, so a file of any size is not cut off at the timeout of one call."""
    from obsmem.stores import PostgresStore
    from obsmem.stores.changes import ImportWrite

    path = await _exported(tmp_path)
    data = len(path.read_text().splitlines()) - 1  # every record but the header
    seen: list[int] = []
    store = SQLiteStore(tmp_path / "target.db")
    write = store.write_import

    async def counting(request: ImportWrite) -> int:
        seen.append(request.records)
        return await write(request)

    store.write_import = counting  # type: ignore[method-assign]
    await Memory(store).import_(path)
    assert seen == [data]
    await store.aclose()
    pg = PostgresStore("postgresql://nobody@127.0.0.1:1/none", call_timeout=60)
    driver = pg._driver
    assert driver._timeout_for(0) == 60  # type: ignore[attr-defined]
    assert driver._timeout_for(100_000) == 160  # type: ignore[attr-defined]
    await pg.aclose()
