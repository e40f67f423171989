"""``obsmem inspect --thread ID --cycles``: the cycle ledger of a real store, as a table and as
JSON, on a SQLite file and on PostgreSQL; it never writes."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from obsmem import Memory
from obsmem.stores import SQLiteStore
from obsmem.testing import scripted_observer, scripted_reflector

from .engine.helpers import Conversation
from .loopback_openai import LoopbackServer
from .test_cli import obsmem
from .test_cli_db import _chat_jsonl, _digest, _one_line


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as s:
        yield s


def _thread_of(db: str, cwd: Path) -> str:
    overview = obsmem("inspect", "--db", db, "--json", cwd=cwd)
    assert overview.returncode == 0, overview.stderr
    [thread] = json.loads(overview.stdout)["resources"][0]["threads"]
    return str(thread["id"])


def _check_replayed(db: str, cwd: Path) -> None:
    thread = _thread_of(db, cwd)
    shown = obsmem("inspect", "--db", db, "--thread", thread, "--cycles", "--json", cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["thread"] == thread
    rows = data["cycles"]
    assert rows, "the replay's cycles are recorded"
    assert [r["started_at"] for r in rows] == sorted((r["started_at"] for r in rows), reverse=True)
    assert {r["outcome"] for r in rows} == {"committed"}
    observed = [r for r in rows if r["kind"] in ("buffering", "observation") and r["ranges"]]
    assert observed
    for row in observed:
        assert row["model"]
        assert row["input_tokens"] > 0
        assert row["ranges"][0]["thread_id"] == thread

    table = obsmem("inspect", "--db", db, "--thread", thread, "--cycles", cwd=cwd)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"cycles of thread {thread}")
    assert lines[1].split()[:3] == ["started", "(UTC)", "kind"]
    assert len(lines) == 2 + len(rows)
    first = observed[-1]["ranges"][0]
    assert f"{first['first_seq']}-{first['last_seq']}" in table.stdout

    newest = observed[0]["cycle_id"]  # within the newest cycles, which keep their detail
    detail = obsmem("inspect", "--db", db, "--thread", thread, "--cycle", newest, cwd=cwd)
    assert detail.returncode == 0, detail.stderr
    assert detail.stdout.startswith(f"cycle {newest} (")
    assert "  call 1: observer" in detail.stdout
    assert "    shown:\n" in detail.stdout
    assert "    answer:\n" in detail.stdout
    calls = json.loads(
        obsmem(
            "inspect", "--db", db, "--thread", thread, "--cycle", newest, "--json", cwd=cwd
        ).stdout
    )["calls"]
    assert "New Message History to Observe" in calls[0]["shown"]
    assert f"      {calls[0]['answer'].splitlines()[0]}" in detail.stdout
    unknown = obsmem("inspect", "--db", db, "--thread", thread, "--cycle", "nope", cwd=cwd)
    assert unknown.returncode == 2
    assert "no cycle 'nope'" in unknown.stderr
    assert "--cycles --json" in unknown.stderr

    only = obsmem(
        "inspect", "--db", db, "--thread", thread, "--kind", "activation", "--json", cwd=cwd
    )
    assert only.returncode == 0, only.stderr
    activations = json.loads(only.stdout)["cycles"]
    assert activations == [r for r in rows if r["kind"] == "activation"]
    none = obsmem("inspect", "--db", db, "--thread", thread, "--outcome", "failed", cwd=cwd)
    assert none.returncode == 0, none.stderr
    assert "none recorded" in none.stdout


def test_inspect_cycles_on_a_sqlite_file(tmp_path: Path, server: LoopbackServer) -> None:
    _chat_jsonl(tmp_path)
    result = obsmem(
        "replay", "chat.jsonl", "--quiet", "--message-tokens", "800", "--db", "m.db",
        cwd=tmp_path, server=server,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    before = _digest(tmp_path / "m.db")
    _check_replayed("m.db", tmp_path)
    assert _digest(tmp_path / "m.db") == before, "inspect never writes"


def test_inspect_cycles_on_postgresql(
    tmp_path: Path, server: LoopbackServer, postgres_dsn: str
) -> None:
    _chat_jsonl(tmp_path)
    result = obsmem(
        "replay", "chat.jsonl", "--quiet", "--message-tokens", "800", "--db", postgres_dsn,
        cwd=tmp_path, server=server,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    _check_replayed(postgres_dsn, tmp_path)


def test_inspect_shows_a_failed_cycle_with_its_error(tmp_path: Path) -> None:
    async def fail() -> None:
        conv = Conversation()
        memory = Memory(
            SQLiteStore(tmp_path / "m.db"),
            observational_memory={
                "observation": {
                    "model": scripted_observer(fault=lambda n: "error"),
                    "messageTokens": 2_000,
                    "bufferTokens": False,
                },
                "reflection": {"model": scripted_reflector()},
            },
            clock=conv.clock,
        )
        ref = {"resource": "u1", "thread": "t1"}
        for _ in range(12):
            await memory.context(ref, [conv.user(150)], actor_model=None)
            await memory.save(ref, [conv.assistant(150)], actor_model=None)
        await memory.aclose()

    asyncio.run(fail())
    shown = obsmem("inspect", "--db", "m.db", "--thread", "t1", "--outcome", "failed", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "failed" in shown.stdout
    assert "      error: " in shown.stdout
    assert "scripted model failure" in shown.stdout
    data = json.loads(
        obsmem(
            "inspect", "--db", "m.db", "--thread", "t1", "--cycles", "--json", cwd=tmp_path
        ).stdout
    )
    failed = [r for r in data["cycles"] if r["outcome"] == "failed"]
    assert failed
    assert all("scripted model failure" in r["error"] for r in failed)


def test_cycles_need_a_thread(tmp_path: Path) -> None:
    result = obsmem("inspect", "--db", "m.db", "--cycles", cwd=tmp_path)
    assert result.returncode == 2
    assert "add --thread ID" in _one_line(result)
    result = obsmem("inspect", "--thread", "t1", "--cycles", "--limit", "0", cwd=tmp_path)
    assert result.returncode == 2
    assert "--limit 0 must be at least 1" in _one_line(result)


def test_inspect_says_what_auto_resolves_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``obsmem inspect`` names the model ``"auto"`` is here, in text and in JSON."""
    import io

    from obsmem.cli import main

    async def make() -> None:
        memory = Memory(SQLiteStore(tmp_path / "m.db"), observational_memory=False)
        ref = {"resource": "u1", "thread": "t1"}
        await memory.save(ref, [Conversation().user(5)], actor_model=None)
        await memory.aclose()

    asyncio.run(make())
    monkeypatch.setenv("OBSMEM_MODEL", "anthropic/claude-haiku-4-5")
    text, shown = io.StringIO(), io.StringIO()
    assert main(["inspect", "--db", str(tmp_path / "m.db")], out=text) == 0
    assert "memory model here: 'auto' is anthropic/claude-haiku-4-5 (OBSMEM_MODEL)" in (
        text.getvalue()
    )
    assert main(["inspect", "--db", str(tmp_path / "m.db"), "--json"], out=shown) == 0
    auto = json.loads(shown.getvalue())["auto_model"]
    assert auto == {
        "model": "anthropic/claude-haiku-4-5",
        "why": "OBSMEM_MODEL",
        "configured": True,
    }


