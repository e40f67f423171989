"""Read a Mastra memory database (LibSQL/SQLite, as ``@mastra/libsql`` writes it).

:func:`read_mastra` opens the file read-only with the standard library's ``sqlite3`` and yields
one :class:`MastraThread` per thread: its messages as obsmem messages (original ids and
timestamps, every part kind Mastra stores) and, where Mastra's observational memory has a
record for it, the log and the cursor where Mastra had it. Nothing here writes to a store
(:mod:`obsmem.transfer.mastra_store` does).

Mastra's cursor is a time, ``lastObservedAt``: a message created at or before it counts as
observed (``observedMessageIds`` is a safety set of ids observed besides). Mastra orders a
thread's messages by ``createdAt``; the reader does too, so "observed" is a prefix of the
thread, and :attr:`MastraThread.observed_through` names its last message. In resource scope a
thread's own cursor is ``thread.metadata.mastra.om.lastObservedAt`` when Mastra set one.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

from ..errors import ObsmemError
from ..messages import Message
from .mastra_messages import decode_json, mastra_messages

__all__ = ["MastraImportError", "MastraThread", "read_mastra"]

OM_TABLE = "mastra_observational_memory"
_NEEDED = ("mastra_threads", "mastra_messages")


class MastraImportError(ObsmemError, ValueError):
    """The file is not a Mastra memory database obsmem can read; the message says how to fix
    it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MastraThread:
    """One Mastra thread as obsmem will store it."""

    id: str
    resource_id: str
    title: str | None
    metadata: Mapping[str, Any]
    created_at: datetime
    updated_at: datetime
    messages: tuple[Message, ...]
    observations: str | None = None
    """The current (head) observation log of Mastra's record for this thread; None when Mastra
    kept none."""
    scope: Literal["thread", "resource"] = "thread"
    """The scope of that record (``resource``: the log covers all of the resource's threads)."""
    last_observed_at: datetime | None = None
    """Mastra's cursor for this thread."""
    observed_through: str | None = None
    """The id of the last message the log covers (None: none yet)."""
    working_memory: str | None = None
    """Thread-scoped working memory (``metadata.workingMemory``)."""
    resource_working_memory: str | None = None
    """The resource's working memory."""
    generation: int = 0
    """Mastra's ``generationCount`` of the record (how many reflections made it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Record:
    observations: str
    scope: Literal["thread", "resource"]
    last_observed_at: datetime | None
    observed_ids: frozenset[str] = field(default_factory=frozenset[str])
    generation: int = 0


def _time(value: Any, what: str) -> datetime:
    """A Mastra timestamp (ISO text, or epoch milliseconds) as an aware datetime."""
    try:
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value / 1000, UTC)
        parsed = datetime.fromisoformat(str(value))
    except (TypeError, ValueError, OverflowError):
        raise MastraImportError(
            f"{what} has the timestamp {value!r}, which is not a date; the database is damaged "
            "or not written by @mastra/libsql"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _json(value: Any, what: str) -> Any:
    try:
        return decode_json(value)
    except ValueError as exc:
        raise MastraImportError(
            f"{what} is not JSON ({exc}); the database is damaged or not written by @mastra/libsql"
        ) from None


def _connect(path: str | Path) -> sqlite3.Connection:
    file = Path(path)
    if not file.is_file():
        raise MastraImportError(
            f"{file} does not exist; give the database file of your Mastra LibSQLStore "
            '(the path in its url, e.g. url: "file:./mastra.db")'
        )
    db = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        db.close()
        raise MastraImportError(
            f"{file} is not a SQLite database ({exc}); give the file @mastra/libsql writes (a "
            "Turso/remote database must be copied to a local file first: turso db shell "
            "<db> .dump | sqlite3 mastra.db)"
        ) from None
    missing = [t for t in _NEEDED if t not in tables]
    if missing:
        db.close()
        raise MastraImportError(
            f"{file} is not a Mastra memory database: it has no {' or '.join(missing)} table; "
            "give the file of the LibSQLStore your Mastra Memory uses"
        )
    db.row_factory = sqlite3.Row
    return db


def _resource_memory(db: sqlite3.Connection, tables: set[str]) -> dict[str, str]:
    if "mastra_resources" not in tables:
        return {}
    rows = db.execute('SELECT id, "workingMemory" FROM mastra_resources')
    return {r["id"]: r["workingMemory"] for r in rows if isinstance(r["workingMemory"], str)}


def _head(db: sqlite3.Connection, key: str) -> _Record | None:
    """The head (newest generation) of Mastra's record for ``key``."""
    row = db.execute(
        f'SELECT * FROM "{OM_TABLE}" WHERE "lookupKey" = ? '
        'ORDER BY "generationCount" DESC, "createdAt" ASC, id ASC LIMIT 1',
        (key,),
    ).fetchone()
    if row is None:
        return None
    what = f"the observational-memory record {row['id']}"
    cursor = row["lastObservedAt"]
    ids = _json(row["observedMessageIds"], what) or []
    return _Record(
        observations=row["activeObservations"] or "",
        scope="resource" if key.startswith("resource:") else "thread",
        last_observed_at=None if cursor is None else _time(cursor, what),
        observed_ids=frozenset(str(i) for i in ids),
        generation=int(row["generationCount"] or 0),
    )


