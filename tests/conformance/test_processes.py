"""Two OS processes committing to the same store: one SQLite file, one PostgreSQL database."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from obsmem.stores import PostgresStore, SQLiteStore, Store
from obsmem.testing.store_conformance.kit import assert_record_invariants, open_record

WORKER = Path(__file__).with_name("store_worker.py")
ROUNDS = 150


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_two_processes_share_one_store_without_losing_work(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    path: str = (
        str(tmp_path / "shared.db") if kind == "sqlite" else request.getfixturevalue("postgres_dsn")
    )
    store: Store = SQLiteStore(path) if kind == "sqlite" else PostgresStore(path)
    await open_record(store, "shared", "r1")
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            str(path),
            name,
            str(ROUNDS),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name in ("a", "b")
    ]
    outputs = [await p.communicate() for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err.decode()

    messages = await store.list_messages("shared")
    assert [m.seq for m in messages] == list(range(1, 2 * ROUNDS + 1))
    assert {m.id for m in messages} == {f"{n}-{i}" for n in "ab" for i in range(ROUNDS)}

    await assert_record_invariants(store, "thread:shared")
    head = await store.get_record("thread:shared")
    assert head is not None
    history = await store.history("thread:shared")
    assert len(history) > 1, "the workers should have reflected at least once"
    # Every message was observed at most once, in order: the log followed by the pending chunks
    # names each covered message exactly once and nothing past what is covered.
    lines = [ln for ln in head.observations.splitlines() if ln]
    for chunk in head.chunks:
        lines += chunk.observations.splitlines()
    seen = [ln.removeprefix("* saw ") for ln in lines]
    covered = head.covered_through("shared")
    assert seen == [m.id for m in messages[:covered]]
    await store.aclose()
