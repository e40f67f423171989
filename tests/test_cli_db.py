"""``--db`` on every command: a SQLite path or a PostgreSQL DSN, checked before anything is
written. A file or database that is not obsmem's is refused in one line (exit 2), never given
obsmem's tables; inspect never writes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from obsmem.cli.common import CannotStart, db_label, is_postgres_dsn, listen, open_store
from obsmem.errors import StoreError
from obsmem.stores import PostgresStore, SQLiteStore
from obsmem.stores.schema import SCHEMA_VERSION

from .loopback_openai import LoopbackServer
from .test_cli import _env, obsmem


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as s:
        yield s


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _someone_elses(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ana')")
    conn.commit()
    conn.close()
    return path


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("obsmem: "), result.stderr
    return lines[0]


def _chat_jsonl(tmp_path: Path) -> Path:
    lines = []
    for i in range(6):
        lines.append({"role": "user", "content": f"Message {i}: my favorite color is blue. " * 12})
        lines.append({"role": "assistant", "content": "Noted, thanks. " * 20})
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    return path


COMMANDS = [
    ("demo", "--model", "test"),
    ("replay", "chat.jsonl", "--model", "test"),
    ("chat", "--model", "test"),
    ("inspect",),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_sqlite_file_that_is_not_obsmems_is_refused_untouched(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    _chat_jsonl(tmp_path)
    other = _someone_elses(tmp_path / "other.db")
    before = _digest(other)
    result = obsmem(*command, "--db", "other.db", cwd=tmp_path, stdin="/quit\n")
    assert result.returncode == 2, result.stdout + result.stderr
    line = _one_line(result)
    assert "other.db is a SQLite database but not an obsmem one (its tables: users)" in line
    if command[0] == "inspect":  # it reads only: no talk of making a file or adding tables
        assert line.endswith("pass --db with the path of an obsmem database")
    else:
        assert "give another path with --db" in line
    assert _digest(other) == before
    assert not (tmp_path / "other.db-wal").exists()
    assert not (tmp_path / "obsmem.db").exists()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_file_that_is_not_sqlite_is_refused(command: tuple[str, ...], tmp_path: Path) -> None:
    _chat_jsonl(tmp_path)
    (tmp_path / "notes.db").write_text("my notes, not a database\n" * 10)
    result = obsmem(*command, "--db", "notes.db", cwd=tmp_path, stdin="/quit\n")
    assert result.returncode == 2
    assert "notes.db is not a SQLite database" in _one_line(result)
    assert (tmp_path / "notes.db").read_text() == "my notes, not a database\n" * 10


def test_a_folder_or_another_url_scheme_is_refused(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    folder = obsmem("demo", "--model", "test", "--db", "folder", cwd=tmp_path)
    assert folder.returncode == 2
    assert "is a folder" in _one_line(folder)
    mysql = obsmem("inspect", "--db", "mysql://me@host/db", cwd=tmp_path)
    assert mysql.returncode == 2
    assert "a PostgreSQL DSN (postgresql://" in _one_line(mysql)


def test_replay_into_an_empty_file_and_a_new_path_creates_the_store(
    tmp_path: Path, server: LoopbackServer
) -> None:
    _chat_jsonl(tmp_path)
    (tmp_path / "empty.db").touch()
    for db in ("empty.db", "new/dir/fresh.db"):
        result = obsmem(
            "replay", "chat.jsonl", "--quiet", "--message-tokens", "800", "--db", db,
            cwd=tmp_path, server=server,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        shown = obsmem("inspect", "--db", db, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert "thread replay-chat-" in shown.stdout


def test_the_opener_checks_schema_versions(tmp_path: Path) -> None:
    """A newer obsmem schema is refused everywhere; an older one only by inspect (writers
    migrate it); an SQLite file with no tables is like an empty one."""
    db = tmp_path / "obsmem.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE threads (id TEXT)")
    conn.execute("CREATE TABLE messages (id TEXT)")
    conn.execute("CREATE TABLE om_records (id TEXT)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    for read_only in (False, True):
        with pytest.raises(CannotStart, match="newer than this obsmem understands"):
            open_store(str(db), read_only=read_only)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    conn.commit()
    conn.close()
    assert isinstance(open_store(str(db)), SQLiteStore)
    with pytest.raises(CannotStart, match="older than this obsmem's"):
        open_store(str(db), read_only=True)
    blank = tmp_path / "blank.db"
    sqlite3.connect(blank).execute("VACUUM").connection.close()
    assert isinstance(open_store(str(blank)), SQLiteStore)
    with pytest.raises(CannotStart, match="not an obsmem database"):
        open_store(str(blank), read_only=True)
    with pytest.raises(CannotStart, match="No obsmem database at"):
        open_store(str(tmp_path / "missing.db"), read_only=True)
    assert not (tmp_path / "missing.db").exists()


def test_dsns_are_recognised_and_shown_without_their_password() -> None:
    assert is_postgres_dsn("postgresql://u@h/db")
    assert is_postgres_dsn("postgres://u@h/db")
    assert not is_postgres_dsn("obsmem.db")
    assert (
        db_label("postgresql://ana:secret@db.local:5432/mem")
        == "postgresql://ana@db.local:5432/mem"
    )
    assert db_label("obsmem.db") == "obsmem.db"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_unreachable_or_malformed_dsn_is_one_line(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    _chat_jsonl(tmp_path)
    dsn = f"postgresql://ana:secret@127.0.0.1:{_free_port()}/mem"
    result = obsmem(*command, "--db", dsn, cwd=tmp_path, stdin="/quit\n")
    assert result.returncode == 2
    line = _one_line(result)
    assert "cannot connect to PostgreSQL database mem on 127.0.0.1" in line
    assert "is the server running" in line.lower()
    assert "secret" not in line
    bad = obsmem(*command, "--db", "postgresql://%zz", cwd=tmp_path, stdin="/quit\n")
    assert bad.returncode == 2
    assert "not a valid PostgreSQL DSN" in _one_line(bad)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_dsn_without_psycopg_names_the_extra(command: tuple[str, ...], tmp_path: Path) -> None:
    _chat_jsonl(tmp_path)
    blocked = (
        "import runpy, sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None; "
        "sys.argv = ['obsmem', *sys.argv[1:]]; runpy.run_module('obsmem', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", blocked, *command, "--db", "postgresql://me@127.0.0.1/mem"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_env(None),
        input="/quit\n",
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert 'pip install "obsmem[postgres]"' in _one_line(result)


def _tables(dsn: str) -> list[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
        ).fetchall()
    return [str(r[0]) for r in rows]


def test_replay_and_inspect_on_postgresql(
    tmp_path: Path, server: LoopbackServer, postgres_dsn: str
) -> None:
    _chat_jsonl(tmp_path)
    empty = obsmem("inspect", "--db", postgres_dsn, cwd=tmp_path)
    assert empty.returncode == 2
    assert "not an obsmem database" in _one_line(empty)
    assert _tables(postgres_dsn) == [], "inspect created nothing"
    result = obsmem(
        "replay", "chat.jsonl", "--quiet", "--message-tokens", "800", "--db", postgres_dsn,
        cwd=tmp_path, server=server,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "obsmem_schema" in _tables(postgres_dsn)
    overview = obsmem("inspect", "--db", postgres_dsn, "--json", cwd=tmp_path)
    assert overview.returncode == 0, overview.stderr
    data = json.loads(overview.stdout)
    assert data["schema_version"] == SCHEMA_VERSION
    [thread] = data["resources"][0]["threads"]
    assert thread["messages"] == 12
    detail = obsmem("inspect", "--db", postgres_dsn, "--thread", thread["id"], cwd=tmp_path)
    assert detail.returncode == 0, detail.stderr
    assert "favorite color is blue" in detail.stdout


def test_a_postgresql_database_with_other_tables_is_refused(
    tmp_path: Path, postgres_dsn: str
) -> None:
    import psycopg

    _chat_jsonl(tmp_path)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    for command in COMMANDS:
        result = obsmem(*command, "--db", postgres_dsn, cwd=tmp_path, stdin="/quit\n")
        assert result.returncode == 2, result.stderr
        line = _one_line(result)
        assert "has tables but no obsmem schema (its tables: orders)" in line
        assert "give another database in --db" in line
    assert _tables(postgres_dsn) == ["orders"]


async def test_a_read_only_postgres_store_never_writes(postgres_dsn: str) -> None:
    writer = PostgresStore(postgres_dsn)
    await writer.create_thread("t1", "ana")
    await writer.aclose()
    reader = PostgresStore(postgres_dsn, read_only=True)
    try:
        assert [t.id for t in await reader.list_threads("ana")] == ["t1"]
        with pytest.raises(StoreError, match="read-only transaction"):
            await reader.create_thread("t2", "ana")
    finally:
        await reader.aclose()


@pytest.mark.parametrize(
    "command",
    [
        ("proxy", "--upstream", "http://127.0.0.1:9/v1", "--port", "0"),
        ("mcp", "--resource", "alice", "--transport", "http", "--port", "0"),
    ],
    ids=lambda c: c[0],
)
def test_the_servers_refuse_what_the_other_commands_refuse(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    """``obsmem proxy`` and ``obsmem mcp`` refuse someone else's SQLite file, untouched, and a
    model that cannot work, each in one line with exit 2, before they listen."""
    other = _someone_elses(tmp_path / "other.db")
    before = _digest(other)
    refused = obsmem(*command, "--db", "other.db", cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "other.db is a SQLite database but not an obsmem one" in _one_line(refused)
    assert _digest(other) == before
    unknown = obsmem(*command, "--db", "m.db", "--model", "foo/bar", cwd=tmp_path)
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr
    assert "--model foo/bar: unknown provider 'foo'" in _one_line(unknown)
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize(
    "command",
    [
        ("proxy", "--upstream", "http://127.0.0.1:9/v1"),
        ("mcp", "--resource", "alice", "--transport", "http"),
        ("ui",),
    ],
    ids=lambda c: c[0],
)
def test_the_servers_refuse_a_port_they_cannot_listen_on(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    """A port out of range, or one another server holds: one line naming the fix, exit 2."""
    import socket

    db = tmp_path / "m.db"

    async def make() -> None:  # an obsmem database, empty
        store = SQLiteStore(db)
        await store.list_resources()
        await store.aclose()

    asyncio.run(make())
    wrong = obsmem(*command, "--db", str(db), "--port", "99999", cwd=tmp_path)
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    assert (
        _one_line(wrong) == "obsmem: --port 99999: give a port from 1 to 65535 (0 picks a free one)"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = obsmem(*command, "--db", str(db), "--port", port, cwd=tmp_path)
    assert busy.returncode == 2, busy.stdout + busy.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in _one_line(busy)
    assert "Traceback" not in busy.stderr


@pytest.mark.parametrize(
    ("host", "shown"), [("", "0.0.0.0"), ("127.0.0.1", "127.0.0.1"), ("::1", "[::1]")]
)
def test_a_server_says_where_clients_reach_it(host: str, shown: str) -> None:
    """``--host ""`` (every address) is said as the bound address, never ``http://:PORT``."""
    try:
        sock, url = listen(host, 0)
    except CannotStart as exc:  # no IPv6 on this machine
        pytest.skip(str(exc))
    with sock:
        assert url == f"http://{shown}:{sock.getsockname()[1]}"