def _thread_messages(db: sqlite3.Connection, thread_id: str, resource_id: str) -> list[Any]:
    """``(mastra id, time, obsmem messages)`` per stored message, in Mastra's order."""
    rows = db.execute(
        'SELECT id, role, content, "createdAt", "resourceId" FROM mastra_messages '
        "WHERE thread_id = ? ORDER BY rowid",
        (thread_id,),
    )
    out: list[tuple[str, datetime, list[Message]]] = []
    for row in rows:
        what = f"message {row['id']} of thread {thread_id}"
        created = _time(row["createdAt"], what)
        raw = row["content"]
        try:
            content = json.loads(raw) if isinstance(raw, str) and raw[:1] in "{[" else raw
        except json.JSONDecodeError:
            raise MastraImportError(
                f"{what} has content that is not JSON; the database is damaged"
            ) from None
        converted = mastra_messages(
            mastra_id=str(row["id"]),
            role=str(row["role"]),
            content=content,
            created_at=created,
            thread_id=thread_id,
            resource_id=row["resourceId"] or resource_id,
        )
        out.append((str(row["id"]), created, converted))
    out.sort(key=lambda item: item[1])  # Mastra's order; stable for equal times
    return out


def _observed_through(
    messages: list[tuple[str, datetime, list[Message]]],
    cursor: datetime | None,
    ids: frozenset[str],
) -> str | None:
    """The id of the last obsmem message of the observed prefix."""
    last: str | None = None
    for mastra_id, created, converted in messages:
        observed = (cursor is not None and created <= cursor) or mastra_id in ids
        if not observed:
            break
        if converted:
            last = converted[-1].id
    return last


def _thread(
    db: sqlite3.Connection, row: sqlite3.Row, has_om: bool, resource_wm: Mapping[str, str]
) -> MastraThread:
    thread_id, resource_id = str(row["id"]), str(row["resourceId"])
    what = f"thread {thread_id}"
    metadata = cast(dict[str, Any], _json(row["metadata"], f"the metadata of {what}") or {})
    record = None
    if has_om:
        record = _head(db, f"thread:{thread_id}") or _head(db, f"resource:{resource_id}")
    messages = _thread_messages(db, thread_id, resource_id)
    cursor = record.last_observed_at if record is not None else None
    if record is not None and record.scope == "resource":
        own = metadata.get("mastra", {}).get("om", {}).get("lastObservedAt")
        cursor = _time(own, what) if own else cursor
    wm = metadata.get("workingMemory")
    return MastraThread(
        id=thread_id,
        resource_id=resource_id,
        title=row["title"] or None,
        metadata=metadata,
        created_at=_time(row["createdAt"], what),
        updated_at=_time(row["updatedAt"], what),
        messages=tuple(m for _, _, converted in messages for m in converted),
        observations=None if record is None else record.observations,
        scope="thread" if record is None else record.scope,
        last_observed_at=cursor,
        observed_through=None
        if record is None
        else _observed_through(messages, cursor, record.observed_ids),
        working_memory=wm if isinstance(wm, str) else None,
        resource_working_memory=resource_wm.get(resource_id),
        generation=0 if record is None else record.generation,
    )


def read_mastra(path: str | Path) -> Iterator[MastraThread]:
    """The threads of the Mastra database at ``path``, oldest first.

    The file is checked before this returns (a missing file, a file that is not SQLite, or a
    SQLite file without Mastra's tables raise :class:`MastraImportError` naming the fix); a
    damaged row raises it while iterating.
    """
    db = _connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def threads() -> Iterator[MastraThread]:
        try:
            has_om = OM_TABLE in tables
            resource_wm = _resource_memory(db, tables)
            rows = db.execute(
                'SELECT id, "resourceId", title, metadata, "createdAt", "updatedAt" '
                'FROM mastra_threads ORDER BY "createdAt", id'
            ).fetchall()
            for row in rows:
                yield _thread(db, row, has_om, resource_wm)
        except sqlite3.DatabaseError as exc:
            raise MastraImportError(
                f"{path} could not be read ({exc}); the database is damaged: "
                "check it with sqlite3 FILE 'PRAGMA integrity_check'"
            ) from None
        finally:
            db.close()

    return threads()