def test_inspect_asks_a_local_server_what_auto_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With only ``OPENAI_BASE_URL``, ``inspect`` names the model that server serves (what a
    ``Memory`` calls), not the placeholder; a server that does not answer leaves the
    placeholder, said as such."""
    import io

    from obsmem.cli import main

    from .strict_server import strict_server_thread

    async def make() -> None:
        memory = Memory(SQLiteStore(tmp_path / "m.db"), observational_memory=False)
        await memory.save(
            {"resource": "u1", "thread": "t1"}, [Conversation().user(5)], actor_model=None
        )
        await memory.aclose()

    asyncio.run(make())
    monkeypatch.delenv("OBSMEM_MODEL", raising=False)
    for key in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(key)
    with strict_server_thread(model_id="qwen2.5:0.5b") as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        shown = io.StringIO()
        assert main(["inspect", "--db", str(tmp_path / "m.db"), "--json"], out=shown) == 0
    auto = json.loads(shown.getvalue())["auto_model"]
    assert auto["model"] == "openai/qwen2.5:0.5b"
    assert auto["why"] == f"the model served at OPENAI_BASE_URL ({server.base_url})"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    shown = io.StringIO()
    assert main(["inspect", "--db", str(tmp_path / "m.db"), "--json"], out=shown) == 0
    assert json.loads(shown.getvalue())["auto_model"]["model"] == "openai/local"
