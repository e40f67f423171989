"""The store ``--db`` names, checked before anything is written."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import MissingExtraError
from .errors import CannotStart, first_line, sentence

if TYPE_CHECKING:
    from ..stores.sqlstore import SQLStore

__all__ = ["db_label", "is_postgres_dsn", "open_store"]


_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_dsn(db: str) -> bool:
    """Whether ``--db`` names a PostgreSQL database (a ``postgresql://`` or ``postgres://``
    DSN) rather than a SQLite file."""
    return db.strip().lower().startswith(_POSTGRES_SCHEMES)


def db_label(db: str) -> str:
    """``--db`` as it may be shown: a DSN without its password."""
    if not is_postgres_dsn(db) or "@" not in db:
        return db
    scheme, _, rest = db.partition("://")
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}@{host}" if user else f"{scheme}://{host}"


def open_store(db: str, *, read_only: bool = False, existing: bool = False) -> SQLStore:
    """The store ``--db`` names, checked before anything is written: a SQLite file (created
    when the path is new or the file empty) or a PostgreSQL DSN. CannotStart (one line: the
    problem and the fix) for a file or database that is not obsmem's, a file that is not SQLite,
    a bad DSN or an unreachable server; MissingExtraError without psycopg. ``read_only``
    (inspect): the store must already hold this version's schema, and it is never written.
    ``existing`` (delete, revise): a SQLite file must exist already; a typo makes none."""
    if is_postgres_dsn(db):
        _check_postgres(db, read_only=read_only)
        from ..stores import PostgresStore

        return PostgresStore(db, read_only=read_only)
    if "://" in db:
        raise CannotStart(
            f"--db {db}: give a SQLite file path (obsmem.db) or a PostgreSQL DSN "
            "(postgresql://user@host/dbname)"
        )
    _check_sqlite(db, read_only=read_only, existing=existing)
    from ..stores import SQLiteStore

    return SQLiteStore(db, read_only=read_only)


_SQLITE_HEADER = b"SQLite format 3\x00"
_OBSMEM_TABLES = frozenset({"threads", "messages", "om_records"})
_ANOTHER_PATH = "give another path with --db (a new file is made there)"
_ANOTHER_DB = "--db with the path of an obsmem database"


def _check_sqlite(path: str, *, read_only: bool, existing: bool = False) -> None:
    if path == ":memory:":
        return
    file = Path(path)
    if file.is_dir():
        raise CannotStart(f"--db {path} is a folder: give the path of a SQLite file")
    if not file.exists():
        if read_only or existing:
            raise CannotStart(
                f"No obsmem database at {path}. Pass --db PATH, or create one by using obsmem "
                "with Memory() in this directory (or run `obsmem demo`)."
            )
        return
    try:
        with file.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise CannotStart(f"cannot read --db {path}: {exc.strerror or exc}") from exc
    if not header:
        if read_only:
            raise CannotStart(
                f"{path}: not an obsmem database (the file is empty); pass --db with the path "
                "of one"
            )
        return
    if header != _SQLITE_HEADER:
        fix = f"pass {_ANOTHER_DB}" if read_only else _ANOTHER_PATH
        raise CannotStart(f"{path} is not a SQLite database (so not an obsmem one): {fix}")
    version, tables = _sqlite_schema(file)
    if not tables and version == 0:  # a SQLite file with nothing in it
        if read_only:
            raise CannotStart(
                f"{path}: not an obsmem database (it has no tables); pass --db with the path of one"
            )
        return
    if version == 0 or not set(tables) >= _OBSMEM_TABLES:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise CannotStart(
            f"{path} is a SQLite database but not an obsmem one (its tables: {shown or 'none'}); "
            + (
                f"pass {_ANOTHER_DB}"
                if read_only
                else f"obsmem will not add its tables to it: {_ANOTHER_PATH}"
            )
        )
    _check_version(path, version, read_only=read_only)


def _sqlite_schema(file: Path) -> tuple[int, list[str]]:
    """``PRAGMA user_version`` and the table names of a SQLite file, read without changing it."""
    try:
        conn = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            rows = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise CannotStart(
            f"{file} cannot be read as a SQLite database ({exc}): {_ANOTHER_PATH}"
        ) from exc
    return version, [str(row[0]) for row in rows]


def _check_version(where: str, version: int, *, read_only: bool) -> None:
    from ..stores.schema import SCHEMA_VERSION

    if version > SCHEMA_VERSION:
        raise CannotStart(
            f"{where}: the obsmem schema there is version {version}, newer than this obsmem "
            f"understands ({SCHEMA_VERSION}): upgrade obsmem (pip install -U obsmem)"
        )
    if read_only and version < SCHEMA_VERSION:
        raise CannotStart(
            f"{where}: the obsmem schema there is version {version}, older than this obsmem's "
            f"({SCHEMA_VERSION}); any obsmem command that stores (obsmem chat, replay, demo) "
            "upgrades it"
        )


def _check_postgres(dsn: str, *, read_only: bool) -> None:
    """Connect once (autocommit, reads only) and look at what the database holds."""
    import importlib.util

    try:
        import psycopg

        if importlib.util.find_spec("psycopg_pool") is None:  # the store's pool
            raise ImportError("psycopg_pool")
    except ImportError as exc:
        raise MissingExtraError(
            "PostgreSQL storage (--db postgresql://...)", "postgres", package="psycopg"
        ) from exc
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise CannotStart(
            f"--db: not a valid PostgreSQL DSN ({sentence(str(exc))}); write it as "
            "postgresql://user:password@host:5432/dbname"
        ) from exc
    where = (
        f"PostgreSQL database {info.get('dbname') or info.get('user') or '(default)'} on "
        f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}"
    )
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT to_regclass('obsmem_schema') IS NOT NULL, count(*) FROM pg_tables "
                "WHERE schemaname = current_schema()"
            ).fetchone()
            ours, count = (bool(row[0]), int(row[1])) if row else (False, 0)
            version, tables = 0, list[str]()
            if ours:
                found = conn.execute("SELECT max(version) FROM obsmem_schema").fetchone()
                version = int(found[0] or 0) if found else 0
            elif count:
                tables = [
                    str(r[0])
                    for r in conn.execute(
                        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                        "ORDER BY tablename LIMIT 6"
                    ).fetchall()
                ]
    except psycopg.Error as exc:
        raise CannotStart(
            f"cannot connect to {where}: {first_line(exc)}. Is the server "
            "running, and the DSN right (host, port, database, user, password)?"
        ) from exc
    if tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise CannotStart(
            f"{where} has tables but no obsmem schema (its tables: {shown}); obsmem will not "
            "add its tables to it: give another database in --db (an empty one, or one obsmem "
            "made)"
        )
    if read_only and not ours:
        raise CannotStart(
            f"{where}: not an obsmem database (it has no obsmem schema); pass --db with the "
            "DSN of one"
        )
    _check_version(where, version, read_only=read_only and ours)
