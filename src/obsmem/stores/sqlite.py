"""SQLiteStore: the embedded default. One file, WAL mode, safe for several processes.

Every store method is one flow run inside one transaction. A write takes SQLite's write lock
first (``BEGIN IMMEDIATE``), re-reads what it changes inside the lock, checks the version the
caller read, applies the pure transition and commits. Another process doing the same waits on
the lock (``busy_timeout``) and then sees the new version, so it raises ConflictError instead of
overwriting.

Where the transactions run: a turn's own load and a cycle's commit are short (a handful of
indexed statements on pages the OS already caches), so they run right away on the event loop,
on a connection that never waits: if another process holds the write lock, the transaction
backs out at once and goes to the worker thread instead. Everything else, everything that may
wait on a lock, and every WAL checkpoint (the one step that syncs the disk) runs on the store's
worker thread, so the event loop never waits on another process or on a disk sync.

The file at the path: SQLite keeps its files open and does not notice when the database file is
deleted, moved away or replaced by another file (a restore), so its connections would go on
writing into a file nothing reads again. The store remembers which file it opened (device and
inode) and checks the path before every call and after every write: a file that is no longer
there makes every call fail with a StoreError saying so, until the same file is back (a
read-only store reads whatever obsmem database is at the path).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar

from ..errors import ConfigError, StoreError
from . import flows
from . import schema as sql
from .flows import Batch, Call, Flow, NeedsWrite, Op, Rows
from .sqlstore import SQLStore

__all__ = ["SQLiteStore"]

T = TypeVar("T")
log = logging.getLogger("obsmem")
_Gone: TypeAlias = Literal["deleted", "replaced"]
"""What happened to the database file at the path: deleted (or moved away), or replaced."""


class _Worker:
    """One thread that runs calls in order and hands each result back to the awaiting event
    loop (a lighter hand-off than an executor's futures: it is paid twice per turn)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def call(self, fn: Callable[[], T]) -> T:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((fn, loop, future))
        return await future

    def _loop(self) -> None:
        while (job := self._queue.get()) is not None:
            fn, loop, future = job
            try:
                result, error = fn(), None
            except BaseException as exc:
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the awaiting loop is gone
                loop.call_soon_threadsafe(_settle, future, result, error)

    async def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            await asyncio.to_thread(self._thread.join)
            self._thread = None


_Job: TypeAlias = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _ToWorker(Exception):
    """The inline connection cannot run this call (the database is locked by another process,
    or its file is not at its path): the worker thread runs it, waiting for the lock, or raises
    the error."""


SECURE_DELETE = "PRAGMA secure_delete = ON"
"""Deleted rows are overwritten with zeros in the file, so an owner's delete takes the text out
of the database file itself, not only out of reach (the WAL keeps it until its next checkpoint).
"""
INLINE_WRITES_PER_CHECKPOINT = 200
"""Inline writes never checkpoint the WAL; every so many, one write goes to the worker thread,
whose connection checkpoints when the WAL has grown."""


class _SQLiteDriver:
    """A worker-thread connection for everything, and an inline connection that never waits
    for quick transactions; each flow is one transaction on one of them."""

    pgvector = False
    jobs = False

    def __init__(self, path: str, busy_timeout_ms: int, *, read_only: bool = False) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.read_only = read_only
        self._worker = _Worker("obsmem-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._inline: sqlite3.Connection | None = None
        self._inline_lock = threading.Lock()
        self._inline_writes = 0
        self._closed = False
        self._file = path
        """The absolute path opened (SQLite makes the path absolute when it opens it: a later
        change of working directory changes nothing)."""
        self._identity: tuple[int, int] | None = None
        """(st_dev, st_ino) of the file the connections opened; None before, and for memory."""
        self._gone: _Gone | None = None
        """What happened to the file while it is not at its path (one warning each time)."""
        self._gone_lock = threading.Lock()
        self._wal_released = False

    async def run(self, call: Call[T]) -> T:
        if self._closed:
            raise StoreError(f"SQLiteStore({self.path!r}) was closed")
        inline = self._inline
        make, write = call.make, call.write
        if (
            call.quick
            and inline is not None
            and self._inline_writes < INLINE_WRITES_PER_CHECKPOINT
            and self._inline_lock.acquire(blocking=False)
        ):
            try:
                return self._run_inline(inline, make, write)
            except _ToWorker:
                pass  # another process holds the lock, or the file is gone: see on the worker
            finally:
                self._inline_lock.release()
        if write:
            self._inline_writes = 0  # the worker's connection checkpoints when the WAL has grown
        return await self._worker.call(lambda: self._run(make, write))

    def _run_inline(
        self, conn: sqlite3.Connection, make: Callable[[bool], Flow[T]], write: bool
    ) -> T:
        if self._check() is not None:
            raise _ToWorker
        try:
            result, write = _drive_or_write(conn, make, write)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise _ToWorker from exc
            raise StoreError(f"SQLite error on {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite error on {self.path}: {exc}") from exc
        if write:
            self._inline_writes += 1
            if (gone := self._check()) is not None:
                raise self._error(gone, wrote=True)
        return result

    def _run(self, make: Callable[[bool], Flow[T]], write: bool) -> T:
        try:
            result, write = _drive_or_write(self._connection(), make, write)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite error on {self.path}: {exc}") from exc
        if write and (gone := self._check()) is not None:
            raise self._error(gone, wrote=True)
        return result

    def _connection(self) -> sqlite3.Connection:
        """The worker's connection, opened on first use, once the file is known to be the one
        at the path."""
        conn = self._conn
        if conn is None:
            return self._open()
        gone = self._check()
        if gone is None:
            return conn
        if self.read_only and gone == "replaced":  # it changes nothing: read the new file
            conn.close()
            self._conn = None
            return self._open_read_only()
        if not self.read_only and not self._wal_released:
            self._release_wal(conn)
        raise self._error(gone)

    # -- the file at the path --------------------------------------------------------------------

    def _moved(self) -> _Gone | None:
        """None while the file opened is the one at the path (or cannot be told: memory, not
        opened yet, the path unreadable); else "deleted" or "replaced". One ``os.stat``."""
        identity = self._identity
        if identity is None:
            return None
        try:
            st = os.stat(self._file)
        except (FileNotFoundError, NotADirectoryError):
            return "deleted"
        except OSError:
            return None
        return None if (st.st_dev, st.st_ino) == identity else "replaced"

    def _check(self) -> _Gone | None:
        """``_moved()``, with one warning when the file goes and one when it is back."""
        gone = self._moved()
        if gone != self._gone:
            with self._gone_lock:
                if gone != self._gone:
                    if gone is None:
                        log.warning(
                            "%s: the SQLite database file is back at its path; calls work again",
                            self._file,
                        )
                        self._wal_released = False
                    else:
                        log.warning("%s", self._error(gone))
                    self._gone = gone
        return gone

    def _error(self, gone: _Gone, *, wrote: bool = False) -> StoreError:
        file = self._file
        if self.read_only:
            if gone == "deleted":
                what = "was deleted or moved away; calls work again once a database is there"
            else:
                what = "was replaced by another file; reading the file now at that path"
        elif gone == "deleted":
            what = (
                "was deleted or moved away while this process had it open, so calls fail: put "
                "it back, or restart the process to start a new, empty database at that path"
            )
        else:
            what = (
                "was replaced by another file while this process had it open, so calls fail: "
                "put the original back, or restart the process to open the file now at that path"
            )
        if wrote:
            what += (
                " (this call's change went into the file this process opened, not into one at "
                "that path)"
            )
        return StoreError(f"{file}: the SQLite database file {what}")

    def _release_wal(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL into the file this process opened (wherever it is now) and empty it: the
        ``-wal`` file at the path would otherwise be read as part of the file now there, or of
        one made there (old pages in another file: lost writes or a malformed database)."""
        self._wal_released = True
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def _open(self) -> sqlite3.Connection:
        if self.read_only:
            return self._open_read_only()
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.busy_timeout_ms / 1000,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            if self.path != ":memory:":
                mode = self._switch_to_wal(conn)
                if str(mode).lower() != "wal":
                    raise StoreError(f"{self.path}: could not switch to WAL mode (got {mode})")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(SECURE_DELETE)
            _migrate(conn, self.path)
            if self.path != ":memory:":  # a second ":memory:" connection is another database
                self._remember_file(os.path.abspath(self.path))
                self._inline = self._open_inline()
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _open_read_only(self) -> sqlite3.Connection:
        """A connection that cannot change the file: no WAL switch, no migration, no tables
        made; the schema must be this version's."""
        if not Path(self.path).is_file():
            raise StoreError(f"{self.path}: no such database file")
        uri = f"{Path(self.path).resolve().as_uri()}?mode=ro"
        conn = sqlite3.connect(
            uri,
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.busy_timeout_ms / 1000,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        except BaseException:
            conn.close()
            raise
        if version != sql.SCHEMA_VERSION:
            conn.close()
            if version == 0:
                raise StoreError(f"{self.path}: not an obsmem database (it has no obsmem schema)")
            newer = version > sql.SCHEMA_VERSION
            raise StoreError(
                f"{self.path}: the database schema is version {version}, "
                + (
                    f"newer than this obsmem understands ({sql.SCHEMA_VERSION}); upgrade obsmem"
                    if newer
                    else f"older than this obsmem's ({sql.SCHEMA_VERSION}); open it once for "
                    "writing (any obsmem command that stores) to upgrade it"
                )
            )
        self._remember_file(os.path.abspath(self.path))
        self._conn = conn
        return conn

    def _remember_file(self, file: str) -> None:
        """The file just opened is the one the calls check for at ``file``."""
        try:
            st = os.stat(file)
        except OSError as exc:
            raise StoreError(
                f"{file}: the database file went away as it was opened ({exc})"
            ) from exc
        self._file = file
        self._identity = (st.st_dev, st.st_ino)
        self._gone = None

    def _open_inline(self) -> sqlite3.Connection:
        """The connection for quick transactions on the event loop: it never waits on a lock
        and never checkpoints (checkpoints sync the disk; the worker's connection does them)."""
        inline = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=0
        )
        inline.execute("PRAGMA busy_timeout = 0")
        inline.execute("PRAGMA wal_autocheckpoint = 0")
        inline.execute("PRAGMA synchronous = NORMAL")
        inline.execute(SECURE_DELETE)
        inline.execute("PRAGMA foreign_keys = ON")
        return inline

    def _switch_to_wal(self, conn: sqlite3.Connection) -> str:
        """``PRAGMA journal_mode = WAL``, waiting out a writer that holds the new file's lock
        (SQLite does not apply ``busy_timeout`` to this pragma)."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        delay = 0.005
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    async def schema_version(self) -> int:
        def read(_: bool) -> Flow[int]:
            rows = yield Op("PRAGMA user_version")
            return int(rows[0][0])

        return await self.run(Call(read, write=False))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True

        def close() -> None:
            if (
                not self.read_only
                and self._conn is not None
                and not self._wal_released
                and self._moved() is not None
            ):
                self._release_wal(self._conn)
            with self._inline_lock:
                if self._inline is not None:
                    self._inline.close()
                    self._inline = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await self._worker.call(close)
        await self._worker.stop()


def _execute(conn: sqlite3.Connection, op: Op) -> Rows:
    if op.many:
        conn.executemany(op.sql, op.params)
        return []
    return conn.execute(op.sql, op.params).fetchall()


def _drive_or_write(
    conn: sqlite3.Connection, make: Callable[[bool], Flow[T]], write: bool
) -> tuple[T, bool]:
    """Run ``make(write)``, or ``make(True)`` as a write when a read flow raises NeedsWrite:
    the result, and whether it ran as a write."""
    try:
        return _drive(conn, make(write), write=write), write
    except NeedsWrite:
        return _drive(conn, make(True), write=True), True


def _drive(conn: sqlite3.Connection, flow: Flow[T], *, write: bool) -> T:
    """Run ``flow`` in one transaction (a batch that ends it commits; what follows runs in a
    new one): each op's rows go back into the flow."""
    begin = "BEGIN IMMEDIATE" if write else "BEGIN"
    conn.execute(begin)
    try:
        item = next(flow)
        while True:
            if not conn.in_transaction:
                conn.execute(begin)
            if isinstance(item, Batch):
                result: Any = [_execute(conn, op) for op in item.ops]
                if item.end:
                    conn.execute("COMMIT")
            else:
                result = _execute(conn, item)
            item = flow.send(result)
    except StopIteration as done:
        if conn.in_transaction:
            conn.execute("COMMIT")
        return done.value  # type: ignore[no-any-return]
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == sql.SCHEMA_VERSION:
        return
    if version < sql.SCHEMA_VERSION:
        # One process migrates; the others wait on the lock, then find nothing left to do.
        version = _drive(conn, _migration(), write=True)
    if version > sql.SCHEMA_VERSION:
        raise StoreError(
            f"{path}: the database schema is version {version}, newer than this obsmem "
            f"understands ({sql.SCHEMA_VERSION}); upgrade obsmem (pip install -U obsmem)"
        )


def _migration() -> Flow[int]:
    rows = yield Op("PRAGMA user_version")
    version = int(rows[0][0])
    if version >= sql.SCHEMA_VERSION:
        return version
    new = yield from flows.migrate(version)
    yield Op(f"PRAGMA user_version = {new}")
    return new


class SQLiteStore(SQLStore):
    """Threads, messages and memory state in one SQLite file.

    ``SQLiteStore("memory.db")``; the file and its schema are created on first use. Several
    stores (in this process or others) may open the same file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = "obsmem.db",
        *,
        busy_timeout_ms: int = 30_000,
        read_only: bool = False,
    ) -> None:
        if not isinstance(path, str | os.PathLike) or not str(path):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigError(
                "SQLiteStore.path", path, 'give a file path ("obsmem.db") or ":memory:"'
            )
        self.path = str(path)
        self.busy_timeout_ms = busy_timeout_ms
        self.read_only = read_only
        """Open the file read-only (``mode=ro``): nothing in it changes, and a write raises."""
        super().__init__(_SQLiteDriver(self.path, busy_timeout_ms, read_only=read_only))

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"
